"""One unit of a benchmark: one image, one model, one method, every chosen metric.

Every value comes from the code the single-image commands use: the method's map from
`method_runs.run_method` (the comparison page's path, default options), the curve metrics
from `metrics.faithfulness` (the `metrics` command's path), localisation from
`metrics.localisation` (pointing game, energy in the boxes), ROAD from pytorch-grad-cam.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import math
import threading
import time

import numpy as np
import torch

from ..capture import capture_cnn, model_layout
from ..studies.method_runs import run_method
from ..images import model_input_box
from ..maps import min_max, upsample
from ..metrics.agreement import spearman
from ..metrics.faithfulness import faithfulness
from ..metrics.localisation import energy_in_boxes, pointing_hit
from ..metrics.stability import mean_pairwise_spearman, seed_stability, stability_seeds
from ..methods import METHODS
from ..pipeline import class_scorer, head_of, prepare, resolve_target, score_kind
from ..infra.rng import seeded
from .plan import BOX_METRICS, CURVE_METRICS, RANDOM_METHOD, ImageItem, Settings, load_item


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
    if metric in CURVE_METRICS:
        curve = faithfulness(model, image, saliency, metric, target, settings.baseline,
                                     settings.steps)
        return {"value": curve.auc, "scores": [float(s) for s in curve.scores]}
    size = tuple(model.spec.input_size)
    if metric == "road":
        return {"value": road_score(model, image, saliency, target, settings.seed)}
    if metric == "randomisation":
        twin = randomised_twin(model, settings.seed)
        other, error, _ = method_map(twin, image, method, target, item, settings.seed)
        if other is None:
            raise ValueError(f"on the randomised model: {error}")
        return {"value": spearman(saliency, other)}
    if metric in BOX_METRICS:
        placed = [b for b in (model_input_box(box, item.original_size(), size,
                                              model.spec.crop_pct) for box in boxes or [])
                  if b is not None]
        if not placed:
            raise ValueError("no box of this image lies inside the model's input crop")
        if metric == "pointing-game":
            return {"value": float(any(pointing_hit(saliency, size, b) for b in placed))}
        return {"value": energy_in_boxes(saliency, size, placed)}
    raise ValueError(f"unknown metric {metric}")


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


# --- ROAD (pytorch-grad-cam) ------------------------------------------------------------------

class _ProbabilityTarget:
    """pytorch-grad-cam calls targets on one unbatched output; ours is the same class score
    as deletion/insertion (softmax probability, or the k-NN class score)."""

    def __init__(self, model, target: int):
        self.scorer = class_scorer(model, target)

    def __call__(self, output: torch.Tensor) -> torch.Tensor:
        return torch.tensor(self.scorer(output.float().cpu()[None])[0])


def road_score(model, image, saliency: np.ndarray, target: int, seed: int) -> float:
    """ROADCombined over the library's percentiles 10..90: (LeRF - MoRF) / 2 of the class
    score change; higher is better. Its imputation draws noise from torch's global
    generator, so the call runs under a forked, seeded generator."""
    from pytorch_grad_cam.metrics.road import ROADCombined

    pixels = prepare(model, image).pixels.to(model.device)
    cam = min_max(upsample(saliency, tuple(pixels.shape[-2:])))[None].astype(np.float32)
    with seeded(model.device, seed), model.lock:  # the generator's lock first, as everywhere
        return float(ROADCombined()(pixels, cam, [_ProbabilityTarget(model, target)],
                                    model.module)[0])


# --- model randomisation (sanity check) -------------------------------------------------------

_TWINS: dict = {}
_TWINS_LOCK = threading.Lock()


def randomised_twin(model, seed: int):
    """A private copy of `model` whose every weight tensor is replaced by Gaussian noise
    with that tensor's own mean and standard deviation (constant tensors such as
    LayerNorm scales at 1 are kept). The shared model is never touched. Its spec id is
    new, so nothing cached for the trained model is reused. One per model per process."""
    from ..models import LoadedModel

    key = (model.spec.id, model.random_weights, str(model.device), seed)
    with _TWINS_LOCK:
        if key in _TWINS:
            return _TWINS[key]
        with model.lock:
            module = copy.deepcopy(model.module)
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for parameter in module.parameters():
                if parameter.numel() > 1 and float(parameter.std()) > 0:
                    noise = torch.randn(parameter.shape, generator=generator)
                    parameter.copy_(noise.to(parameter) * parameter.std() + parameter.mean())
        spec = dataclasses.replace(model.spec, id=f"{model.spec.id}~randomised-{seed}",
                                   display_name=f"{model.spec.display_name} (randomised)")
        twin = LoadedModel(spec=spec, module=module, device=model.device, random_weights=True,
                           weights_source="trained weights replaced by noise (sanity check)",
                           class_names=model.class_names, head=head_of(model),
                           extras={"randomised_from": model.spec.id})
        _TWINS[key] = twin
        return twin
