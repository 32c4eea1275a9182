"""LeGrad (Bousselham et al., ICCV 2025): a gradient method built for ViTs.

For every chosen block l, the block's output tokens are read out as if the network ended
there: mean over all tokens, the model's final norm and head, then our class score s^l.
The gradient of s^l with respect to that block's own attention probabilities A^l is
clamped at 0, averaged over heads and query tokens, and the prefix keys are dropped; the
maps of the chosen blocks are averaged. One forward pass, then one short backward pass per
block (from s^l to A^l only).

Written here because neither packaged implementation fits our timm models: the authors'
`legrad-torch` wraps OpenCLIP, and torchcam 0.5's `LeGrad` hooks torchvision's
`nn.MultiheadAttention`. tests/test_legrad.py checks this code against torchcam's on a
torchvision ViT whose weights are copied into a timm ViT.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
import torch

from ..capture import CaptureError, live_forward, model_layout, token_layout
from ..infra.errors import OptionError
from ..pipeline import prepare
from .base import ExplainRequest, ExplainResult, FromModel, Int, Theory, method

THEORY = Theory(
    mechanism="For each late block, reads the class score off that block's tokens and takes its "
              "gradient with respect to the block's own attention map; positive parts averaged "
              "(Bousselham, LeGrad).",
    cost="One forward pass plus one short backward pass per chosen block (2 by default).",
    class_specificity="Yes: the gradients come from the chosen class's score.",
    resolution="One value per patch token.",
    supervision="A class score read through the model's final norm and head.",
    best_for="Class-specific ViT maps from the attention the decision is most sensitive to.")


def block_relevance(attention_grad: torch.Tensor, num_prefix_tokens: int) -> torch.Tensor:
    """(B, heads, Nq, Nk) gradient of a block's score w.r.t. its attention -> (B, patches):
    ReLU, mean over heads and queries, prefix keys dropped."""
    return attention_grad.clamp(min=0).mean(dim=(1, 2))[:, num_prefix_tokens:]


def block_readout(module: torch.nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """A block's tokens (B, N, C) -> the model's output as if it ended at that block:
    mean over all tokens, then the final norm and the head (LeGrad's read-out)."""
    features = module.norm(tokens.mean(dim=1))
    for name in ("fc_norm", "head_drop", "head"):
        layer = getattr(module, name, None)
        if layer is not None:
            features = layer(features)
    return features


@dataclass(frozen=True)
class LeGradResult:
    map: np.ndarray  # (rows, cols) mean over the chosen blocks, raw
    per_block: np.ndarray  # (blocks, rows, cols)
    blocks: list[int]  # 0-based indices of the chosen blocks
    backward_passes: int  # measured: backward passes that reached an attention tensor
    seconds: float


def chosen_blocks(count: int, start: int) -> list[int]:
    first = start if start >= 0 else count + start
    if not 0 <= first < count:
        raise OptionError(f"Option start={start} is out of range for {count} blocks "
                          f"({-count}..{count - 1}).")
    return list(range(first, count))


def run_legrad(module: torch.nn.Module, pixels: torch.Tensor, score_fn, start: int = -2,
               lock=None) -> LeGradResult:
    layout = token_layout(module, pixels)
    started = time.perf_counter()
    # the forward with every block recorded (shared with GAE's and DAAM's captures of the
    # same image inside `capture.shared_forwards()`), then one short backward per block
    live, _ = live_forward(module, pixels, lock)
    plain = [r for r in live.recorders if r.kind == "self"]  # CaiT's class blocks are skipped
    blocks = chosen_blocks(len(plain), start)
    with (lock or nullcontext()), torch.enable_grad():
        maps, reached = [], []
        for index in blocks:
            recorder = plain[index]
            if "attn" not in recorder.raw:
                raise CaptureError("LeGrad reads the attention probabilities themselves; "
                                   "this model mixes heads after the softmax.")
            attention = recorder.raw["attn"]
            handle = attention.register_hook(lambda grad: reached.append(1))
            try:
                score = score_fn(block_readout(module, recorder.raw["out"]))
                grad = torch.autograd.grad(score, attention, retain_graph=True)[0]
            finally:
                handle.remove()
            prefix = attention.shape[-1] - layout.num_patches
            maps.append(block_relevance(grad, prefix)[0].reshape(layout.grid))
    per_block = torch.stack(maps).detach().float().cpu().numpy()
    return LeGradResult(per_block.mean(axis=0), per_block, blocks, len(reached),
                        time.perf_counter() - started)


def _self_blocks(model) -> int:
    return len(model_layout(model).self_blocks)


def _convention(values: dict) -> str:
    return ("LeGrad: per chosen block, class score of (final norm + head of the mean token) "
            "differentiated w.r.t. that block's attention; ReLU, mean over heads and queries, "
            f"prefix keys dropped; mean over the blocks from start={values['start']} to the last "
            "(the authors' default: the last two); raw, not min-max scaled")


@method("legrad", family="vit", needs_target=True, cost="gradient", theory=THEORY,
        title="LeGrad",
        convention=_convention,
        summary="LeGrad: gradients of each late block's class score w.r.t. its own attention "
                "(--set start=BLOCK; default -2, the last two blocks).",
        options=(Int("start", -2,
                     FromModel("minus the number of self-attention blocks",
                               lambda model: -_self_blocks(model)),
                     FromModel("the last self-attention block",
                               lambda model: _self_blocks(model) - 1),
                     "First block averaged, among the self-attention blocks; negative counts "
                     "from the end (-2: the last two)."),))
def explain(request: ExplainRequest, *, start: int) -> ExplainResult:
    """LeGrad for one class; `detail` is the LeGradResult (per-block maps, passes)."""
    model = request.model
    result = run_legrad(model.module, prepare(model, request.image).pixels.to(model.device),
                        request.head.score_fn(request.target), start, model.lock)
    return ExplainResult(
        map=result.map.astype(np.float32), arrays={"per_block": result.per_block},
        meta={"start": start, "blocks": result.blocks,
              "partial_backward_passes": result.backward_passes},
        detail=result)
