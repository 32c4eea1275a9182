"""Agreement between explanation maps: Spearman rank correlation and top-k % overlap, on
the finer of the two maps' grids; and the per-patch gradient importance that attention is
compared with."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from ..infra.cache import BoundedCache, cache_key, fingerprint
from ..infra.errors import OptionError
from ..maps import upsample

# every rerun of the comparison page asks again for the same matrices (about 1 s for 11 maps)
AGREEMENT_CACHE = BoundedCache(max_entries=64, max_bytes=16 * 2**20)


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
    """(names, spearman matrix, top-k overlap matrix) for every pair of maps; each matrix
    cached by the maps' names, order and content (read-only). The rank correlation does not
    depend on `percent` (and costs most: 0.9 s for 11 maps), so a new top-k share
    computes only the overlaps."""
    content = fingerprint(list(maps.items()))
    rho = AGREEMENT_CACHE.get_or_compute(cache_key("spearman", None, content),
                                         lambda: _pairwise(maps, spearman))
    overlap = AGREEMENT_CACHE.get_or_compute(
        cache_key("top-k-overlap", None, content, fingerprint(percent)),
        lambda: _pairwise(maps, lambda a, b: top_k_overlap(a, b, percent)))
    return list(maps), rho, overlap


def _pairwise(maps: dict[str, np.ndarray], measure) -> np.ndarray:
    """The symmetric matrix of measure(a, b) over every pair of maps (1 on the diagonal)."""
    names = list(maps)
    matrix = np.eye(len(names))
    for i in range(len(names)):
        for j in range(i + 1, len(names)):
            matrix[i, j] = matrix[j, i] = measure(maps[names[i]], maps[names[j]])
    matrix.setflags(write=False)
    return matrix


def patch_gradient_importance(input_grad: torch.Tensor, grid: tuple[int, int]) -> np.ndarray:
    """Gradient importance per patch: the L2 norm over colour channels of d score / d pixel,
    averaged over each patch's pixels (the saliency-map analogue of seed 004's
    embedding-gradient norm)."""
    norm = input_grad.detach().float()[0].norm(dim=0)  # (H, W)
    return F.adaptive_avg_pool2d(norm[None, None], tuple(grid))[0, 0].numpy()
