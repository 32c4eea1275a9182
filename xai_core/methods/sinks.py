"""The `sinks` method: the sink score, sink key and entropy of every head (definitions and
the analysis in `xai_core.analysis.attention_sinks`). Its `detail` is the `SinkAnalysis` the
pages, rollout's start=auto and the DAAM flow read.

Named after the method it registers, like every method file (`METHODS["sinks"]`,
`python -m xai_core explain --method sinks`); this thin wrapper caches the analysis that
rollout and the interventions also read without a method."""

from __future__ import annotations

import numpy as np

from ..pipeline import vit_capture
from ..analysis.attention_sinks import DEFINITION, ENTROPY_DEFINITION, SINK_THRESHOLD, analyse_sinks
from ..analysis.tokens import prefix_token_names
from .base import ExplainRequest, ExplainResult, Theory, method


@method("sinks", family="vit", needs_target=False, cost="forward",
        summary="Attention sinks: per block and head, the share of attention all queries send "
                "to their common most-attended key, that key, and the entropy.",
        convention=DEFINITION,
        theory=Theory(
            mechanism="Per head, averages every query's attention row and finds the key that "
                      "receives the most; a head that sends most of it to one key is a sink.",
            cost="One forward pass; no gradient.",
            class_specificity="None: a property of the heads on this input.",
            resolution="One value per patch token (the most attention it receives in any "
                       "head).",
            supervision="None.",
            best_for="Finding heads that park attention they do not use, and the background "
                     "patch that then lights up in rollout."),
        off_by_default="its map shows where heads park attention they do not use, not what "
                       "the class used; page 4 explains it",
        benchmark_skip="its map shows where heads park attention, not an attribution of the "
                       "class")
def explain(request: ExplainRequest) -> ExplainResult:
    model = request.model
    capture = vit_capture(model, request.image)
    analysis = analyse_sinks(capture, prefix_token_names(model.module))
    patch_received = analysis.received[..., analysis.num_prefix_tokens:]
    excluded = len(capture.blocks) - len(analysis.blocks)
    return ExplainResult(
        map=patch_received.max((0, 1)).reshape(analysis.grid).astype(np.float32),
        arrays={"scores": analysis.scores.astype(np.float32),
                "key": analysis.keys.astype(np.int64),
                "entropy": analysis.entropy.astype(np.float32),
                "blocks": np.array(analysis.blocks)},
        meta={"entropy": ENTROPY_DEFINITION, "threshold": SINK_THRESHOLD,
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
                        "prefix tokens first; blocks: capture block index of each row"},
        detail=analysis)
