"""Attention rollout (Abnar & Zuidema 2020), in two named conventions.

- "oracle" (Chefer's `compute_rollout_attention`): per block, fuse the heads,
  optionally discard the weakest entries, add the identity for the residual
  path and divide every ROW by its own sum; multiply the blocks left to right
  in forward order, R = Â_end ... Â_start.
- "vit-explain" (jacobgildenblat/vit-explain, the most copied code): the same
  steps, but it computes (F + I) / 2 and then divides by `a.sum(-1)` without
  keepdim. For batch 1 that broadcast divides COLUMN j by ROW j's sum (its
  issue #16). When the fused rows already sum to one (mean fusion, nothing
  discarded) every row of (F + I) / 2 sums to one and the two agree exactly.

Rollout needs one token set shared by every multiplied block, so it runs over
self-attention blocks only: CaiT's class-attention blocks (one [CLS] query)
are left out and its patch blocks have no prefix token at all.

`start=auto` (the default of the app and the CLI) starts after the
sink-dominated blocks (`xai_core.analysis.attention_sinks`): a head that sends most of every
query's attention to one background patch adds the same bright column to every
row of its block, and rollout carries it to the end as one bright pixel. On
DINOv2 ViT-S/14 that is block 0, head 5, on every sample image (docs/methods.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..infra.cache import BoundedCache, cache_key
from ..capture import Capture, CaptureError, model_layout
from ..infra.errors import OptionError
from ..pipeline import prepare, vit_capture
from ..analysis.attention_sinks import DEFINITION as SINK_DEFINITION
from ..analysis.attention_sinks import SinkAnalysis
from .base import (LAST_PATCH, LAST_SELF_BLOCK, METHODS, Choice, ExplainRequest, ExplainResult,
                   Float, Int, Theory, method)

# Rollout matrices of recent (image, settings): another query row is only a lookup.
ROLLOUT_CACHE = BoundedCache(max_entries=64, max_bytes=96 * 2**20)
FUSIONS = ("mean", "max", "min")
CONVENTIONS = ("oracle", "vit-explain")
AUTO = "auto"
FUSION = Choice("fusion", "mean", FUSIONS, "How a block's heads become one matrix.")
CONVENTION_NAMES = {
    "oracle": "row-normalised (A+I)/rowsum, Chefer's compute_rollout_attention",
    "vit-explain": "vit-explain: (A+I)/2 divided by a.sum(-1) without keepdim "
                   "(column j / row j's sum)",
}


def fuse_heads(attn: np.ndarray, fusion: str = "mean") -> np.ndarray:
    """(heads, N, N) -> (N, N) by the mean, max or min over heads. The method's entry point
    hands it a checked `fusion`; a direct caller's value is checked by the same declaration."""
    fusion = FUSION.parse(fusion)
    return getattr(np, fusion)(np.asarray(attn, dtype=np.float64), axis=0)


def discard_lowest(fused: np.ndarray, ratio: float) -> np.ndarray:
    """vit-explain's discard: zero the lowest `ratio` fraction of all N*N entries
    (ties broken as torch.topk does), except entry [0, 0] (CLS -> CLS)."""
    fused = np.array(fused, dtype=np.float64)
    count = int(fused.size * ratio)
    if count <= 0:
        return fused
    flat = torch.from_numpy(fused.reshape(-1))
    _, indices = flat.topk(count, largest=False)
    indices = indices[indices != 0]
    flat[indices] = 0.0
    return flat.reshape(fused.shape).numpy()


def residual_step(fused: np.ndarray, convention: str = "oracle") -> np.ndarray:
    """One block's rollout factor Â from its fused (and discarded) attention."""
    n = fused.shape[-1]
    with_identity = fused + np.eye(n)
    if convention == "oracle":
        return with_identity / with_identity.sum(-1, keepdims=True)
    if convention == "vit-explain":
        half = with_identity / 2
        return half / half.sum(-1)  # the broadcast bug, on purpose: divides column j
    raise ValueError(f"Rollout convention must be one of {', '.join(CONVENTIONS)}.")


@dataclass
class Rollout:
    matrices: list[np.ndarray]  # R after each block in [start, end]: R_l = Â_l ... Â_start
    block_indices: list[int]  # capture block index of each factor
    num_prefix_tokens: int
    grid: tuple[int, int]

    @property
    def matrix(self) -> np.ndarray:
        return self.matrices[-1]

    def query_row(self, query: int | None = None, matrix: np.ndarray | None = None):
        """`token_row` of the final (or a given) rollout matrix."""
        matrix = self.matrix if matrix is None else matrix
        return token_row(matrix, self.num_prefix_tokens, self.grid, query)


def token_row(matrix, prefix: int, grid: tuple[int, int], query: int | None = None):
    """(map grid, prefix values, description) of a token-by-token relevance matrix: the
    [CLS] row, a patch's row (`query` = patch index), or - with no prefix token - the
    mean of all rows."""
    if query is not None:
        row, what = matrix[prefix + query], f"patch {query}'s row"
    elif prefix:
        row, what = matrix[0], "[CLS] row"
    else:
        row, what = matrix.mean(0), "mean over all patch rows (no [CLS] token)"
    return row[prefix:].reshape(grid), row[:prefix], what


def rollout_blocks(capture: Capture) -> list[int]:
    """Indices of the blocks rollout multiplies: the self-attention blocks."""
    blocks = [b.index for b in capture.blocks if b.kind == "self"]
    if not blocks:
        raise CaptureError("Rollout needs self-attention blocks; this model has none.")
    return blocks


AUTO_RULE = ("start=auto: rollout starts one block after the last sink-dominated block in the "
             "first half of the self-attention blocks (at the first block when there is none); "
             + SINK_DEFINITION)


@dataclass(frozen=True)
class AutoStart:
    """What `start=auto` chose, and why."""

    start: int  # position among the rollout blocks
    left_out: list[dict]  # one entry per block before `start`
    kept: list[dict]  # sink-dominated blocks in the second half, which stay in

    def meta(self) -> dict:
        return {"start_rule": AUTO_RULE, "left_out": self.left_out,
                "sink_dominated_kept": self.kept}

    def summary(self) -> str:
        """One sentence for a caption."""
        if not self.left_out:
            return "No block is sink-dominated, so rollout starts at the first block."

        def heads(entry):
            return " and ".join(f"head {s['head']} sends {s['score']:.0%} of its attention "
                                f"(mean over queries) to {s['key']}" for s in entry["sink_heads"])
        first, last = self.left_out[0]["block"], self.left_out[-1]["block"]
        if first == last:
            return f"Left out: block {first}, where {heads(self.left_out[0])}."
        return (f"Left out: blocks {first}–{last}. Sink-dominated: "
                + "; ".join(f"block {e['block']}, where {heads(e)}" for e in self.left_out
                            if e["sink_heads"]) + ".")


def _sink_entries(analysis: SinkAnalysis, position: int) -> list[dict]:
    return [{"head": s.head, "score": round(s.score, 4), "key": s.key_name, "key_index": s.key}
            for s in analysis.patch_sinks(position)]


def auto_start(analysis: SinkAnalysis) -> AutoStart:
    """Resolve start=auto from a sink analysis (its rows are the rollout blocks)."""
    dominated = analysis.sink_dominated()
    half = len(analysis.blocks) // 2
    early = [p for p in dominated if p < half]
    start = early[-1] + 1 if early else 0
    left_out = [{"block": analysis.blocks[p], "sink_heads": _sink_entries(analysis, p),
                 "reason": "sink-dominated" if p in dominated
                 else "before a sink-dominated block (rollout is one chain of blocks)"}
                for p in range(start)]
    kept = [{"block": analysis.blocks[p], "sink_heads": _sink_entries(analysis, p),
             "reason": "in the second half of the blocks; kept so rollout keeps at least "
                       "half of the network"} for p in dominated if p >= half]
    return AutoStart(start, left_out, kept)


def attention_rollout(capture: Capture, start: int = 0, end: int | None = None,
                      fusion: str = "mean", discard: float = 0.0,
                      convention: str = "oracle") -> Rollout:
    """Rollout over self-attention blocks start..end (positions among them, inclusive)."""
    eligible = rollout_blocks(capture)
    end = len(eligible) - 1 if end is None else end
    if not 0 <= start <= end < len(eligible):
        raise ValueError(f"Start and end blocks must satisfy 0 <= start <= end <= "
                         f"{len(eligible) - 1}; got {start} and {end}.")
    if not 0.0 <= discard < 1.0:
        raise ValueError(f"Discard ratio must be in [0, 1); got {discard}.")
    chosen = eligible[start:end + 1]
    prefix = capture.blocks[chosen[0]].num_prefix_tokens
    result = None
    matrices = []
    for index in chosen:
        attn = capture.blocks[index].acts["attn"][0].numpy()
        factor = residual_step(discard_lowest(fuse_heads(attn, fusion), discard), convention)
        result = factor if result is None else factor @ result
        matrices.append(result)
    return Rollout(matrices, chosen, prefix, capture.layout.grid)


def cached_rollout(model, image, start: int, end: int, fusion: str, discard: float,
                   convention: str) -> Rollout:
    """`attention_rollout` of one image from the shared capture, memoised whole (every
    block's matrix), so the method asked for another query row only reads it."""
    key = cache_key("rollout", model, start, end, fusion, float(discard), convention,
                    image=prepare(model, image).sha256)
    return ROLLOUT_CACHE.get_or_compute(key, lambda: attention_rollout(
        vit_capture(model, image), start, end, fusion, discard, convention))


def last_block_cls_attention(capture: Capture, query: int | None = None):
    """Raw attention of the last self-attention block, heads averaged, from the
    [CLS] query (or a patch; the mean row when there is no prefix token)."""
    index = rollout_blocks(capture)[-1]
    record = capture.blocks[index]
    fused = record.acts["attn"][0].double().mean(0).numpy()
    single = Rollout([fused], [index], record.num_prefix_tokens, capture.layout.grid)
    return single.query_row(query)


def _start_before_end(values: dict, model) -> None:
    if values["start"] != AUTO and values["end"] < values["start"]:
        raise OptionError(f"Option end={values['end']} is before start={values['start']}: "
                          "rollout runs from start to end.")


@method("rollout", family="vit", needs_target=False, cost="forward",
        summary="Attention rollout over the self-attention blocks (oracle or vit-explain "
                "convention; head fusion, discard ratio, start/end block, start=auto after the "
                "sink-dominated blocks).",
        convention=lambda values: CONVENTION_NAMES[values["convention"]],
        theory=Theory(
            mechanism="Multiplies head-averaged attention, plus the identity for the skip path, "
                      "through the blocks; by default it starts after any sink-dominated early "
                      "block (start=auto, see page 4).",
            cost="One forward pass plus one small matrix product per block.",
            class_specificity="None: a property of the input, not of a class.",
            resolution="One value per patch token.", supervision="None.",
            best_for="How information can travel from patches to [CLS] across depth."),
        options=(
            FUSION,
            Float("discard", 0.0, 0.0, 0.99,
                  "Zero this fraction of each fused matrix's weakest entries (never "
                  "[CLS]->[CLS]) before adding the identity."),
            Int("start", AUTO, 0, LAST_SELF_BLOCK,
                "First block (among the self-attention blocks), or 'auto': after the "
                "sink-dominated blocks.", word=AUTO),
            Int("end", LAST_SELF_BLOCK, 0, LAST_SELF_BLOCK,
                "Last block (among the self-attention blocks)."),
            Choice("convention", "oracle", CONVENTIONS,
                   "oracle: rows divided by their own sums (Chefer); vit-explain: that "
                   "library's column-by-row-sum division."),
            Int("query", -1, -1, LAST_PATCH,
                "The row read: -1 = [CLS] (or the mean row without one), else a patch.")),
        check=_start_before_end)
def explain(request: ExplainRequest, *, fusion: str, discard: float, start, end: int,
            convention: str, query: int) -> ExplainResult:
    model, image = request.model, request.image
    chosen = None
    if start == AUTO:
        chosen = auto_start(METHODS["sinks"](model, image).detail)
        start = chosen.start
        if end < start:  # which blocks auto leaves out depends on the image
            raise OptionError(f"Option end={end} is before the first block: start=auto chose "
                              f"block {start} on this image. {chosen.summary()} Set start=0 "
                              "to include every block.")
    rolled = cached_rollout(model, image, start, end, fusion, discard, convention)
    row = None if query < 0 else query
    grid, prefix_values, what = rolled.query_row(row)
    per_block = np.stack([rolled.query_row(row, m)[0] for m in rolled.matrices])
    layout = model_layout(model)
    return ExplainResult(
        map=grid.astype(np.float32),
        arrays={"per_block": per_block.astype(np.float32),
                "prefix_values": prefix_values.astype(np.float32),
                "blocks": np.array(rolled.block_indices)},
        meta={"fusion": fusion, "discard": discard, "start": start, "end": end,
              **(chosen.meta() if chosen else {"start_rule": "chosen by the user"}),
              "row": what, "num_prefix_tokens": rolled.num_prefix_tokens,
              "blocks_used": "self-attention blocks only"
              + ("; class-attention blocks excluded"
                 if len(layout.self_blocks) < layout.num_blocks else ""),
              "per_block": "rollout up to each block from `start`, same row",
              "display": "raw rollout values, not normalised"},
        detail=rolled)
