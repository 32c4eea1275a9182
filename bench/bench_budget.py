"""The cost budget and the upload limits (issue 29): how fast a request over the budget is
refused, the budget's memory estimate against the memory a method really adds, and the
memory a huge 16-bit PNG upload adds.

Memory is the peak resident set a call adds (VmHWM after resetting it through
/proc/self/clear_refs, minus VmRSS before), each in a fresh process with one torch thread
and the call warmed once at a small size. Targets: refused in < 0.5 s; the 16-bit
6300x6300 PNG adds <= 300 MB. `python -m bench.bench_budget` prints the rows. Smoke: the
refusals, one memory run at batch 2 and the grayscale upload.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MEMORY_RUNS = [("dinov2-s14", "integrated-gradients", 4), ("dinov2-s14", "integrated-gradients", 16),
               ("dinov2-s14", "kernel-shap", 16), ("efficientnet-lite0", "integrated-gradients", 16),
               ("efficientnet-lite0", "kernel-shap", 16)]
WARM = {"integrated-gradients": {"steps": 2, "batch": 1}, "kernel-shap": {"samples": 10, "batch": 1}}
SMOKE_MEMORY_RUN = ("efficientnet-lite0", "integrated-gradients", 2)


def _options(name: str, size: int) -> dict:
    if name == "integrated-gradients":
        return {"steps": size, "batch": size}
    return {"samples": max(size, 10), "batch": size}


def _resident(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _peak_added(call) -> float:
    """MB of peak resident memory `call()` adds in this process."""
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    before = _resident("VmRSS")
    call()
    return _resident("VmHWM") - before


def _child_method(model_id: str, name: str, size: int) -> dict:
    import torch

    from xai_core.infra import budget
    from xai_core.images import load_sample
    from xai_core.methods import METHODS
    from xai_core.models import get_model

    torch.set_num_threads(1)
    model, image, method = get_model(model_id), load_sample("coffee"), METHODS[name]
    with budget.overriding(budget.UNLIMITED):
        method(model, image, **WARM[name])
        options = _options(name, size)
        added = _peak_added(lambda: method(model, image, **options))
    estimate = budget.peak_bytes(method, method.resolve(model, options), model) / 2**20
    return {"measured_mb": added, "estimate_mb": estimate}


def _child_upload(channels: int) -> dict:
    sys.path.insert(0, str(ROOT / "tests"))
    from hostile_corpus import deep_png

    from xai_core.images import load_upload

    data = deep_png(6300, channels=channels)
    started = time.perf_counter()
    added = _peak_added(lambda: load_upload(data))
    return {"measured_mb": added, "file_kb": len(data) / 1024,
            "seconds": time.perf_counter() - started}


def _in_child(*args: str) -> dict:
    result = subprocess.run([sys.executable, "-m", "bench.bench_budget", "--child", *args],
                            cwd=ROOT, capture_output=True, text=True, timeout=900,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    if result.returncode:
        raise RuntimeError(result.stderr[-2000:])
    return json.loads(result.stdout.strip().splitlines()[-1])


def _refusal_seconds() -> list[dict]:
    """The issue's links, refused by the code page 7 and the CLI run (models loaded)."""
    from xai_core.infra import budget
    from xai_core.images import load_sample
    from xai_core.methods import METHODS
    from xai_core.models import get_model

    model, image = get_model("dinov2-s14"), load_sample("coffee")
    rows = []
    for name, options in [("integrated-gradients", {"steps": 64, "batch": 64}),
                          ("kernel-shap", {"samples": 5000}),
                          ("integrated-gradients", {"steps": 512, "batch": 512})]:
        started = time.perf_counter()
        try:
            METHODS[name](model, image, **options)
            raise RuntimeError(f"{name} {options} was not refused")
        except budget.OverBudget:
            seconds = time.perf_counter() - started
        rows.append({"name": f"refused: {name} {options}", "value": round(seconds * 1000, 1),
                     "unit": "ms", "note": "target < 500 ms, DINOv2 loaded"})
    return rows


def run(smoke: bool = False) -> list[dict]:
    rows = _refusal_seconds()
    for model_id, name, size in [SMOKE_MEMORY_RUN] if smoke else MEMORY_RUNS:
        found = _in_child("method", model_id, name, str(size))
        rows.append({"name": f"memory: {model_id} {name} batch {size}",
                     "value": round(found["measured_mb"]), "unit": "MB",
                     "note": f"budget's estimate {found['estimate_mb']:.0f} MB"})
    for channels, kind in [(1, "grayscale"), (3, "RGB"), (4, "RGBA")][:1 if smoke else None]:
        found = _in_child("upload", str(channels))
        rows.append({"name": f"upload: 16-bit {kind} 6300x6300 PNG "
                             f"({found['file_kb']:.0f} KB)",
                     "value": round(found["measured_mb"]), "unit": "MB",
                     "note": f"target <= 300 MB; {found['seconds']:.1f} s"})
    return rows


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    if sys.argv[1:2] == ["--child"]:
        kind, *rest = sys.argv[2:]
        found = (_child_method(rest[0], rest[1], int(rest[2])) if kind == "method"
                 else _child_upload(int(rest[0])))
        print(json.dumps(found))
    else:
        for row in run():
            print(f"{row['name']:70} {row['value']:>8} {row['unit']:3} {row.get('note', '')}")
