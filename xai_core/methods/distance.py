"""Mean attention distance (Raghu et al. 2021; Keras "probing ViTs") and a CNN's
receptive field, in pixels, so the two can be drawn on one axis.

Mean attention distance of head h in one block:

    MAD_h = mean over query patches i of  sum_j A_hij * D_ij

with D_ij the Euclidean distance between the centres of patches i and j in
pixels (patch size x grid distance). Prefix handling, named in the UI:

- "exclude" (the references): drop prefix rows AND columns. Rows are NOT
  renormalised by default, so attention a patch gives to a prefix token simply
  adds no distance; `renormalise=True` divides each patch row by what is left
  (the distance "given that the head looks at image patches").
- "centre": keep every token; a prefix token has no position of its own, so it
  is placed at the image centre, and prefix queries are averaged in too.

Only self-attention blocks are measured (CaiT's class-attention blocks have a
single [CLS] query with no position).

Receptive field of a chain of convolutions/poolings (the textbook recurrence):
    rf_l = rf_{l-1} + (k_eff - 1) * jump_{l-1},  jump_l = jump_{l-1} * stride,
    k_eff = dilation * (k - 1) + 1;  rf_0 = 1, jump_0 = 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..infra.cache import BoundedCache, cache_key
from ..capture import Capture, CaptureError
from ..infra.errors import OptionError
from ..pipeline import prepare, vit_capture
from .base import LAST_SELF_BLOCK, Choice, ExplainRequest, ExplainResult, Int, Theory, method

PREFIX_MODES = ("exclude", "centre")
CONVENTION_NAMES = {
    ("exclude", False): "prefix rows and columns dropped, rows not renormalised (as Raghu et "
                        "al. and the Keras probing-ViTs code)",
    ("exclude", True): "prefix rows and columns dropped, each patch row renormalised to sum 1",
    ("centre", False): "prefix tokens kept and placed at the image centre (they have no "
                       "position), prefix queries averaged in",
}
# Derived per-image results are tiny; keep them apart from the big captures.
DISTANCE_CACHE = BoundedCache(max_entries=512, max_bytes=64 * 2**20)


def patch_centres(grid: tuple[int, int], patch_size: tuple[int, int]) -> np.ndarray:
    """(N, 2) pixel (y, x) centres of the patches in raster order."""
    rows, cols = grid
    r, c = np.divmod(np.arange(rows * cols), cols)
    return np.stack([(r + 0.5) * patch_size[0], (c + 0.5) * patch_size[1]], axis=1)


def patch_distance_matrix(grid: tuple[int, int], patch_size: tuple[int, int]) -> np.ndarray:
    """(N, N) Euclidean distances in pixels between patch centres."""
    centres = patch_centres(grid, patch_size)
    return np.sqrt(((centres[:, None, :] - centres[None, :, :]) ** 2).sum(-1))


def mean_pairwise_distance(grid: tuple[int, int], patch_size: tuple[int, int]) -> float:
    """What perfectly uniform attention over the patches gives (i = j pairs included)."""
    return float(patch_distance_matrix(grid, patch_size).mean())


def token_distance_matrix(num_prefix: int, grid: tuple[int, int],
                          patch_size: tuple[int, int]) -> np.ndarray:
    """(P+N, P+N) distances with the prefix tokens placed at the image centre."""
    centre = np.array([[grid[0] * patch_size[0] / 2, grid[1] * patch_size[1] / 2]])
    points = np.concatenate([np.repeat(centre, num_prefix, 0), patch_centres(grid, patch_size)])
    return np.sqrt(((points[:, None, :] - points[None, :, :]) ** 2).sum(-1))


def per_query_distance(attn: np.ndarray, num_prefix: int, grid: tuple[int, int],
                       patch_size: tuple[int, int], prefix: str = "exclude",
                       renormalise: bool = False) -> np.ndarray:
    """(..., Q) attention-weighted distance of every query for attention (..., N, N).

    Q is the number of patches ("exclude") or of all tokens ("centre")."""
    attn = np.asarray(attn, dtype=np.float64)
    if prefix == "exclude":
        part = attn[..., num_prefix:, num_prefix:]
        if renormalise:
            part = part / np.maximum(part.sum(-1, keepdims=True), 1e-30)
        return (part * patch_distance_matrix(grid, patch_size)).sum(-1)
    if prefix == "centre":
        if renormalise:
            raise ValueError("Renormalising applies only when prefix tokens are excluded.")
        return (attn * token_distance_matrix(num_prefix, grid, patch_size)).sum(-1)
    raise ValueError(f"Prefix handling must be one of {', '.join(PREFIX_MODES)}.")


def mean_attention_distance(attn: np.ndarray, num_prefix: int, grid: tuple[int, int],
                            patch_size: tuple[int, int], prefix: str = "exclude",
                            renormalise: bool = False) -> np.ndarray:
    """(..., heads, N, N) -> (..., heads) mean attention distance in pixels."""
    return per_query_distance(attn, num_prefix, grid, patch_size, prefix, renormalise).mean(-1)


@dataclass
class DistanceResult:
    mad: np.ndarray  # (blocks, heads) pixels
    per_query: np.ndarray  # (blocks, heads, rows, cols) pixels, patch queries only
    blocks: list[int]  # capture block indices measured
    reference: float  # mean pairwise patch distance (uniform attention)
    max_distance: float  # largest patch-centre distance
    convention: str


def capture_distances(capture: Capture, prefix: str = "exclude",
                      renormalise: bool = False) -> DistanceResult:
    """Mean attention distance of every head of every self-attention block."""
    if (prefix, renormalise) not in CONVENTION_NAMES:
        raise ValueError("Renormalising applies only when prefix tokens are excluded.")
    layout = capture.layout
    records = [b for b in capture.blocks if b.kind == "self"]
    if not records:
        raise CaptureError("This model has no self-attention blocks to measure.")
    per_query, mad = [], []
    for record in records:
        attn = record.acts["attn"][0].numpy()
        p = record.num_prefix_tokens
        query = per_query_distance(attn, p, layout.grid, layout.patch_size, prefix, renormalise)
        mad.append(query.mean(-1))
        per_query.append(query[:, p:] if prefix == "centre" else query)
    distances = patch_distance_matrix(layout.grid, layout.patch_size)
    heads = per_query[0].shape[0]
    return DistanceResult(
        mad=np.stack(mad), blocks=[r.index for r in records],
        per_query=np.stack(per_query).reshape(len(records), heads, *layout.grid),
        reference=float(distances.mean()), max_distance=float(distances.max()),
        convention=CONVENTION_NAMES[(prefix, renormalise)])


def cached_distances(model, image, prefix: str, renormalise: bool) -> DistanceResult:
    """`capture_distances` of one image, from the shared capture cache, memoised: the
    method asked for another block only reads it."""
    key = cache_key("mad", model, prefix, renormalise, image=prepare(model, image).sha256)
    return DISTANCE_CACHE.get_or_compute(
        key, lambda: capture_distances(vit_capture(model, image), prefix, renormalise))


def gallery_distances(model, images: dict, prefix: str = "exclude",
                      renormalise: bool = False) -> tuple[list[str], np.ndarray]:
    """(names, (images, blocks, heads)) for several images (e.g. the whole gallery)."""
    names = list(images)
    if not names:
        raise ValueError("No images to average over.")
    stacked = np.stack([cached_distances(model, images[n], prefix, renormalise).mad
                        for n in names])
    return names, stacked


# --- CNN receptive fields -----------------------------------------------------------------------

@dataclass(frozen=True)
class RfLayer:
    name: str
    stage: str
    kernel: int
    stride: int
    dilation: int
    rf: int  # pixels after this layer
    jump: int  # input pixels between neighbouring output positions


def receptive_field_recurrence(layers: list[tuple[int, int, int]]) -> list[tuple[int, int]]:
    """[(kernel, stride, dilation)] -> [(rf, jump)] after each layer."""
    rf, jump, out = 1, 1, []
    for kernel, stride, dilation in layers:
        rf += (dilation * (kernel - 1)) * jump
        jump *= stride
        out.append((rf, jump))
    return out


def textbook_receptive_field(num_layers: int, kernel: int = 3) -> list[int]:
    """Stride-1 k x k stack: rf_l = rf_{l-1} + (k - 1), i.e. 1 + l (k - 1)."""
    return [rf for rf, _ in receptive_field_recurrence([(kernel, 1, 1)] * num_layers)]


def _first(value) -> int:
    return int(value[0] if isinstance(value, (tuple, list)) else value)


def _stage_of(name: str) -> str:
    parts = name.split(".")
    return ".".join(parts[:2]) if len(parts) >= 3 else name


def cnn_receptive_fields(module: torch.nn.Module) -> list[RfLayer]:
    """The receptive field after every spatial layer of a CNN, read from its own
    Conv2d / pooling modules (kernel, stride, dilation) in forward order.

    1x1 stride-1 layers do not change it and are skipped; residual shortcuts
    (`downsample` branches) run beside the main path and are skipped too.
    Valid for chain-like CNNs (VGG, EfficientNet, the main path of a ResNet)."""
    spatial = (torch.nn.Conv2d, torch.nn.MaxPool2d, torch.nn.AvgPool2d)
    layers = []
    for name, layer in module.named_modules():
        if not isinstance(layer, spatial) or "downsample" in name.split("."):
            continue
        kernel, stride = _first(layer.kernel_size), _first(layer.stride)
        dilation = _first(getattr(layer, "dilation", 1))
        if kernel == 1 and stride == 1:
            continue
        layers.append((name, kernel, stride, dilation))
    if not layers:
        raise CaptureError(f"{type(module).__name__} has no convolution or pooling layers.")
    fields = receptive_field_recurrence([(k, s, d) for _, k, s, d in layers])
    return [RfLayer(name, _stage_of(name), k, s, d, rf, jump)
            for (name, k, s, d), (rf, jump) in zip(layers, fields)]


def stage_receptive_fields(module: torch.nn.Module) -> list[RfLayer]:
    """The last layer of every stage (e.g. `conv_stem`, `blocks.0` ... `blocks.6`)."""
    last: dict[str, RfLayer] = {}
    for layer in cnn_receptive_fields(module):
        last[layer.stage] = layer
    return list(last.values())


def _renormalise_needs_exclude(values: dict, model) -> None:
    if values["prefix"] == "centre" and values["renormalise"] == "yes":
        raise OptionError("renormalise=yes applies only with prefix=exclude.")


@method("distance", family="vit", needs_target=False, cost="forward",
        summary="Mean attention distance in pixels of every head of every block; the map is "
                "each query patch's distance in one block, heads averaged.",
        convention=lambda values: CONVENTION_NAMES[(values["prefix"],
                                                    values["renormalise"] == "yes")],
        theory=Theory(
            mechanism="Weights the pixel distance between patch centres by attention, per "
                      "query patch, and averages over queries (Raghu et al.).",
            cost="One forward pass; no gradient.",
            class_specificity="None: a property of the heads on this input.",
            resolution="One value per query patch, per head and block.",
            supervision="None.",
            best_for="How far each head looks, block by block, next to a CNN's receptive "
                     "field."),
        options=(Choice("prefix", "exclude", PREFIX_MODES,
                        "exclude: drop prefix rows and columns; centre: keep them, placed at "
                        "the image centre."),
                 Choice("renormalise", "no", ("no", "yes"),
                        "yes: divide each patch row by the attention left after dropping the "
                        "prefix columns (prefix=exclude only)."),
                 Int("block", LAST_SELF_BLOCK, 0, LAST_SELF_BLOCK,
                     "The block (among the self-attention blocks) whose per-query distances "
                     "make the map.")),
        off_by_default="mean attention distance describes how far patches look, not what the "
                       "class used",
        benchmark_skip="its map is a distance in pixels, not an attribution of the class",
        check=_renormalise_needs_exclude)
def explain(request: ExplainRequest, *, prefix: str, renormalise: str,
            block: int) -> ExplainResult:
    result = cached_distances(request.model, request.image, prefix, renormalise == "yes")
    return ExplainResult(
        map=result.per_query[block].mean(0).astype(np.float32),
        arrays={"mean_attention_distance": result.mad.astype(np.float32),
                "per_query": result.per_query.astype(np.float32),
                "blocks": np.array(result.blocks)},
        meta={"unit": "pixels", "block": block,
              "map": "each query patch's attention-weighted distance in `block`, heads "
                     "averaged",
              "mean_pairwise_patch_distance": result.reference,
              "max_patch_distance": result.max_distance,
              "blocks_measured": "self-attention blocks only"},
        detail=result)
