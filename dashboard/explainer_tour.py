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

import math
from dataclasses import dataclass

import numpy as np

from dashboard.page_list import PAGE_LIST
from xai_core.explainer import OVERLAYS, STAGE_IDS, decode
from xai_core.sinks import SINK_THRESHOLD
from xai_core.token_marks import HIGH_NORM_GAP, HIGH_NORM_RATIO

# resolved against the model's blocks; sink: the block of the strongest sink head
BLOCKS = ("first", "middle", "last", "last_self", "sink")
# sharpest: the lowest-entropy [CLS] row in that block; sink: the strongest sink head
HEADS = ("mean", "first", "sharpest", "sink")
# centre: the patch in the middle of the grid; longest: the patch token with the largest
# norm / median (a flagged high-norm token when there is one, xai_core.token_marks)
PATCHES = (None, "centre", "longest")
PARTS = ("pipeline", "image", "sequence", "overlay", "heads", "player", "detail", "steps",
         "matrix", "qk")  # plus "stage:<id>" for one box of the pipeline


@dataclass(frozen=True)
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


TOUR: list[Step] = [
    Step("One picture in, one answer out",
         "This page follows **one forward pass** of {model} on your image, from the pixels on "
         "the left to the answer on the right: **{top_label}** ({top_share}). Every shape and "
         "number you see comes from this model and this very run. Move with Next and Back, "
         "or with the "
         "← → keys; hover anything at any time.",
         "image", "last", "mean", None, "attention", ("pipeline",), "1_tokenization.py"),
    Step("What the model sees",
         "Your {orig_w}×{orig_h} picture is resized and centre-cropped to **{H}×{W}** pixels. "
         "With three colour channels that is {pixels} numbers, and nothing else: no "
         "file name, no caption.",
         "image", "last", "mean", None, "attention", ("stage:image", "image"),
         "1_tokenization.py"),
    Step("Cut into patches",
         "A transformer reads sequences, so the image is cut into square tiles of "
         "{P}×{P} pixels: N = HW/P² = {H}·{W}/{P}² = **{patches} patches** in a "
         "{rows}×{cols} grid. Hover the image: the tile under your pointer is shown enlarged.",
         "patches", "last", "mean", "centre", "attention", ("stage:patches", "image", "detail"),
         "1_tokenization.py"),
    Step("Patches become tokens",
         "Each patch's {P}·{P}·3 = {flat} numbers are multiplied by one learned matrix E "
         "({flat}×{D}), giving a **token** of {D} numbers. {prefix_sentence} So this image "
         "became **{token_sentence}**. In the token strip above the picture, hover a token to "
         "find its patch, or a patch to find its token.",
         "tokens", "first", "mean", "centre", "attention", ("stage:tokens", "sequence"),
         "1_tokenization.py"),
    Step("Where did each patch come from?",
         "Attention on its own treats the tokens as an unordered set: shuffle the patches and "
         "it computes the same thing. So a learned **position vector** (one per slot, table "
         "{pos_table}) is added to every token before the first block. The small map shows "
         "how long each token is when it enters the first block (block 0; blocks and heads "
         "are numbered from 0 here, as on the other pages).",
         "tokens", "first", "mean", "centre", "attention", ("detail",), "1_tokenization.py"),
    Step("Inside a block",
         "{blocks_sentence} Every block does the same two moves: **attention** (tokens "
         "exchange information) and an **MLP** (each token is processed on its own), each "
         "added back onto its input. The ten cards show each step with its real shape; the "
         "small maps show every patch token's length after that step.",
         "blocks", "first", "mean", "centre", "attention", ("stage:blocks", "steps"),
         "2_self_attention.py"),
    Step("Queries and keys",
         "In each head every token makes a **query** q (what am I looking for?) and a **key** "
         "k (what do I offer?), {d} numbers each: {heads} heads × {d} = {D}. Their match is "
         "the dot product q·k, divided by √{d} = {sqrt_d} so the scores do not grow with the "
         "vector length. Below: q of the marked patch, k of the key it likes best, and the "
         "{d} products that add up to the score.",
         "blocks", "first", "first", "centre", "attention", ("qk",), "2_self_attention.py"),
    Step("Softmax turns scores into attention",
         "Softmax turns one query's scores against all {tokens_block} keys into weights that "
         "are positive and **sum to 1**: one row of the attention matrix. Hover a patch of "
         "the image: its row is drawn over the picture at once. Does the marked patch look "
         "mostly at its neighbours in this early block, or far away?",
         "blocks", "first", "first", "centre", "attention", ("matrix", "image"),
         "2_self_attention.py"),
    Step("Many heads ask different questions",
         "Each block has {heads} heads, each with its own queries and keys. Hover the head "
         "chips under the image: do the heads of {middle_label} look at the same places? "
         "Head {sharpest} has the most focused [CLS] row here. The outputs of all heads are "
         "put side by side ({heads}×{d} = {D}) and mixed by one projection.",
         "blocks", "middle", "mean", None, "attention", ("heads",), "4_rollout_heads.py"),
    Step("Near in early blocks, far in late ones",
         "Keep the pointer on a patch and drag the block slider. In trained ViTs, early blocks "
         "mix heads that look only at close neighbours, like a small convolution, with heads "
         "that already look far away; in the last blocks almost every head spreads over the "
         "whole image. A CNN cannot do that: its view grows a little with every layer.",
         "blocks", "first", "mean", "centre", "attention", ("image", "player"),
         "3_attention_distance.py"),
    Step("Attention sinks",
         "{sink_sentence}",
         "blocks", "sink", "sink", None, "attention", ("image", "heads", "matrix"),
         "4_rollout_heads.py"),
    Step("The residual stream",
         "A block never replaces its input; it **adds** to it: x + attention(x), then "
         "x + MLP(x). This running sum is the residual stream. The chart shows the tokens' "
         "lengths after every block: the median patch token grows from {embed_norm} to "
         "{final_norm}. {outlier_sentence}",
         "norm", "last", "mean", "longest", "attention", ("stage:norm", "detail"),
         "4_rollout_heads.py"),
    Step("What [CLS] gathers, block by block",
         "{cls_sentence} Press ▶ to watch it block by block, or hover the block thumbnails "
         "in the pipeline: where does it spread out, and where does it settle?",
         "blocks", "last", "mean", None, "attention", ("player", "stage:blocks"),
         "4_rollout_heads.py"),
    Step("Rollout: attention through all blocks",
         "One block's attention ignores the blocks before it and the residual path. "
         "**Attention rollout** (Abnar & Zuidema) averages the heads, adds the identity for "
         "the residual, normalises each row and multiplies the blocks in order. {rollout_start} "
         "Press ▶ to see it accumulate up to {rollout_last}.",
         "blocks", "last_self", "mean", None, "rollout", ("overlay", "image"),
         "4_rollout_heads.py"),
    Step("DAAM: where the decision is built",
         "{daam_sentence}",
         "blocks", "last", "mean", None, "daam", ("overlay", "image", "player"),
         "6_daam_flow.py"),
    Step("From tokens to one feature",
         "After the last block a final LayerNorm rescales every token. The image's summary is "
         "{pooling}: **{D} numbers**. {feature_sentence}",
         "feature", "last", "mean", None, "attention", ("stage:norm", "stage:feature", "detail"),
         "6_daam_flow.py"),
    Step("The prediction",
         "{head_sentence} Here: **{top_label}** ({top_share}), then {second_label}. Try your "
         "own photo in the sidebar: every number on this page follows it.",
         "top5", "last", "mean", None, "attention", ("stage:head", "stage:top5", "detail"),
         "7_comparison.py"),
    Step("Looking is not the same as deciding",
         "Attention shows where information was **collected**, not which pixels **changed** "
         "the answer: the MLPs and norms transform what was gathered, and different attention "
         "patterns can give the same prediction. Class-specific, gradient-based maps "
         "(Grad-CAM) and tests that delete the top-ranked pixels and watch the score drop "
         "answer that second question.",
         "blocks", "last", "mean", None, "attention", ("image",), "5_gradcam.py"),
]


# --- facts from the live payload ---------------------------------------------------------------

def _share(probability: float) -> str:
    return f"{100 * probability:.1f}%"


def _entropy(row: np.ndarray) -> float:
    p = row / row.sum() if row.sum() > 0 else row
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


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
    return int(np.argmin([_entropy(row) for row in query_row_values(overview, block)]))


def tour_facts(overview: dict) -> dict[str, str]:
    """The numbers the steps quote, from the overview payload of the image on screen."""
    layout, dims, prediction = overview["layout"], overview["dims"], overview["prediction"]
    (height, width), (ph, _) = layout["input"], layout["patch"]
    rows, cols = layout["grid"]
    top = prediction["top"]
    names = layout["prefix_names"]
    late = layout["cls_joins_late"]
    middle = resolve_block("middle", overview)
    blocks = overview["blocks"]
    norms = [decode(b["norm_out"]).astype(np.float64) for b in blocks]
    first_norm = decode(overview["embedding_norms"]).astype(np.float64)
    stage_note = {s["id"]: s for s in overview["stages"]}["feature"]["note"]
    return {
        "model": overview["model"]["label"], "H": str(height), "W": str(width),
        "orig_w": str(layout["original"][0]), "orig_h": str(layout["original"][1]),
        "pixels": f"{height * width * 3:,}", "P": str(ph), "rows": str(rows), "cols": str(cols),
        "patches": str(layout["patches"]), "flat": str(ph * ph * 3), "D": str(dims["width"]),
        "heads": str(dims["heads"]), "d": str(dims["head_dim"]),
        "sqrt_d": f"{math.sqrt(dims['head_dim']):.3g}",
        "tokens_block": str(blocks[0]["nk"]),
        "prefix_sentence": _prefix_sentence(names, late, dims),
        "token_sentence": _token_sentence(layout, names, late),
        "pos_table": "×".join(map(str, dims["pos_table"])) if dims["pos_table"] else "none",
        "blocks_sentence": _blocks_sentence(dims, late),
        "middle_label": blocks[middle]["label"].lower(),
        "sharpest": str(resolve_head("sharpest", overview, middle)),
        "embed_norm": f"{np.median(first_norm):.3g}",
        "final_norm": f"{np.median(norms[-1]):.3g}",
        "outlier_sentence": _outlier_sentence(overview),
        "sink_sentence": _sink_sentence(overview),
        "rollout_start": _rollout_start(overview),
        "cls_sentence": _cls_sentence(late, dims),
        "rollout_last": blocks[resolve_block("last_self", overview)]["label"].lower(),
        "daam_sentence": _daam_sentence(overview),
        "pooling": stage_note,
        "feature_sentence": _feature_sentence(prediction),
        "head_sentence": _head_sentence(prediction),
        "top_label": top[0]["label"], "top_share": _share(top[0]["probability"]),
        "second_label": (f"{top[1]['label']} ({_share(top[1]['probability'])})"
                         if len(top) > 1 else "nothing else"),
    }


def _prefix_sentence(names: list[str], late: bool, dims: dict) -> str:
    if late:
        return (f"This model adds no token in front yet: its [CLS] token joins only in the "
                f"{dims['class_blocks']} class-attention blocks at the end.")
    if not names:
        return "This model puts no extra token in front of the patches."
    extra = {"[CLS]": "[CLS], a learned token with no pixels that will gather a summary",
             "[DIST]": "[DIST], a distillation token trained to match a teacher network"}
    described = [extra.get(n, f"{n}, a register token that gives the model scratch space")
                 for n in names]
    return ("In front go " + "; ".join(described) + ".")


def _token_sentence(layout: dict, names: list[str], late: bool) -> str:
    if late or not names:
        return f"{layout['patches']} patch tokens"
    return f"{layout['patches']} patch tokens + {len(names)} ({', '.join(names)})"


def _blocks_sentence(dims: dict, late: bool) -> str:
    if late:
        return (f"The tokens pass through {dims['self_blocks']} self-attention blocks, then "
                f"{dims['class_blocks']} class-attention blocks where only [CLS] asks.")
    return f"The tokens pass through {dims['blocks']} blocks, one after the other."


def _outlier_sentence(overview: dict) -> str:
    marks, cols = overview["high_norm"], overview["layout"]["grid"][1]
    where = lambda t: (f"row {t['patch'] // cols}, column {t['patch'] % cols}: "  # noqa: E731
                       f"{t['ratio']}× the median in block {t['block']}")
    rule = (f"at least {HIGH_NORM_RATIO:g}× the median and {HIGH_NORM_GAP:g}× longer than any "
            "unmarked patch, the rule page 4 uses")
    if not marks["flagged"]:
        return (f"The marked patch is the longest ({where(marks['largest'])}), yet it does not "
                f"stand apart ({rule}). Darcet et al. (2024) found large ViTs re-using a few "
                "patches as scratch space; those stand far apart.")
    count = len(marks["flagged"])
    return (f"{count} patch token{'s' if count > 1 else ''} stand{'' if count > 1 else 's'} "
            f"apart ({rule}); the marked one is at {where(marks['flagged'][0])}. Darcet et al. "
            "(2024) found large ViTs re-using a few patches as scratch space like this.")


def _sink_sentence(overview: dict) -> str:
    strongest = overview["sinks"]["strongest"]
    block = overview["blocks"][strongest["block"]]["label"].lower()
    share = f"{100 * strongest['score']:.0f}%"
    if strongest["score"] < SINK_THRESHOLD:
        return (f"Does any head pour most of its attention into one key? Not here: the most "
                f"concentrated head ({block}, head {strongest['head']}) gives its favourite "
                f"key, {strongest['key']}, {share} of the attention on average, below the "
                f"{SINK_THRESHOLD:.0%} that makes an attention sink.")
    text = (f"In {block}, head {strongest['head']} sends {share} of every query's attention, "
            f"on average, to one key: {strongest['key']}. Such a key is an **attention sink**: "
            "the head copies nearly the same value into every token, whatever the image shows "
            "there. Hover the heads of this block to compare.")
    if overview["sinks"]["left_out"]:
        text += (" A sink on a patch would light up that patch in attention rollout, so the "
                 "rollout here starts after it.")
    return text


def _rollout_start(overview: dict) -> str:
    left_out = overview["sinks"]["left_out"]
    if not left_out:
        return "It starts at the first block."
    first = overview["rollout"]["blocks"][0]
    sink_step = 1 + [step.title for step in TOUR].index("Attention sinks")
    return (f"Here it starts at block {first}: the blocks before it are left out because of "
            f"the attention sink of step {sink_step} (the app's start=auto rule, explained on "
            "page 4).")


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


def _feature_sentence(prediction: dict) -> str:
    if prediction["head"] == "knn":
        return ("This model learned without labels (self-supervised), so the feature is its "
                "whole output; the stripe shows its numbers, red positive and blue negative.")
    return f"A linear layer turns it into {prediction['output_shape'][-1]} class scores."


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
    rows, cols = overview["layout"]["grid"]
    return (rows // 2) * cols + cols // 2


def longest_patch(overview: dict) -> int:
    marks = overview["high_norm"]
    return (marks["flagged"] or [marks["largest"]])[0]["patch"]


def resolve_steps(overview: dict) -> list[dict]:
    """Every step with its text filled in and its controls as numbers for this model."""
    facts = tour_facts(overview)
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
        resolved.append({
            "title": step.title, "text": step.text.format(**facts), "stage": step.stage,
            "block": block, "head": resolve_head(step.head, overview, block), "patch": patch,
            "overlay": overlay, "spot": list(step.spot),
            "page": {"file": step.page, "title": titles[step.page]}})
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
        return None, f"“tour={value}” is not a step number; the tour has steps 1-{count}."
    if not 1 <= step <= count:
        return None, f"The tour has steps 1-{count}; there is no step {step}."
    return step, None
