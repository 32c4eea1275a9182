"""Gradient-weighted attention (GAE; Chefer et al. 2021, "generic attention-model
explainability", their ViT rule).

    R = I
    for every block in forward order:
        Ā = mean over heads of clamp(∇A ⊙ A, min=0)
        R = R + Ā · R
    map = R[CLS, prefix:]

No row normalisation. The gradient is of the target scalar: the class logit
for supervised models, the k-NN class score for a self-supervised one (the
capture's `score_fn`). All gradients come from the capture's single backward.

CaiT: its patch blocks update the patch tokens only (no [CLS] yet) and its
class-attention blocks update the [CLS] token only. The rule still holds on
the full token set [CLS] + patches: a patch block's Ā sits in the patch rows
and columns, a class block's Ā (one query) sits in the [CLS] row, and all
other rows of Ā are zero (those tokens pass through unchanged).
"""

from __future__ import annotations

import numpy as np

from ..cache import cache_key
from ..capture import Capture, CaptureError
from ..pipeline import head_of, prepare, vit_capture
from .rollout import ROLLOUT_CACHE, token_row
from .base import ExplainRequest, ExplainResult, register

CONVENTION = ("Chefer GAE: R = I; R += mean_h(clamp(grad_A * A, 0)) @ R per block; "
              "row [CLS], prefix columns dropped; not normalised")


def block_relevance(attn: np.ndarray, grad: np.ndarray) -> np.ndarray:
    """Ā for one block: (heads, Nq, Nk) -> (Nq, Nk)."""
    return np.clip(np.asarray(grad, np.float64) * np.asarray(attn, np.float64), 0, None).mean(0)


def gae_matrix(capture: Capture) -> tuple[np.ndarray, int, list[np.ndarray]]:
    """(R over the final token set, its number of prefix tokens, R after each block)."""
    if not capture.has_gradients:
        raise CaptureError("GAE needs a capture with a target (a backward pass).")
    patches = capture.layout.num_patches
    prefix = max(block.num_prefix_tokens for block in capture.blocks)
    total = prefix + patches
    relevance = np.eye(total)
    history = []
    for block in capture.blocks:
        bar = block_relevance(block.acts["attn"][0].numpy(), block.grads["attn"][0].numpy())
        placed = np.zeros((total, total))
        offset = prefix - block.num_prefix_tokens  # keys of this block start here
        if block.kind == "class":
            placed[0, offset:] = bar[0]
        else:
            placed[offset:, offset:] = bar
        relevance = relevance + placed @ relevance
        history.append(relevance)
    return relevance, prefix, history


def gae_map(capture: Capture, query: int | None = None, relevance=None):
    """(grid map, prefix values, description); `relevance` = (R, prefix) if known."""
    relevance, prefix = relevance or gae_matrix(capture)[:2]
    return token_row(relevance, prefix, capture.layout.grid, query)


def image_gae_map(model, image, target: int, head=None, query: int | None = None):
    """`gae_map` for one image and target from the shared capture; R is memoised."""
    capture = vit_capture(model, image, target=target, head=head)
    key = cache_key("gae", model, target, image=prepare(model, image).sha256,
                    head=head_of(model, head))
    relevance = ROLLOUT_CACHE.get_or_compute(key, lambda: gae_matrix(capture)[:2])
    return gae_map(capture, query, relevance)


@register("gae", family="vit", needs_target=True,
          summary="Gradient-weighted attention (Chefer): positive grad x attention, "
                  "accumulated through the residual stream.")
def explain_gae(request: ExplainRequest) -> ExplainResult:
    capture = vit_capture(request.model, request.image, target=request.target, head=request.head)
    query = request.options.get_int("query", -1, -1, capture.layout.num_patches - 1)
    grid, prefix_values, what = gae_map(capture, None if query < 0 else query)
    return ExplainResult(map=grid.astype(np.float32),
                         arrays={"prefix_values": prefix_values.astype(np.float32)},
                         meta={"convention": CONVENTION, "row": what, "score": capture.score,
                               "num_prefix_tokens": int(prefix_values.size)})
