"""`explain --method sinks`: the sink score, sink key and entropy of every head
(definitions in `xai_core.sinks`)."""

from __future__ import annotations

import numpy as np

from ..pipeline import vit_capture
from ..sinks import DEFINITION, ENTROPY_DEFINITION, SINK_THRESHOLD, image_sinks
from .base import ExplainRequest, ExplainResult, register


@register("sinks", family="vit", needs_target=False,
          summary="Attention sinks: per block and head, the share of attention all queries "
                  "send to their common most-attended key, that key, and the entropy.")
def explain_sinks(request: ExplainRequest) -> ExplainResult:
    capture = vit_capture(request.model, request.image)
    analysis = image_sinks(request.model, request.image)
    patch_received = analysis.received[..., analysis.num_prefix_tokens:]
    excluded = len(capture.blocks) - len(analysis.blocks)
    return ExplainResult(
        map=patch_received.max((0, 1)).reshape(analysis.grid).astype(np.float32),
        arrays={"scores": analysis.scores.astype(np.float32),
                "key": analysis.keys.astype(np.int64),
                "entropy": analysis.entropy.astype(np.float32),
                "blocks": np.array(analysis.blocks)},
        meta={"convention": DEFINITION, "entropy": ENTROPY_DEFINITION,
              "threshold": SINK_THRESHOLD,
              "num_prefix_tokens": analysis.num_prefix_tokens,
              "prefix_tokens": list(analysis.prefix_names),
              "key_names": [[analysis.key_name(int(k)) for k in row] for row in analysis.keys],
              "sink_heads": [{"block": s.block, "head": s.head, "score": round(s.score, 4),
                              "key": s.key_name, "key_index": s.key}
                             for s in analysis.sink_heads()],
              "sink_dominated_blocks": [analysis.blocks[p] for p in analysis.sink_dominated()],
              "blocks_used": "self-attention blocks only"
              + (f"; {excluded} class-attention block(s) excluded: one [CLS] query has no "
                 "'key all queries agree on'" if excluded else ""),
              "map": "per patch: the largest mean attention it receives from all queries in "
                     "any block and head (max over blocks and heads of r_bh)",
              "arrays": "scores, key, entropy: (blocks, heads); key indexes the key sequence, "
                        "prefix tokens first; blocks: capture block index of each row"})
