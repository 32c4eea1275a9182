"""Raw attention: what one block's query token attends to, per head."""

from __future__ import annotations

import numpy as np

from ..capture import Capture, model_layout
from ..infra.errors import OptionError
from ..pipeline import vit_capture
from .base import (LAST_BLOCK, LAST_PATCH, ExplainRequest, ExplainResult, Int, Theory,
                   method)


def query_attention(capture: Capture, block: int, query: int | None = None) -> np.ndarray:
    """(heads, rows, cols) attention of one query token over the patch grid.

    `query` None means the block's first prefix token ([CLS]); otherwise a patch
    index in raster order. Prefix keys are dropped (they are not image pixels).
    """
    record = capture.blocks[block]
    attn = record.acts["attn"][0]  # (H, Nq, Nk)
    prefix = record.num_prefix_tokens
    if query is None:
        if prefix == 0:
            raise ValueError(f"Block {block} has no [CLS] token; pick a patch as the query.")
        row = 0
    else:
        if record.kind == "class":
            raise ValueError("Class-attention blocks have only the [CLS] query.")
        row = prefix + query
    grid = capture.layout.grid
    return attn[:, row, prefix:].reshape(attn.shape[0], *grid).numpy()


def query_prefix_attention(capture: Capture, block: int, query: int) -> np.ndarray:
    """(heads, prefix) attention that patch `query` gives to each prefix key of one block
    (the part of its row `query_attention` leaves out: prefix tokens have no pixels)."""
    record = capture.blocks[block]
    prefix = record.num_prefix_tokens
    return record.acts["attn"][0, :, prefix + query, :prefix].numpy()


def _class_block_query(values: dict, model) -> None:
    if values["query"] >= 0 and model_layout(model).block_kinds[values["block"]] == "class":
        raise OptionError(f"Block {values['block']} is a class-attention block: its only "
                          "query is [CLS] (query=-1).")


@method("attention", family="vit", needs_target=False, cost="forward",
        summary="Raw attention of the [CLS] query (or a patch) in one block, per head.",
        convention="post-softmax attention row, prefix keys dropped, head mean; "
                   "not renormalised",
        theory=Theory(
            mechanism="Reads the softmax(QKᵀ/√d) row of the [CLS] query in one block, heads "
                      "averaged.",
            cost="One forward pass; no gradient.",
            class_specificity="None: asking about another class gives the same map.",
            resolution="One value per patch token.",
            supervision="None; works on self-supervised models too.",
            best_for="Seeing where one block routes information into [CLS]; head "
                     "specialisation."),
        options=(Int("block", LAST_BLOCK, 0, LAST_BLOCK, "The block whose attention is read."),
                 Int("query", -1, -1, LAST_PATCH,
                     "The query token: -1 = [CLS], else a patch index in raster order.")),
        check=_class_block_query)
def explain(request: ExplainRequest, *, block: int, query: int) -> ExplainResult:
    capture = vit_capture(request.model, request.image)
    per_head = query_attention(capture, block, None if query < 0 else query)
    return ExplainResult(map=per_head.mean(0).astype(np.float32),
                         arrays={"per_head": per_head.astype(np.float32)},
                         meta={"block": block, "query": "cls" if query < 0 else query},
                         detail=per_head)
