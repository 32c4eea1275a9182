"""Localisation of explanation maps (seed 001, Table 3 protocol): binarise the map at
0.1 x its maximum, take the largest 8-connected region's tight box, IoU with a given box;
and the pointing game (Zhang et al. 2016: the map's peak falls in the box, with a
15-pixel tolerance).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..infra.errors import OptionError
from ..maps import check_map, upsample
from .contract import HIGHER, MetricRequest, metric

LOCALISATION_THRESHOLD = 0.1
POINTING_TOLERANCE = 15

Box = tuple[int, int, int, int]  # x0, y0, x1, y1 in pixels, half-open: [x0, x1) x [y0, y1)


def largest_region_box(saliency: np.ndarray, size: tuple[int, int],
                       threshold: float = LOCALISATION_THRESHOLD) -> Box | None:
    """Binarise the upsampled map at threshold x max; the tight box of the largest
    8-connected region. None when the map has no positive maximum."""
    from scipy import ndimage

    values = upsample(check_map(saliency), size)
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
    values = upsample(check_map(saliency), size)
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


def energy_in_boxes(saliency: np.ndarray, size: tuple[int, int], boxes) -> float:
    """Energy-based pointing game (Wang et al., Score-CAM): the share of the map's positive
    mass, upsampled to the input, that falls inside the union of the boxes. NaN when the
    map has no positive mass."""
    values = np.clip(upsample(check_map(saliency), size).astype(np.float64), 0, None)
    total = float(values.sum())
    if total <= 0:
        return float("nan")
    inside = np.zeros(size, dtype=bool)
    for box in boxes:
        x0, y0, x1, y1 = check_box(box, size)
        inside[y0:y1, x0:x1] = True
    return float(values[inside].sum()) / total


# --- the declarations (the benchmark's box metrics) -------------------------------------------

def _input_size(request: MetricRequest) -> tuple[int, int]:
    if not request.boxes:
        raise ValueError("no box of this image lies inside the model's input crop")
    return tuple(request.model.spec.input_size)


@metric("pointing-game", better=HIGHER, needs="boxes",
        summary=f"1 when the map's peak falls in a box ({POINTING_TOLERANCE}-pixel tolerance), "
                "else 0")
def pointing_game(request: MetricRequest) -> float:
    size = _input_size(request)
    return float(any(pointing_hit(request.saliency, size, box) for box in request.boxes))


@metric("energy-in-box", better=HIGHER, needs="boxes",
        summary="share of the map's positive mass inside the boxes")
def energy_in_box(request: MetricRequest) -> float:
    return energy_in_boxes(request.saliency, _input_size(request), request.boxes)
