"""Dynamic Accumulated Attention Map (DAAM, seed 001 sections 3.2-3.3, 4.4).

From ONE capture (a forward and one backward for the target scalar), per block b
that has a [CLS] query:

    a0_b        the [CLS] query's attention row, per head (incl. prefix keys)
    S_b[n, c]   = a0_b[h, n] * V_b[h, n, j]   with channel c = h*d + j   (eq. 7)
                  so sum_n S_b[n, :] = T_b, the [CLS] context entering attn.proj
    C_b         = d(target) / dT_b, read at the [CLS] position of `context` (eq. 8)
    L_b         = ReLU(sum_c ReLU(C_b)_c * S_b[patches, c])  on the patch grid (eq. 9)
    D_b         = sum_{i<=b} L_i                                      (eq. 11-12)

Supervised models: the target is a class logit. Self-supervised models with a
k-NN memory bank (the bundled DINOv2): the target is <w, output>, where w are
the dimension-wise importance weights of eq. 13 computed from the bank entries
of the target class among the k nearest neighbours; as in the official code the
channel weights are then not clipped (`channel_relu` says which was used).

Token layouts: prefix tokens (CLS, distillation, registers) are read from each
captured block; CaiT's flow runs over its class-attention blocks (the only blocks
with a [CLS] query), as in the paper's figure 5.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from ..capture import BlockRecord, Capture, CaptureError
from ..capture import capture as run_model_capture
from ..maps import min_max
from ..pipeline import head_of, vit_capture
from .base import Choice, ExplainRequest, ExplainResult, Theory, method
from .daam_knn import KNN_FORMULAS, KnnWeights, knn_capture, knn_pass, weighted_output_score

CHANNEL_RELU = ("auto", "yes", "no")
CONVENTION = ("DAAM (Liao et al.): S_b = a0_b (x) V_b, C_b = grad at the [CLS] context entering "
              "attn.proj, L_b = ReLU(sum_c w_c S_b[:, c]) over patch tokens, D_b = cumulative "
              "sum; raw, not normalised")

DISPLAY_MODES = {
    "official": "Official DAAM display: x = map / (max over all frames), y = sigmoid(5x) - 0.5, "
                "then min-max per frame",
    "frame": "Per-frame min-max: every block stretched to its own range",
    "shared": "One linear scale for all frames: map / (max over all frames)",
}


# --- the decomposition -----------------------------------------------------------------------

def flow_blocks(capture: Capture) -> list[BlockRecord]:
    """The blocks DAAM runs over: those whose query 0 is the [CLS] token.

    CaiT: its class-attention blocks only (its patch blocks have no [CLS]).
    """
    blocks = [b for b in capture.blocks if b.kind == "class"]
    if not blocks:
        blocks = [b for b in capture.blocks if b.kind == "self" and b.num_prefix_tokens > 0]
    if not blocks:
        raise CaptureError("DAAM needs a [CLS] token, and this model's blocks have none.")
    return blocks


def decompose(record: BlockRecord) -> torch.Tensor:
    """S_b (Nk, C): the [CLS] row of the attention times the values, channel h*d + j."""
    a0 = record.acts["attn"][0, :, 0, :]  # (H, Nk)
    values = record.acts["v"][0]  # (H, Nk, d)
    heads, tokens, dim = values.shape
    return (a0.unsqueeze(-1) * values).permute(1, 0, 2).reshape(tokens, heads * dim)


def cls_context(record: BlockRecord) -> torch.Tensor:
    """T_b (C,): the [CLS] context as it enters `attn.proj`."""
    return record.acts["context"][0, 0]


def channel_importance(record: BlockRecord) -> torch.Tensor:
    """C_b (C,): the target's gradient at the [CLS] position of the context."""
    if record.grads is None:
        raise CaptureError("DAAM needs a capture with a backward pass (a target).")
    return record.grads["context"][0, 0]


def block_map(S: torch.Tensor, C: torch.Tensor, prefix: int, grid: tuple[int, int],
              channel_relu: bool = True) -> torch.Tensor:
    """L_b on the patch grid: ReLU of the channel-weighted sum over patch tokens."""
    weights = C.clamp(min=0) if channel_relu else C
    return (S[prefix:] @ weights).clamp(min=0).reshape(grid)


# --- the result ------------------------------------------------------------------------------

@dataclass
class DaamResult:
    L: np.ndarray  # (B, rows, cols) per-block maps, raw
    D: np.ndarray  # (B, rows, cols) accumulated maps, raw
    S: np.ndarray  # (B, patches, C) decomposition on patch tokens (channel inspector)
    C: np.ndarray  # (B, C) channel importance, unclipped
    T: np.ndarray  # (B, C) [CLS] contexts (the identity's right-hand side)
    block_indices: list[int]  # capture block index of each frame
    block_labels: list[str]  # e.g. "block 3", "class block 24 (after 24 patch blocks)"
    short_labels: list[str]  # e.g. "block 3", "class block 24"
    block_kind: str  # "self", or "class": the flow runs over CaiT's class-attention blocks
    num_heads: int
    prefix_tokens: list[int]
    grid: tuple[int, int]
    patch_size: tuple[int, int]
    channel_relu: bool
    variant: str  # "supervised" | "knn"
    score: float
    target: int
    target_label: str
    knn: KnnWeights | None = None
    seconds: dict[str, float] = field(default_factory=dict)

    def meta(self) -> dict:
        meta = {"variant": self.variant, "channel_relu": self.channel_relu,
                "blocks": self.block_labels, "block_indices": self.block_indices,
                "prefix_tokens": self.prefix_tokens, "grid": list(self.grid),
                "patch_size": list(self.patch_size), "score": self.score}
        if self.knn is not None:
            meta["knn"] = {"formula": self.knn.formula, "class": self.knn.class_label,
                           "voters": [v.source for v in self.knn.voters],
                           "fallback": self.knn.fallback,
                           "weights_sha256": self.knn.fingerprint(),
                           "k": len(self.knn.neighbours)}
        return meta


def sink_frames(result: DaamResult, analysis) -> list[dict]:
    """Flow frames whose brightest patch is the patch key of a sink head of that block
    (`xai_core.analysis.attention_sinks`): such an L_b shows the sink, not the object. Each
    entry says how much that frame adds to the final map D_B and how much of D_B the sink patch
    holds."""
    rows = {block: position for position, block in enumerate(analysis.blocks)}
    total = float(result.D[-1].sum())
    found = []
    for frame, block in enumerate(result.block_indices):
        frame_map = result.L[frame]
        if block not in rows or total <= 0 or frame_map.max() <= 0:
            continue
        top = int(frame_map.argmax())
        for sink in analysis.patch_sinks(rows[block]):
            if sink.key - analysis.num_prefix_tokens == top:
                found.append({"frame": frame, "label": result.block_labels[frame],
                              "block": block, "head": sink.head, "score": sink.score, "key": sink.key_name,
                              "frame_share": float(frame_map.sum()) / total,
                              "patch_share": float(result.D[-1].ravel()[top]) / total})
    return found


def _block_labels(blocks: list[BlockRecord], capture: Capture) -> tuple[list[str], list[str]]:
    """(labels, short labels) of the flow's frames: blocks numbered from 0 in forward order,
    as the capture and every page number them."""
    if blocks[0].kind == "class":
        patch_blocks = sum(1 for b in capture.blocks if b.kind == "self")
        short = [f"class block {b.index}" for b in blocks]
        return [f"{label} (after {patch_blocks} patch blocks)" for label in short], short
    labels = [f"block {b.index}" for b in blocks]
    return labels, labels


def daam_from_capture(capture: Capture, channel_relu: bool = True) -> dict:
    """All DAAM arrays from one capture with gradients (no caching, no model)."""
    blocks = flow_blocks(capture)
    grid = capture.layout.grid
    L, S, C, T = [], [], [], []
    for record in blocks:
        s, c = decompose(record), channel_importance(record)
        L.append(block_map(s, c, record.num_prefix_tokens, grid, channel_relu))
        S.append(s[record.num_prefix_tokens:])
        C.append(c)
        T.append(cls_context(record))
    L = torch.stack(L)
    labels, short = _block_labels(blocks, capture)
    return dict(L=L.numpy(), D=L.cumsum(0).numpy(), S=torch.stack(S).numpy(),
                C=torch.stack(C).numpy(), T=torch.stack(T).numpy(),
                block_indices=[b.index for b in blocks], block_labels=labels,
                short_labels=short, block_kind=blocks[0].kind,
                num_heads=blocks[0].num_heads, prefix_tokens=[b.num_prefix_tokens for b in blocks],
                grid=grid, patch_size=capture.layout.patch_size)


def _resolve_relu(channel_relu: str, variant: str) -> bool:
    """The channel_relu option (one of CHANNEL_RELU) as a yes/no for this variant."""
    if channel_relu == "auto":  # the official code: ReLU for logits, none for the k-NN variant
        return variant == "supervised"
    return channel_relu == "yes"


def _variant(head) -> str:
    return "knn" if head.kind == "knn" else "supervised"


def daam_result(capture: Capture, head, target: int, variant: str, relu: bool,
                knn: KnnWeights | None = None, started: float | None = None) -> DaamResult:
    arrays = daam_from_capture(capture, relu)
    seconds = dict(capture.seconds)
    if started is not None:
        seconds["total"] = time.perf_counter() - started
    return DaamResult(**arrays, channel_relu=relu, variant=variant, score=capture.score,
                      target=target, target_label=head.class_names[target], knn=knn,
                      seconds=seconds)


def daam_uncached(model, pixels: torch.Tensor, target: int, head=None,
                  formula: str = "official", channel_relu: str = "auto") -> DaamResult:
    """DAAM for every block from one forward + one backward, no cache (benchmarks)."""
    started = time.perf_counter()
    head = head_of(model, head)
    variant = _variant(head)
    relu = _resolve_relu(channel_relu, variant)
    if variant == "knn":
        knn, capture = knn_pass(model, pixels, target, head, formula)
    else:
        knn, capture = None, run_model_capture(model, pixels, head.score_fn(target))
    return daam_result(capture, head, target, variant, relu, knn, started)


def result_score_fn(result: DaamResult, head):
    """The scalar a DAAM result differentiated: the logit, or <output, w> with ITS w."""
    if result.knn is not None:
        return weighted_output_score(result.knn.weights)
    return head.score_fn(result.target)


# --- display normalisations ------------------------------------------------------------------

def display_frames(frames: np.ndarray, mode: str) -> np.ndarray:
    """Frames (B, rows, cols) scaled to [0, 1] for display, by one of DISPLAY_MODES."""
    frames = np.asarray(frames, dtype=np.float64)
    each_frame = tuple(range(1, frames.ndim))
    if mode not in DISPLAY_MODES:
        raise ValueError(f"Unknown display mode '{mode}' ({', '.join(DISPLAY_MODES)}).")
    if mode == "official":
        top = frames.max()
        scaled = frames / top if top > 0 else np.zeros_like(frames)
        return min_max(1.0 / (1.0 + np.exp(-5.0 * scaled)) - 0.5, each_frame)
    if mode == "frame":
        return min_max(frames, each_frame)
    return min_max(frames)


# --- channel inspector -----------------------------------------------------------------------

@dataclass
class ChannelView:
    channel: int
    head: int
    dim: int
    weight: float  # ReLU(C_b)_c (or C_b_c when unclipped)
    feature: np.ndarray  # S_b[patches, c] on the grid
    contribution: np.ndarray  # weight * feature on the grid


def top_channels(result: DaamResult, frame: int, count: int = 6) -> list[ChannelView]:
    """The channels with the largest weight in block `frame` and their spatial maps."""
    C = result.C[frame]
    weights = np.maximum(C, 0) if result.channel_relu else C
    order = np.argsort(-weights, kind="stable")[:count]
    head_dim = C.shape[0] // result.num_heads
    views = []
    for channel in order.tolist():
        feature = result.S[frame][:, channel].reshape(result.grid)
        views.append(ChannelView(channel, channel // head_dim, channel % head_dim,
                                 float(weights[channel]), feature, weights[channel] * feature))
    return views


# --- the method ------------------------------------------------------------------------------

@method("daam", family="vit", needs_target=True, cost="gradient",
        title="DAAM",
        summary="Dynamic Accumulated Attention Map: per-block L and accumulated D maps (one "
                "backward for all blocks; eq. 13 weights for a k-NN head).",
        convention=CONVENTION,
        theory=Theory(
            mechanism="Splits each block's [CLS] context into per-patch parts, weights the "
                      "channels by the gradient and accumulates the maps block by block.",
            cost="One forward and one backward pass give every block's map.",
            class_specificity="Yes (for a k-NN head: weights from the class's nearest bank "
                              "entries).",
            resolution="One value per patch token, for every block.",
            supervision="A class score, or a k-NN memory bank for self-supervised ViTs.",
            best_for="Watching the decision form through the depth of the network."),
        options=(Choice("knn_weights", "official", KNN_FORMULAS,
                        "Eq. 13 for a k-NN head: the official code's formula or the paper's."),
                 Choice("channel_relu", "auto", CHANNEL_RELU,
                        "Clip the channel weights to their positive part: auto = as the "
                        "official code (yes for logits, no for a k-NN head).")))
def explain(request: ExplainRequest, *, knn_weights: str, channel_relu: str) -> ExplainResult:
    """DAAM for a ViT, an image and a target class; `detail` is the DaamResult."""
    model, image, target, head = request.model, request.image, request.target, request.head
    started = time.perf_counter()
    variant = _variant(head)
    relu = _resolve_relu(channel_relu, variant)
    if variant == "knn":
        knn, capture = knn_capture(model, image, target, head, knn_weights)
    else:  # the shared capture other pages use for this target
        knn, capture = None, vit_capture(model, image, target, head)
    result = daam_result(capture, head, target, variant, relu, knn, started)
    meta = result.meta()
    meta["seconds"] = result.seconds
    arrays = {"L": result.L.astype(np.float32), "D": result.D.astype(np.float32),
              "channel_importance": result.C.astype(np.float32)}
    if result.knn is not None:
        arrays["knn_weights"] = result.knn.weights.astype(np.float32)
    return ExplainResult(map=result.D[-1].astype(np.float32), arrays=arrays, meta=meta,
                         detail=result)
