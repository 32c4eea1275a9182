"""From pixels to tokens: token counts, the patch embedding and the position table.

Everything is read from the loaded timm model (patch size, prefix tokens, the
grid its position table was built for); nothing assumes 14x14, 224 px or a
single [CLS] token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

from ..infra.cache import cache_key
from ..images import SAMPLES, load_sample
from ..pipeline import CAPTURE_CACHE


class TokenError(ValueError):
    """Sizes that give no tokens, or a model without the piece asked for (message in words)."""


# --- counting tokens --------------------------------------------------------------------------

@dataclass(frozen=True)
class TokenCount:
    """How an H x W image is cut into P x P patches, plus the prefix tokens.

    A strided convolution (timm's PatchEmbed) keeps floor(H/P) x floor(W/P)
    patches and silently ignores the last H mod P rows and W mod P columns;
    padding the image up to the next multiple of P keeps them (ceil).
    """

    height: int
    width: int
    patch: int
    prefix: int

    @property
    def rows(self) -> int:
        return self.height // self.patch

    @property
    def cols(self) -> int:
        return self.width // self.patch

    @property
    def leftover_rows(self) -> int:  # pixel rows the convolution never sees
        return self.height % self.patch

    @property
    def leftover_cols(self) -> int:
        return self.width % self.patch

    @property
    def divisible(self) -> bool:
        return self.leftover_rows == 0 and self.leftover_cols == 0

    @property
    def num_patches(self) -> int:
        return self.rows * self.cols

    @property
    def num_tokens(self) -> int:
        return self.num_patches + self.prefix

    @property
    def dropped_pixels(self) -> int:
        return self.height * self.width - self.num_patches * self.patch ** 2

    @property
    def padded_rows(self) -> int:
        return math.ceil(self.height / self.patch)

    @property
    def padded_cols(self) -> int:
        return math.ceil(self.width / self.patch)

    @property
    def padded_tokens(self) -> int:
        return self.padded_rows * self.padded_cols + self.prefix


def token_count(height: int, width: int, patch: int, prefix: int = 1) -> TokenCount:
    for name, value in (("height", height), ("width", width), ("patch size", patch)):
        if int(value) != value or value < 1:
            raise TokenError(f"The {name} must be a whole number of pixels >= 1, got {value}.")
    if prefix < 0 or int(prefix) != prefix:
        raise TokenError(f"The number of prefix tokens must be a whole number >= 0, got {prefix}.")
    if height < patch or width < patch:
        raise TokenError(f"A {height}x{width} image is smaller than one {patch}x{patch} patch, "
                         "so it gives no tokens at all. Make the image larger or the patch "
                         "smaller.")
    return TokenCount(int(height), int(width), int(patch), int(prefix))


def prefix_token_names(module: torch.nn.Module) -> list[str]:
    """Names of the tokens placed before the patches, in timm's order:
    [CLS], then the distillation token, then register tokens."""
    names = []
    if getattr(module, "cls_token", None) is not None:
        names.append("[CLS]")
    if getattr(module, "dist_token", None) is not None:
        names.append("[DIST]")
    registers = int(getattr(module, "num_reg_tokens", 0) or 0)
    names += [f"[REG{i + 1}]" for i in range(registers)]
    total = int(getattr(module, "num_prefix_tokens", len(names)))
    names += [f"[PREFIX{i + 1}]" for i in range(len(names), total)]
    return names[:total]


# --- the patch embedding E --------------------------------------------------------------------

def _patch_projection(module: torch.nn.Module) -> torch.Tensor:
    proj = getattr(getattr(module, "patch_embed", None), "proj", None)
    weight = getattr(proj, "weight", None)
    if weight is None or weight.dim() != 4:
        raise TokenError("This model has no convolutional patch embedding (patch_embed.proj).")
    return weight.detach().float().cpu()  # (D, C, P_h, P_w)


@dataclass(frozen=True)
class EmbeddingPCA:
    """Principal components of the patch-embedding filters (Dosovitskiy et al., Fig. 7).

    Each of the D filters is one row of E^T, a vector of P_h*P_w*C numbers;
    the components are orthonormal directions in that pixel space.
    """

    components: np.ndarray  # (n, P_h, P_w, C) raw, unit norm
    explained: np.ndarray  # (n,) fraction of the filters' variance
    e_shape: tuple[int, int]  # E is (P_h*P_w*C) x D
    patch_size: tuple[int, int]
    channels: int

    def tiles(self) -> np.ndarray:
        """Components as RGB tiles in [0, 1] (each centred on grey, same scale for +/-)."""
        peak = np.abs(self.components).max(axis=(1, 2, 3), keepdims=True)
        tiles = 0.5 + 0.5 * self.components / np.where(peak > 0, peak, 1.0)
        if self.channels == 1:
            tiles = np.repeat(tiles, 3, axis=-1)
        return tiles[..., :3]


def patch_embedding_pca(module: torch.nn.Module, components: int = 28) -> EmbeddingPCA:
    weight = _patch_projection(module)
    dim, channels, ph, pw = weight.shape
    filters = weight.permute(0, 2, 3, 1).reshape(dim, -1).double().numpy()  # (D, P_h*P_w*C)
    centred = filters - filters.mean(axis=0, keepdims=True)
    _, singular, vt = np.linalg.svd(centred, full_matrices=False)
    count = max(1, min(components, vt.shape[0]))
    variance = singular ** 2
    explained = variance[:count] / variance.sum() if variance.sum() > 0 else np.zeros(count)
    return EmbeddingPCA(vt[:count].reshape(count, ph, pw, channels), explained,
                        (ph * pw * channels, dim), (ph, pw), channels)


def cached_embedding_pca(model, components: int = 28) -> EmbeddingPCA:
    key = cache_key("tokens-pca", model, components)
    return CAPTURE_CACHE.get_or_compute(key, lambda: patch_embedding_pca(model.module, components))


# --- position embeddings ----------------------------------------------------------------------

@dataclass(frozen=True)
class PositionSimilarity:
    similarity: np.ndarray  # (rows, cols, rows, cols): cos(pos[r, c], pos[r2, c2])
    grid: tuple[int, int]  # the grid the model's position table was built for
    prefix_in_table: int  # leading prefix rows in the table (0 when prefixes get none)

    @property
    def matrix(self) -> np.ndarray:
        rows, cols = self.grid
        return self.similarity.reshape(rows * cols, rows * cols)

    def near_and_far(self) -> tuple[float, float]:
        """Mean similarity of side-by-side patches (sharing an edge), and of patches more
        than half the grid apart: whether the table has learned the 2-D layout, measured."""
        rows, cols = self.grid
        row, col = np.divmod(np.arange(rows * cols), cols)
        down, across = np.abs(row[:, None] - row), np.abs(col[:, None] - col)
        far = np.hypot(down, across) > max(rows, cols) / 2
        return float(self.matrix[down + across == 1].mean()), float(self.matrix[far].mean())


def position_similarity(module: torch.nn.Module) -> PositionSimilarity:
    """Cosine similarity between the learned position embeddings of every pair of patches.

    The table is `module.pos_embed` (1, prefix + rows*cols, D), or (1, rows*cols, D)
    for models whose prefix tokens get no position (timm's `no_embed_class`).
    """
    table = getattr(module, "pos_embed", None)
    if not isinstance(table, torch.Tensor):
        raise TokenError("This model has no learned position table (pos_embed); it encodes "
                         "positions another way.")
    grid = getattr(getattr(module, "patch_embed", None), "grid_size", None)
    if grid is None:
        raise TokenError("This model does not say which patch grid its position table is for.")
    rows, cols = (grid, grid) if isinstance(grid, int) else tuple(int(g) for g in grid)
    table = table.detach().float().cpu().reshape(-1, table.shape[-1])
    prefix = table.shape[0] - rows * cols
    if prefix not in (0, int(getattr(module, "num_prefix_tokens", 0))):
        raise TokenError(f"The position table has {table.shape[0]} rows, which fits neither "
                         f"{rows}x{cols} patches nor patches plus the prefix tokens.")
    patches = torch.nn.functional.normalize(table[prefix:].double(), dim=1)
    similarity = (patches @ patches.T).numpy()
    return PositionSimilarity(similarity.reshape(rows, cols, rows, cols), (rows, cols), prefix)


def cached_position_similarity(model) -> PositionSimilarity:
    key = cache_key("tokens-possim", model)
    return CAPTURE_CACHE.get_or_compute(key, lambda: position_similarity(model.module))


# --- k-NN neighbours, described for a gallery -------------------------------------------------

@dataclass(frozen=True)
class NeighbourView:
    sample_id: str | None  # gallery sample, or None for a user's own example
    view: int  # 0 = the image itself, > 0 = an augmented crop of it
    label: str
    similarity: float
    source: str


def describe_neighbours(neighbours) -> list[NeighbourView]:
    """Bank sources look like "chelsea#3" (sample id, view) or "upload:ab12cd34#0"."""
    described = []
    for n in neighbours:
        name, _, view = n.source.rpartition("#")
        name = name or n.source
        described.append(NeighbourView(name if name in SAMPLES else None,
                                       int(view) if view.isdigit() else 0, n.label,
                                       float(n.similarity), n.source))
    return described


@lru_cache(maxsize=16)
def sample_thumbnail(sample_id: str, side: int = 160):
    """A small copy of a gallery photo (shared, read-only)."""
    image = load_sample(sample_id)
    image.thumbnail((side, side))
    return image


def cls_joins_late(module: torch.nn.Module) -> bool:
    """CaiT-style models: patches attend among themselves first; [CLS] is appended
    only for the final class-attention blocks."""
    return bool(getattr(module, "blocks_token_only", None))
