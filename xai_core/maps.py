"""What methods, metrics and figures do to an explanation map itself: check that it is a
finite 2-D grid, resize it, and the one min-max scaling to [0, 1]."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F


def upsample(saliency: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """A grid-shaped map resized (bilinear, align_corners=False) to `size` (H, W)."""
    grid = torch.as_tensor(np.asarray(saliency, dtype=np.float32))[None, None]
    return F.interpolate(grid, size=tuple(size), mode="bilinear", align_corners=False)[0, 0].numpy()


def check_map(saliency: np.ndarray) -> np.ndarray:
    """The map as float64, or ValueError when it is not a finite 2-D grid of 2+ cells."""
    saliency = np.asarray(saliency, dtype=np.float64)
    if saliency.ndim != 2 or saliency.size < 2:
        raise ValueError(f"A map must be a 2-D grid with at least two cells; got {saliency.shape}.")
    if not np.isfinite(saliency).all():
        raise ValueError("The map contains NaN or infinite values.")
    return saliency


def min_max(values: np.ndarray, axis: int | tuple[int, ...] | None = None, eps: float = 0.0,
            dtype=np.float64) -> np.ndarray:
    """(x - min) / (max - min), to [0, 1]: over the whole array, or over `axis` for each map of
    a stack on its own. A constant map becomes zeros. `eps` > 0 divides by (max - min + eps)
    instead, pytorch-grad-cam's scale_cam_image; `dtype` is the arithmetic's precision."""
    shifted = np.asarray(values, dtype=dtype)
    shifted = shifted - shifted.min(axis=axis, keepdims=True)
    span = shifted.max(axis=axis, keepdims=True)
    if eps:
        return shifted / (eps + span)
    return np.divide(shifted, span, out=np.zeros_like(shifted), where=span > 0)
