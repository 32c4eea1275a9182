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
sink-dominated blocks (`xai_core.sinks`): a head that sends most of every
query's attention to one background patch adds the same bright column to every
row of its block, and rollout carries it to the end as one bright pixel. On
DINOv2 ViT-S/14 that is block 0, head 5, on every sample image (README).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..cache import BoundedCache, cache_key
from ..capture import Capture, CaptureError
from ..errors import OptionError
from ..pipeline import prepare, vit_capture
from ..sinks import DEFINITION as SINK_DEFINITION
from ..sinks import SinkAnalysis, image_sinks
from .base import ExplainRequest, ExplainResult, register

# Final rollout matrices of recent (image, settings), so a page re-render is cheap.
ROLLOUT_CACHE = BoundedCache(max_entries=64, max_bytes=96 * 2**20)
FUSIONS = ("mean", "max", "min")
CONVENTIONS = ("oracle", "vit-explain")
CONVENTION_NAMES = {
    "oracle": "row-normalised (A+I)/rowsum, Chefer's compute_rollout_attention",
    "vit-explain": "vit-explain: (A+I)/2 divided by a.sum(-1) without keepdim "
                   "(column j / row j's sum)",
}


def fuse_heads(attn: np.ndarray, fusion: str = "mean") -> np.ndarray:
    """(heads, N, N) -> (N, N) by the mean, max or min over heads."""
    if fusion not in FUSIONS:
        raise ValueError(f"Head fusion must be one of {', '.join(FUSIONS)}, not '{fusion}'.")
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


AUTO = "auto"
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


def image_rollout(model, image, start: int = 0, end: int | None = None, fusion: str = "mean",
                  discard: float = 0.0, convention: str = "oracle") -> Rollout:
    """`attention_rollout` of one image from the shared capture, memoised (final matrix only)."""
    key = cache_key("rollout", model, start, end, fusion, float(discard), convention,
                    image=prepare(model, image).sha256)

    def compute():
        rolled = attention_rollout(vit_capture(model, image), start, end, fusion, discard,
                                   convention)
        return Rollout([rolled.matrix], rolled.block_indices, rolled.num_prefix_tokens,
                       rolled.grid)
    return ROLLOUT_CACHE.get_or_compute(key, compute)


def last_block_cls_attention(capture: Capture, query: int | None = None):
    """Raw attention of the last self-attention block, heads averaged, from the
    [CLS] query (or a patch; the mean row when there is no prefix token)."""
    index = rollout_blocks(capture)[-1]
    record = capture.blocks[index]
    fused = record.acts["attn"][0].double().mean(0).numpy()
    single = Rollout([fused], [index], record.num_prefix_tokens, capture.layout.grid)
    return single.query_row(query)


@register("rollout", family="vit", needs_target=False,
          summary="Attention rollout over the self-attention blocks (oracle or vit-explain "
                  "convention; head fusion, discard ratio, start/end block, start=auto "
                  "after the sink-dominated blocks).")
def explain_rollout(request: ExplainRequest) -> ExplainResult:
    capture = vit_capture(request.model, request.image)
    options = request.options
    last = len(rollout_blocks(capture)) - 1
    fusion = options.get_choice("fusion", "mean", FUSIONS)
    discard = options.get_float("discard", 0.0, 0.0, 0.99)
    start = options.get_int_or_word("start", AUTO, 0, last, AUTO)
    chosen = None
    if start == AUTO:
        chosen = auto_start(image_sinks(request.model, request.image))
        start = chosen.start
    try:
        end = options.get_int("end", last, start, last)
    except OptionError as error:
        if chosen is None:
            raise
        raise OptionError(f"{error} start=auto chose block {start}; "
                          f"{chosen.summary()} Set start=0 to include every block.") from None
    convention = options.get_choice("convention", "oracle", CONVENTIONS)
    query = options.get_int("query", -1, -1, capture.layout.num_patches - 1)
    query = None if query < 0 else query
    rolled = attention_rollout(capture, start, end, fusion, discard, convention)
    grid, prefix_values, what = rolled.query_row(query)
    per_block = np.stack([rolled.query_row(query, m)[0] for m in rolled.matrices])
    return ExplainResult(
        map=grid.astype(np.float32),
        arrays={"per_block": per_block.astype(np.float32),
                "prefix_values": prefix_values.astype(np.float32),
                "blocks": np.array(rolled.block_indices)},
        meta={"fusion": fusion, "discard": discard, "start": start, "end": end,
              **(chosen.meta() if chosen else {"start_rule": "chosen by the user"}),
              "convention": CONVENTION_NAMES[convention], "row": what,
              "num_prefix_tokens": rolled.num_prefix_tokens,
              "blocks_used": "self-attention blocks only"
              + ("; class-attention blocks excluded"
                 if last + 1 < len(capture.blocks) else ""),
              "per_block": "rollout up to each block from `start`, same row",
              "display": "raw rollout values, not normalised"})
