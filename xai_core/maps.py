"""What metrics and figures do to an explanation map itself: check that it is a finite
2-D grid, resize it, scale it to [0, 1]."""

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


def normalise(values: np.ndarray) -> np.ndarray:
    """Min-max to [0, 1] for display only; a constant map becomes zeros."""
    values = np.asarray(values, dtype=np.float64)
    span = values.max() - values.min()
    return np.zeros_like(values) if span <= 0 else (values - values.min()) / span
