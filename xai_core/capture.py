"""The capture engine: one forward (and one backward when asked) that records
everything the explanation methods read.

For every transformer block it records, under the names used throughout the
project (B = batch, H = heads, Nq/Nk = query/key tokens, C = width, d = C/H):

    ln1       (B, Nk, C)     LN1 output, the attention's input             [F1]
    q, k, v   (B, H, N*, d)  queries (Nq), keys and values (Nk)
    attn      (B, H, Nq, Nk) attention probabilities, rows sum to 1        [F2]
    context   (B, Nq, C)     per-head context softmax(QK^T)V, heads concatenated
                             (channel h*d + j), as it enters `attn.proj`     [F3]
    attn_out  (B, Nq, C)     attention output after the projection
    ln2       (B, Nq, C)     LN2 output                                      [F4]
    mlp       (B, Nq, C)     MLP output                                      [F5]
    out       (B, Nq, C)     block output                                    [F6]

With a target, one `torch.autograd.grad` call gives the gradient of that scalar
with respect to every recorded tensor (and the input pixels); nothing is left
on the parameters and no hook outlives the call. Everything is returned as CPU
float32 tensors so results can be cached and shared between sessions. Inside
`shared_forwards()`, captures with different targets (and LeGrad's per-block backward
passes) of the same pixels share one forward pass, its graph kept until the block ends.

Token layout is read from the model and the input: prefix tokens (CLS,
distillation, registers), patch grid, patch size. CaiT's class-attention blocks
(one [CLS] query over [CLS] + patches) are recorded with kind "class".
"""

from __future__ import annotations

import hashlib
import threading
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Callable

import torch

ScoreFn = Callable[[torch.Tensor], torch.Tensor]


class CaptureError(ValueError):
    """The model or input does not fit the capture engine (message in words)."""


@dataclass(frozen=True)
class TokenLayout:
    """How the token sequence maps onto the image."""

    num_prefix_tokens: int
    grid: tuple[int, int]  # (rows, cols) of patches
    patch_size: tuple[int, int]  # (height, width) in pixels
    input_size: tuple[int, int]  # (height, width) in pixels

    @property
    def num_patches(self) -> int:
        return self.grid[0] * self.grid[1]

    @property
    def num_tokens(self) -> int:
        return self.num_prefix_tokens + self.num_patches

    @property
    def centre_patch(self) -> int:
        return centre_patch(self.grid)


def centre_patch(grid: tuple[int, int]) -> int:
    """Raster index of the patch at the middle of a (rows, cols) grid (the lower-right of
    the four middle patches when both sides are even): the default query patch."""
    rows, cols = grid
    return (rows // 2) * cols + cols // 2


@dataclass
class BlockRecord:
    """What one block computed. `num_prefix_tokens` counts the prefix tokens in
    this block's key sequence (0 in CaiT's patch blocks, 1 in its class blocks)."""

    index: int
    kind: str  # "self" (self-attention) or "class" (CaiT class attention)
    num_prefix_tokens: int
    acts: dict[str, torch.Tensor]
    grads: dict[str, torch.Tensor] | None = None

    @property
    def num_heads(self) -> int:
        return self.acts["attn"].shape[1]

    @property
    def num_queries(self) -> int:
        return self.acts["attn"].shape[2]


@dataclass
class Capture:
    layout: TokenLayout
    blocks: list[BlockRecord]
    output: torch.Tensor  # logits, or features for self-supervised models
    score: float | None = None  # the target scalar, when a backward ran
    input_grad: torch.Tensor | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    passes: dict[str, int] = field(default_factory=dict)

    @property
    def has_gradients(self) -> bool:
        return self.score is not None

    def self_attention_blocks(self) -> list[BlockRecord]:
        return [block for block in self.blocks if block.kind == "self"]

    def stacked(self, name: str, grads: bool = False, kind: str = "self") -> torch.Tensor:
        """One recorded tensor for every block of `kind`, stacked: (L, ...)."""
        blocks = [b for b in self.blocks if b.kind == kind]
        if not blocks:
            raise CaptureError(f"This model has no '{kind}' attention blocks.")
        if grads and not self.has_gradients:
            raise CaptureError("This capture ran without a target, so it has no gradients.")
        return torch.stack([(b.grads if grads else b.acts)[name] for b in blocks])


# --- where each block type keeps its pieces ---------------------------------------------------

def is_talking_heads(block: torch.nn.Module) -> bool:
    """CaiT's talking heads: the heads are mixed by a linear layer after the softmax."""
    return hasattr(block.attn, "proj_w")


def transformer_blocks(module: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """The blocks in forward order with their kind; CaiT's class blocks come last."""
    blocks = [("self", b) for b in getattr(module, "blocks", [])]
    blocks += [("class", b) for b in (getattr(module, "blocks_token_only", None) or [])]
    if not blocks or not all(hasattr(b, "attn") and hasattr(b, "norm1") for _, b in blocks):
        raise CaptureError(f"{type(module).__name__} is not a ViT the capture engine knows "
                           "(it needs timm-style blocks with norm1/attn/norm2/mlp).")
    return blocks


def token_layout(module: torch.nn.Module, pixels: torch.Tensor) -> TokenLayout:
    """The token layout of `pixels` (B, 3, H, W) through `module`."""
    return layout_at(module, tuple(pixels.shape[-2:]))


def layout_at(module: torch.nn.Module, size: tuple[int, int]) -> TokenLayout:
    """The token layout of an (H, W) input, read from the module's patch embedding."""
    patch = getattr(getattr(module, "patch_embed", None), "patch_size", None)
    if patch is None:
        raise CaptureError("This model has no patch embedding, so it has no token grid.")
    patch = (patch, patch) if isinstance(patch, int) else tuple(patch)
    height, width = size
    return TokenLayout(num_prefix_tokens=int(getattr(module, "num_prefix_tokens", 0)),
                       grid=(height // patch[0], width // patch[1]), patch_size=patch,
                       input_size=(height, width))


@dataclass(frozen=True)
class ModelLayout:
    """What a loaded ViT's modules say before any forward pass: the kind of every block
    and the token layout at the model's input size. Method options whose range depends on
    the model (a block index, a query patch) are checked against it, so a bad value is
    refused before a capture runs."""

    block_kinds: tuple[str, ...]  # "self" or "class", in forward order
    tokens: TokenLayout

    @property
    def num_blocks(self) -> int:
        return len(self.block_kinds)

    @property
    def self_blocks(self) -> list[int]:
        """Indices of the self-attention blocks (every block but CaiT's class blocks)."""
        return [i for i, kind in enumerate(self.block_kinds) if kind == "self"]


def model_layout(model) -> ModelLayout:
    """`ModelLayout` of a loaded ViT (`xai_core.models.LoadedModel`)."""
    kinds = tuple(kind for kind, _ in transformer_blocks(model.module))
    return ModelLayout(kinds, layout_at(model.module, tuple(model.spec.input_size)))


class _Recorder:
    """Hooks on one block that keep references to the tensors of the forward pass."""

    def __init__(self, block: torch.nn.Module, kind: str):
        self.block, self.kind, self.raw = block, kind, {}
        self.handles: list = []
        attn = block.attn
        self._on_output(block.norm1, "ln1")
        if kind == "class":
            for name in ("q", "k", "v"):
                self._on_output(getattr(attn, name), name + "_flat")
        else:
            self._on_output(attn.qkv, "qkv")
        if is_talking_heads(block):  # softmax probabilities enter the head-mixing layer
            self._on_input(attn.proj_w, "attn_bnnh")
        else:
            self._on_output(attn.attn_drop, "attn")
        self._on_input(attn.proj, "context")
        self._on_output(attn.proj, "attn_out")
        self._on_output(block.norm2, "ln2")
        self._on_output(block.mlp, "mlp")
        self._on_output(block, "out")

    def _on_output(self, module, name):
        self.handles.append(module.register_forward_hook(
            lambda _m, _i, out: self.raw.__setitem__(name, out)))

    def _on_input(self, module, name):
        self.handles.append(module.register_forward_pre_hook(
            lambda _m, args: self.raw.__setitem__(name, args[0])))

    def remove(self):
        for handle in self.handles:
            handle.remove()

    def tensors(self, raw: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
        """The recorded tensors (or, given `raw`, their gradients, keyed like the
        recordings) under their public names: views, so q/k/v come out of qkv."""
        raw, heads = self.raw if raw is None else raw, self.block.attn.num_heads
        named = {k: raw[k] for k in ("ln1", "context", "attn_out", "ln2", "mlp", "out")}
        named["attn"] = raw["attn"] if "attn" in raw else raw["attn_bnnh"].permute(0, 3, 1, 2)
        if self.kind == "class":
            for name in ("q", "k", "v"):
                named[name] = _split_heads(raw[name + "_flat"], heads)
        else:
            qkv = raw["qkv"]
            batch, tokens, _ = qkv.shape
            q, k, v = qkv.reshape(batch, tokens, 3, heads, -1).permute(2, 0, 3, 1, 4).unbind(0)
            named.update(q=q, k=k, v=v)
        return named

    def sources(self) -> dict[str, torch.Tensor]:
        """The tensors autograd differentiates against (q/k/v come from qkv)."""
        return dict(self.raw)


def _split_heads(flat: torch.Tensor, heads: int) -> torch.Tensor:
    if flat.dim() == 2:  # CaiT's class query is computed from x[:, 0] alone
        flat = flat.unsqueeze(1)
    batch, tokens, width = flat.shape
    return flat.reshape(batch, tokens, heads, width // heads).permute(0, 2, 1, 3)


@contextmanager
def _unfused_attention(module: torch.nn.Module):
    """Fused SDPA never materialises the attention matrix; switch it off for this call."""
    switched = [m for m in module.modules() if getattr(m, "fused_attn", False)]
    for m in switched:
        m.fused_attn = False
    try:
        yield
    finally:
        for m in switched:
            m.fused_attn = True


def _as_cpu(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().to("cpu", torch.float32) for k, v in tensors.items()}


def _gradients(score: torch.Tensor, recorders: list[_Recorder], pixels: torch.Tensor,
               keep_graph: bool = False):
    """One backward pass for every recorded tensor of every block, and the input."""
    names = [(i, k) for i, r in enumerate(recorders) for k in r.sources()]
    inputs = [recorders[i].sources()[k] for i, k in names] + [pixels]
    grads = torch.autograd.grad(score, inputs, allow_unused=True, retain_graph=keep_graph)
    grads = [torch.zeros_like(x) if g is None else g for x, g in zip(inputs, grads)]
    per_block: list[dict[str, torch.Tensor]] = [{} for _ in recorders]
    for (i, k), g in zip(names, grads[:-1]):
        per_block[i][k] = g
    return per_block, grads[-1]


def run_capture(module: torch.nn.Module, pixels: torch.Tensor, score_fn: ScoreFn | None = None,
                lock=None) -> Capture:
    """Forward `pixels` through a timm ViT, recording every block; with `score_fn`
    (model output -> scalar) also one backward pass for all gradients. Inside
    `shared_forwards()` every capture reuses the thread's kept forward pass of the same
    model and pixels (running and keeping it when there is none yet)."""
    layout = token_layout(module, pixels)
    blocks = transformer_blocks(module)
    if score_fn is not None or sharing_forwards():  # inside: a backward may follow
        return _live_capture(module, pixels, score_fn, layout, blocks, lock)
    with (lock if lock is not None else nullcontext()), block_recorders(module) as recorders:
        return _forward_only(module, pixels, layout, blocks, recorders)


# --- one forward for several backward passes ----------------------------------------------------

_SHARED = threading.local()


@dataclass
class LiveForward:
    """A forward pass whose autograd graph is kept for more backward passes."""

    module: torch.nn.Module  # held, so its id in the registry's key stays its own
    leaf: torch.Tensor  # the input pixels (requires grad)
    output: torch.Tensor
    recorders: list[_Recorder]  # their hooks removed, their tensors kept
    seconds: float


def _shared_registry() -> dict | None:
    return getattr(_SHARED, "forwards", None)


@contextmanager
def shared_forwards():
    """Within this block, the captures with a backward that this thread runs on the same
    model and pixels share one forward pass: the first runs it and keeps its graph, each
    later one runs only its backward (page 7: GAE, DAAM and LeGrad on one image cost one
    forward, not three). A ViT's prediction or forward-only capture made in the block is
    that pass too, so a page that predicts, captures and then explains a class runs one
    forward. The graphs are freed when the block ends."""
    outer = _shared_registry()
    if outer is None:
        _SHARED.forwards = {}
    try:
        yield
    finally:
        if outer is None:
            _SHARED.forwards = None


@contextmanager
def separate_forwards():
    """Within this block every capture runs its own forward, even inside `shared_forwards()`:
    for a module whose weights change between captures (the DAAM sanity check randomises
    a private copy step by step)."""
    saved = _shared_registry()
    _SHARED.forwards = None
    try:
        yield
    finally:
        _SHARED.forwards = saved


def sharing_forwards() -> bool:
    """Whether this thread is inside `shared_forwards()`."""
    return _shared_registry() is not None


def shared_outputs() -> list[torch.Tensor]:
    """The outputs of this thread's kept forward passes (a pass counter hooks them)."""
    return [live.output for live in (_shared_registry() or {}).values()]


def _pixels_key(module: torch.nn.Module, pixels: torch.Tensor) -> tuple:
    """The module (and the versions of its weights: an in-place change makes a new key) and
    the pixels' content."""
    content = hashlib.sha1(pixels.detach().cpu().contiguous().numpy().tobytes()).hexdigest()
    weights = sum(parameter._version for parameter in module.parameters())
    return id(module), weights, str(pixels.device), tuple(pixels.shape), content


def live_forward(module: torch.nn.Module, pixels: torch.Tensor,
                 lock=None) -> tuple[LiveForward, bool]:
    """(a forward of `pixels` with every block recorded and its graph kept, whether it was
    already there): inside `shared_forwards()` the thread's pass of the same model and
    pixels is reused, outside it each call runs its own."""
    registry, key = _shared_registry(), _pixels_key(module, pixels)
    if registry is not None and key in registry:
        return registry[key], True
    with (lock if lock is not None else nullcontext()), block_recorders(module) as recorders:
        leaf = pixels.detach().clone().requires_grad_(True)
        started = time.perf_counter()
        with torch.enable_grad():
            output = module(leaf)
        live = LiveForward(module, leaf, output, recorders, time.perf_counter() - started)
    if registry is not None:
        registry[key] = live
    return live, False


def _live_capture(module, pixels, score_fn, layout, blocks, lock) -> Capture:
    """A capture read from a forward whose graph is kept (the thread's inside
    `shared_forwards()`, run now if it is not there yet; else its own), with one backward
    from `score_fn(output)` to every recorded tensor and the input when `score_fn` is given.
    A forward with a graph costs what one without does (DINOv2 on 2 cores: 0.12 s and
    0.13 s), so a forward-only capture inside the block keeps its pass for the backward
    passes that may follow."""
    live, reused = live_forward(module, pixels, lock)
    grads, score, input_grad, backward_seconds = (
        ([None] * len(live.recorders), None, None, 0.0) if score_fn is None
        else _backward(live, score_fn, lock))
    return Capture(
        layout=layout, blocks=_block_records(layout, blocks, live.recorders, grads),
        output=live.output.detach().to("cpu", torch.float32), score=score,
        input_grad=input_grad,
        seconds={"forward": 0.0 if reused else live.seconds, "backward": backward_seconds},
        passes={"forward": int(not reused), "backward": int(score_fn is not None)})


def _backward(live: LiveForward, score_fn, lock):
    """(per-block raw gradients, the score, the input's gradient, seconds) of one backward
    through `live`, its graph kept inside `shared_forwards()` for the next one."""
    started = time.perf_counter()
    with (lock if lock is not None else nullcontext()), torch.enable_grad():
        score = score_fn(live.output)
        grads, input_grad = _gradients(score, live.recorders, live.leaf,
                                       keep_graph=sharing_forwards())
    return (grads, float(score.detach()), input_grad.detach().cpu(),
            time.perf_counter() - started)


@contextmanager
def block_recorders(module: torch.nn.Module):
    """Hooks that keep what every block computes in the next forward pass (with its
    autograd graph, when gradients are on), with fused attention off so the attention
    matrix exists. `recorder.tensors()` names them. Hold the model's lock around it."""
    recorders = [_Recorder(block, kind) for kind, block in transformer_blocks(module)]
    try:
        with _unfused_attention(module):
            yield recorders
    finally:
        for recorder in recorders:
            recorder.remove()


def _timed_forward(module, pixels, score_fn):
    """Forward (with a graph only when a target needs one); returns the input leaf,
    output, target score (or None), and the start and end times."""
    want_grads = score_fn is not None
    pixels = pixels.detach().clone().requires_grad_(want_grads)
    started = time.perf_counter()
    with torch.set_grad_enabled(want_grads):
        output = module(pixels)
        score = score_fn(output) if want_grads else None
    return pixels, output, score, started, time.perf_counter()


def _forward_only(module, pixels, layout, blocks, recorders) -> Capture:
    """One forward without a graph, every block recorded."""
    _, output, _, started, done = _timed_forward(module, pixels, None)
    seconds = done - started
    records = _block_records(layout, blocks, recorders, [None] * len(recorders))
    return Capture(
        layout=layout, blocks=records, output=output.detach().to("cpu", torch.float32),
        score=None, input_grad=None, seconds={"forward": seconds, "backward": 0.0},
        passes={"forward": 1, "backward": 0})


def _block_records(layout, blocks, recorders, raw_grads) -> list[BlockRecord]:
    records = []
    for index, ((kind, _), recorder, grads) in enumerate(zip(blocks, recorders, raw_grads)):
        acts = recorder.tensors()
        prefix = acts["k"].shape[2] - layout.num_patches
        records.append(BlockRecord(
            index=index, kind=kind, num_prefix_tokens=prefix, acts=_as_cpu(acts),
            grads=_as_cpu(recorder.tensors(grads)) if grads is not None else None))
    _check_layout(layout, records)
    return records


def _check_layout(layout: TokenLayout, records: list[BlockRecord]) -> None:
    for record in records:
        if record.num_prefix_tokens < 0:
            raise CaptureError(
                f"Block {record.index} has {record.acts['k'].shape[2]} tokens but the grid "
                f"{layout.grid} needs {layout.num_patches}; the input size does not fit the model.")


def capture(model, pixels: torch.Tensor, score_fn: ScoreFn | None = None) -> Capture:
    """Capture a loaded model (`xai_core.models.LoadedModel`) under its lock."""
    return run_capture(model.module, pixels.to(model.device), score_fn, lock=model.lock)


# --- CNNs ---------------------------------------------------------------------------------------

@dataclass
class CnnCapture:
    layer: str
    activations: torch.Tensor  # (B, K, h, w)
    gradients: torch.Tensor | None
    output: torch.Tensor
    score: float | None = None
    input_grad: torch.Tensor | None = None
    seconds: dict[str, float] = field(default_factory=dict)


def conv_layer_names(module: torch.nn.Module) -> list[str]:
    """Layers whose output is a spatial feature map, in forward order (for the layer picker)."""
    return [name for name, m in module.named_modules()
            if name and isinstance(m, (torch.nn.Conv2d, torch.nn.BatchNorm2d))]


def run_cnn_capture(module: torch.nn.Module, pixels: torch.Tensor, layer: str,
                    score_fn: ScoreFn | None = None, lock=None) -> CnnCapture:
    """Record one conv stage's activations (and, with a target, their gradients)."""
    try:
        target = module.get_submodule(layer)
    except AttributeError:
        raise CaptureError(f"The model has no layer named '{layer}'.") from None
    with (lock if lock is not None else nullcontext()):
        store: dict[str, torch.Tensor] = {}
        handle = target.register_forward_hook(lambda _m, _i, out: store.__setitem__("a", out))
        try:
            want_grads = score_fn is not None
            pixels, output, score, started, forward_done = _timed_forward(module, pixels,
                                                                           score_fn)
            grads = (torch.autograd.grad(score, [store["a"], pixels]) if want_grads
                     else (None, None))
            done = time.perf_counter()
        finally:
            handle.remove()
    cpu = lambda t: None if t is None else t.detach().to("cpu", torch.float32)  # noqa: E731
    return CnnCapture(layer=layer, activations=cpu(store["a"]), gradients=cpu(grads[0]),
                      output=cpu(output), score=float(score.detach()) if want_grads else None,
                      input_grad=cpu(grads[1]),
                      seconds={"forward": forward_done - started, "backward": done - forward_done})


def capture_cnn(model, pixels: torch.Tensor, layer: str | None = None,
                score_fn: ScoreFn | None = None) -> CnnCapture:
    layer = layer or model.spec.cnn_target_layer
    return run_cnn_capture(model.module, pixels.to(model.device), layer, score_fn, lock=model.lock)
