"""Interventions (issue 32): DINOv2's head-importance grid (12 x 6 heads switched off one at
a time; target <= 6 s on the 2-core CPU, 0 s cached) and one intervention's before/after.

Rows: the grid uncached (the median of 3 runs, the cache cleared before each; the plain
capture for the sink stories already cached, as on a page that shows them), the grid from
the cache, `intervene` with two heads off, without maps and with the four maps, and the
read-out (logit lens) of every block and patch, its per-block k-NN banks built once before;
cause vs claim for page 7's 8 ViT methods at k = 1, 2, 4, 8, 16, 32 with 20 random draws
(target <= 10 s): the methods' maps first (as page 7 or page 9 computes them once), then the
removals uncached (tokens dropped, pixels masked, each: 6 k x 28 images) and cached.
"""

from __future__ import annotations

import statistics
import time

from xai_core import cause_vs_claim, interventions, readout
from xai_core.compare import default_methods, run_methods
from xai_core.images import load_sample
from xai_core.models import get_model
from xai_core.pipeline import model_output, resolve_target, vit_capture

REPEATS = 3


def _median_seconds(function, repeats: int = REPEATS) -> float:
    times = []
    for _ in range(repeats):
        interventions.RESULTS.clear()
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def run() -> list[dict]:
    model, image = get_model("dinov2-s14"), load_sample("chelsea")
    vit_capture(model, image)
    model_output(model, image)
    grid = _median_seconds(lambda: interventions.head_importance(model, image))
    started = time.perf_counter()
    interventions.head_importance(model, image)
    cached = time.perf_counter() - started
    plain = _median_seconds(lambda: interventions.intervene(model, image, maps=False,
                                                            heads_off="0.5,3.2"))
    with_maps = _median_seconds(lambda: interventions.intervene(model, image,
                                                                heads_off="0.5,3.2"))
    readout.block_heads(model, model.head)  # the per-block banks: once per process
    lens = _median_seconds(lambda: (readout.RESULTS.clear(), readout.readout(model, image)))
    methods = default_methods(model)
    started = time.perf_counter()
    run_methods(model, image, methods, resolve_target(model, None, image))
    maps = time.perf_counter() - started
    claims = {removal: _median_seconds(lambda: (
        cause_vs_claim.RESULTS.clear(),
        cause_vs_claim.cause_vs_claim(model, image, removals=removal)), repeats=1)
        for removal in cause_vs_claim.REMOVALS}
    started = time.perf_counter()
    found = cause_vs_claim.cause_vs_claim(model, image, removals="pixels")  # the last computed
    claims_cached = time.perf_counter() - started
    return [
        {"name": "head-importance grid, DINOv2 (72 heads, batched)", "value": grid,
         "unit": "s", "note": "target <= 6 s"},
        {"name": "head-importance grid, cached", "value": cached, "unit": "s"},
        {"name": "intervene heads_off=0.5,3.2, no maps", "value": plain, "unit": "s"},
        {"name": "intervene heads_off=0.5,3.2, with the four maps", "value": with_maps,
         "unit": "s"},
        {"name": "readout, 12 blocks x (image + 256 patches)", "value": lens, "unit": "s"},
        {"name": f"cause vs claim: the {len(methods)} methods' maps, once", "value": maps,
         "unit": "s"},
        {"name": "cause vs claim, tokens dropped, 8 methods + 20 draws x k = 1..32 (6 k)",
         "value": claims["tokens"], "unit": "s", "note": "target <= 10 s"},
        {"name": "cause vs claim, pixels masked (blur), the same", "value": claims["pixels"],
         "unit": "s", "note": "target <= 10 s"},
        {"name": "cause vs claim, both removals", "value": sum(claims.values()), "unit": "s"},
        {"name": "cause vs claim, cached", "value": claims_cached, "unit": "s"},
        {"name": "cause vs claim, images per removal (distinct patch sets of 6 k x 28)",
         "value": found.images, "unit": "images"},
    ]
