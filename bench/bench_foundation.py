"""Cold start and capture overhead (issue 2's targets: capture <= 1.3x a bare forward,
forward+backward <= 1.3x a bare forward+backward, dinov2-s14 on this machine's device).
Smoke: one cold start on this machine's own model cache, one run of each."""

from __future__ import annotations

import copy
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import timm
import torch

from xai_core.capture import run_capture
from xai_core.images import load_sample
from xai_core.models import get_model
from xai_core.models.settings import cache_dir
from xai_core.pipeline import prepare

ROOT = Path(__file__).resolve().parent.parent
COLD_START = ("import time; t=time.perf_counter(); from xai_core.models import get_model; "
              "from xai_core.pipeline import predict; from xai_core.images import load_sample; "
              "predict(get_model('dinov2-s14'), load_sample('chelsea')); "
              "print(time.perf_counter()-t)")


def _cold_start(cache: str) -> float:
    env = {"VIT_LENS_CACHE_DIR": cache, "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", COLD_START], cwd=ROOT, env=env,
                         capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def _seconds(function) -> float:
    started = time.perf_counter()
    function()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - started


def _median_seconds(function, repeats: int = 7) -> float:
    function()  # warm-up
    return statistics.median(_seconds(function) for _ in range(repeats))


def _paired_medians(baseline, candidate, repeats: int = 9) -> tuple[float, float]:
    """Medians of two functions run alternately, so load changes on a shared machine hit
    both alike and their ratio stays meaningful."""
    baseline(), candidate()  # warm-up
    pairs = [(_seconds(baseline), _seconds(candidate)) for _ in range(repeats)]
    return (statistics.median(b for b, _ in pairs), statistics.median(c for _, c in pairs))


def run(smoke: bool = False) -> list[dict]:
    rows = []
    if smoke:  # no conversion: the machine's own cache, filled by `make warmup` or a test
        rows.append({"name": "cold start to first prediction, this machine's cache",
                     "value": _cold_start(str(cache_dir())), "unit": "s"})
    else:
        with tempfile.TemporaryDirectory() as cache:
            uncached = _cold_start(cache)
            cached = _cold_start(cache)
        rows += [{"name": "cold start to first prediction, conversion + bank not cached",
                  "value": uncached, "unit": "s"},
                 {"name": "cold start to first prediction, conversion + bank cached",
                  "value": cached, "unit": "s"}]
    repeats = 1 if smoke else 9

    model = get_model("dinov2-s14")
    pixels = prepare(model, load_sample("chelsea")).pixels.to(model.device)
    bare = copy.deepcopy(model.module)  # timm defaults: fused attention, no hooks
    score_fn = model.head.score_fn(0)

    def bare_forward():
        with torch.no_grad():
            bare(pixels)

    def bare_forward_backward():
        x = pixels.clone().requires_grad_(True)
        torch.autograd.grad(score_fn(bare(x)), [x])

    forward, captured = _paired_medians(bare_forward, lambda: run_capture(model.module, pixels),
                                        repeats)
    forward_backward, captured_grads = _paired_medians(
        bare_forward_backward, lambda: run_capture(model.module, pixels, score_fn), repeats)
    rows += [
        {"name": "dinov2-s14 bare timm forward", "value": forward * 1e3, "unit": "ms"},
        {"name": "dinov2-s14 capture (forward, all blocks recorded)", "value": captured * 1e3,
         "unit": "ms"},
        {"name": "capture / bare forward", "value": captured / forward, "unit": "x",
         "note": "target <= 1.3"},
        {"name": "dinov2-s14 bare forward+backward", "value": forward_backward * 1e3,
         "unit": "ms"},
        {"name": "dinov2-s14 capture with backward (all gradients)",
         "value": captured_grads * 1e3, "unit": "ms"},
        {"name": "capture+backward / bare forward+backward",
         "value": captured_grads / forward_backward, "unit": "x", "note": "target <= 1.3"},
    ]
    return rows
