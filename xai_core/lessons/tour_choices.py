"""The Explainer tour's choices of block and head, resolved on a picture's overview (the
payload of `explainer.overview_payload`), and the heads its steps switch off.

A tour step names its block and head as choices ("middle", "sharpest", ...), which this
module turns into indices for one picture; the step's words and the rest of the tour are
dashboard/explainer/tour.py. The steps that switch a head off are declared here
(`TOUR_SWITCHES`), below the tour, so that page 0's view (views/p0_vit_explainer.py) and
with it `warmup --gallery` run the same switches the tour shows. The model in the browser
resolves the same choices in dashboard/static/explainer/model/tour-steps.js."""

from __future__ import annotations

import numpy as np

from ..analysis.entropy import entropy
from .explainer import decode

# resolved against the model's blocks; sink: the block of the strongest sink head
BLOCKS = ("first", "middle", "last", "last_self", "sink")
# sharpest: the lowest-entropy [CLS] row in that block; sink: the strongest sink head;
# nearest: the head with the smallest mean attention distance among the block's heads that
# are not sink heads (xai_core.analysis.attention_sinks: a sink head's map is its sink key
# whatever the query)
HEADS = ("mean", "first", "sharpest", "sink", "nearest")
# The tour's steps that switch a head off (the model runs again without it: the Explainer's
# `head_switch`), by step id: the block and head each turns off, as choices.
TOUR_SWITCHES = {"switch_sink": ("sink", "sink"), "test_claim": ("middle", "sharpest")}


def query_row_values(overview: dict, block: int) -> np.ndarray:
    """(heads, patches) [CLS] (or mean patch) rows of a block, dequantised."""
    rows = overview["query_rows"][block]
    codes = decode(rows["codes"]).astype(np.float64)
    return codes * decode(rows["scale"]).astype(np.float64)[:, None] / 255.0


def resolve_block(choice: str, overview: dict) -> int:
    blocks = overview["blocks"]
    selfs = [b["index"] for b in blocks if b["kind"] == "self"]
    if choice == "sink":
        return overview["sinks"]["strongest"]["block"]
    return {"first": 0, "middle": selfs[len(selfs) // 2], "last": len(blocks) - 1,
            "last_self": selfs[-1]}[choice]


def resolve_head(choice: str, overview: dict, block: int) -> int:
    """-1 for the mean of the heads, else a head index."""
    if choice == "mean":
        return -1
    if choice == "first":
        return 0
    if choice == "sink":
        strongest = overview["sinks"]["strongest"]
        return strongest["head"] if strongest["block"] == block else -1
    if choice == "nearest":
        return nearest_head(overview, block)
    return int(np.argmin([entropy(row / row.sum()) for row in query_row_values(overview, block)]))


def sink_heads(overview: dict, block: int) -> dict[int, dict]:
    """The sink heads of one block (head -> its sink facts), from the sink analysis."""
    return {s["head"]: s for s in overview["sinks"]["heads"] if s["block"] == block}


def head_distances(overview: dict, block: int) -> list[float] | None:
    """Mean attention distance (px) of each head of a self-attention block, or None."""
    measured = overview["distance"]
    if block not in measured["blocks"]:
        return None
    return measured["mad"][measured["blocks"].index(block)]


def kept_heads(overview: dict, block: int) -> list[int]:
    """The heads whose distance means something: not sink heads. A sink head's map is its
    sink key whatever the query, and attention to a prefix token adds no distance (page 3's
    convention), so either kind would read as a distance the head does not look. All heads
    when every one is a sink."""
    heads = range(len(head_distances(overview, block)))
    sinks = sink_heads(overview, block)
    return [h for h in heads if h not in sinks] or list(heads)


def nearest_head(overview: dict, block: int) -> int:
    """The non-sink head of the block with the smallest mean attention distance (-1, the
    mean of the heads, in a block that has no distance: class attention)."""
    mad = head_distances(overview, block)
    if mad is None:
        return -1
    return min(kept_heads(overview, block), key=lambda h: mad[h])


def switched_heads(overview: dict) -> dict[str, tuple[int, int]]:
    """The (block, head) each switching step of the tour turns off on this picture."""
    chosen = {}
    for step_id, (block_choice, head_choice) in TOUR_SWITCHES.items():
        block = resolve_block(block_choice, overview)
        chosen[step_id] = (block, resolve_head(head_choice, overview, block))
    return chosen
