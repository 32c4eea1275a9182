"""The ViT Explainer's guided tour: ordered steps from pixels to the prediction, as data.

Each step has an id and names the controls it sets, in the component's own vocabulary
(checked by the tests): the pipeline stage to open, the block, the head, the query patch,
the map drawn over the image, the parts of the page it points at (`targets`: the tour
places the view so each is on screen beside its box) and the deeper page (1-9) on its
topic. Texts are templates filled with facts read from the live overview payload
(`tour_facts`), so "this image became 256 patch tokens + 1 [CLS]" is true of the model
and image on screen; a step's `lead` is the one line its compact box shows. What the
browser needs besides words comes as data: the patches a step names (numbers) and the
measured numbers it quotes, each labelled on a part it points at. `**bold**` and the
glossary's marks (`⟦term⟧`, dashboard/explainer/glossary.py) are the only markup; the
component escapes the rest.

Importable without running the app (no streamlit here).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from dashboard import literal
from dashboard.explainer.glossary import explain_first_uses, terms_of
from dashboard.page_list import PAGE_LIST
from xai_core.capture import centre_patch as capture_centre_patch
from xai_core.lessons.explainer import decode, head_switch
from xai_core.lessons.tour_choices import (TOUR_SWITCHES, head_distances, kept_heads,
                                           nearest_head, resolve_block, resolve_head,
                                           sink_heads, switched_heads)
from xai_core.analysis.attention_sinks import SINK_THRESHOLD
from xai_core.analysis.token_marks import HIGH_NORM_GAP, HIGH_NORM_RATIO

# centre: the patch in the middle of the grid; longest: the patch token with the largest
# norm / median (a flagged high-norm token when there is one, xai_core.analysis.token_marks)
PATCHES = (None, "centre", "longest")
# what a step can point at: the component's parts, each a `data-part` of its DOM
PARTS = ("pipeline", "image", "caption", "sequence", "overlay", "heads", "player", "detail",
         "steps", "matrix", "qk", "answer", "readout", "prediction")
# Texts say "point at or tap" where they ask for a hover: they read right with a mouse and on
# a touch screen.


@dataclass(frozen=True, kw_only=True)
class Step:
    id: str  # names the step for code, tests and links (a title may be reworded)
    title: str
    lead: str  # one line: what the compact tour box shows
    text: str  # the rest, shown after the lead under "more"
    stage: str
    block: str  # a choice of xai_core/lessons/tour_choices.BLOCKS
    head: str  # a choice of tour_choices.HEADS
    patch: str | None  # the patch it pins
    overlay: str
    targets: tuple[str, ...]  # the parts it points at: on screen, whole, beside the box
    page: str  # a file of dashboard/page_list.py
    # the step switches its head off (the model runs again without it: `head_switch`)
    switch_off: bool = False
    # a patch its words name on the picture besides the pinned one (the sink's key)
    names: str | None = None


# (block, head) -> `xai_core.lessons.explainer.head_switch` of that one head
Switch = Callable[[int, int], dict]


def switching(step_id: str) -> dict:
    """A step that switches a head off: its id, block and head as xai_core declares them
    (`tour_choices.TOUR_SWITCHES`, which page 0's view and the gallery warm-up run)."""
    block, head = TOUR_SWITCHES[step_id]
    return {"id": step_id, "block": block, "head": head, "switch_off": True}


def switcher(model, image, head) -> Switch:
    """The tour's head switch for the model, picture and head on screen."""
    return lambda block, h: head_switch(model, image, head, [(block, h)])


TOUR: list[Step] = [
    Step(id="pipeline", title="One picture in, one answer out",
         lead="One run of this model on this picture, from pixels to its answer: {top_answer}.",
         text="{random_note}The model is {model}. Every shape and number on this page comes "
              "from it and this very run. Move with Next and Back, or with the ← → keys; point at or tap "
              "anything at any time.",
         stage="image", block="last", head="mean", patch=None, overlay="attention",
         targets=("pipeline",), page="1_tokenization.py"),
    Step(id="pixels", title="What the model sees",
         lead="The model sees {H}×{W} pixels, 3 colours each: **{pixels} numbers**, nothing "
              "else.",
         text="{picture_sentence} No file name, no caption: only the red, green and blue "
              "of every pixel.",
         stage="image", block="last", head="mean", patch=None, overlay="attention",
         targets=("detail",), page="1_tokenization.py"),
    Step(id="patches", title="Cut into patches",
         lead="The picture is cut into **{patches} patches** of {P}×{P} pixels, a "
              "{rows}×{cols} grid.",
         text="A ⟦transformer⟧ cannot take a picture whole, so the picture becomes a row "
              "of tiles: {H}×{W} pixels in tiles of {P}×{P} make {patches}. Point at or "
              "tap a tile: it is outlined and named beside the picture, and the Patches panel "
              "further down shows it enlarged, pixel by pixel.",
         stage="patches", block="first", head="mean", patch="centre", overlay="attention",
         targets=("image", "caption"), page="1_tokenization.py"),
    Step(id="tokens", title="Patches become tokens",
         lead="Each patch becomes a **token**, a list of {D} numbers: {token_sentence}.",
         text="One learned ⟦matrix⟧ E ({flat}×{D}) turns each patch's {P}·{P}·3 = {flat} "
              "numbers into {D}. {prefix_sentence} In the token strip above the picture, "
              "point at or tap a token to find its patch, or a patch to find its token.",
         stage="tokens", block="first", head="mean", patch="centre", overlay="attention",
         targets=("sequence", "image"), page="1_tokenization.py"),
    Step(id="positions", title="Each token is told where it was",
         lead="A learned **⟦position|position vector⟧** is added to every token: the model "
              "learns where each patch was.",
         text="Attention on its own treats the tokens as an unordered set: shuffle the "
              "patches and it computes the same thing. So each place in the grid has its own "
              "list of numbers (a table of {pos_table}), added to the token of the patch "
              "there before the first block. These lists are not drawn themselves: the small "
              "map beside this text shows each patch token's ⟦norm|length ‖x‖⟧ with its "
              "position vector added. Page 1, view 4, shows which places the model learned "
              "to treat as alike. Blocks and heads are numbered from 0 here, as on the other "
              "pages.",
         stage="tokens", block="first", head="mean", patch="centre", overlay="attention",
         targets=("detail",), page="1_tokenization.py"),
    Step(id="block", title="Inside a block",
         lead="{blocks_lead}: in each, tokens share information (**attention**), then each "
              "is reworked alone (⟦mlp⟧).",
         text="Each result is added back onto the block's input. The ten cards show each "
              "step with its real shape; each small map shows every patch token's "
              "⟦norm|length ‖x‖⟧ after that step.",
         # head 0, as the next two steps: the mean of block 0's heads can be a sink's patch
         stage="blocks", block="first", head="first", patch="centre", overlay="attention",
         targets=("steps",), page="2_self_attention.py"),
    Step(id="qk", title="Queries and keys",
         lead="In each head every token makes a **query** (what am I looking for?) and a "
              "**key** (what do I offer?).",
         text="Each is {d} numbers: {heads} heads × {d} = {D}. Their match is the "
              "⟦dot⟧ of the two lists, divided by the square root of {d} ({sqrt_d}) so "
              "that longer lists do not give larger scores. Below: the query of the marked "
              "patch, the key it matches best, and the {d} products that add up to the score.",
         stage="blocks", block="first", head="first", patch="centre", overlay="attention",
         targets=("qk",), page="2_self_attention.py"),
    Step(id="softmax", title="Scores become attention",
         lead="⟦softmax|Softmax⟧ turns one query's {tokens_block} scores into shares that "
              "add up to 1: its attention.",
         text="Point at or tap a patch of the picture: its row of shares is drawn over the "
              "picture at once, and the caption says how much of it goes to the extra tokens "
              "and how much to the patches. Does the marked patch look mostly at its "
              "neighbours in this early block, or far away? The attention ⟦matrix⟧ further "
              "down holds every row.",
         stage="blocks", block="first", head="first", patch="centre", overlay="attention",
         targets=("image", "caption"), page="2_self_attention.py"),
    Step(id="heads", title="Many heads ask different questions",
         lead="Each block has {heads} heads, each with its own queries and keys: do they look "
              "at the same places?",
         text="Point at or tap the head chips. In {middle_label}, head {sharpest} has the "
              "most focused {middle_row}: its attention is packed into the fewest patches. The "
              "heads' outputs are put side by side ({heads}×{d} = {D} numbers) and mixed by "
              "the ⟦w_o⟧.",
         stage="blocks", block="middle", head="mean", patch=None, overlay="attention",
         targets=("image", "heads"), page="4_rollout_heads.py"),
    Step(id="sinks", title="Attention sinks",
         lead="{sink_lead}",
         text="{sink_sentence}",
         stage="blocks", block="sink", head="sink", patch=None, overlay="attention",
         targets=("image", "heads"), page="4_rollout_heads.py", names="sink"),
    Step(**switching("switch_sink"), title="Switch that head off",
         lead="{sink_switch_lead}",
         text="A map says where a head looks, not whether the answer needs it. "
              "{sink_switch_sentence} {two_scores} {switch_how} Page 9 switches every head "
              "off in turn.",
         stage="blocks", patch=None, overlay="attention",
         targets=("heads", "answer"), page="9_interventions.py"),
    # after the sinks: the first block's mean of heads can be one sink patch, so distance is
    # taught on a head that is not a sink, and the step says which heads it leaves out
    Step(id="distance", title="Near and far: how far the heads look",
         lead="{near_head_lead}",
         text="{near_head_sentence} Tap or click a patch to pin it and drag the block slider "
              "beside the picture: how far does its attention reach? {distance_sentence} A "
              "⟦cnn⟧ cannot mix near and far in one layer: its view grows a little with every "
              "layer.",
         stage="blocks", block="first", head="nearest", patch="centre", overlay="attention",
         targets=("image", "caption", "player"), page="3_attention_distance.py"),
    Step(id="residual", title="The residual stream",
         lead="Each block **adds** to its tokens: {growth_lead}.",
         text="A block never replaces its input: x + attention(x), then x + ⟦mlp|MLP⟧(x). This "
              "running sum is the **⟦residual|residual stream⟧**. The chart shows the tokens' "
              "⟦norm|lengths ‖x‖⟧ after every block: {growth_sentence} {outlier_sentence}",
         stage="norm", block="last_self", head="mean", patch="longest", overlay="attention",
         targets=("detail",), page="4_rollout_heads.py"),
    Step(id="cls", title="What the summary token gathers, block by block",
         lead="{cls_lead}",
         text="{cls_sentence} Press ▶ beside the picture to watch it block by block, or drag "
              "the block slider: where does it spread out, and where does it settle?",
         stage="blocks", block="last", head="mean", patch=None, overlay="attention",
         targets=("image", "player"), page="4_rollout_heads.py"),
    Step(id="rollout", title="Rollout: attention through all blocks",
         lead="**⟦rollout|Attention rollout⟧** follows attention through all the blocks: "
              "press ▶ to watch it grow.",
         text="One block's attention ignores the blocks before it and each token's own path "
              "around attention. Rollout, from a 2020 paper by Abnar and Zuidema, averages "
              "the heads, adds each "
              "token's own path, scales each row to add up to 1 and multiplies the blocks in "
              "order. {rollout_start} It grows up to {rollout_last}.",
         stage="blocks", block="last_self", head="mean", patch=None, overlay="rollout",
         targets=("image", "overlay"), page="4_rollout_heads.py"),
    Step(id="daam", title="DAAM: where the decision is built",
         lead="{daam_lead}",
         text="{daam_sentence}",
         stage="blocks", block="last", head="mean", patch=None, overlay="daam",
         targets=("image", "overlay", "player"), page="6_daam_flow.py"),
    Step(id="feature", title="From tokens to one feature",
         lead="A final ⟦layernorm⟧ rescales every token; the picture's summary is "
              "**{width} numbers**.",
         text="{summary_sentence} {feature_sentence}",
         stage="feature", block="last", head="mean", patch=None, overlay="attention",
         targets=("detail",), page="6_daam_flow.py"),
    Step(id="prediction", title="The prediction",
         lead="{prediction_lead}",
         text="{head_sentence} {prediction_sentence} {answer_note}{fair_test}",
         stage="top5", block="last", head="mean", patch=None, overlay="attention",
         targets=("prediction",), page="7_comparison.py"),
    Step(id="readout", title="What each block would answer",
         lead="Stop the model early: the green bar under each block is {readout_label}'s "
              "score read out there.",
         text="Take the tokens after block k, apply the final ⟦layernorm|norm⟧ and the head, "
              "as if the later blocks were not there: the **read-out**, which researchers call "
              "the ⟦logit_lens⟧. {readout_sentence}",
         stage="top5", block="last", head="mean", patch=None, overlay="attention",
         targets=("readout",), page="9_interventions.py"),
    Step(id="looking", title="Looking is not the same as deciding",
         lead="Attention shows where information was **collected**, not which pixels "
              "**changed** the answer.",
         text="The ⟦mlp|MLPs⟧ and ⟦layernorm|norms⟧ transform what was gathered, and "
              "different attention patterns can give the same prediction. Maps for one class "
              "built from the ⟦gradient⟧ (⟦gradcam⟧) and tests that delete the top-ranked "
              "pixels and watch the score drop answer that second question.",
         stage="blocks", block="last", head="mean", patch=None, overlay="attention",
         targets=("image",), page="5_gradcam.py"),
    Step(**switching("test_claim"), title="Test a claim",
         lead="{sharp_switch_lead}",
         text="Head {sharpest} of {middle_label} has the most focused attention (step "
              "{heads_step}): a map would call it important. {sharp_switch_sentence} "
              "{compare_sentence} {switch_yourself} Page 9 ranks every head by what the answer "
              "loses without it, beside what the maps claim.",
         stage="blocks", patch=None, overlay="attention",
         targets=("heads", "answer"), page="9_interventions.py"),
]
STEP_IDS = [step.id for step in TOUR]


# --- facts from the live payload ---------------------------------------------------------------

def share_label(share: float) -> str:
    """A class's share as the component's bars print it (format.js `pct`): one decimal from
    10 %, two below, so a number the tour quotes reads the same on the bar."""
    return f"{100 * share:.{1 if share >= 0.1 else 2}f}%"


def percent(share: float) -> str:
    """A share of attention in words: never "100%" for a share that is not all of it (the
    component's heads note prints it the same way, controls.js `attentionShare`)."""
    return "over 99.9%" if share >= 0.9995 else f"{100 * share:.1f}%"


def whole(value: float) -> int:
    """Rounded as the browser's Math.round rounds (halves up), so a number the tour quotes
    is the one the component labels."""
    return math.floor(value + 0.5)


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


def tour_facts(overview: dict, switch: Switch, live: bool = True,
               second_opinion: dict | None = None) -> dict[str, str]:
    """The numbers the steps quote, from the overview payload of the image on screen and
    the two heads the tour switches off (`switch`); `live`: in the app (False: an offline
    lesson, where nothing runs again); `second_opinion`: the CNN's ImageNet answer shown
    beside a picture the k-NN bank does not know (`second_opinion` in the component)."""
    return {**model_facts(overview, live), **picture_facts(overview, switch, second_opinion)}


def model_facts(overview: dict, live: bool = True) -> dict[str, str]:
    """The facts that depend on the model only: the same for every picture."""
    layout, dims = overview["layout"], overview["dims"]
    (height, width), (ph, _) = layout["input"], layout["patch"]
    rows, cols = layout["grid"]
    names = layout["prefix_names"]
    late = layout["cls_joins_late"]
    middle = resolve_block("middle", overview)
    blocks = overview["blocks"]
    return {
        "model": overview["model"]["label"], "H": str(height), "W": str(width),
        "pixels": f"{height * width * 3:,}", "P": str(ph), "rows": str(rows), "cols": str(cols),
        "patches": str(layout["patches"]), "flat": str(ph * ph * 3), "D": str(dims["width"]),
        "width": str(dims["width"]),
        "heads": str(dims["heads"]), "d": str(dims["head_dim"]),
        "sqrt_d": f"{math.sqrt(dims['head_dim']):.3g}",
        "tokens_block": str(blocks[0]["nk"]),
        "prefix_sentence": _prefix_sentence(names, late, dims),
        "token_sentence": _token_sentence(layout, names, late),
        "pos_table": "×".join(map(str, dims["pos_table"])) if dims["pos_table"] else "none",
        "blocks_lead": _blocks_lead(dims, late),
        "middle_label": blocks[middle]["label"].lower(),
        "middle_row": "⟦cls⟧ row" if blocks[middle]["prefix"] else "mean patch row",
        "switch_how": SWITCH_HOW[live], "switch_yourself": SWITCH_YOURSELF[live],
        "cls_lead": _cls_sentences(late, dims)[0],
        "cls_sentence": _cls_sentences(late, dims)[1],
        "rollout_last": blocks[resolve_block("last_self", overview)]["label"].lower(),
        "summary_sentence": _summary_sentence(overview),
        "feature_sentence": _feature_sentence(overview["prediction"], names),
        "head_sentence": _head_sentence(overview["prediction"]),
        "heads_step": str(step_number("heads")),
    }


def picture_facts(overview: dict, switch: Switch,
                  second_opinion: dict | None = None) -> dict[str, str]:
    """The facts of the picture on screen (the model in the learner's browser computes
    these itself for their photo: dashboard/static/explainer/model/tour-steps.js)."""
    prediction = overview["prediction"]
    middle = resolve_block("middle", overview)
    random = overview["model"]["random"]
    return {
        "random_note": ("The weights are random, so that answer means nothing; the shapes "
                        "are real. " if random else "" if prediction["open_set"]["known"] else
                        "A forced guess, because this picture looks like none of what the "
                        "model knows. "),
        "picture_sentence": _picture_sentence(overview),
        "sharpest": str(resolve_head("sharpest", overview, middle)),
        "growth_lead": _growth(overview)[0],
        "growth_sentence": _growth(overview)[1],
        "outlier_sentence": _outlier_sentence(overview),
        "sink_lead": _sink_sentences(overview)[0],
        "sink_sentence": _sink_sentences(overview)[1],
        "distance_sentence": _distance_sentence(overview),
        "near_head_lead": _near_head_lead(overview),
        "near_head_sentence": _near_head_sentence(overview),
        "rollout_start": _rollout_start(overview),
        "daam_lead": _daam_sentences(overview)[0],
        "daam_sentence": _daam_sentences(overview)[1],
        "top_answer": _top_answer(prediction),
        "prediction_lead": _prediction_lead(overview),
        "prediction_sentence": _prediction_sentence(prediction),
        "answer_note": _answer_note(overview),
        "fair_test": _fair_test(overview, second_opinion),
        "readout_label": f"**{short(_readout_label(overview))}**",
        "readout_sentence": _readout_sentence(overview),
        **_switch_facts(overview, switch),
    }


def browser_tour(overview: dict) -> dict:
    """What the model in the learner's browser needs to write the tour for their photo
    (dashboard/static/explainer/model/tour-steps.js): the steps and the glossary as data, the
    facts that depend on the model only (from a recorded picture's overview of the same
    model), the fixed sentences and thresholds the picture's facts use. Switches run in the
    browser, so the tour speaks as the app does (`live`)."""
    from dataclasses import asdict

    from dashboard.explainer.glossary import GLOSSARY

    return {"steps": [asdict(step) for step in TOUR],
            "glossary": {key: {"term": t.term, "words": t.words, "taught": t.taught}
                         for key, t in GLOSSARY.items()},
            "pages": page_titles(), "model_facts": model_facts(overview, live=True),
            "two_scores": TWO_SCORES, "teach": TEACH, "sink_threshold": SINK_THRESHOLD,
            "high_norm_ratio": HIGH_NORM_RATIO, "high_norm_gap": HIGH_NORM_GAP}


def step_number(step_id: str) -> int:
    return 1 + STEP_IDS.index(step_id)


def _switch_facts(overview: dict, switch: Switch) -> dict[str, str]:
    chosen = switched_heads(overview)
    sink, sharp = chosen["switch_sink"], chosen["test_claim"]
    results = {pair: switch(*pair) for pair in {sink, sharp}}
    knn = overview["prediction"]["head"] == "knn"
    return {"sink_switch_lead": _switch_lead(overview, sink, results[sink]),
            "sharp_switch_lead": _switch_lead(overview, sharp, results[sharp]),
            "sink_switch_sentence": _switch_sentence(overview, sink, results[sink]),
            "sharp_switch_sentence": _switch_sentence(overview, sharp, results[sharp]),
            "two_scores": TWO_SCORES if knn else "",
            "compare_sentence": _compare_sentence(sink, sharp, results)}


# A k-NN head has two numbers per class that a switch moves, and they can move apart (DINOv2
# on chelsea, block 0 head 5 off: the cat's class score 0.967 -> 0.968, its bar 97.4% ->
# 97.0%); the answer panel shows both, and the tour says which is which.
TWO_SCORES = ("The answer panel shows both numbers: the k-NN class score, and the class's "
              "share of the ⟦knn⟧, its bar. They need not move together.")


def _where(overview: dict, pair: tuple[int, int]) -> str:
    block, head = pair
    return f"head {head} of {overview['blocks'][block]['label'].lower()}"


def _target_share(result: dict, which: str) -> float | None:
    """The target class's share of the answer before or after a switch (None: not in the
    top five)."""
    label = result["target"]["label"]
    return next((t["share"] for t in result[which] if t["label"] == label), None)


def switch_quotes(result: dict, knn: bool) -> list[str]:
    """The numbers a switching step quotes, as the answer panel labels them: the class
    score before and after and, for a k-NN head, the class's share of the vote (answer.js)."""
    if "error" in result:
        return []
    target = result["target"]
    quotes = [f"{target['before']:.3f}", f"{target['after']:.3f}"]
    shares = [_target_share(result, which) for which in ("before", "after")]
    if knn and None not in shares:
        quotes += [share_label(share) for share in shares]
    return quotes


def short(label: str) -> str:
    """A class name as a one-line lead names it: ImageNet's first synonym ("African
    crocodile" of "African crocodile, Nile crocodile, Crocodylus niloticus")."""
    return label.split(",")[0]


def _switch_lead(overview: dict, pair: tuple[int, int], result: dict) -> str:
    """One line: which head is off and what happened to the answer's numbers."""
    where = _where(overview, pair)
    if "error" in result:
        return f"{where[0].upper()}{where[1:]} cannot be switched off here."
    target = result["target"]
    knn = overview["prediction"]["head"] == "knn"
    score = "⟦knn|k-NN⟧ ⟦class_score⟧" if knn else "probability"
    text = (f"{where[0].upper()}{where[1:]} off: {short(target['label'])}'s {score} "
            f"{target['before']:.3f} → {target['after']:.3f}")
    quotes = switch_quotes(result, knn)
    if len(quotes) == 4:
        text += f", its share of the vote {quotes[2]} → {quotes[3]}"
    return text + "."


def _switch_sentence(overview: dict, pair: tuple[int, int], result: dict) -> str:
    """What switching one head off did to the answer, in the tour's words."""
    where = _where(overview, pair)
    if "error" in result:
        return f"{where[0].upper()}{where[1:]} cannot be switched off here: {result['error']}"
    before, after, target = result["before"][0], result["after"][0], result["target"]
    text = (f"Here {where} is switched off (its output set to 0 before the ⟦w_o⟧) and the "
            "model runs again: ")
    text += (f"the answer stays **{after['label']}**" if after["label"] == before["label"]
             else f"the answer changes from **{before['label']}** to **{after['label']}**")
    text += (f"; the class score of {target['label']} goes from {target['before']:.3f} to "
             f"{target['after']:.3f}: it {target['words']}.")
    if overview["model"]["random"]:
        text += " The weights are random, so this says nothing about a trained model."
    return text


def _compare_sentence(sink: tuple[int, int], sharp: tuple[int, int], results: dict) -> str:
    """The focused head's effect beside the sink head's (step "Switch that head off"), and
    whether either carries the answer alone."""
    step = step_number("switch_sink")
    if sink == sharp:
        return f"It is also the head switched off in step {step}."
    if any("error" in results[pair] for pair in (sink, sharp)):
        return ""
    target = results[sharp]["target"]
    text = (f"With the ⟦sink⟧ head of step {step} off, the score "
            f"{results[sink]['target']['words']}; with this focused head off, it "
            f"{target['words']}.")
    largest = (max(abs(results[pair]["target"]["drop"]) for pair in (sink, sharp))
               / max(abs(target["before"]), 1e-12))
    if largest < 0.05:
        text += (f" Both changes are under 5% of the score itself ({target['before']:.3f}): "
                 "on this picture neither head carries the answer alone.")
    return text


def _readout_label(overview: dict) -> str:
    found = overview["readout"]
    return found.get("label") or overview["prediction"]["top"][0]["label"]


def _holds_itself(overview: dict) -> bool:
    """The k-NN bank holds this very picture (its nearest entry is the picture itself)."""
    neighbours = overview["prediction"].get("neighbours") or []
    return bool(neighbours) and neighbours[0]["similarity"] > 0.999


# What would make a fair test of a k-NN head when the bank holds the picture or knows nothing
# like it (issue 40: the tour sent the learner to their own photo, where an 8-picture bank
# calls everything unknown).
TEACH = ("On Home, teach the ⟦knn|k-NN⟧ two or three labelled photos of one kind of thing (\"Teach "
         "the k-NN a new class\"), then open another photo of that kind here: the vote then "
         "has to recognise it, not find it.")


def _fair_test(overview: dict, second_opinion: dict | None) -> str:
    """What would make a fair test on the picture on screen (k-NN heads only)."""
    prediction = overview["prediction"]
    if prediction["head"] != "knn" or overview["model"]["random"]:
        return ""
    if _holds_itself(overview):
        return "A fair test on this picture: " + TEACH[0].lower() + TEACH[1:]
    if prediction["open_set"]["known"]:
        return ""
    text = (f"The bank knows only {prediction['classes']} kinds of thing. For a fair test, "
            + TEACH[0].lower() + TEACH[1:])
    if second_opinion:
        text += (f" Or compare with a model trained on the {second_opinion['classes']} "
                 f"classes of ⟦imagenet⟧: beside the bars, {second_opinion['model']} answers **{second_opinion['label']}** "
                 f"({share_label(second_opinion['share'])}).")
    return text


def _readout_sentence(overview: dict) -> str:
    found = overview["readout"]
    if "unavailable" in found and overview["layout"]["cls_joins_late"]:
        return ("Not here: in this model's last blocks only the summary token asks, so the "
                "tokens after an early block cannot go to the head as they are.")
    if "unavailable" in found:
        return f"Not here: {found['unavailable']}"
    if overview["model"]["random"]:
        return "The weights are random, so the read-outs mean nothing here."
    first, blocks = found["first_block"], found["blocks"]
    if _holds_itself(overview):
        return ("Each block is compared with a ⟦bank⟧ of the gallery's features at that "
                "block, and the banks hold this very picture: its own views are the nearest "
                f"entries, so the read-out says {found['label']} from block {first} on, which "
                "tests nothing. It shows where an answer forms on a picture the banks do not "
                f"hold of one of their {_kinds(overview)}.")
    text = f"From block {first} on, every read-out's top class is {found['label']}"
    if first > 0:
        text += f"; block 0 would answer {blocks[0]['label']}"
    if found["bank"]:
        text += (" (each block is compared with a ⟦bank⟧ of the gallery's features at that "
                 "block)")
    return text + "."


def _kinds(overview: dict) -> str:
    """The k-NN bank's classes in words: "8 classes (cat, flower, ...)"."""
    names = overview["prediction"].get("bank_classes") or []
    return f"{len(names)} classes ({', '.join(names)})" if names else "classes"


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
                f"** pixels covering {share_label(picture['kept'])} of the picture (the box in "
                "the Image panel). The rest never reaches the model.")
    return f"{text} is resized to **{height}×{width}** pixels."


def _median_patch_norm(overview: dict, values) -> float:
    return float(np.median(decode(values).astype(np.float64)[-overview["layout"]["patches"]:]))


def growth(overview: dict) -> tuple[float, float, dict]:
    """The median patch token's length entering the first block and after the last block
    that still has patch tokens, and that block (the residual chart labels both ends)."""
    patches = overview["layout"]["patches"]
    last = [b for b in overview["blocks"] if b["nq"] >= patches][-1]
    return (_median_patch_norm(overview, overview["embedding_norms"]),
            _median_patch_norm(overview, last["norm_out"]), last)


def _growth(overview: dict) -> tuple[str, str]:
    """How the median patch token's length changes from the embeddings to the output of
    the last block that still has patch tokens: (the lead's words, the sentence)."""
    before, after, last = growth(overview)
    where = f"from the first block's input to the output of {last['label'].lower()}"
    if abs(after - before) <= 0.02 * before:
        return (f"the median patch token's length stays at about {before:.3g}",
                f"the median patch token stays at about {before:.3g} {where}.")
    verb = "grows" if after > before else "shrinks"
    return (f"the median patch token's length {verb} from {before:.3g} to {after:.3g}",
            f"the median patch token {verb} from {before:.3g} to {after:.3g} {where}.")


def _top_answer(prediction: dict) -> str:
    top = prediction["top"][0]
    if prediction["open_set"]["known"]:
        return f"**{short(top['label'])}** ({share_label(top['probability'])})"
    return f"a forced guess, **{short(top['label'])}**"


def _prediction_lead(overview: dict) -> str:
    prediction = overview["prediction"]
    top = prediction["top"]
    if not prediction["open_set"]["known"]:
        return ("A forced guess: this picture looks like none of what the model knows, but it "
                "must name one of its classes.")
    vote = "The vote" if prediction["head"] == "knn" else "The answer"
    second = (f", then {short(top[1]['label'])} {share_label(top[1]['probability'])}"
              if len(top) > 1 else "")
    caveat = (", but the bank holds this very picture"
              if _holds_itself(overview) and not overview["model"]["random"] else "")
    return (f"{vote}: **{short(top[0]['label'])}** {share_label(top[0]['probability'])}{second}"
            f"{caveat}.")


def prediction_quotes(overview: dict, second_opinion: dict | None = None) -> list[str]:
    """The numbers the prediction step quotes, as the Prediction panel labels them."""
    prediction = overview["prediction"]
    quotes = []
    if prediction["open_set"]["known"]:
        quotes += [share_label(t["probability"]) for t in prediction["top"][:2]]
    if _holds_itself(overview) and not overview["model"]["random"]:
        quotes.append(f"{prediction['neighbours'][0]['similarity']:.3f}")
    if second_opinion and _fair_test(overview, second_opinion):
        quotes.append(share_label(second_opinion["share"]))
    return quotes


def _prediction_sentence(prediction: dict) -> str:
    """The answer with its share, or, for a picture unlike everything the model knows,
    that fact instead of a percentage that would read as confidence."""
    top = prediction["top"]
    found = prediction["open_set"]
    if not found["known"]:
        return (f"Here the picture looks like **none of what the model knows**: "
                f"{found['why']}. The model must still name one of its classes "
                f"({top[0]['label']}), so that is a guess, not an answer.")
    second = (f"{top[1]['label']} ({share_label(top[1]['probability'])})" if len(top) > 1
              else "nothing else")
    return (f"Here: **{top[0]['label']}** ({share_label(top[0]['probability'])}), then "
            f"{second}.")


def _answer_note(overview: dict) -> str:
    if overview["model"]["random"]:
        return "The weights are random, so this answer means nothing. "
    if _holds_itself(overview):
        similarity = overview["prediction"]["neighbours"][0]["similarity"]
        return ("The bank holds this very picture (its nearest entry has "
                f"⟦cosine|cosine similarity⟧ {similarity:.3f}), so this is no fair test of "
                "recognition. ")
    return ""


def _prefix_sentence(names: list[str], late: bool, dims: dict) -> str:
    if late:
        return (f"This model puts no token in front yet: its ⟦cls⟧ token joins only in the "
                f"{dims['class_blocks']} class-attention blocks at the end.")
    if not names:
        return "This model puts no extra token in front of the patches."
    described = []
    if "[CLS]" in names:
        described.append("⟦cls⟧")
    if "[DIST]" in names:
        described.append("⟦dist⟧")
    registers = [n for n in names if n not in ("[CLS]", "[DIST]")]
    if registers:
        listed = (registers[0] if len(registers) == 1
                  else f"{registers[0]}…{registers[-1]}")
        described.append(f"{listed}, {len(registers)} "
                         f"⟦register|register token{'s' if len(registers) > 1 else ''}⟧")
    return "In front go " + "; ".join(described) + "."


def _token_sentence(layout: dict, names: list[str], late: bool) -> str:
    if late or not names:
        return f"**{layout['patches']} patch tokens**"
    return f"**{layout['tokens']} tokens: {layout['patches']} patches + {', '.join(names)}**"


def _blocks_lead(dims: dict, late: bool) -> str:
    if late:
        return f"{dims['self_blocks']} blocks, then {dims['class_blocks']} for the summary token"
    return f"{dims['blocks']} blocks in a row"


def _outlier_sentence(overview: dict) -> str:
    marks, cols = overview["high_norm"], overview["layout"]["grid"][1]
    where = lambda t: (f"row {t['patch'] // cols}, column {t['patch'] % cols}: "  # noqa: E731
                       f"{t['ratio']:g}× the median in block {t['block']}")
    rule = (f"a patch stands apart when its list of numbers is at least {HIGH_NORM_RATIO:g}× "
            f"as long as the median patch's and {HIGH_NORM_GAP:g}× as long as every unmarked "
            "one")
    study = ("a 2024 study by Darcet and colleagues found large models like this one "
             "re-using a few patches as ⟦scratch⟧")
    if not marks["flagged"]:
        return (f"The marked patch is the longest ({where(marks['largest'])}) but does not "
                f"stand apart ({rule}). {study[0].upper()}{study[1:]}; those stand far apart.")
    count = len(marks["flagged"])
    return (f"{count} patch token{'s' if count > 1 else ''} stand{'' if count > 1 else 's'} "
            f"apart ({rule}); the marked one is at {where(marks['flagged'][0])}. "
            f"{study[0].upper()}{study[1:]} like this.")


def outlier_quote(overview: dict) -> str:
    """The marked patch's length over the median, as the residual chart labels it."""
    marks = overview["high_norm"]
    return f"{(marks['flagged'] or [marks['largest']])[0]['ratio']:g}×"


def distance_label(mad: float) -> str:
    """A mean attention distance as the picture's caption labels it (picture.js)."""
    return f"{whole(mad)} pixels"


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
        return f"{low}–{high} pixels" if low != high else f"about {low} pixels"

    text = f"On this picture the heads of {name(0)} look {span(0)} from their query"
    if len(blocks) > 1:
        text += f", those of {name(-1)} {span(-1)}"
    text += (f", in page 3's ⟦mad⟧; attention spread evenly over the picture would give "
             f"{even:.0f} pixels.")
    if len(blocks) == 1:
        return text
    near_first, near_last = min(kept[0]), min(kept[-1])
    patch = overview["layout"]["patch"][0]  # a difference under one patch is not a trend
    text += (" The papers on vision ⟦transformer|transformers⟧ report early blocks mixing "
             "near- and far-looking heads, late blocks only far-looking ones; ")
    if near_last >= near_first + patch:
        return text + (f"here {name(-1)}'s nearest head ({near_last:.0f} pixels) looks farther "
                       f"than {name(0)}'s ({near_first:.0f} pixels).")
    if near_last > near_first - patch:
        return text + (f"not here: the nearest heads of {name(0)} and {name(-1)} look about "
                       f"as far ({near_first:.0f} and {near_last:.0f} pixels, under a patch "
                       "apart).")
    return text + (f"not here: {name(-1)}'s nearest head ({near_last:.0f} pixels) looks "
                   f"nearer than {name(0)}'s ({near_first:.0f} pixels).")


def _near_head_lead(overview: dict) -> str:
    """One line: the head the distance step draws and how far it looks."""
    block = resolve_block("first", overview)
    label = overview["blocks"][block]["label"].lower()
    head = nearest_head(overview, block)
    if head < 0:
        return f"How far do the heads of {label} look from their query on the picture?"
    mad = head_distances(overview, block)[head]
    return (f"Head {head} of {label}, its nearest-looking head, looks "
            f"{distance_label(mad)} from its query on average.")


def _near_head_sentence(overview: dict) -> str:
    """Which head the distance step draws, and which sink heads it leaves out and why."""
    block = resolve_block("first", overview)
    label = overview["blocks"][block]["label"]
    head = nearest_head(overview, block)
    if head < 0:
        return f"The picture shows the mean of the heads of {label.lower()}."
    text = f"The picture shows head {head} of {label.lower()}, its nearest-looking head."
    sinks = sink_heads(overview, block)
    if not sinks or len(sinks) == len(head_distances(overview, block)):
        return text
    left_out = "; ".join(
        f"head {h} ({percent(s['score'])} to {key_words(s['key'])}: "
        + ("its map is that patch whatever you pin)" if s["on_patch"] else
           "a token with no place on the picture, so no distance)")
        for h, s in sorted(sinks.items()))
    return f"{text} Left out here and below, as ⟦sink|sinks⟧ (step {step_number('sinks')}): " \
           f"{left_out}."


def _sink_sentences(overview: dict) -> tuple[str, str]:
    """(the lead, the rest) of the sink step."""
    strongest = overview["sinks"]["strongest"]
    block = overview["blocks"][strongest["block"]]["label"].lower()
    share = percent(strongest["score"])
    if strongest["score"] < SINK_THRESHOLD:
        return ("Does any head pour most of its attention into one key? Not here.",
                f"The most concentrated head ({block}, head {strongest['head']}) gives its "
                f"favourite key, {key_words(strongest['key'])}, {share} of the attention on "
                "average, "
                f"below the {SINK_THRESHOLD:.0%} that makes an ⟦sink⟧.")
    lead = (f"Head {strongest['head']} of {block} sends {share} of its attention to "
            f"{key_words(strongest['key'])}: an **⟦sink|attention sink⟧**.")
    text = ("That share is the mean over every query. Such a head copies nearly the same "
            "thing into every token, whatever the picture shows there. Point at or tap the "
            "other heads of this block to compare.")
    if overview["sinks"]["left_out"]:
        text += (" A sink on a patch would light up that patch in attention ⟦rollout⟧, so "
                 "the rollout here starts after it.")
    return lead, text


def key_words(key: str) -> str:
    """A key as the tour names it: a patch in words, an extra token with its glossary mark."""
    if key == "[CLS]":
        return "⟦cls⟧"
    if key == "[DIST]":
        return "⟦dist⟧"
    return key if key.startswith("patch") else f"⟦register|{key}⟧"


def sink_patch(overview: dict) -> int | None:
    """The patch the strongest sink head pours its attention into (None: a sink on an extra
    token, or no sink at all)."""
    strongest = overview["sinks"]["strongest"]
    if strongest["score"] < SINK_THRESHOLD or not strongest["on_patch"]:
        return None
    return strongest["patch"]


def _rollout_start(overview: dict) -> str:
    """Where rollout starts, with the start=auto rule said in words (not cited)."""
    left_out = overview["sinks"]["left_out"]
    if not left_out:
        return "It starts at the first block."
    first = overview["rollout"]["blocks"][0]
    sink_step = step_number("sinks")
    last = left_out[-1]["block"]  # the rule ends the left-out run at a sink block
    blocks = (f"block {last} is" if len(left_out) == 1
              else f"blocks {left_out[0]['block']}–{last} are")
    return (f"Here it starts at block {first}: {blocks} left out, because block {last} has a "
            f"head that is an attention ⟦sink⟧ on a patch (step {sink_step}), which rollout "
            "would carry forward as one bright patch whatever the picture shows. The rule: "
            "start one block after the last such block in the first half of the blocks.")


def _cls_sentences(late: bool, dims: dict) -> tuple[str, str]:
    if late:
        return ("The map is what the tokens look at, block by block, up to the summary "
                "token's own blocks.",
                f"The first {dims['self_blocks']} blocks have no ⟦cls⟧; for them the map is "
                "the mean attention row of all patches. In the class-attention blocks at the "
                "end, the map is what [CLS] attends to.")
    return ("In every block ⟦cls⟧ gathers from all the tokens: the map is its attention row.",
            "What it finds is added to it, block after block.")


def _daam_sentences(overview: dict) -> tuple[str, str]:
    daam = overview["daam"]
    if "unavailable" in daam:
        return ("⟦daam|DAAM⟧ needs a summary token, and this model has none: the map shows "
                "attention instead.", daam["unavailable"])
    return (f"**⟦daam|DAAM⟧** weighs what ⟦cls⟧ gathers by how much it moves the score of "
            f"**{short(daam['target'])}**: press ▶ to watch.",
            f"Attention is the same whatever the class. DAAM (from a paper by Liao and "
            f"colleagues) keeps what [CLS] "
            f"gathers in each block apart, channel by channel, weighs the channels by the "
            f"⟦gradient⟧ of the score for **{daam['target']}**, and adds the blocks up: the "
            "decision's evidence, accumulating.")


def _summary_sentence(overview: dict) -> str:
    width, names = overview["dims"]["width"], overview["layout"]["prefix_names"]
    if "[DIST]" in names:
        return (f"The picture's summary is two tokens, ⟦cls⟧ and ⟦dist⟧, of **{width} "
                "numbers** each.")
    pooling = {s["id"]: s for s in overview["stages"]}["feature"]["sentence"].replace(
        "[CLS]", "⟦cls⟧", 1)
    return f"The picture's summary, its **⟦feature⟧**, is {pooling}."


def _feature_sentence(prediction: dict, names: list[str]) -> str:
    if prediction["head"] == "knn":
        return ("This model learned without labels (⟦self_supervised⟧), so the feature is "
                "its whole output; the stripe shows its numbers, red positive and blue "
                "negative.")
    classes = prediction["output_shape"][-1]
    if "[DIST]" in names:
        return (f"Each goes through its own layer of weighted sums to {classes} class scores, "
                "and the two lists of scores are averaged.")
    return f"One layer of weighted sums turns it into {classes} class scores."


def _head_sentence(prediction: dict) -> str:
    if prediction["head"] == "knn":
        return (f"Classes come from a ⟦bank|memory bank⟧ of labelled examples: the "
                f"{prediction['k']} entries most like this feature (by "
                f"⟦cosine|cosine similarity⟧) vote, the more "
                f"similar ones much more strongly: each with the weight "
                f"⟦vote_weight|exp(cos/{prediction['temperature']})⟧.")
    return "⟦softmax|Softmax⟧ turns the class scores into probabilities that add up to 1."


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


def step_quotes(overview: dict, step: Step, switch_result: dict | None,
                second_opinion: dict | None) -> list[str]:
    """The measured numbers a step quotes, each as the figure it points at labels it (the
    browser walk checks that each is on screen in one of the step's targets)."""
    prediction = overview["prediction"]
    if step.id == "pipeline" and prediction["open_set"]["known"]:
        return [share_label(prediction["top"][0]["probability"])]
    if step.id == "pixels" and overview["picture"]["kept"] < 0.995 \
            and not overview["picture"]["squashed"]:
        return [share_label(overview["picture"]["kept"])]
    if step.id == "sinks" and overview["sinks"]["strongest"]["score"] >= SINK_THRESHOLD:
        return [percent(overview["sinks"]["strongest"]["score"])]
    if step.id == "distance":
        block = resolve_block("first", overview)
        head = nearest_head(overview, block)
        return [distance_label(head_distances(overview, block)[head])] if head >= 0 else []
    if step.id == "residual":
        before, after, _ = growth(overview)
        return [f"{before:.3g}", f"{after:.3g}", outlier_quote(overview)]
    if step.id == "prediction":
        return prediction_quotes(overview, second_opinion)
    if step.switch_off and switch_result:
        return switch_quotes(switch_result, prediction["head"] == "knn")
    return []


def resolve_steps(overview: dict, switch: Switch, live: bool = True,
                  second_opinion: dict | None = None) -> list[dict]:
    """Every step with its words filled in (`lead`: the one line the compact tour box shows;
    `text`: the whole, the lead first; `terms`: the words of the terms they mark), its
    controls as numbers for this model, what it points at (`targets`; `patches`: the patches
    it names on the picture; `quotes`: the measured numbers it quotes, each labelled on a
    target). A step that switches its head off carries the result (`switch`), so it shows
    without a round trip, also in an offline lesson (`live` False: the text says so)."""
    switch = functools.cache(switch)  # the facts and the steps ask for the same heads
    facts = tour_facts(overview, switch, live, second_opinion)
    titles = page_titles()
    daam_ok = "unavailable" not in overview["daam"]
    words = explain_first_uses([(step.id, step.lead.format(**facts), step.text.format(**facts))
                                for step in TOUR])
    resolved = []
    for step, (lead, rest) in zip(TOUR, words):
        block = resolve_block(step.block, overview)
        info = overview["blocks"][block]
        patch = {"centre": centre_patch(overview), "longest": longest_patch(overview),
                 None: None}[step.patch]
        if patch is not None and info["kind"] == "class":
            patch = None  # only [CLS] queries a class-attention block
        named = sink_patch(overview) if step.names == "sink" else None
        overlay = step.overlay if daam_ok or step.overlay != "daam" else "attention"
        head = resolve_head(step.head, overview, block)
        result = switch(block, head) if step.switch_off and head >= 0 else None
        resolved.append({
            "id": step.id, "title": step.title, "lead": lead, "text": f"{lead} {rest}",
            "terms": terms_of(lead, rest), "stage": step.stage,
            "block": block, "head": head, "patch": patch, "overlay": overlay,
            "targets": list(step.targets),
            "patches": ([p for p in (patch, named) if p is not None]
                        if "image" in step.targets else []),
            "quotes": step_quotes(overview, step, result, second_opinion),
            "page": {"file": step.page, "title": titles[step.page]},
            "switch": result})
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
