"""The ViT Explainer's guided tour: ordered steps from pixels to the prediction, as data.

Each step names the controls it sets, in the component's own vocabulary (checked by the
tests): the pipeline stage to open, the block, the head, the query patch, the map drawn
over the image, the parts of the page to spotlight, and the deeper page (1-8) on its
topic. Texts are templates filled with facts read from the live overview payload
(`tour_facts`), so "this image became 256 patch tokens + 1 [CLS]" is true of the model
and image on screen. `**bold**` is the only markup; the component escapes the rest.

Importable without running the app (no streamlit here).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from dashboard import literal
from dashboard.page_list import PAGE_LIST
from xai_core.capture import centre_patch as capture_centre_patch
from xai_core.analysis.entropy import entropy
from xai_core.lessons.explainer import decode, head_switch
from xai_core.analysis.attention_sinks import SINK_THRESHOLD
from xai_core.analysis.token_marks import HIGH_NORM_GAP, HIGH_NORM_RATIO

# resolved against the model's blocks; sink: the block of the strongest sink head
BLOCKS = ("first", "middle", "last", "last_self", "sink")
# sharpest: the lowest-entropy [CLS] row in that block; sink: the strongest sink head;
# nearest: the head with the smallest mean attention distance among the block's heads that
# are not sink heads (xai_core.analysis.attention_sinks: a sink head's map is its sink key whatever
# the query)
HEADS = ("mean", "first", "sharpest", "sink", "nearest")
# centre: the patch in the middle of the grid; longest: the patch token with the largest
# norm / median (a flagged high-norm token when there is one, xai_core.analysis.token_marks)
PATCHES = (None, "centre", "longest")
PARTS = ("pipeline", "image", "sequence", "overlay", "heads", "player", "detail", "steps",
         "matrix", "qk", "answer", "readout")  # plus "stage:<id>" for one box of the pipeline
# Texts say "point at or tap" where they ask for a hover: they read right with a mouse and on
# a touch screen.


@dataclass(frozen=True, kw_only=True)
class Step:
    title: str
    text: str
    stage: str
    block: str
    head: str
    patch: str | None
    overlay: str
    spot: tuple[str, ...]
    page: str  # a file of dashboard/page_list.py
    # the step switches its head off (the model runs again without it: `head_switch`)
    switch_off: bool = False


# (block, head) -> `xai_core.lessons.explainer.head_switch` of that one head
Switch = Callable[[int, int], dict]


def switcher(model, image, head) -> Switch:
    """The tour's head switch for the model, picture and head on screen."""
    return lambda block, h: head_switch(model, image, head, [(block, h)])


TOUR: list[Step] = [
    Step(title="One picture in, one answer out",
         text="This page follows **one forward pass** of {model} on this picture, from the "
              "pixels on the left to the answer on the right: {top_answer}. {random_note}"
              "Every shape and number you see comes from this model and this very run. Move "
              "with Next and Back, or with the ← → keys; point at or tap anything at any time.",
         stage="image", block="last", head="mean", patch=None, overlay="attention",
         spot=("pipeline",), page="1_tokenization.py"),
    Step(title="What the model sees",
         text="{picture_sentence} With three colour channels (red, green, blue) that is "
              "{H}×{W}×3 = **{pixels} numbers**, and nothing else: no file name, no caption.",
         stage="image", block="last", head="mean", patch=None, overlay="attention",
         spot=("stage:image", "detail"), page="1_tokenization.py"),
    Step(title="Cut into patches",
         text="A transformer reads sequences, so the image is cut into square tiles of "
              "{P}×{P} pixels: N = HW/P² = {H}·{W}/{P}² = **{patches} patches** in a "
              "{rows}×{cols} grid. Point at or tap a tile of the image: the Patches panel "
              "shows that tile enlarged, pixel by pixel.",
         stage="patches", block="first", head="mean", patch="centre", overlay="attention",
         spot=("stage:patches", "image", "detail"), page="1_tokenization.py"),
    Step(title="Patches become tokens",
         text="Each patch's {P}·{P}·3 = {flat} numbers are multiplied by one learned matrix "
              "E ({flat}×{D}), giving a **token**: a list of {D} numbers. {prefix_sentence} So "
              "this picture became **{token_sentence}**. In the token strip above the picture, "
              "point at or tap a token to find its patch, or a patch to find its token.",
         stage="tokens", block="first", head="mean", patch="centre", overlay="attention",
         spot=("stage:tokens", "sequence"), page="1_tokenization.py"),
    Step(title="Each token is told where it was",
         text="Attention on its own treats the tokens as an unordered set: shuffle the "
              "patches and it computes the same thing. So a learned **position vector** (one "
              "per slot, table {pos_table}) is added to every token before the first block. "
              "The vectors themselves are not drawn here: the small map beside this text shows "
              "each patch token's length ‖x‖ (its {D} numbers taken together) with its "
              "position vector added, as it enters the first block. Go deeper to page 1, view "
              "4, to see which positions the model learned to treat as alike. Blocks and "
              "heads are numbered from 0 here, as on the other pages.",
         stage="tokens", block="first", head="mean", patch="centre", overlay="attention",
         spot=("detail",), page="1_tokenization.py"),
    Step(title="Inside a block",
         text="{blocks_sentence} Every block does the same two moves: **attention** (tokens "
              "exchange information) and an **MLP** (each token is processed on its own), each "
              "added back onto its input. The ten cards show each step with its real shape; "
              "each small map shows every patch token's length ‖x‖ after that step.",
         # head 0, as the next two steps: the mean of block 0's heads can be a sink's patch
         stage="blocks", block="first", head="first", patch="centre", overlay="attention",
         spot=("stage:blocks", "steps"), page="2_self_attention.py"),
    Step(title="Queries and keys",
         text="In each head every token makes a **query** q (what am I looking for?) and a "
              "**key** k (what do I offer?), {d} numbers each: {heads} heads × {d} = {D}. "
              "Their match is the dot product q·k, divided by √{d} = {sqrt_d} so the scores do "
              "not grow with the vector length. Below: q of the marked patch, k of the key it "
              "likes best, and the {d} products that add up to the score.",
         stage="blocks", block="first", head="first", patch="centre", overlay="attention",
         spot=("qk",), page="2_self_attention.py"),
    Step(title="Softmax turns scores into attention",
         text="Softmax turns one query's scores against all {tokens_block} keys into weights "
              "that are positive and **sum to 1**: one row of the attention matrix. Point at "
              "or tap a patch of the image: its row is drawn over the picture at once. Does "
              "the marked patch look mostly at its neighbours in this early block, or far "
              "away?",
         stage="blocks", block="first", head="first", patch="centre", overlay="attention",
         spot=("image", "matrix"), page="2_self_attention.py"),
    Step(title="Many heads ask different questions",
         text="Each block has {heads} heads, each with its own queries and keys. Point at or "
              "tap the head chips under the image: do the heads of {middle_label} look at the "
              "same places? Head {sharpest} has the most focused {middle_row} here: its "
              "attention is packed into the fewest patches. The outputs of all heads are put "
              "side by side ({heads}×{d} = {D}) and mixed by one projection.",
         stage="blocks", block="middle", head="mean", patch=None, overlay="attention",
         spot=("image", "heads"), page="4_rollout_heads.py"),
    Step(title="Attention sinks",
         text="{sink_sentence}",
         stage="blocks", block="sink", head="sink", patch=None, overlay="attention",
         spot=("image", "heads", "matrix"), page="4_rollout_heads.py"),
    Step(title="Switch that head off",
         text="A map says where a head looks, not whether the answer needs it. "
              "{sink_switch_sentence} {switch_how} Page 9 switches every head off in turn.",
         stage="blocks", block="sink", head="sink", patch=None, overlay="attention",
         spot=("heads", "answer"), page="9_interventions.py", switch_off=True),
    # after the sinks: the first block's mean of heads can be one sink patch, so distance is
    # taught on a head that is not a sink, and the step says which heads it leaves out
    Step(title="Near and far: how far the heads look",
         text="{near_head_sentence} Tap or click a patch to pin it and drag the block slider "
              "under the picture: how far does its attention reach? {distance_sentence} A CNN "
              "cannot mix near and far in one layer: its view grows a little with every layer.",
         stage="blocks", block="first", head="nearest", patch="centre", overlay="attention",
         spot=("image", "player"), page="3_attention_distance.py"),
    Step(title="The residual stream",
         text="A block never replaces its input; it **adds** to it: x + attention(x), then "
              "x + MLP(x). This running sum is the residual stream. The chart shows the "
              "tokens' lengths ‖x‖ after every block: {growth_sentence} {outlier_sentence}",
         stage="norm", block="last_self", head="mean", patch="longest", overlay="attention",
         spot=("stage:norm", "detail"), page="4_rollout_heads.py"),
    Step(title="What [CLS] gathers, block by block",
         text="{cls_sentence} Press ▶ under the picture to watch it block by block, or drag "
              "the block slider beside it: where does it spread out, and where does it settle?",
         stage="blocks", block="last", head="mean", patch=None, overlay="attention",
         spot=("image", "player"), page="4_rollout_heads.py"),
    Step(title="Rollout: attention through all blocks",
         text="One block's attention ignores the blocks before it and the residual path. "
              "**Attention rollout** (Abnar & Zuidema) averages the heads, adds the identity "
              "for the residual, normalises each row and multiplies the blocks in order. "
              "{rollout_start} Press ▶ to see it accumulate up to {rollout_last}.",
         stage="blocks", block="last_self", head="mean", patch=None, overlay="rollout",
         spot=("image", "overlay"), page="4_rollout_heads.py"),
    Step(title="DAAM: where the decision is built",
         text="{daam_sentence}",
         stage="blocks", block="last", head="mean", patch=None, overlay="daam",
         spot=("image", "overlay", "player"), page="6_daam_flow.py"),
    Step(title="From tokens to one feature",
         text="After the last block a final LayerNorm rescales every token. "
              "{summary_sentence} {feature_sentence}",
         stage="feature", block="last", head="mean", patch=None, overlay="attention",
         spot=("stage:norm", "stage:feature", "detail"), page="6_daam_flow.py"),
    Step(title="The prediction",
         text="{head_sentence} {prediction_sentence} {answer_note}Try your own photo in the "
              "sidebar: every number on this page follows it.",
         stage="top5", block="last", head="mean", patch=None, overlay="attention",
         spot=("stage:head", "stage:top5", "detail"), page="7_comparison.py"),
    Step(title="What each block would answer",
         text="Stop the model early: take the tokens after block k, apply the final norm "
              "and the head, as if the later blocks were not there (the **read-out**, or "
              "logit lens). The thin bar under each block shows the score of the final "
              "answer, {readout_label}, read out there. {readout_sentence}",
         stage="top5", block="last", head="mean", patch=None, overlay="attention",
         spot=("readout",), page="9_interventions.py"),
    Step(title="Looking is not the same as deciding",
         text="Attention shows where information was **collected**, not which pixels "
              "**changed** the answer: the MLPs and norms transform what was gathered, and "
              "different attention patterns can give the same prediction. Class-specific, "
              "gradient-based maps (Grad-CAM) and tests that delete the top-ranked pixels and "
              "watch the score drop answer that second question.",
         stage="blocks", block="last", head="mean", patch=None, overlay="attention",
         spot=("image",), page="5_gradcam.py"),
    Step(title="Test a claim",
         text="Head {sharpest} of {middle_label} has the most focused attention (step "
              "{heads_step}): a map would call it important. {sharp_switch_sentence} "
              "{compare_sentence} {switch_yourself} Page 9 ranks every head by what the answer "
              "loses without it, beside what the maps claim.",
         stage="blocks", block="middle", head="sharpest", patch=None, overlay="attention",
         spot=("heads", "answer"), page="9_interventions.py", switch_off=True),
]


# --- facts from the live payload ---------------------------------------------------------------

def _share(probability: float) -> str:
    return f"{100 * probability:.1f}%"


def percent(share: float) -> str:
    """A share of attention in words: never "100%" for a share that is not all of it."""
    return "over 99.9%" if share >= 0.9995 else f"{100 * share:.1f}%"


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


def _head_distances(overview: dict, block: int) -> list[float] | None:
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
    heads = range(len(_head_distances(overview, block)))
    sinks = sink_heads(overview, block)
    return [h for h in heads if h not in sinks] or list(heads)


def nearest_head(overview: dict, block: int) -> int:
    """The non-sink head of the block with the smallest mean attention distance (-1, the
    mean of the heads, in a block that has no distance: class attention)."""
    mad = _head_distances(overview, block)
    if mad is None:
        return -1
    return min(kept_heads(overview, block), key=lambda h: mad[h])


# How a learner switches heads: in the app (`live`), or not at all in an offline lesson, where
# no model can run again and the switching steps show the results made with the file.
SWITCH_HOW = {
    True: ("Every head chip has a small power switch in its corner: turn any head of any block "
           "off and the model runs again without it; the answer bars under the chips change "
           "in place."),
    False: ("In the app every head chip has a power switch that runs the model again without "
            "that head; this file cannot run the model, so it shows the result computed when "
            "it was made."),
}
SWITCH_YOURSELF = {True: "Switch heads off yourself with the power switch on each chip.",
                   False: "In the app you can switch any head off yourself."}


def tour_facts(overview: dict, switch: Switch, live: bool = True) -> dict[str, str]:
    """The numbers the steps quote, from the overview payload of the image on screen and
    the two heads the tour switches off (`switch`); `live`: in the app (False: an offline
    lesson, where nothing runs again)."""
    layout, dims, prediction = overview["layout"], overview["dims"], overview["prediction"]
    (height, width), (ph, _) = layout["input"], layout["patch"]
    rows, cols = layout["grid"]
    names = layout["prefix_names"]
    late = layout["cls_joins_late"]
    middle = resolve_block("middle", overview)
    blocks = overview["blocks"]
    random = overview["model"]["random"]
    return {
        "model": overview["model"]["label"], "H": str(height), "W": str(width),
        "pixels": f"{height * width * 3:,}", "P": str(ph), "rows": str(rows), "cols": str(cols),
        "patches": str(layout["patches"]), "flat": str(ph * ph * 3), "D": str(dims["width"]),
        "heads": str(dims["heads"]), "d": str(dims["head_dim"]),
        "sqrt_d": f"{math.sqrt(dims['head_dim']):.3g}",
        "tokens_block": str(blocks[0]["nk"]),
        "random_note": ("The weights are random, so that answer means nothing; the shapes "
                        "are real. " if random else ""),
        "picture_sentence": _picture_sentence(overview),
        "prefix_sentence": _prefix_sentence(names, late, dims),
        "token_sentence": _token_sentence(layout, names, late),
        "pos_table": "×".join(map(str, dims["pos_table"])) if dims["pos_table"] else "none",
        "blocks_sentence": _blocks_sentence(dims, late),
        "middle_label": blocks[middle]["label"].lower(),
        "middle_row": "[CLS] row" if blocks[middle]["prefix"] else "mean patch row",
        "sharpest": str(resolve_head("sharpest", overview, middle)),
        "growth_sentence": _growth_sentence(overview),
        "outlier_sentence": _outlier_sentence(overview),
        "sink_sentence": _sink_sentence(overview),
        "switch_how": SWITCH_HOW[live], "switch_yourself": SWITCH_YOURSELF[live],
        "distance_sentence": _distance_sentence(overview),
        "near_head_sentence": _near_head_sentence(overview),
        "rollout_start": _rollout_start(overview),
        "cls_sentence": _cls_sentence(late, dims),
        "rollout_last": blocks[resolve_block("last_self", overview)]["label"].lower(),
        "daam_sentence": _daam_sentence(overview),
        "summary_sentence": _summary_sentence(overview),
        "feature_sentence": _feature_sentence(prediction, names),
        "head_sentence": _head_sentence(prediction),
        "top_answer": _top_answer(prediction),
        "prediction_sentence": _prediction_sentence(prediction),
        "answer_note": _answer_note(overview),
        "readout_label": f"**{_readout_label(overview)}**",
        "readout_sentence": _readout_sentence(overview),
        "heads_step": str(step_number("Many heads ask different questions")),
        **_switch_facts(overview, switch),
    }


def step_number(title: str) -> int:
    return 1 + [step.title for step in TOUR].index(title)


def switched_heads(overview: dict) -> dict[str, tuple[int, int]]:
    """The (block, head) each switching step turns off, by the step's own choices."""
    chosen = {}
    for step in TOUR:
        if step.switch_off:
            block = resolve_block(step.block, overview)
            chosen[step.title] = (block, resolve_head(step.head, overview, block))
    return chosen


def _switch_facts(overview: dict, switch: Switch) -> dict[str, str]:
    chosen = switched_heads(overview)
    sink, sharp = chosen["Switch that head off"], chosen["Test a claim"]
    results = {pair: switch(*pair) for pair in {sink, sharp}}
    return {"sink_switch_sentence": _switch_sentence(overview, sink, results[sink]),
            "sharp_switch_sentence": _switch_sentence(overview, sharp, results[sharp]),
            "compare_sentence": _compare_sentence(sink, sharp, results)}


def signed_change(change: float) -> str:
    """A score change as the tour prints it: three decimals with its sign, or "under 0.001"
    (never "-0.000")."""
    if abs(change) < 0.0005:
        return "a change under 0.001"
    return f"{'+' if change > 0 else '−'}{abs(change):.3f}"


def _switch_sentence(overview: dict, pair: tuple[int, int], result: dict) -> str:
    """What switching one head off did to the answer, in the tour's words."""
    block, head = pair
    where = f"head {head} of {overview['blocks'][block]['label'].lower()}"
    if "error" in result:
        return f"{where[0].upper()}{where[1:]} cannot be switched off here: {result['error']}"
    before, after, target = result["before"][0], result["after"][0], result["target"]
    text = (f"Here {where} is switched off (its output set to 0 before the projection "
            "W_O) and the model runs again: ")
    text += (f"the answer stays **{after['label']}**" if after["label"] == before["label"]
             else f"the answer changes from **{before['label']}** to **{after['label']}**")
    text += (f"; the class score of {target['label']} goes from {target['before']:.3f} to "
             f"{target['after']:.3f} ({signed_change(target['after'] - target['before'])}).")
    if overview["model"]["random"]:
        text += " The weights are random, so this says nothing about a trained model."
    return text


def _compare_sentence(sink: tuple[int, int], sharp: tuple[int, int], results: dict) -> str:
    """The focused head's effect beside the sink head's (step "Switch that head off"), and
    whether either carries the answer alone."""
    step = step_number("Switch that head off")
    if sink == sharp:
        return f"It is also the head switched off in step {step}."
    if any("error" in results[pair] for pair in (sink, sharp)):
        return ""
    target = results[sharp]["target"]
    change = {pair: results[pair]["target"]["after"] - results[pair]["target"]["before"]
              for pair in (sink, sharp)}
    text = (f"The sink head of step {step}: {signed_change(change[sink])}; this focused "
            f"head: {signed_change(change[sharp])}.")
    largest = max(abs(c) for c in change.values()) / max(abs(target["before"]), 1e-12)
    if largest < 0.05:
        text += (f" Neither moves the score by {100 * largest:.1f}% of itself or more: on "
                 "this picture neither head carries the answer alone.")
    return text


def _readout_label(overview: dict) -> str:
    found = overview["readout"]
    return found.get("label") or overview["prediction"]["top"][0]["label"]


def _readout_sentence(overview: dict) -> str:
    found = overview["readout"]
    if "unavailable" in found:
        return f"Not here: {found['unavailable']}"
    if overview["model"]["random"]:
        return "The weights are random, so the read-outs mean nothing here."
    first, blocks = found["first_block"], found["blocks"]
    neighbours = overview["prediction"].get("neighbours") or []
    if neighbours and neighbours[0]["similarity"] > 0.999:
        return ("Each block is compared with a bank of the gallery's features at that "
                "block, and the banks hold this very picture: its own views are the "
                f"nearest entries, so the read-out says {found['label']} from block {first} "
                "on, which tests nothing. Try your own photo to see where the answer forms.")
    text = f"From block {first} on, every read-out's top class is {found['label']}"
    if first > 0:
        text += f"; block 0 would answer {blocks[0]['label']}"
    if found["bank"]:
        text += " (each block is compared with a bank of the gallery's features at that block)"
    return text + "."


def _picture_sentence(overview: dict) -> str:
    scale = overview["picture"]["scale"]
    return _fit_sentence(overview) + (f" It is {scale}." if scale else "")


def _fit_sentence(overview: dict) -> str:
    picture, (height, width) = overview["picture"], overview["layout"]["input"]
    (w, h), (source_w, source_h) = picture["size"], picture["source"]
    text = f"This {w}×{h} picture"
    if (source_w, source_h) != (w, h):
        text = f"Your {source_w}×{source_h} photo was shrunk to {w}×{h} on upload; it"
    if picture["squashed"]:
        return (f"{text} is squeezed to **{height}×{width}** pixels, whole: its proportions "
                "change, nothing is cut off.")
    if picture["kept"] < 0.995:
        return (f"{text} is resized and its centre cut out: the model sees **{height}×{width}"
                f"** pixels covering {100 * picture['kept']:.0f}% of the picture (the box "
                "in the Image panel). The rest never reaches the model.")
    return f"{text} is resized to **{height}×{width}** pixels."


def _median_patch_norm(overview: dict, values) -> float:
    return float(np.median(decode(values).astype(np.float64)[-overview["layout"]["patches"]:]))


def _growth_sentence(overview: dict) -> str:
    """How the median patch token's length changes from the embeddings to the output of
    the last block that still has patch tokens."""
    patches = overview["layout"]["patches"]
    last = [b for b in overview["blocks"] if b["nq"] >= patches][-1]
    before = _median_patch_norm(overview, overview["embedding_norms"])
    after = _median_patch_norm(overview, last["norm_out"])
    where = f"from the first block's input to the output of {last['label'].lower()}"
    if abs(after - before) <= 0.02 * before:
        return f"the median patch token stays at about {before:.3g} {where}."
    verb = "grows" if after > before else "shrinks"
    return f"the median patch token {verb} from {before:.3g} to {after:.3g} {where}."


def _top_answer(prediction: dict) -> str:
    top = prediction["top"][0]
    if prediction["open_set"]["known"]:
        return f"**{top['label']}** ({_share(top['probability'])})"
    return (f"a forced guess, **{top['label']}**, because this picture looks like none of "
            "what the model knows")


def _prediction_sentence(prediction: dict) -> str:
    """The answer with its share, or, for a picture unlike everything the model knows,
    that fact instead of a percentage that would read as confidence."""
    top = prediction["top"]
    found = prediction["open_set"]
    if not found["known"]:
        return (f"Here the picture looks like **none of what the model knows**: "
                f"{found['why']}. The model must still name one of its classes "
                f"({top[0]['label']}), so that is a guess, not an answer.")
    second = (f"{top[1]['label']} ({_share(top[1]['probability'])})" if len(top) > 1
              else "nothing else")
    return f"Here: **{top[0]['label']}** ({_share(top[0]['probability'])}), then {second}."


def _answer_note(overview: dict) -> str:
    if overview["model"]["random"]:
        return "The weights are random, so this answer means nothing. "
    neighbours = overview["prediction"].get("neighbours") or []
    if neighbours and neighbours[0]["similarity"] > 0.999:
        return ("The bank holds this very picture (its nearest entry has cosine similarity "
                f"{neighbours[0]['similarity']:.3f}), so this is no fair test. ")
    return ""


def _prefix_sentence(names: list[str], late: bool, dims: dict) -> str:
    if late:
        return (f"This model puts no token in front yet: its [CLS] token joins only in the "
                f"{dims['class_blocks']} class-attention blocks at the end.")
    if not names:
        return "This model puts no extra token in front of the patches."
    described = []
    if "[CLS]" in names:
        described.append("[CLS], a learned token with no pixels that gathers a summary")
    if "[DIST]" in names:
        described.append("[DIST], a distillation token that learns, in training, to copy "
                         "a teacher network's answer")
    registers = [n for n in names if n not in ("[CLS]", "[DIST]")]
    if registers:
        listed = (registers[0] if len(registers) == 1
                  else f"{registers[0]}…{registers[-1]}")
        described.append(f"{listed}, {len(registers)} register token"
                         f"{'s' if len(registers) > 1 else ''} with no pixels that give the "
                         "model scratch space")
    return "In front go " + "; ".join(described) + "."


def _token_sentence(layout: dict, names: list[str], late: bool) -> str:
    if late or not names:
        return f"{layout['patches']} patch tokens"
    return f"{layout['tokens']} tokens: {layout['patches']} patches + {', '.join(names)}"


def _blocks_sentence(dims: dict, late: bool) -> str:
    if late:
        return (f"The tokens pass through {dims['self_blocks']} self-attention blocks, then "
                f"{dims['class_blocks']} class-attention blocks where only [CLS] asks.")
    return f"The tokens pass through {dims['blocks']} blocks, one after the other."


def _outlier_sentence(overview: dict) -> str:
    marks, cols = overview["high_norm"], overview["layout"]["grid"][1]
    where = lambda t: (f"row {t['patch'] // cols}, column {t['patch'] % cols}: "  # noqa: E731
                       f"{t['ratio']}× the median in block {t['block']}")
    rule = (f"a patch stands apart when its vector is at least {HIGH_NORM_RATIO:g}× as long "
            f"as the median patch's and {HIGH_NORM_GAP:g}× as long as every unmarked one")
    if not marks["flagged"]:
        return (f"The marked patch is the longest ({where(marks['largest'])}) but does not "
                f"stand apart ({rule}). Darcet et al. (2024) found large ViTs re-using a few "
                "patches as scratch space; those stand far apart.")
    count = len(marks["flagged"])
    return (f"{count} patch token{'s' if count > 1 else ''} stand{'' if count > 1 else 's'} "
            f"apart ({rule}); the marked one is at {where(marks['flagged'][0])}. Darcet et al. "
            "(2024) found large ViTs re-using a few patches as scratch space like this.")


def _distance_sentence(overview: dict) -> str:
    """How far the non-sink heads of the first and last self-attention blocks look on this
    image, next to what the ViT papers report (said only as far as the measurement bears it
    out)."""
    measured = overview["distance"]
    blocks, even = measured["blocks"], measured["reference"]
    name = lambda i: overview["blocks"][blocks[i]]["label"].lower()  # noqa: E731
    kept = [[measured["mad"][i][h] for h in kept_heads(overview, block)]
            for i, block in enumerate(blocks)]

    def span(i: int) -> str:
        low, high = round(min(kept[i])), round(max(kept[i]))
        return f"{low}–{high} px" if low != high else f"about {low} px"

    text = f"On this image the heads of {name(0)} look {span(0)} from their query"
    if len(blocks) > 1:
        text += f", those of {name(-1)} {span(-1)}"
    text += f", in page 3's mean attention distance (evenly spread attention: {even:.0f} px)."
    if len(blocks) == 1:
        return text
    near_first, near_last = min(kept[0]), min(kept[-1])
    patch = overview["layout"]["patch"][0]  # a difference under one patch is not a trend
    text += (" The ViT papers report early blocks mixing near- and far-looking heads, late "
             "blocks only far-looking ones; ")
    if near_last >= near_first + patch:
        return text + (f"here {name(-1)}'s nearest head ({near_last:.0f} px) looks farther "
                       f"than {name(0)}'s ({near_first:.0f} px).")
    if near_last > near_first - patch:
        return text + (f"not here: the nearest heads of {name(0)} and {name(-1)} look about "
                       f"as far ({near_first:.0f} and {near_last:.0f} px, under a patch apart).")
    return text + (f"not here: {name(-1)}'s nearest head ({near_last:.0f} px) looks nearer "
                   f"than {name(0)}'s ({near_first:.0f} px).")


def _near_head_sentence(overview: dict) -> str:
    """Which head the distance step draws, and which sink heads it leaves out and why."""
    block = resolve_block("first", overview)
    label = overview["blocks"][block]["label"]
    head = nearest_head(overview, block)
    if head < 0:
        return f"The picture shows the mean of the heads of {label.lower()}."
    text = f"The picture shows head {head} of {label.lower()}, its nearest-looking head."
    sinks = sink_heads(overview, block)
    if not sinks or len(sinks) == len(_head_distances(overview, block)):
        return text
    left_out = "; ".join(
        f"head {h} ({percent(s['score'])} to {s['key']}: "
        + ("its map is that patch whatever you pin)" if s["on_patch"] else
           "a token with no place on the picture, so no distance)")
        for h, s in sorted(sinks.items()))
    return f"{text} Left out here and below, as sinks (last step): {left_out}."


def _sink_sentence(overview: dict) -> str:
    strongest = overview["sinks"]["strongest"]
    block = overview["blocks"][strongest["block"]]["label"].lower()
    share = percent(strongest["score"])
    if strongest["score"] < SINK_THRESHOLD:
        return (f"Does any head pour most of its attention into one key? Not here: the most "
                f"concentrated head ({block}, head {strongest['head']}) gives its favourite "
                f"key, {strongest['key']}, {share} of the attention on average, below the "
                f"{SINK_THRESHOLD:.0%} that makes an attention sink.")
    text = (f"In {block}, head {strongest['head']} sends {share} of every query's attention, "
            f"on average, to one key: {strongest['key']}. Such a key is an **attention sink**: "
            "the head copies nearly the same value into every token, whatever the image shows "
            "there. Point at or tap the other heads of this block to compare.")
    if overview["sinks"]["left_out"]:
        text += (" A sink on a patch would light up that patch in attention rollout, so the "
                 "rollout here starts after it.")
    return text


def _rollout_start(overview: dict) -> str:
    """Where rollout starts, with the start=auto rule said in words (not cited)."""
    left_out = overview["sinks"]["left_out"]
    if not left_out:
        return "It starts at the first block."
    first = overview["rollout"]["blocks"][0]
    sink_step = step_number("Attention sinks")
    last = left_out[-1]["block"]  # the rule ends the left-out run at a sink block
    blocks = (f"block {last} is" if len(left_out) == 1
              else f"blocks {left_out[0]['block']}–{last} are")
    return (f"Here it starts at block {first}: {blocks} left out, because block {last} has a "
            f"head that is an attention sink on a patch (step {sink_step}), which rollout "
            "would carry forward as one bright patch whatever the image shows. The rule: "
            "start one block after the last such block in the first half of the blocks.")


def _cls_sentence(late: bool, dims: dict) -> str:
    if late:
        return (f"The first {dims['self_blocks']} blocks have no [CLS]; for them the map is "
                "the mean attention row of all patches. In the class-attention blocks at the "
                "end, the map is what [CLS] attends to.")
    return ("In every block [CLS] attends to all tokens and adds what it finds to itself: the "
            "map is its attention row.")


def _daam_sentence(overview: dict) -> str:
    daam = overview["daam"]
    if "unavailable" in daam:
        return ("DAAM needs a [CLS] query, and this model has none: " + daam["unavailable"]
                + " The map shows attention instead.")
    return (f"Attention is the same whatever the class. **DAAM** (Liao et al.) keeps what "
            f"[CLS] gathers in each block apart, channel by channel, weighs the channels by "
            f"the gradient of the score for **{daam['target']}**, and adds the blocks up. "
            "Press ▶ to watch the decision's evidence accumulate.")


def _summary_sentence(overview: dict) -> str:
    width, names = overview["dims"]["width"], overview["layout"]["prefix_names"]
    if "[DIST]" in names:
        return (f"The image's summary is two tokens, [CLS] and [DIST], of **{width} numbers** "
                "each.")
    pooling = {s["id"]: s for s in overview["stages"]}["feature"]["sentence"]
    return f"The image's summary is {pooling}: **{width} numbers**."


def _feature_sentence(prediction: dict, names: list[str]) -> str:
    if prediction["head"] == "knn":
        return ("This model learned without labels (self-supervised), so the feature is its "
                "whole output; the stripe shows its numbers, red positive and blue negative.")
    classes = prediction["output_shape"][-1]
    if "[DIST]" in names:
        return (f"Each goes through its own linear layer to {classes} class scores, and the "
                "two lists of scores are averaged.")
    return f"A linear layer turns it into {classes} class scores."


def _head_sentence(prediction: dict) -> str:
    if prediction["head"] == "knn":
        return (f"Classes come from a memory bank of labelled examples: the {prediction['k']} "
                f"entries most similar to this feature vote, weighted by exp(cos/"
                f"{prediction['temperature']}).")
    return "Softmax turns the class scores into probabilities that sum to 1."


# --- resolving steps for the component ----------------------------------------------------------

def page_titles() -> dict[str, str]:
    return {name: title for name, title, _ in PAGE_LIST}


def centre_patch(overview: dict) -> int:
    """The patch in the middle of the grid: the example query of the tour (a centre crop
    usually puts the subject there; nothing is claimed about it)."""
    return capture_centre_patch(tuple(overview["layout"]["grid"]))


def longest_patch(overview: dict) -> int:
    marks = overview["high_norm"]
    return (marks["flagged"] or [marks["largest"]])[0]["patch"]


def resolve_steps(overview: dict, switch: Switch, live: bool = True) -> list[dict]:
    """Every step with its text filled in and its controls as numbers for this model; a
    step that switches its head off carries the result (`switch`), so it shows without a
    round trip, also in an offline lesson (`live` False: the text says so)."""
    switch = functools.cache(switch)  # the facts and the steps ask for the same heads
    facts = tour_facts(overview, switch, live)
    titles = page_titles()
    daam_ok = "unavailable" not in overview["daam"]
    resolved = []
    for step in TOUR:
        block = resolve_block(step.block, overview)
        info = overview["blocks"][block]
        patch = {"centre": centre_patch(overview), "longest": longest_patch(overview),
                 None: None}[step.patch]
        if patch is not None and info["kind"] == "class":
            patch = None  # only [CLS] queries a class-attention block
        overlay = step.overlay if daam_ok or step.overlay != "daam" else "attention"
        head = resolve_head(step.head, overview, block)
        resolved.append({
            "title": step.title, "text": step.text.format(**facts), "stage": step.stage,
            "block": block, "head": head, "patch": patch,
            "overlay": overlay, "spot": list(step.spot),
            "page": {"file": step.page, "title": titles[step.page]},
            "switch": switch(block, head) if step.switch_off and head >= 0 else None})
    return resolved


def step_from_query(value: str | None) -> tuple[int | None, str | None]:
    """The tour step a `?tour=N` deep link asks for: (step or None, a message when the
    value is not a step)."""
    if value is None or value == "":
        return None, None
    count = len(TOUR)
    try:
        step = int(value)
    except ValueError:
        return None, (f"{literal.code('tour=' + value)} is not a step number; the tour has steps "
                      f"1-{count}.")
    if not 1 <= step <= count:
        return None, f"The tour has steps 1-{count}; there is no step {step}."
    return step, None
