"""Faithfulness of explanation maps: deletion, insertion and perturbation curves.

Faithfulness (Petsiuk et al. 2018 "RISE"; Chefer et al. 2021): rank the input by
the map, then remove (deletion) or reveal (insertion) it in equal steps against
a baseline image and record the class score after every step. The perturbed
images go through the model in batches under its lock; the untouched image and the pure
baseline, which every map's curves share, go through once per image (`end_scores`). AUC is
the trapezoid area under the recorded score over the fraction perturbed (x from 0 to 1), so
it has the score's own units.

- deletion / insertion rank PIXELS by the map upsampled (bilinear) to the model
  input; fraction 0 is the full image (deletion) or the baseline (insertion),
  fraction 1 the other one.
- pos-perturb / neg-perturb (Chefer) rank map CELLS (a ViT's patches, a CNN's
  feature-map cells) and blank the most (positive) or least (negative) relevant
  ones for fractions 0, 1/N, ..., (N-1)/N (0-90 % for N = 10).

Baselines: `analysis.perturbation` (zeros, blur, RISE's blur, the image's mean colour).

The class score (`pipeline.class_scorer`) is what the model's head calls the class's
probability: the softmax probability for an ImageNet classifier, and for a k-NN head (DINOv2) the
differentiable k-NN class score `head.score_fn` (mean cosine similarity to the
class's nearest bank entries), because k-NN votes are a step function.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np
import torch

from ..analysis.perturbation import BASELINES, baseline_pixels
from ..infra.cache import BoundedCache, cache_key
from ..infra.errors import OptionError
from ..infra.faults import StopCheck, check_stop, retry_with_smaller_batch
from ..maps import check_map, upsample
from ..pipeline import (class_scorer, default_batch_size, head_of, prepare, resolve_target,
                        score_kind)

METRICS = ("deletion", "insertion", "pos-perturb", "neg-perturb")
MIN_STEPS, MAX_STEPS = 2, 500

Progress = Callable[[int, int], None]
# Curves and end scores are a few hundred bytes each, but a page-7 run makes 4 per method and
# model: in the capture cache (24 entries) they pushed out one another and the captures, so
# the Export view and its PNG recomputed the whole run (210 s after a 243 s run).
CURVE_CACHE = BoundedCache(max_entries=4096, max_bytes=16 * 2**20)


# --- ranking ----------------------------------------------------------------------------------

def _cell_of_pixel(grid: tuple[int, int], size: tuple[int, int]) -> np.ndarray:
    """(H, W) index of the map cell each input pixel lies in (cells tile the input)."""
    rows = np.minimum(np.arange(size[0]) * grid[0] // size[0], grid[0] - 1)
    cols = np.minimum(np.arange(size[1]) * grid[1] // size[1], grid[1] - 1)
    return rows[:, None] * grid[1] + cols[None, :]


def _ranks(values: np.ndarray, most_first: bool) -> np.ndarray:
    """Rank 0 = perturbed first. Ties keep raster order (stable sort), so it is deterministic."""
    order = np.argsort(-values if most_first else values, kind="stable")
    ranks = np.empty(values.size, dtype=np.int64)
    ranks[order] = np.arange(values.size)
    return ranks


def pixel_ranks(saliency: np.ndarray, size: tuple[int, int], metric: str) -> tuple[np.ndarray, int]:
    """(H, W) perturbation rank of every input pixel and how many units are ranked."""
    saliency = np.asarray(saliency, dtype=np.float64)
    if metric in ("deletion", "insertion"):
        return _ranks(upsample(saliency, size).astype(np.float64).ravel(), True).reshape(size), \
            size[0] * size[1]
    cell_ranks = _ranks(saliency.ravel(), most_first=(metric == "pos-perturb"))
    return cell_ranks[_cell_of_pixel(saliency.shape, size)], saliency.size


def fractions_for(metric: str, steps: int) -> np.ndarray:
    if metric in ("deletion", "insertion"):
        return np.arange(steps + 1) / steps
    return np.arange(steps) / steps  # Chefer: 0 %, 10 %, ..., 90 % for 10 steps


# --- curves -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Curve:
    metric: str
    baseline: str
    unit: str  # what was ranked: "pixel" or "cell"
    target: int
    score_kind: str
    fractions: np.ndarray
    scores: np.ndarray
    auc: float
    full_score: float  # the unperturbed image
    baseline_score: float  # the fully perturbed image
    images: int  # perturbed images evaluated
    batches: int
    seconds: float

    def as_dict(self) -> dict:
        data = asdict(self)
        data["fractions"] = [float(x) for x in self.fractions]
        data["scores"] = [float(x) for x in self.scores]
        return data


def check_curve_options(metric: str, baseline: str, steps: int) -> None:
    if metric not in METRICS:
        raise OptionError(f"Metric '{metric}' is not one of: {', '.join(METRICS)}.")
    check_baseline_and_steps(baseline, steps)


def check_baseline_and_steps(baseline: str, steps: int) -> None:
    """The settings every curve of a run shares (the benchmark checks them once per run)."""
    if baseline not in BASELINES:
        raise OptionError(f"Baseline '{baseline}' is not one of: {', '.join(BASELINES)}.")
    if not MIN_STEPS <= int(steps) <= MAX_STEPS:
        raise OptionError(f"Steps must be between {MIN_STEPS} and {MAX_STEPS}, got {steps}.")


def compute_curve(model, pixels: torch.Tensor, saliency: np.ndarray, metric: str,
                  scorer: Callable[[torch.Tensor], np.ndarray], target: int, kind: str,
                  baseline: str = "zeros", steps: int = 20, batch_size: int = 16,
                  progress: Progress | None = None,
                  should_stop: StopCheck | None = None,
                  ends: tuple[float, float] | None = None) -> Curve:
    """One faithfulness curve, uncached. `pixels` (1, 3, H, W) in model-input space.
    The perturbed images go through the model in batches, each under the model's lock;
    `should_stop()` is asked before every batch, and after running out of memory the
    curve is scored once more with smaller batches. `ends` (`end_scores`: the scores of the
    untouched image and of the pure baseline, which no map changes) replaces the passes of
    the curve's images that are exactly one of them."""
    check_curve_options(metric, baseline, steps)
    saliency = check_map(saliency)
    size = tuple(pixels.shape[-2:])
    ranks, units = pixel_ranks(saliency, size, metric)
    fractions = fractions_for(metric, steps)
    counts = np.rint(fractions * units).astype(np.int64)
    image = pixels.detach().float().cpu()
    empty = baseline_pixels(image, baseline)
    # deletion-like metrics move the image towards the baseline; insertion the other way
    start, end = (empty, image) if metric == "insertion" else (image, empty)
    started = time.perf_counter()
    known = {} if ends is None else _known_scores(counts, units, metric, ends)
    measured = [i for i in range(len(counts)) if i not in known]
    batched = retry_with_smaller_batch(
        lambda size: _scores_in_batches(model, start, end, torch.as_tensor(ranks),
                                        counts[measured], scorer, size, progress, should_stop),
        max(1, int(batch_size)))
    scores = np.empty(len(counts), dtype=np.float64)
    scores[measured] = np.concatenate(batched) if batched else []
    scores[list(known)] = list(known.values())
    full, base = (ends if ends is not None
                  else _ends_read_off_the_curve(model, empty, scorer, metric, scores))
    return Curve(metric=metric, baseline=baseline, unit="pixel" if metric in ("deletion", "insertion")
                 else "cell", target=int(target), score_kind=kind, fractions=fractions,
                 scores=scores, auc=float(np.trapezoid(scores, fractions)), full_score=full,
                 baseline_score=base, images=len(measured), batches=len(batched),
                 seconds=time.perf_counter() - started)


def _scores_in_batches(model, start, end, ranks, counts, scorer, size, progress, should_stop):
    """The scores of the images with the `counts` top-ranked units moved from `start` to
    `end`, `size` images per forward pass."""
    scores = []
    for first in range(0, len(counts), size):
        check_stop(should_stop)
        chunk = torch.as_tensor(counts[first:first + size])
        changed = (ranks[None] < chunk[:, None, None])[:, None]  # (b, 1, H, W)
        batch = torch.where(changed, end, start)
        with model.lock, torch.inference_mode():
            output = model.module(batch.to(model.device)).float().cpu()
        scores.append(scorer(output))
        if progress is not None:
            progress(min(first + len(chunk), len(counts)), len(counts))
    return scores


def _known_scores(counts, units: int, metric: str, ends: tuple[float, float]) -> dict:
    """Curve index -> score for the images that are the untouched image or the pure
    baseline: nothing moved yet is where the curve starts (the image, or the baseline for
    insertion), everything moved is where it ends."""
    full, base = ends
    first, last = (base, full) if metric == "insertion" else (full, base)
    return {i: first if count == 0 else last
            for i, count in enumerate(counts) if count == 0 or count == units}


def _ends_read_off_the_curve(model, empty, scorer, metric, scores) -> tuple[float, float]:
    """Scores of the untouched image and of the pure baseline (read off the curve where
    it contains them; pos/neg-perturb stop at 90 %, so the baseline gets its own pass)."""
    if metric == "deletion":
        return float(scores[0]), float(scores[-1])
    if metric == "insertion":
        return float(scores[-1]), float(scores[0])
    with model.lock, torch.inference_mode():
        output = model.module(empty.to(model.device)).float().cpu()
    return float(scores[0]), float(scorer(output)[0])


def end_scores(model, image, target: int, baseline: str, head=None) -> tuple[float, float]:
    """(score of the untouched image, score of the pure baseline) for a class: the two
    images every curve of that image and baseline shares, whatever its map (one pass of
    two images, cached), so each curve runs only the images in between."""
    head = head_of(model, head)
    prepared = prepare(model, image)
    key = cache_key("metric-ends", model, int(target), baseline, image=prepared.sha256,
                    head=head)

    def compute() -> tuple[float, float]:
        pixels = prepared.pixels.detach().float().cpu()
        both = torch.cat([pixels, baseline_pixels(pixels, baseline)])
        with model.lock, torch.inference_mode():
            output = model.module(both.to(model.device)).float().cpu()
        full, base = class_scorer(model, target, head)(output)
        return float(full), float(base)
    return CURVE_CACHE.get_or_compute(key, compute)


def map_digest(saliency: np.ndarray) -> str:
    saliency = np.ascontiguousarray(saliency, dtype=np.float32)
    digest = hashlib.sha256(str(saliency.shape).encode())
    digest.update(saliency.tobytes())
    return digest.hexdigest()


def faithfulness(model, image, saliency: np.ndarray, metric: str, target: int | str | None = None,
                 baseline: str = "zeros", steps: int = 20, head=None,
                 batch_size: int | None = None, progress: Progress | None = None,
                 should_stop: StopCheck | None = None) -> Curve:
    """A faithfulness curve for `saliency` on (model, image), cached by content:
    (model, weights, image sha256, map sha256, target, head, metric, baseline, steps)."""
    check_curve_options(metric, baseline, steps)
    saliency = check_map(saliency)
    head = head_of(model, head)
    target = resolve_target(model, target, image, head)
    prepared = prepare(model, image)
    key = cache_key("metric-curve", model, map_digest(saliency), target, metric, baseline,
                    int(steps), image=prepared.sha256, head=head)
    computed = []

    def compute() -> Curve:
        computed.append(True)
        check_stop(should_stop)  # asked before every pass, the end images' too
        ends = end_scores(model, image, target, baseline, head)
        return compute_curve(model, prepared.pixels, saliency, metric,
                             class_scorer(model, target, head), target, score_kind(model, head),
                             baseline, int(steps), batch_size or default_batch_size(model),
                             progress, should_stop, ends)

    curve = CURVE_CACHE.get_or_compute(key, compute)
    if not computed and progress is not None:
        progress(1, 1)
    return curve
