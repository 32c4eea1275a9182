"""Grad-CAM for a ViT: the whole taxonomy of seed 002 from ONE forward and ONE backward.

A variant is (block, location, weights, heads):

- location, read from the capture engine's tensors of that block:
    F1 LN1 output (ln1), F2 attention matrix per head (attn), F3 per-head context
    softmax(QK^T)V before the output projection (context), F4 LN2 output (ln2),
    F5 MLP output (mlp), F6 block output (out).
- weights: "patch" = the gradient averaged over the patch tokens (eqs. 10/11), or
  "cls" = the gradient at the [CLS] token (eqs. 12/13).
- heads (F2 and F3 only): "sum-relu" = heads summed before the ReLU (eq. 15), or
  "relu-sum" = ReLU per head, then summed (eq. 16).

Every location is handled as a per-head "tokens x channels" tensor X[h, i, k]
with its gradient G[h, i, k]:

- F1, F4, F5, F6: one "head", X = the (N, C) token features.
- F3: X[h] = the (N, d) context of head h (channels h*d .. h*d+d-1 of the context).
- F2: the [CLS] query's attention row (seed eq. 8, Chefer's attention Grad-CAM):
  X[h, i, 0] = A_h[CLS, i]; the key axis is the token axis and each head is one
  channel. So the patch weight of head h is the mean of dy/dA_h[CLS, patch keys]
  and the [CLS] weight is dy/dA_h[CLS, CLS].

Then alpha[h, k] = mean over patch tokens i of G[h, i, k] ("patch") or G[h, 0, k]
("cls"); m[h, i] = sum_k alpha[h, k] X[h, i, k] on the patch tokens; the map is
ReLU(sum_h m[h]) or sum_h ReLU(m[h]), reshaped to the patch grid (raster order).
Prefix tokens (CLS, distillation, registers) are never part of the map.

A cell whose weights come from an all-zero gradient (in a [CLS]-token model: the
patch tokens of the last block after the attention, which nothing downstream
reads) is flagged "zero-gradient": its map is identically zero, not a finding.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from ..infra.cache import cache_key
from ..capture import BlockRecord, Capture
from ..infra.errors import OptionError
from ..pipeline import CAPTURE_CACHE, prepare, vit_capture
from .base import LAST_BLOCK, Choice, ExplainRequest, ExplainResult, Int, Theory, method
from .gradcam import scale_like_pytorch_grad_cam

LOCATIONS = ("F1", "F2", "F3", "F4", "F5", "F6")
LOCATION_TENSOR = {"F1": "ln1", "F2": "attn", "F3": "context", "F4": "ln2", "F5": "mlp",
                   "F6": "out"}
LOCATION_NAMES = {
    "F1": "LN1 output", "F2": "attention ([CLS] row, per head)",
    "F3": "per-head context (before the projection)", "F4": "LN2 output", "F5": "MLP output",
    "F6": "block output",
}
MULTI_HEAD = ("F2", "F3")
WEIGHTS = ("patch", "cls")
WEIGHT_NAMES = {"patch": "patch-averaged gradient", "cls": "[CLS] gradient"}
HEAD_MODES = ("sum-relu", "relu-sum")
HEAD_NAMES = {"sum-relu": "heads summed, then ReLU", "relu-sum": "ReLU per head, then summed"}

OK, ZERO_GRADIENT, RELU_EMPTY = "ok", "zero-gradient", "relu-empty"


@dataclass(frozen=True)
class Variant:
    block: int
    location: str
    weights: str
    heads: str | None  # None for single-head locations (F1, F4, F5, F6)

    @property
    def key(self) -> str:
        parts = [f"block{self.block}", self.location, self.weights]
        return "/".join(parts + ([self.heads] if self.heads else []))

    def describe(self) -> str:
        text = (f"block {self.block}, {self.location} ({LOCATION_NAMES[self.location]}), "
                f"{WEIGHT_NAMES[self.weights]}")
        return text + (f", {HEAD_NAMES[self.heads]}" if self.heads else "")


@dataclass(frozen=True)
class Cell:
    variant: Variant
    map: np.ndarray  # (rows, cols) raw, after the ReLU
    per_head: np.ndarray  # (heads, rows, cols) per-head sums before any ReLU
    alpha: np.ndarray  # (heads, channels) the weights used
    status: str  # ok | zero-gradient | relu-empty
    reason: str = ""


@dataclass(frozen=True)
class TaxonomyCounts:
    variants: int  # every defined cell
    zero_gradient: int  # blank: the weights come from an all-zero gradient
    relu_empty: int  # every weighted sum negative: nothing left after the ReLU
    drawn: int
    undefined: int  # (block, location, weighting) combinations this model does not have

    def labelled(self) -> dict[str, int]:
        """The counts under the words `meta` shows."""
        return {"variants": self.variants, "blank (zero gradient)": self.zero_gradient,
                "empty after ReLU": self.relu_empty, "drawn": self.drawn,
                "not defined here": self.undefined}


@dataclass
class Taxonomy:
    """Every defined variant of one capture, plus the locations that are not defined."""

    grid: tuple[int, int]
    patch_size: tuple[int, int]
    num_blocks: int
    cells: dict[Variant, Cell]
    undefined: dict[tuple[int, str, str], str] = field(default_factory=dict)  # -> reason
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def count(self) -> int:
        return len(self.cells)

    def counts(self) -> TaxonomyCounts:
        statuses = [cell.status for cell in self.cells.values()]
        return TaxonomyCounts(len(statuses), statuses.count(ZERO_GRADIENT),
                              statuses.count(RELU_EMPTY), statuses.count(OK), len(self.undefined))

    def cell(self, block: int, location: str, weights: str, heads: str | None = None) -> Cell:
        heads = (heads or HEAD_MODES[0]) if location in MULTI_HEAD else None
        variant = Variant(block, location, weights, heads)
        if variant in self.cells:
            return self.cells[variant]
        reason = self.undefined.get((block, location, weights), "this cell does not exist")
        raise OptionError(f"Grad-CAM at {location} of block {block} with {WEIGHT_NAMES[weights]} "
                          f"is not defined for this model: {reason}")


# --- one location of one block as X[h, i, k], G[h, i, k] ----------------------------------------

def location_tensors(record: BlockRecord, location: str) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(X, G, prefix) for batch item 0: per-head token x channel features and gradients,
    with the number of prefix tokens on their token axis."""
    if record.grads is None:
        raise ValueError("This capture ran without a target class, so it has no gradients.")
    name = LOCATION_TENSOR[location]
    act, grad = record.acts[name][0], record.grads[name][0]
    heads = record.num_heads
    if location == "F2":  # (H, Nq, Nk): the [CLS] query row, keys as tokens, heads as channels
        return act[:, 0, :, None], grad[:, 0, :, None], record.num_prefix_tokens
    if location == "F3":  # (Nq, C) -> (H, Nq, d): channel h*d + j belongs to head h
        tokens, width = act.shape
        split = lambda t: t.reshape(tokens, heads, width // heads).permute(1, 0, 2)  # noqa: E731
        return split(act), split(grad), _query_prefix(record, tokens)
    tokens = act.shape[0]
    prefix = record.num_prefix_tokens if name == "ln1" else _query_prefix(record, tokens)
    return act[None], grad[None], prefix


def _query_prefix(record: BlockRecord, tokens: int) -> int:
    """Prefix count on the query axis: as the keys in self-attention blocks; CaiT's
    class blocks only carry the [CLS] query (no patch tokens at all)."""
    return record.num_prefix_tokens if tokens > 1 or record.kind == "self" else tokens


def undefined_reason(record: BlockRecord, location: str, weights: str, num_patches: int) -> str:
    """Why a (block, location, weights) cell does not exist for this model, or ''."""
    if location == "F2" and record.num_prefix_tokens == 0:
        return "this block has no [CLS] token, so there is no [CLS] attention row"
    X, _, prefix = location_tensors(record, location)
    if X.shape[1] - prefix != num_patches:
        return "this tensor carries only the [CLS] token here, no patch tokens"
    if weights == "cls" and prefix == 0:
        return "this block has no [CLS] token to take the gradient from"
    return ""


def weights_of(G: np.ndarray, prefix: int, weights: str) -> np.ndarray:
    """alpha[h, k]: eq. 10/11 (mean over the patch tokens) or eq. 12/13 (the [CLS] token)."""
    return G[:, prefix:, :].mean(axis=1) if weights == "patch" else G[:, 0, :]


def combine_heads(per_head: np.ndarray, heads: str | None) -> np.ndarray:
    """(H, P) per-head sums -> (P,): eq. 15 (sum, then ReLU) or eq. 16 (ReLU, then sum)."""
    if heads == "relu-sum":
        return np.maximum(per_head, 0).sum(axis=0)
    return np.maximum(per_head.sum(axis=0), 0)


def _zero_gradient_reason(variant: Variant, last: bool, prefix: int) -> str:
    where = "patch tokens" if variant.weights == "patch" else "[CLS] token"
    text = (f"The gradient of the target at the {where} of {variant.location} in block "
            f"{variant.block} is exactly zero, so every weight is zero and the map is blank.")
    if last and variant.weights == "patch" and prefix > 0:
        text += (" After the last block's attention only the prefix tokens ([CLS] and any "
                 "others) feed the head, so the patch tokens here cannot change the score.")
    return text


def block_cells(record: BlockRecord, num_patches: int, grid: tuple[int, int], last: bool
                ) -> tuple[list[Cell], dict[tuple[int, str, str], str]]:
    """Every cell of one block. The arithmetic is small (a few hundred tokens), so it runs in
    float64 numpy: no thread-pool hand-offs per tiny tensor, and no rounding worries."""
    cells, undefined = [], {}
    for location in LOCATIONS:
        reasons = {w: undefined_reason(record, location, w, num_patches) for w in WEIGHTS}
        undefined.update(((record.index, location, w), why) for w, why in reasons.items() if why)
        defined = [w for w in WEIGHTS if not reasons[w]]
        if not defined:
            continue
        X, G, prefix = location_tensors(record, location)
        X, G = X.numpy().astype(np.float64), G.numpy().astype(np.float64)
        patches = X[:, prefix:, :]  # (H, P, K)
        for weights in defined:
            alpha = weights_of(G, prefix, weights)
            per_head = np.matmul(patches, alpha[:, :, None])[:, :, 0]  # (H, P)
            source = G[:, prefix:, :] if weights == "patch" else G[:, 0, :]
            zero = not source.any()
            for heads in (HEAD_MODES if location in MULTI_HEAD else (None,)):
                variant = Variant(record.index, location, weights, heads)
                flat = combine_heads(per_head, heads)
                if zero:
                    status, why = ZERO_GRADIENT, _zero_gradient_reason(variant, last, prefix)
                elif not flat.any():
                    status, why = RELU_EMPTY, ("Every patch's weighted sum is negative here, so "
                                               "the ReLU leaves nothing to draw.")
                else:
                    status, why = OK, ""
                cells.append(Cell(variant, flat.reshape(grid).astype(np.float32),
                                  per_head.reshape(-1, *grid).astype(np.float32),
                                  alpha.astype(np.float32), status, why))
    return cells, undefined


def taxonomy(capture: Capture) -> Taxonomy:
    """Every Grad-CAM variant of every block from one capture (one forward + backward)."""
    if not capture.has_gradients:
        raise ValueError("The taxonomy needs a capture with a target class (a backward pass).")
    started = time.perf_counter()
    layout = capture.layout
    cells, undefined = {}, {}
    last = len(capture.blocks) - 1
    for record in capture.blocks:
        block, missing = block_cells(record, layout.num_patches, layout.grid, record.index == last)
        cells.update((cell.variant, cell) for cell in block)
        undefined.update(missing)
    seconds = dict(capture.seconds)
    seconds["cells"] = time.perf_counter() - started
    return Taxonomy(layout.grid, layout.patch_size, len(capture.blocks), cells, undefined, seconds)


def cached_taxonomy(model, image, target: int, head) -> Taxonomy:
    """The taxonomy for (model, image, target), memoised: both methods read it."""
    prepared = prepare(model, image)
    key = cache_key("vit-gradcam-taxonomy", model, target, image=prepared.sha256, head=head)
    return CAPTURE_CACHE.get_or_compute(
        key, lambda: taxonomy(vit_capture(model, image, target=target, head=head)))


def upsample_for_display(cam: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Eq. 17/18 for an overlay: bilinear to the input size, then min-max to [0, 1]
    (pytorch-grad-cam's exact scaling, so its ViT example can be reproduced). Takes one
    (rows, cols) map or a stack of them."""
    return scale_like_pytorch_grad_cam(cam, size)


# --- the methods ------------------------------------------------------------------------------

def _cell_meta(cell: Cell) -> dict:
    return {"variant": cell.variant.key, "description": cell.variant.describe(),
            "status": cell.status, "reason": cell.reason}


CONVENTION = ("ViT Grad-CAM taxonomy ('Grad-CAM for Vision Transformers: A Systematic "
              "Taxonomy'): F1..F6 per block; weights = patch-token mean (eq. 10/11) or "
              "[CLS] gradient (eq. 12/13); F2 = [CLS] attention row with heads as channels "
              "(eq. 8); F2/F3 heads summed before ReLU (eq. 15) or ReLU per head then summed "
              "(eq. 16); prefix tokens dropped; raw map on the patch grid (no min-max)")
VARIANT_THEORY = Theory(
    mechanism="Grad-CAM transplanted to a ViT: token features of a chosen block weighted by "
              "their gradients, patch tokens as the grid.",
    cost="One forward and one backward pass per class.",
    class_specificity="Yes, when the chosen feature location carries gradient to patches.",
    resolution="One value per patch token.", supervision="A class score.",
    best_for="Comparing CNN-style explanations across architectures; learning which layers "
             "give blank maps.")


@method("vit-gradcam", family="vit", needs_target=True, cost="gradient",
        title="ViT Grad-CAM",
        summary="One ViT Grad-CAM variant (--set location=F1..F6 weights=patch|cls "
                "heads=sum-relu|relu-sum block=N).",
        convention=CONVENTION, theory=VARIANT_THEORY,
        options=(Choice("location", "F1", LOCATIONS,
                        "Where features and gradients are read: " + "; ".join(
                            f"{loc} {name}" for loc, name in LOCATION_NAMES.items()) + "."),
                 Choice("weights", "patch", WEIGHTS,
                        "patch: the gradient averaged over the patch tokens; cls: the "
                        "gradient at the [CLS] token."),
                 Choice("heads", "sum-relu", HEAD_MODES,
                        "F2 and F3 only: heads summed before the ReLU, or ReLU per head then "
                        "summed."),
                 Int("block", LAST_BLOCK, 0, LAST_BLOCK, "The block read.")))
def explain(request: ExplainRequest, *, location: str, weights: str, heads: str,
            block: int) -> ExplainResult:
    result = cached_taxonomy(request.model, request.image, request.target, request.head)
    cell = result.cell(block, location, weights, heads)
    return ExplainResult(map=cell.map.astype(np.float32),
                         arrays={"per_head": cell.per_head, "alpha": cell.alpha},
                         meta={**_cell_meta(cell), "block": block, "location": location,
                               "weights": weights,
                               "heads": heads if location in MULTI_HEAD else None},
                         detail=cell)


@method("vit-gradcam-all", family="vit", needs_target=True, cost="gradient",
        title="ViT Grad-CAM (every block)",
        summary="Every ViT Grad-CAM variant (all blocks, locations, weightings, head modes) "
                "from one forward + backward, in one file.",
        convention=CONVENTION,
        theory=Theory(
            mechanism="Every Grad-CAM variant of a ViT at once: six feature locations per "
                      "block, two weightings, two ways to combine heads.",
            cost="One forward and one backward pass for all of them.",
            class_specificity="Yes, wherever the location carries gradient to patches.",
            resolution="One value per patch token, for every variant.",
            supervision="A class score.",
            best_for="Seeing how much 'Grad-CAM on a ViT' depends on choices a paper may not "
                     "state."),
        off_by_default="its map is vit-gradcam's default variant; the other variants belong "
                       "to page 5",
        benchmark_skip="its map is vit-gradcam's default variant")
def explain_all(request: ExplainRequest) -> ExplainResult:
    """Every variant; `detail` is the Taxonomy page 5 draws."""
    result = cached_taxonomy(request.model, request.image, request.target, request.head)
    cells = list(result.cells.values())
    default = result.cell(result.num_blocks - 1, "F1", "patch")
    return ExplainResult(
        map=default.map.astype(np.float32),
        arrays={"maps": np.stack([c.map for c in cells]).astype(np.float32),
                "variants": np.array([c.variant.key for c in cells]),
                "blocks": np.array([c.variant.block for c in cells]),
                "locations": np.array([c.variant.location for c in cells]),
                "weights": np.array([c.variant.weights for c in cells]),
                "heads": np.array([c.variant.heads or "" for c in cells]),
                "zero_gradient": np.array([c.status == ZERO_GRADIENT for c in cells]),
                "relu_empty": np.array([c.status == RELU_EMPTY for c in cells])},
        meta={"variant_count": result.count, "counts": result.counts().labelled(),
              "map": "F1 of the last block with patch-averaged weights "
                     "(pytorch-grad-cam's ViT example); all variants are in 'maps'",
              "undefined": {f"block{b}/{loc}/{w}": why
                            for (b, loc, w), why in result.undefined.items()},
              "seconds": result.seconds},
        detail=result)
