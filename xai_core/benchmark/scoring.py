"""One unit of a benchmark: one image, one model, one method, every chosen metric.

Every value comes from the code the single-image commands use: the method's map from
`method_runs.run_method` (the comparison page's path, default options), every metric through
its declaration in `xai_core.metrics`: the curves from `metrics.faithfulness` (the `metrics`
command's path), localisation from `metrics.localisation` (pointing game, energy in the
boxes), ROAD from pytorch-grad-cam (`metrics.road`), the randomisation check on a private
copy of the model (`metrics.randomisation`).
"""

from __future__ import annotations

import hashlib
import math
import threading
import time

import numpy as np
import torch

from ..capture import capture_cnn, model_layout
from ..studies.method_runs import run_method
from ..images import model_input_box
from ..metrics import METRICS, MetricRequest
from ..metrics.stability import mean_pairwise_spearman, seed_stability, stability_seeds
from ..methods import METHODS
from ..pipeline import resolve_target, score_kind
from .plan import RANDOM_METHOD, ImageItem, Settings, load_item


def unit_rows(settings: Settings, item: ImageItem, model, method: str,
              boxes: list | None = None) -> list[dict]:
    """The rows of one (image, model, method): one per metric. A method that cannot run
    here gives rows with value NaN and its reason in `error`."""
    image = load_item(item)
    target = resolve_target(model, item.label, image)  # no ImageFolder class: the top one
    base = {"image": item.id, "model": model.spec.id, "method": method, "target": target,
            "target_label": model.class_names[target],
            "score_kind": score_kind(model), **settings.value_fields()}
    started = time.perf_counter()
    saliency, error, meta = method_map(model, image, method, target, item, settings.seed)
    method_ms = (time.perf_counter() - started) * 1000
    if "completeness_error" in meta:  # Integrated Gradients: how far it misses adding up
        base["completeness_error"] = meta["completeness_error"]
    if settings.stability and saliency is not None:
        base["stability"] = map_stability(model, image, method, target, item, settings.seed)
    rows = []
    for metric in settings.metrics:
        row = {**base, "metric": metric, "value": float("nan"), "error": error,
               "method_ms": round(method_ms, 2)}
        if saliency is not None:
            try:
                row.update(metric_value(settings, model, image, item, method, saliency, target,
                                        metric, boxes))
            except ValueError as failure:  # a map a metric cannot use (constant, no box)
                row["error"] = str(failure)
        rows.append(row)
    return rows


def method_map(model, image, method: str, target: int, item: ImageItem, seed: int):
    """(map, None, the method's meta) or (None, why not, {})."""
    if method == RANDOM_METHOD:
        return random_map(model, item.id, seed), None, {}
    run = run_method(model, image, method, target)
    return (run.map, None, run.meta) if run.ok else (None, run.error, {})


def map_stability(model, image, method: str, target: int, item: ImageItem, seed: int
                  ) -> float | None:
    """The map's seed stability (`metrics.stability`) at the method's default options; the
    random floor's over the run's seed and the next two."""
    if method == RANDOM_METHOD:
        maps = [random_map(model, item.id, s) for s in stability_seeds(seed)]
        value = mean_pairwise_spearman(maps)
        return value if math.isfinite(value) else None
    return seed_stability(METHODS[method], model, image, target=target)["stability"]


def metric_value(settings: Settings, model, image, item, method, saliency, target, metric,
                 boxes) -> dict:
    """One metric of one map, through its declaration (`xai_core.metrics`), with the run's
    settings as the options the metric declares (a curve's steps and baseline)."""
    declared = METRICS[metric]
    size = tuple(model.spec.input_size)
    placed = () if declared.needs != "boxes" else tuple(
        b for b in (model_input_box(box, item.original_size(), size, model.spec.crop_pct)
                    for box in boxes or []) if b is not None)

    def remap(other_model):
        other, error, _ = method_map(other_model, image, method, target, item, settings.seed)
        if other is None:
            raise ValueError(f"on the randomised model: {error}")
        return other
    request = MetricRequest(model, image, saliency, target, boxes=placed, seed=settings.seed,
                            remap=remap)
    options = {o.name: getattr(settings, o.name) for o in declared.options}
    result = declared(request, **options)
    if declared.is_curve:
        return {"value": result.auc, "scores": [float(s) for s in result.scores]}
    return {"value": declared.value(result)}


# --- the random floor ---------------------------------------------------------------------------

_GRIDS: dict = {}
_GRIDS_LOCK = threading.Lock()


def explanation_grid(model) -> tuple[int, int]:
    """The grid a method of this model naturally explains on: a ViT's patch grid, a CNN's
    default Grad-CAM stage (read off one forward pass, once per model)."""
    key = (model.spec.id, model.random_weights)
    with _GRIDS_LOCK:
        if key in _GRIDS:
            return _GRIDS[key]
    if model.spec.is_vit:
        grid = model_layout(model).tokens.grid
    else:
        pixels = torch.zeros(1, 3, *model.spec.input_size)
        grid = tuple(int(v) for v in capture_cnn(model, pixels).activations.shape[-2:])
    with _GRIDS_LOCK:
        _GRIDS[key] = grid
    return grid


def random_map(model, image_id: str, seed: int) -> np.ndarray:
    """Uniform noise on the model's explanation grid, seeded by (seed, image, model), so
    every backend and every rerun draws the same floor. A randomised twin draws its
    model's floor: the floor ignores the weights."""
    model_id = model.extras.get("randomised_from", model.spec.id)
    digest = hashlib.sha256(f"{seed}|{image_id}|{model_id}".encode()).digest()
    rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
    return rng.random(explanation_grid(model)).astype(np.float32)
