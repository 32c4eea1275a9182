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

from ..infra.cache import cache_key
from ..capture import Capture, CaptureError, model_layout
from ..pipeline import prepare, vit_capture
from .base import LAST_PATCH, ExplainRequest, ExplainResult, Int, Theory, method
from .rollout import ROLLOUT_CACHE, token_row

CONVENTION = ("Chefer GAE: R = I; R += mean_h(clamp(grad_A * A, 0)) @ R per block; "
              "row [CLS], prefix columns dropped; not normalised")


def block_relevance(attn: np.ndarray, grad: np.ndarray) -> np.ndarray:
    """Ā for one block: (heads, Nq, Nk) -> (Nq, Nk)."""
    return np.clip(np.asarray(grad, np.float64) * np.asarray(attn, np.float64), 0, None).mean(0)


def gae_matrix(capture: Capture) -> tuple[np.ndarray, int]:
    """(R over the final token set, its number of prefix tokens)."""
    if not capture.has_gradients:
        raise CaptureError("GAE needs a capture with a target (a backward pass).")
    patches = capture.layout.num_patches
    prefix = max(block.num_prefix_tokens for block in capture.blocks)
    total = prefix + patches
    relevance = np.eye(total)
    for block in capture.blocks:
        bar = block_relevance(block.acts["attn"][0].numpy(), block.grads["attn"][0].numpy())
        placed = np.zeros((total, total))
        offset = prefix - block.num_prefix_tokens  # keys of this block start here
        if block.kind == "class":
            placed[0, offset:] = bar[0]
        else:
            placed[offset:, offset:] = bar
        relevance = relevance + placed @ relevance
    return relevance, prefix


def gae_map(capture: Capture, query: int | None = None):
    """(grid map, prefix values, description) of one row of R."""
    relevance, prefix = gae_matrix(capture)
    return token_row(relevance, prefix, capture.layout.grid, query)


def cached_gae_matrix(model, image, target: int, head) -> tuple[np.ndarray, int, float]:
    """(R, prefix, target score) of one image and target from the shared capture, memoised,
    so the method asked for another query row only reads it."""
    def compute():
        capture = vit_capture(model, image, target=target, head=head)
        return (*gae_matrix(capture), capture.score)
    key = cache_key("gae", model, target, image=prepare(model, image).sha256, head=head)
    return ROLLOUT_CACHE.get_or_compute(key, compute)


@method("gae", family="vit", needs_target=True, cost="gradient",
        title="GAE",
        summary="Gradient-weighted attention (Chefer): positive grad x attention, accumulated "
                "through the residual stream.",
        convention=CONVENTION,
        theory=Theory(
            mechanism="Weights every block's attention by its gradient (positive part only) "
                      "and adds the result up along the residual stream (Chefer).",
            cost="One forward and one backward pass per class.",
            class_specificity="Yes: the gradients come from the chosen class's score.",
            resolution="One value per patch token.",
            supervision="A class score: a logit, or a k-NN class score.",
            best_for="Class-specific ViT maps that hold up well under perturbation tests."),
        options=(Int("query", -1, -1, LAST_PATCH,
                     "The row read: -1 = [CLS] (or the mean row without one), else a "
                     "patch."),))
def explain(request: ExplainRequest, *, query: int) -> ExplainResult:
    model, image, target, head = request.model, request.image, request.target, request.head
    relevance, prefix, score = cached_gae_matrix(model, image, target, head)
    grid, prefix_values, what = token_row(relevance, prefix, model_layout(model).tokens.grid,
                                          None if query < 0 else query)
    return ExplainResult(map=grid.astype(np.float32),
                         arrays={"prefix_values": prefix_values.astype(np.float32)},
                         meta={"row": what, "score": score,
                               "num_prefix_tokens": int(prefix_values.size)})
