"""Faithfulness metrics: deletion + insertion at 20 steps for every registered method on each
bundled model, and the speed-up of batched over one-image-at-a-time evaluation."""

from __future__ import annotations

import time

from xai_core import compare, pipeline
from xai_core.metrics import faithfulness
from xai_core.images import load_sample
from xai_core.models import get_model

BUNDLED = ("dinov2-s14", "efficientnet-lite0")
STEPS = 20
SAMPLE = "coffee"


def _curve(model, pixels, saliency, metric, target, batch_size):
    return faithfulness.compute_curve(model, pixels, saliency, metric,
                                      faithfulness.class_scorer(model, target), target,
                                      faithfulness.score_kind(model), "zeros", STEPS, batch_size)


def run() -> list[dict]:
    rows = []
    image = load_sample(SAMPLE)
    for model_id in BUNDLED:
        model = get_model(model_id)
        target = pipeline.resolve_target(model, None, image)
        pixels = pipeline.prepare(model, image).pixels
        batch = pipeline.default_batch_size(model)
        runs = [r for r in compare.run_methods(model, image, compare.default_methods(model),
                                               target) if r.ok]
        if not runs:
            rows.append({"name": f"{model_id}: no registered method", "value": 0.0,
                         "unit": "", "note": "nothing to measure yet"})
            continue
        for run in runs:
            started = time.perf_counter()
            deletion = _curve(model, pixels, run.map, "deletion", target, batch)
            insertion = _curve(model, pixels, run.map, "insertion", target, batch)
            rows.append({"name": f"{model_id} {run.name}: deletion+insertion @{STEPS} steps",
                         "value": time.perf_counter() - started, "unit": "s",
                         "note": f"{2 * (STEPS + 1)} images, batch {batch}; AUC del "
                                 f"{deletion.auc:.3f} ins {insertion.auc:.3f}"})
        started = time.perf_counter()
        one = _curve(model, pixels, runs[0].map, "deletion", target, 1)
        single = time.perf_counter() - started
        started = time.perf_counter()
        batched = _curve(model, pixels, runs[0].map, "deletion", target, batch)
        together = time.perf_counter() - started
        same = float(abs(one.scores - batched.scores).max())
        rows.append({"name": f"{model_id}: batched speed-up (deletion, {STEPS + 1} images)",
                     "value": single / together, "unit": "x",
                     "note": f"one-at-a-time {single:.2f} s vs batch {batch} {together:.2f} s; "
                             f"max score difference {same:.1e}"})
    return rows
