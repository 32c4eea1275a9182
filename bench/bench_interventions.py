"""Interventions (issue 32): DINOv2's head-importance grid (12 x 6 heads switched off one at
a time; target <= 6 s on the 2-core CPU, 0 s cached) and one intervention's before/after.

Rows: the grid uncached (the median of 3 runs, the cache cleared before each; the plain
capture for the sink stories already cached, as on a page that shows them), the grid from
the cache, `intervene` with two heads off, without maps and with the four maps, and the
read-out (logit lens) of every block and patch, its per-block k-NN banks built once before;
cause vs claim for page 7's 8 ViT methods at k = 1, 2, 4, 8, 16, 32 with 20 random draws
(target <= 10 s): the methods' maps first (as page 7 or page 9 computes them once), then the
removals uncached (tokens dropped, pixels masked, each: 6 k x 28 images) and cached. The
grid and the removals also as process CPU seconds over the torch threads: the wall time with
the cores free, which the shared machine seldom gives (`bench.run` prints its load average).
"""

from __future__ import annotations

import statistics
import time

import torch

from xai_core.studies import cause_vs_claim, interventions, readout
from xai_core.studies.method_runs import default_methods, run_methods
from xai_core.infra.cache import memory_only
from xai_core.images import load_sample
from xai_core.models import get_model
from xai_core.pipeline import model_output, resolve_target, vit_capture

REPEATS = 3


def _median_seconds(function, repeats: int = REPEATS) -> float:
    return _median_times(function, repeats)[0]


def _median_times(function, repeats: int = REPEATS) -> tuple[float, float]:
    """(wall, process CPU) seconds, each the median of `repeats` runs. On the shared 2-core
    machine other work stretches the wall time; the CPU time (all torch threads) over the
    threads is what the wall time would be with the cores to itself."""
    walls, cpus = [], []
    for _ in range(repeats):
        interventions.RESULTS.clear()
        started, cpu = time.perf_counter(), time.process_time()
        function()
        walls.append(time.perf_counter() - started)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus)


def _cpu_row(name: str, cpu: float, target: float) -> dict:
    threads = torch.get_num_threads()
    return {"name": f"{name}: CPU s / {threads} threads", "value": cpu / threads, "unit": "s",
            "note": f"target <= {target:g} s with the cores free (CPU {cpu:.1f} s)"}


def run() -> list[dict]:
    with memory_only():  # computed here: the disk store would answer from an earlier run
        return _measure()


def _measure() -> list[dict]:
    model, image = get_model("dinov2-s14"), load_sample("chelsea")
    vit_capture(model, image)
    model_output(model, image)
    grid, grid_cpu = _median_times(lambda: interventions.head_importance(model, image))
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
    timed = {removal: _median_times(lambda: (
        cause_vs_claim.RESULTS.clear(),
        cause_vs_claim.cause_vs_claim(model, image, removals=removal)), repeats=1)
        for removal in cause_vs_claim.REMOVALS}
    claims = {removal: wall for removal, (wall, _) in timed.items()}
    started = time.perf_counter()
    found = cause_vs_claim.cause_vs_claim(model, image, removals="pixels")  # the last computed
    claims_cached = time.perf_counter() - started
    return [
        {"name": "head-importance grid, DINOv2 (72 heads, batched)", "value": grid,
         "unit": "s", "note": "target <= 6 s"},
        _cpu_row("head-importance grid", grid_cpu, 6),
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
        _cpu_row("cause vs claim, tokens dropped", timed["tokens"][1], 10),
        _cpu_row("cause vs claim, pixels masked", timed["pixels"][1], 10),
        {"name": "cause vs claim, both removals", "value": sum(claims.values()), "unit": "s"},
        {"name": "cause vs claim, cached", "value": claims_cached, "unit": "s"},
        {"name": "cause vs claim, images per removal (distinct patch sets of 6 k x 28)",
         "value": found.images, "unit": "images"},
    ]
