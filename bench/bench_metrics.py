"""Faithfulness metrics: deletion + insertion at 20 steps for every registered method on each
bundled model, and the speed-up of batched over one-image-at-a-time evaluation.
The per-method rows run the curves as page 7 does (`faithfulness.faithfulness`): the
untouched image and the pure baseline, the same for every map, go through the model once per
image, so each pair of curves runs 2 x (STEPS - 1) images. The speed-up rows run every image
of a curve (`compute_curve`) both ways.

Every perturbed image is one full forward pass; on a CPU a ViT-S forward is compute-bound
already at batch 1, so batching only removes per-call overhead, and a CNN's activations
outgrow the CPU's caches beyond a batch of about 4 (`pipeline.default_batch_size`). Wall times stretch when
other work shares the CPU: each row also gives the process's CPU seconds (all threads) and
the load average, and the speed-up alternates the two ways (a, b, a, b, ...) and takes
medians, so a changing load slows both alike.
"""

from __future__ import annotations

import os
import statistics
import time

from xai_core.studies import method_runs
from xai_core import pipeline
from xai_core.metrics import faithfulness
from xai_core.images import load_sample
from xai_core.models import get_model

BUNDLED = ("dinov2-s14", "efficientnet-lite0")
STEPS = 20
SAMPLE = "coffee"
REPEATS = 3


def _curve(model, pixels, saliency, metric, target, batch_size):
    return faithfulness.compute_curve(model, pixels, saliency, metric,
                                      pipeline.class_scorer(model, target), target,
                                      pipeline.score_kind(model), "zeros", STEPS, batch_size)


def _speed_up(model, pixels, saliency, target, batch: int) -> dict:
    curves, times = {}, {1: [], batch: []}
    for _ in range(REPEATS):
        for size in (1, batch):
            started = time.perf_counter()
            curves[size] = _curve(model, pixels, saliency, "deletion", target, size)
            times[size].append(time.perf_counter() - started)
    single, together = statistics.median(times[1]), statistics.median(times[batch])
    same = float(abs(curves[1].scores - curves[batch].scores).max())
    return {"name": f"{model.spec.id}: batched speed-up (deletion, {STEPS + 1} images)",
            "value": single / together, "unit": "x",
            "note": f"medians of {REPEATS}: one-at-a-time {single:.2f} s vs batch {batch} "
                    f"{together:.2f} s, load {os.getloadavg()[0]:.1f}; max score difference "
                    f"{same:.1e}"}


def run() -> list[dict]:
    rows = []
    image = load_sample(SAMPLE)
    for model_id in BUNDLED:
        model = get_model(model_id)
        target = pipeline.resolve_target(model, None, image)
        pixels = pipeline.prepare(model, image).pixels
        batch = pipeline.default_batch_size(model)
        runs = [r for r in method_runs.run_methods(model, image, method_runs.default_methods(model),
                                               target) if r.ok]
        if not runs:
            rows.append({"name": f"{model_id}: no registered method", "value": 0.0,
                         "unit": "", "note": "nothing to measure yet"})
            continue
        target_note = "; target <= 4 s" if model_id == "dinov2-s14" else ""
        for run in runs:  # as page 7 runs them: the image's two end images are shared
            started, cpu = time.perf_counter(), time.process_time()
            deletion, insertion = [faithfulness.faithfulness(
                model, image, run.map, metric, target, "zeros", STEPS, batch_size=batch)
                for metric in ("deletion", "insertion")]
            ends = " + the 2 end images" if run is runs[0] else ""
            rows.append({"name": f"{model_id} {run.name}: deletion+insertion @{STEPS} steps",
                         "value": time.perf_counter() - started, "unit": "s",
                         "note": f"{deletion.images + insertion.images} images{ends}, batch "
                                 f"{batch}; CPU {time.process_time() - cpu:.1f} s, load "
                                 f"{os.getloadavg()[0]:.1f}; AUC del {deletion.auc:.3f} ins "
                                 f"{insertion.auc:.3f}{target_note}"})
        rows.append(_speed_up(model, pixels, runs[0].map, target, batch))
    return rows
