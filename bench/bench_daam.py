"""DAAM (issue 6): every block's map costs one forward + one backward.

Rows: DAAM for all blocks, uncached (the capture with its recorded tensors, the k-NN
weights of eq. 13 where the model has a bank, the per-block maps) divided by a bare
timm forward + backward of the same model and target (fused attention, no hooks);
target <= 1.5x on CPU. And the time of the sanity-check row (cascading randomisation
from the top block down, one forward + backward per step).
"""

from __future__ import annotations

import copy
import statistics
import time

import torch

from xai_core.images import load_sample
from xai_core.methods import METHODS, daam, daam_knn
from xai_core.metrics import daam_sanity
from xai_core.models import get_model
from xai_core.pipeline import CAPTURE_CACHE, prepare

REPEATS = 7


def _interleaved_medians(functions: dict, repeats: int = REPEATS) -> dict[str, float]:
    """Median seconds of each function, run in turn (a, b, a, b, ...), so a machine
    whose load changes during the run slows both alike."""
    for function in functions.values():
        function()  # warm-up
    times: dict[str, list[float]] = {name: [] for name in functions}
    for _ in range(repeats):
        for name, function in functions.items():
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            started = time.perf_counter()
            function()
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            times[name].append(time.perf_counter() - started)
    return {name: statistics.median(values) for name, values in times.items()}


def _ratio_rows(model, image, label: str) -> list[dict]:
    pixels = prepare(model, image).pixels.to(model.device)
    head = model.head
    with torch.no_grad():
        output = model.module(pixels)
    target = int(head.probabilities(output.float().cpu()).argmax())
    bare = copy.deepcopy(model.module)  # timm defaults: fused attention, no hooks
    if head.kind == "knn":  # the same scalar: <output, w> with this image's eq. 13 weights
        weights = daam_knn.knn_weights(head.bank, output[0].float().cpu(), target).weights
        score_fn = daam_knn.weighted_output_score(weights)
    else:
        score_fn = head.score_fn(target)

    def bare_forward_backward():
        x = pixels.clone().requires_grad_(True)
        torch.autograd.grad(score_fn(bare(x)), [x])

    medians = _interleaved_medians({
        "bare": bare_forward_backward,
        "daam": lambda: daam.daam_uncached(model, pixels, target, head)})
    baseline, full = medians["bare"], medians["daam"]
    blocks = len(daam.daam_uncached(model, pixels, target, head).L)
    return [
        {"name": f"{label}: bare forward+backward (fused timm)", "value": baseline * 1e3,
         "unit": "ms"},
        {"name": f"{label}: DAAM, all {blocks} blocks (1 fwd + 1 bwd)", "value": full * 1e3,
         "unit": "ms"},
        {"name": f"{label}: DAAM all blocks / bare forward+backward", "value": full / baseline,
         "unit": "x", "note": "target <= 1.5"},
    ]


def run() -> list[dict]:
    image = load_sample("chelsea")
    dinov2 = get_model("dinov2-s14")
    rows = _ratio_rows(dinov2, image, "dinov2-s14 (k-NN, eq. 13)")
    rows += _ratio_rows(get_model("deit-s16", random_weights=True), image,
                        "deit-s16 (logit; random weights, timing only)")

    target = dinov2.head.class_names.index("cat")
    METHODS["daam"](dinov2, image, target=target)  # the original map, as on the page
    steps = daam_sanity.sanity_steps(12)
    started = time.perf_counter()  # seed 1: not cached by anything before
    check = daam_sanity.cascading_randomisation(dinov2, image, target, steps=steps, seed=1)
    seconds = time.perf_counter() - started
    CAPTURE_CACHE.clear()
    rows.append({"name": f"dinov2-s14 sanity-check row ({len(steps)} randomisation steps)",
                 "value": seconds, "unit": "s",
                 "note": "rho " + ", ".join(f"{r:.2f}" for r in check.rho)})
    return rows
