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

import copy
import hashlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from ..capture import BlockRecord, Capture, CaptureError, run_capture, transformer_blocks
from ..knn import KNN_K, KNN_TEMPERATURE, MemoryBank, Neighbour, knn_vote
from ..pipeline import CAPTURE_CACHE, head_of, prepare, vit_capture
from .base import ExplainRequest, ExplainResult, register

KNN_FORMULAS = ("official", "paper")
KNN_FORMULA_NAMES = {
    "official": "official code: mean over voters of x̂_d·ẑ_kd, divided by |their sum over d|, "
                "then min-max to [0, 1]",
    "paper": "paper eq. 13: mean over voters of x̂_d·ẑ_kd / |cos(x, z_k)|, then ReLU (eq. 14)",
}
CHANNEL_RELU = ("auto", "yes", "no")

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


@dataclass
class KnnWeights:
    """Eq. 13 for one image and one class of a k-NN memory bank."""

    weights: np.ndarray  # (D,) what the backward uses as d(target)/d(output)
    raw: np.ndarray  # (D,) before min-max / ReLU
    formula: str
    neighbours: list[Neighbour]  # the k nearest bank entries (the vote)
    voters: list[Neighbour]  # the bank entries the weights were computed from
    fallback: bool  # True: the class had no entry among the k nearest; its nearest were used
    class_label: str

    def fingerprint(self) -> str:
        return hashlib.sha256(self.weights.astype(np.float32).tobytes()).hexdigest()[:16]


def dimension_weights(feature: torch.Tensor, members: torch.Tensor,
                      formula: str = "official") -> tuple[np.ndarray, np.ndarray]:
    """Eq. 13 from a feature (D,) and the voting bank entries (K, D).

    Returns (weights, raw). "official": the released code (products averaged over
    voters, divided by |sum over d| = |mean cosine|, min-max to [0, 1]).
    "paper": each voter's products divided by its own |cosine|, averaged; ReLU.
    """
    x = F.normalize(feature.detach().double().reshape(-1), dim=0)
    z = F.normalize(members.detach().double().reshape(-1, x.numel()), dim=1)
    products = x.unsqueeze(0) * z  # (K, D): x̂_d * ẑ_kd
    if formula == "official":
        mean = products.mean(0)
        total = mean.sum().abs()
        raw = mean / total if total > 0 else mean
        span = raw.max() - raw.min()
        weights = (raw - raw.min()) / span if span > 0 else torch.ones_like(raw)
    elif formula == "paper":
        cosine = products.sum(1, keepdim=True).abs().clamp(min=1e-12)
        raw = (products / cosine).mean(0)
        weights = raw.clamp(min=0)
    else:
        raise ValueError(f"Unknown eq. 13 formula '{formula}' ({', '.join(KNN_FORMULAS)}).")
    return weights.float().numpy(), raw.float().numpy()


def knn_weights(bank: MemoryBank, feature: torch.Tensor, class_index: int,
                formula: str = "official", k: int = KNN_K,
                temperature: float = KNN_TEMPERATURE) -> KnnWeights:
    """The weights of eq. 13 from the target class's entries among the k nearest."""
    _, neighbours = knn_vote(bank, feature, k, temperature)
    label = bank.class_names[class_index]
    voters = [n for n in neighbours if n.label == label]
    fallback = not voters
    if fallback:  # "where would it look for this class": its own nearest entries
        query = F.normalize(feature.detach().float().reshape(1, -1), dim=1)[0]
        rows = [i for i, l in enumerate(bank.labels) if l == label]
        similarity = bank.features[rows] @ query
        order = similarity.argsort(descending=True)[:k].tolist()
        voters = [Neighbour(rows[i], label, bank.sources[rows[i]], float(similarity[i]))
                  for i in order]
    weights, raw = dimension_weights(feature, bank.features[[v.index for v in voters]], formula)
    return KnnWeights(weights, raw, formula, neighbours, voters, fallback, label)


def voter_rows(weights: KnnWeights) -> list[dict]:
    """The k nearest bank entries, in vote order, marked when they shaped w."""
    from ..tokens import describe_neighbours

    used = {v.index for v in weights.voters}
    rows = [{"rank": str(i + 1), "bank entry": view.source, "label": view.label,
             "cosine": round(view.similarity, 4), "used for w": "yes" if n.index in used else ""}
            for i, (n, view) in enumerate(zip(weights.neighbours,
                                              describe_neighbours(weights.neighbours)))]
    if weights.fallback:  # the class's own nearest entries, outside the vote
        rows += [{"rank": "-", "bank entry": view.source, "label": view.label,
                  "cosine": round(view.similarity, 4), "used for w": "yes (outside the vote)"}
                 for view in describe_neighbours(weights.voters)]
    return rows


def weighted_output_score(weights: np.ndarray):
    """score_fn(output) = <output, w>: its gradient at the output is w (eq. 13 -> 8)."""
    vector = torch.as_tensor(weights, dtype=torch.float32)

    def score(output: torch.Tensor) -> torch.Tensor:
        return (output * vector.to(output.device, output.dtype)).sum()
    return score


# --- the result ------------------------------------------------------------------------------

@dataclass
class DaamResult:
    L: np.ndarray  # (B, rows, cols) per-block maps, raw
    D: np.ndarray  # (B, rows, cols) accumulated maps, raw
    S: np.ndarray  # (B, patches, C) decomposition on patch tokens (channel inspector)
    C: np.ndarray  # (B, C) channel importance, unclipped
    T: np.ndarray  # (B, C) [CLS] contexts (the identity's right-hand side)
    block_indices: list[int]  # capture block index of each frame
    block_labels: list[str]
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
                "patch_size": list(self.patch_size), "score": self.score,
                "convention": "DAAM (Liao et al.): S_b = a0_b (x) V_b, C_b = grad at the [CLS] "
                              "context entering attn.proj, L_b = ReLU(sum_c w_c S_b[:, c]) over "
                              "patch tokens, D_b = cumulative sum; raw, not normalised"}
        if self.knn is not None:
            meta["knn"] = {"formula": self.knn.formula, "class": self.knn.class_label,
                           "voters": [v.source for v in self.knn.voters],
                           "fallback": self.knn.fallback,
                           "weights_sha256": self.knn.fingerprint(),
                           "k": len(self.knn.neighbours)}
        return meta


def sink_frames(result: DaamResult, analysis) -> list[dict]:
    """Flow frames whose brightest patch is the patch key of a sink head of that block
    (`xai_core.sinks`): such an L_b shows the sink, not the object. Each entry says how
    much that frame adds to the final map D_B and how much of D_B the sink patch holds."""
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


def _block_labels(blocks: list[BlockRecord], capture: Capture) -> list[str]:
    if blocks[0].kind == "class":
        patch_blocks = sum(1 for b in capture.blocks if b.kind == "self")
        return [f"class block {i + 1} (after {patch_blocks} patch blocks)"
                for i in range(len(blocks))]
    return [f"block {b.index + 1}" for b in blocks]


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
    return dict(L=L.numpy(), D=L.cumsum(0).numpy(), S=torch.stack(S).numpy(),
                C=torch.stack(C).numpy(), T=torch.stack(T).numpy(),
                block_indices=[b.index for b in blocks],
                block_labels=_block_labels(blocks, capture),
                num_heads=blocks[0].num_heads, prefix_tokens=[b.num_prefix_tokens for b in blocks],
                grid=grid, patch_size=capture.layout.patch_size)


def _resolve_relu(channel_relu: str, variant: str) -> bool:
    if channel_relu not in CHANNEL_RELU:
        raise ValueError(f"channel_relu must be one of {', '.join(CHANNEL_RELU)}.")
    if channel_relu == "auto":  # the official code: ReLU for logits, none for the k-NN variant
        return variant == "supervised"
    return channel_relu == "yes"


def knn_pass(model, pixels: torch.Tensor, target: int, head,
             formula: str = "official") -> tuple[KnnWeights, Capture]:
    """ONE forward + backward for the k-NN variant: the weights of eq. 13 are computed
    from the output inside the capture, and the backward starts from them
    (score = <output, w>, so d score / d output = w)."""
    from ..capture import capture as run_model_capture

    found: dict[str, KnnWeights] = {}

    def score(output: torch.Tensor) -> torch.Tensor:
        found["weights"] = knn_weights(head.bank, output.detach()[0].float().cpu(), target,
                                       formula)
        return weighted_output_score(found["weights"].weights)(output)
    capture = run_model_capture(model, pixels, score)
    return found["weights"], capture


def knn_capture(model, image, target: int, head=None,
                formula: str = "official") -> tuple[KnnWeights, Capture]:
    """`knn_pass`, cached. The key names everything w depends on (image, weights of the
    model, bank fingerprint, class, formula), so equal keys mean equal w."""
    head = head_of(model, head)
    prepared = prepare(model, image)
    key = ("daam-knn-capture", model.spec.id, model.random_weights, prepared.sha256, target,
           head.fingerprint(), formula)
    return CAPTURE_CACHE.get_or_compute(
        key, lambda: knn_pass(model, prepared.pixels, target, head, formula))


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
    from ..capture import capture as run_model_capture

    started = time.perf_counter()
    head = head_of(model, head)
    variant = _variant(head)
    relu = _resolve_relu(channel_relu, variant)
    if variant == "knn":
        knn, capture = knn_pass(model, pixels, target, head, formula)
    else:
        knn, capture = None, run_model_capture(model, pixels, head.score_fn(target))
    return daam_result(capture, head, target, variant, relu, knn, started)


def compute_daam(model, image, target: int, head=None, formula: str = "official",
                 channel_relu: str = "auto") -> DaamResult:
    """DAAM for a loaded ViT, an image and a target class index (cached by content)."""
    head = head_of(model, head)
    variant = _variant(head)
    relu = _resolve_relu(channel_relu, variant)
    if formula not in KNN_FORMULAS:
        raise ValueError(f"Unknown eq. 13 formula '{formula}' ({', '.join(KNN_FORMULAS)}).")
    sha = prepare(model, image).sha256
    key = ("daam", model.spec.id, model.random_weights, sha, target, head.fingerprint(),
           variant, formula if variant == "knn" else None, relu)

    def compute() -> DaamResult:
        started = time.perf_counter()
        if variant == "knn":
            knn, capture = knn_capture(model, image, target, head, formula)
        else:  # the shared capture other pages use for this target
            knn, capture = None, vit_capture(model, image, target, head)
        return daam_result(capture, head, target, variant, relu, knn, started)
    return CAPTURE_CACHE.get_or_compute(key, compute)


def result_score_fn(result: DaamResult, head):
    """The scalar a DAAM result differentiated: the logit, or <output, w> with ITS w."""
    if result.knn is not None:
        return weighted_output_score(result.knn.weights)
    return head.score_fn(result.target)


# --- display normalisations ------------------------------------------------------------------

def display_frames(frames: np.ndarray, mode: str) -> np.ndarray:
    """Frames (B, rows, cols) scaled to [0, 1] for display, by one of DISPLAY_MODES."""
    frames = np.asarray(frames, dtype=np.float64)
    if mode not in DISPLAY_MODES:
        raise ValueError(f"Unknown display mode '{mode}' ({', '.join(DISPLAY_MODES)}).")
    if mode == "official":
        top = frames.max()
        scaled = frames / top if top > 0 else np.zeros_like(frames)
        return _min_max_each(1.0 / (1.0 + np.exp(-5.0 * scaled)) - 0.5)
    if mode == "frame":
        return _min_max_each(frames)
    low, high = frames.min(), frames.max()
    return (frames - low) / (high - low) if high > low else np.zeros_like(frames)


def _min_max_each(frames: np.ndarray) -> np.ndarray:
    flat = frames.reshape(len(frames), -1)
    low, high = flat.min(1, keepdims=True), flat.max(1, keepdims=True)
    span = np.where(high > low, high - low, 1.0)
    return ((flat - low) / span * (high > low)).reshape(frames.shape)


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


# --- sanity check (section 4.4): cascading randomisation --------------------------------------

def sanity_steps(num_blocks: int, count: int = 4) -> list[int]:
    """1-based first randomised block for each step, top down, ending with full (1).

    12 blocks: [12, 9, 6, 3, 1] (the paper's 12, 9, 6, 3 plus full randomisation)."""
    step = max(1, num_blocks // count)
    firsts = [num_blocks - i * step for i in range(count) if num_blocks - i * step >= 1]
    return list(dict.fromkeys(firsts + [1]))


def attention_linears(block: torch.nn.Module) -> list[torch.nn.Linear]:
    return [m for m in block.attn.modules() if isinstance(m, torch.nn.Linear)]


@torch.no_grad()
def randomise_attention(block: torch.nn.Module, seed: int) -> None:
    """Scale-preserving Gaussian re-initialisation of the attention's linear layers
    (each tensor gets N(0, its own std)); a local generator, never the global RNG."""
    generator = torch.Generator().manual_seed(seed)
    for layer in attention_linears(block):
        for parameter in (layer.weight, layer.bias):
            if parameter is None:
                continue
            std = float(parameter.float().std()) if parameter.numel() > 1 else 0.02
            fresh = torch.randn(parameter.shape, generator=generator) * (std or 0.02)
            parameter.copy_(fresh.to(parameter.device, parameter.dtype))


@dataclass
class SanityResult:
    original: np.ndarray  # final accumulated map D_B of the trained model
    maps: list[np.ndarray]  # final D_B after each step
    first_randomised: list[int]  # 1-based block from which everything up to the top is random
    num_blocks: int
    rho: list[float]  # Spearman(original, step map)
    seconds: float


def private_copy(model) -> torch.nn.Module:
    """A deep copy of the shared module, taken under its lock (hooks and flags are
    shared state), so randomising it never touches what other sessions use."""
    with model.lock:
        return copy.deepcopy(model.module)


def randomised_copies(module: torch.nn.Module, steps: list[int],
                      seed: int = 0) -> Iterator[tuple[int, torch.nn.Module]]:
    """Randomise `module` IN PLACE (pass a private copy), top down and cumulatively:
    after the step for k, the attention linears of blocks k..B (1-based) are random.
    Block n always gets seed*1000 + n, so a state does not depend on the path to it."""
    blocks = [block for _, block in transformer_blocks(module)]
    randomised = len(blocks) + 1  # blocks numbered >= this are random
    for first in sorted(set(steps), reverse=True):
        for number in range(first, randomised):
            randomise_attention(blocks[number - 1], seed * 1000 + number)
        randomised = min(randomised, first)
        yield first, module


def cascading_randomisation(model, image, target: int, head=None, formula: str = "official",
                            channel_relu: str = "auto", steps: list[int] | None = None,
                            seed: int = 0) -> SanityResult:
    """Randomise attention linears from the top block down to block k (cumulative), and
    compare the final DAAM map with the trained model's by rank correlation. Cached."""
    head = head_of(model, head)
    original = compute_daam(model, image, target, head, formula, channel_relu)
    module_blocks = transformer_blocks(model.module)
    steps = sorted(set(steps or sanity_steps(len(module_blocks))), reverse=True)
    if any(not 1 <= k <= len(module_blocks) for k in steps):
        raise ValueError(f"Sanity steps must lie in 1-{len(module_blocks)}.")
    prepared = prepare(model, image)
    key = ("daam-sanity", model.spec.id, model.random_weights, prepared.sha256, target,
           head.fingerprint(), formula, original.channel_relu, tuple(steps), seed)

    def compute() -> SanityResult:
        from ..metrics import spearman  # (metrics imports the methods package)

        started = time.perf_counter()
        score_fn = result_score_fn(original, head)
        maps = []
        for _, clone in randomised_copies(private_copy(model), steps, seed):
            capture = run_capture(clone, prepared.pixels.to(model.device), score_fn)
            maps.append(daam_from_capture(capture, original.channel_relu)["D"][-1])
        final = original.D[-1]
        return SanityResult(final, maps, list(steps), len(module_blocks),
                            [spearman(final, m) for m in maps], time.perf_counter() - started)
    return CAPTURE_CACHE.get_or_compute(key, compute)


# --- CLI / comparison registration -----------------------------------------------------------

@register("daam", family="vit", needs_target=True,
          summary="Dynamic Accumulated Attention Map: per-block L and accumulated D maps "
                  "(one backward for all blocks; eq. 13 weights for a k-NN head).")
def explain_daam(request: ExplainRequest) -> ExplainResult:
    options = request.options
    formula = options.get_choice("knn_weights", "official", KNN_FORMULAS)
    relu = options.get_choice("channel_relu", "auto", CHANNEL_RELU)
    result = compute_daam(request.model, request.image, request.target, request.head,
                          formula, relu)
    meta = result.meta()
    meta["seconds"] = result.seconds
    arrays = {"L": result.L.astype(np.float32), "D": result.D.astype(np.float32),
              "channel_importance": result.C.astype(np.float32)}
    if result.knn is not None:
        arrays["knn_weights"] = result.knn.weights.astype(np.float32)
    return ExplainResult(map=result.D[-1].astype(np.float32), arrays=arrays, meta=meta)
