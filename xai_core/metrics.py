"""Faithfulness, agreement and localisation metrics for explanation maps.

Faithfulness (Petsiuk et al. 2018 "RISE"; Chefer et al. 2021): rank the input by
the map, then remove (deletion) or reveal (insertion) it in equal steps against
a baseline image and record the class score after every step. The perturbed
images go through the model in batches under its lock. AUC is the trapezoid
area under the recorded score over the fraction perturbed (x from 0 to 1), so it
has the score's own units.

- deletion / insertion rank PIXELS by the map upsampled (bilinear) to the model
  input; fraction 0 is the full image (deletion) or the baseline (insertion),
  fraction 1 the other one.
- pos-perturb / neg-perturb (Chefer) rank map CELLS (a ViT's patches, a CNN's
  feature-map cells) and blank the most (positive) or least (negative) relevant
  ones for fractions 0, 1/N, ..., (N-1)/N (0-90 % for N = 10).

Baselines: "zeros" = zeros in model-input space (the training mean colour once
normalised), "blur" = the image under an 11x11 Gaussian blur with sigma 5 (the
RISE code's kernel), "mean" = the image's own mean colour.

The class score is what the model's head calls the class's probability: the
softmax probability for an ImageNet classifier, and for a k-NN head (DINOv2) the
differentiable k-NN class score `head.score_fn` (mean cosine similarity to the
class's nearest bank entries), because k-NN votes are a step function.

Agreement: Spearman rank correlation and top-k % overlap, on the finer of the
two maps' grids. Localisation (seed 001, Table 3 protocol): binarise the map at
0.1 x its maximum, take the largest 8-connected region's tight box, IoU with a
given box; and the pointing game (Zhang et al. 2016: the map's peak falls in
the box, with a 15-pixel tolerance).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from .faults import StopCheck, check_stop, retry_with_smaller_batch
from .methods.base import OptionError
from .pipeline import CAPTURE_CACHE, default_batch_size, head_of, prepare, resolve_target

METRICS = ("deletion", "insertion", "pos-perturb", "neg-perturb")
BASELINES = ("zeros", "blur", "mean")
BASELINE_NAMES = {"zeros": "zeros in model-input space (the training mean colour)",
                  "blur": "Gaussian blur (11x11, sigma 5)",
                  "mean": "the image's mean colour"}
MIN_STEPS, MAX_STEPS = 2, 500
BLUR_KERNEL, BLUR_SIGMA = 11, 5.0
LOCALISATION_THRESHOLD = 0.1
POINTING_TOLERANCE = 15

Progress = Callable[[int, int], None]


# --- the class score --------------------------------------------------------------------------

def score_kind(model, head=None) -> str:
    head = head_of(model, head)
    if head.kind == "imagenet":
        return "softmax probability of the class"
    return "k-NN class score (mean cosine similarity to the class's nearest bank entries)"


def class_scorer(model, target: int, head=None) -> Callable[[torch.Tensor], np.ndarray]:
    """Model output (B, ...) -> the target class's score for every image, (B,) numpy."""
    head = head_of(model, head)
    if head.kind == "imagenet":
        return lambda output: output.float().softmax(-1)[:, target].numpy().astype(np.float64)
    score = head.score_fn(target)  # sums over its batch: call it per image
    return lambda output: np.array([float(score(output[i:i + 1])) for i in range(len(output))])


# --- baselines and ranking --------------------------------------------------------------------

def baseline_pixels(pixels: torch.Tensor, baseline: str) -> torch.Tensor:
    """The fully perturbed image, in model-input (normalised) space, same shape as `pixels`."""
    if baseline == "zeros":
        return torch.zeros_like(pixels)
    if baseline == "blur":
        from torchvision.transforms.v2.functional import gaussian_blur

        return gaussian_blur(pixels, [BLUR_KERNEL, BLUR_KERNEL], [BLUR_SIGMA, BLUR_SIGMA])
    if baseline == "mean":
        return pixels.mean(dim=(-2, -1), keepdim=True).expand_as(pixels).clone()
    raise OptionError(f"Baseline '{baseline}' is not one of: {', '.join(BASELINES)}.")


def upsample(saliency: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """A grid-shaped map resized (bilinear, align_corners=False) to `size` (H, W)."""
    grid = torch.as_tensor(np.asarray(saliency, dtype=np.float32))[None, None]
    return F.interpolate(grid, size=tuple(size), mode="bilinear", align_corners=False)[0, 0].numpy()


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
    if baseline not in BASELINES:
        raise OptionError(f"Baseline '{baseline}' is not one of: {', '.join(BASELINES)}.")
    if not MIN_STEPS <= int(steps) <= MAX_STEPS:
        raise OptionError(f"Steps must be between {MIN_STEPS} and {MAX_STEPS}, got {steps}.")


def _check_map(saliency: np.ndarray) -> np.ndarray:
    saliency = np.asarray(saliency, dtype=np.float64)
    if saliency.ndim != 2 or saliency.size < 2:
        raise ValueError(f"A map must be a 2-D grid with at least two cells; got {saliency.shape}.")
    if not np.isfinite(saliency).all():
        raise ValueError("The map contains NaN or infinite values.")
    return saliency


def compute_curve(model, pixels: torch.Tensor, saliency: np.ndarray, metric: str,
                  scorer: Callable[[torch.Tensor], np.ndarray], target: int, kind: str,
                  baseline: str = "zeros", steps: int = 20, batch_size: int = 16,
                  progress: Progress | None = None,
                  should_stop: StopCheck | None = None) -> Curve:
    """One faithfulness curve, uncached. `pixels` (1, 3, H, W) in model-input space.
    The perturbed images go through the model in batches, each under the model's lock;
    `should_stop()` is asked before every batch, and after running out of memory the
    curve is scored once more with smaller batches."""
    check_curve_options(metric, baseline, steps)
    saliency = _check_map(saliency)
    size = tuple(pixels.shape[-2:])
    ranks, units = pixel_ranks(saliency, size, metric)
    fractions = fractions_for(metric, steps)
    counts = np.rint(fractions * units).astype(np.int64)
    image = pixels.detach().float().cpu()
    empty = baseline_pixels(image, baseline)
    # deletion-like metrics move the image towards the baseline; insertion the other way
    start, end = (empty, image) if metric == "insertion" else (image, empty)
    ranks_t = torch.as_tensor(ranks)
    started = time.perf_counter()

    def score_in_batches(size: int) -> list[np.ndarray]:
        scores = []
        for first in range(0, len(counts), size):
            check_stop(should_stop)
            chunk = torch.as_tensor(counts[first:first + size])
            changed = (ranks_t[None] < chunk[:, None, None])[:, None]  # (b, 1, H, W)
            batch = torch.where(changed, end, start)
            with model.lock, torch.inference_mode():
                output = model.module(batch.to(model.device)).float().cpu()
            scores.append(scorer(output))
            if progress is not None:
                progress(min(first + len(chunk), len(counts)), len(counts))
        return scores

    batched = retry_with_smaller_batch(score_in_batches, max(1, int(batch_size)))
    scores, batches = np.concatenate(batched), len(batched)
    full, base = _end_scores(model, image, empty, scorer, metric, scores)
    return Curve(metric=metric, baseline=baseline, unit="pixel" if metric in ("deletion", "insertion")
                 else "cell", target=int(target), score_kind=kind, fractions=fractions,
                 scores=scores, auc=float(np.trapezoid(scores, fractions)), full_score=full,
                 baseline_score=base, images=len(counts), batches=batches,
                 seconds=time.perf_counter() - started)


def _end_scores(model, image, empty, scorer, metric, scores) -> tuple[float, float]:
    """Scores of the untouched image and of the pure baseline (read off the curve where
    it contains them; pos/neg-perturb stop at 90 %, so the baseline gets its own pass)."""
    if metric == "deletion":
        return float(scores[0]), float(scores[-1])
    if metric == "insertion":
        return float(scores[-1]), float(scores[0])
    with model.lock, torch.inference_mode():
        output = model.module(empty.to(model.device)).float().cpu()
    return float(scores[0]), float(scorer(output)[0])


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
    saliency = _check_map(saliency)
    head = head_of(model, head)
    target = resolve_target(model, target, image, head)
    prepared = prepare(model, image)
    key = ("metric-curve", model.spec.id, model.random_weights, prepared.sha256,
           map_digest(saliency), target, head.fingerprint(), metric, baseline, int(steps))
    computed = []

    def compute() -> Curve:
        computed.append(True)
        return compute_curve(model, prepared.pixels, saliency, metric,
                             class_scorer(model, target, head), target, score_kind(model, head),
                             baseline, int(steps), batch_size or default_batch_size(model),
                             progress, should_stop)

    curve = CAPTURE_CACHE.get_or_compute(key, compute)
    if not computed and progress is not None:
        progress(1, 1)
    return curve


# --- agreement between maps -------------------------------------------------------------------

def common_grid(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two maps on one grid: equal grids as they are; otherwise both resized (bilinear)
    to the finer grid (more cells)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape == b.shape:
        return a, b
    shape = a.shape if a.size >= b.size else b.shape
    return upsample(a, shape).astype(np.float64), upsample(b, shape).astype(np.float64)


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman rank correlation of two maps cell by cell (NaN when one is constant)."""
    from scipy.stats import spearmanr

    a, b = common_grid(a, b)
    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    return float(spearmanr(a.ravel(), b.ravel()).statistic)


def top_k_overlap(a: np.ndarray, b: np.ndarray, percent: float = 10.0) -> float:
    """Share of the top `percent` % cells of map a that are also in b's top `percent` %."""
    if not 0 < percent <= 100:
        raise OptionError(f"Top-k percent must be in (0, 100], got {percent}.")
    a, b = common_grid(a, b)
    count = max(1, int(round(a.size * percent / 100)))
    top_a = np.argsort(-a.ravel(), kind="stable")[:count]
    top_b = np.argsort(-b.ravel(), kind="stable")[:count]
    return len(np.intersect1d(top_a, top_b)) / count


def agreement_matrices(maps: dict[str, np.ndarray], percent: float = 10.0):
    """(names, spearman matrix, top-k overlap matrix) for every pair of maps."""
    names = list(maps)
    size = len(names)
    rho, overlap = np.eye(size), np.eye(size)
    for i in range(size):
        for j in range(i + 1, size):
            rho[i, j] = rho[j, i] = spearman(maps[names[i]], maps[names[j]])
            overlap[i, j] = overlap[j, i] = top_k_overlap(maps[names[i]], maps[names[j]], percent)
    return names, rho, overlap


def patch_gradient_importance(input_grad: torch.Tensor, grid: tuple[int, int]) -> np.ndarray:
    """Gradient importance per patch: the L2 norm over colour channels of d score / d pixel,
    averaged over each patch's pixels (the saliency-map analogue of seed 004's
    embedding-gradient norm)."""
    norm = input_grad.detach().float()[0].norm(dim=0)  # (H, W)
    return F.adaptive_avg_pool2d(norm[None, None], tuple(grid))[0, 0].numpy()


# --- localisation -----------------------------------------------------------------------------

Box = tuple[int, int, int, int]  # x0, y0, x1, y1 in pixels, half-open: [x0, x1) x [y0, y1)


def largest_region_box(saliency: np.ndarray, size: tuple[int, int],
                       threshold: float = LOCALISATION_THRESHOLD) -> Box | None:
    """Binarise the upsampled map at threshold x max; the tight box of the largest
    8-connected region. None when the map has no positive maximum."""
    from scipy import ndimage

    values = upsample(_check_map(saliency), size)
    peak = float(values.max())
    if peak <= 0:
        return None
    mask = values >= threshold * peak
    labels, count = ndimage.label(mask, structure=np.ones((3, 3), dtype=bool))
    sizes = ndimage.sum_labels(mask, labels, index=np.arange(1, count + 1))
    ys, xs = np.nonzero(labels == int(np.argmax(sizes)) + 1)
    return int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1


def check_box(box, size: tuple[int, int]) -> Box:
    x0, y0, x1, y1 = (int(v) for v in box)
    height, width = size
    if not (0 <= x0 < x1 <= width and 0 <= y0 < y1 <= height):
        raise OptionError(f"A box needs 0 <= x0 < x1 <= {width} and 0 <= y0 < y1 <= {height}; "
                          f"got ({x0}, {y0}, {x1}, {y1}).")
    return x0, y0, x1, y1


def box_iou(a: Box | None, b: Box) -> float:
    """Intersection over union of two half-open pixel boxes (seed 001, eq. 15)."""
    if a is None:
        return 0.0
    width = max(0, min(a[2], b[2]) - max(a[0], b[0]))
    height = max(0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = width * height
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union else 0.0


def map_peak(saliency: np.ndarray, size: tuple[int, int]) -> tuple[int, int]:
    """(x, y) pixel of the upsampled map's maximum (first in raster order on ties)."""
    values = upsample(_check_map(saliency), size)
    y, x = np.unravel_index(int(np.argmax(values)), values.shape)
    return int(x), int(y)


def pointing_hit(saliency: np.ndarray, size: tuple[int, int], box: Box,
                 tolerance: float = POINTING_TOLERANCE) -> bool:
    """Pointing game: the peak lies inside the box or within `tolerance` pixels of it."""
    x, y = map_peak(saliency, size)
    dx = max(box[0] - x, 0, x - (box[2] - 1))
    dy = max(box[1] - y, 0, y - (box[3] - 1))
    return bool(np.hypot(dx, dy) <= tolerance)


@dataclass(frozen=True)
class Localisation:
    box: Box | None  # the map's estimated box
    iou: float
    correct: bool  # IoU >= 0.5
    peak: tuple[int, int]
    pointing_hit: bool


def localise(saliency: np.ndarray, size: tuple[int, int], box) -> Localisation:
    box = check_box(box, size)
    estimated = largest_region_box(saliency, size)
    iou = box_iou(estimated, box)
    return Localisation(estimated, iou, iou >= 0.5, map_peak(saliency, size),
                        pointing_hit(saliency, size, box))
