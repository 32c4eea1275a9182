"""Raw attention: what one block's query token attends to, per head."""

from __future__ import annotations

import numpy as np

from ..capture import Capture
from ..pipeline import vit_capture
from .base import ExplainRequest, ExplainResult, register


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


@register("attention", family="vit", needs_target=False,
          summary="Raw attention of the [CLS] query (or a patch) in one block, per head.")
def explain_attention(request: ExplainRequest) -> ExplainResult:
    capture = vit_capture(request.model, request.image)
    options = request.options
    block = options.get_int("block", len(capture.blocks) - 1, 0, len(capture.blocks) - 1)
    query = options.get_int("query", -1, -1, capture.layout.num_patches - 1)
    per_head = query_attention(capture, block, None if query < 0 else query)
    return ExplainResult(map=per_head.mean(0).astype(np.float32),
                         arrays={"per_head": per_head.astype(np.float32)},
                         meta={"block": block, "query": "cls" if query < 0 else query,
                               "convention": "post-softmax attention row, prefix keys dropped, "
                                             "head mean; not renormalised"})
