"""The words the ViT Explainer's tour uses that a first-year student cannot place, each
explained in plain words.

A step's text marks a term as `⟦id⟧` (shown as the term) or `⟦id|shown words⟧`. The tour
explains the term in words where the tour first uses it (`explain_first_uses`: its words
follow in brackets, unless the step that first uses it teaches it itself, `taught`), and
the component draws every marked term as a button whose popover gives the same words, so a
learner who jumps to a later step can still ask. `tests/test_explainer_words.py` checks that
every step's words stay within these terms.

Importable without running the app (no streamlit here).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MARK = re.compile(r"⟦([a-z_]+)(?:\|([^⟧]*))?⟧")


@dataclass(frozen=True)
class Term:
    term: str  # as the text shows it when the mark names no other words
    words: str  # what it means, in plain words
    forms: str  # a regular expression of the ways the steps write it (for the word check)
    taught: str | None = None  # the id of the step that teaches it in its own words


GLOSSARY: dict[str, Term] = {
    "transformer": Term("transformer", "the kind of network this is: it reads a list of "
                        "tokens and lets them exchange information",
                        r"(?:vision )?transformers?"),
    "cls": Term("[CLS]", "an extra token with no pixels, learned in training, that gathers a "
                "summary of the picture", r"\[CLS\]"),
    "dist": Term("[DIST]", "an extra token with no pixels that learns, in training, to copy "
                 "the answer of a teacher network", r"\[DIST\]"),
    "register": Term("register tokens", "extra tokens with no pixels where the model keeps "
                     "numbers it needs later", r"register tokens?|\[REG\d*\]"),
    "matrix": Term("matrix", "a table of numbers; multiplying a list of numbers by it gives a "
                   "new list, each entry a weighted sum of the old ones", r"matri(?:x|ces)"),
    "norm": Term("length ‖x‖", "the size of a token's numbers taken together: the square "
                 "root of the sum of their squares", r"‖x‖"),
    "position": Term("position vector", "a learned list of numbers, one for each place in "
                     "the grid, added to the token of the patch at that place",
                     r"position vectors?", taught="positions"),
    "mlp": Term("MLP", "a small network of two layers that works on each token on its own",
                r"MLPs?"),
    "dot": Term("dot product", "multiply two lists number by number and add up the products",
                r"dot product"),
    "softmax": Term("softmax", "turns a list of scores into shares that are positive and add "
                    "up to 1; a larger score gets a larger share", r"softmax"),
    "w_o": Term("projection W_O", "one learned table of weights that mixes the outputs of all "
                "heads back into one list of numbers per token", r"W_O|projection"),
    "sink": Term("attention sink", "a key that gets nearly all of a head's attention from "
                 "every query, whatever the picture shows there", r"sinks?", taught="sinks"),
    "mad": Term("mean attention distance", "how far from its query, on average, a head's "
                "attention lands on the picture, each key counted by its share",
                r"mean attention distance"),
    "cnn": Term("CNN", "the kind of image model common before this one: each layer looks at "
                "small neighbourhoods of the layer before", r"CNNs?|convolutional"),
    "residual": Term("residual stream", "the tokens as they run through the blocks: each "
                     "block adds its result to them instead of replacing them",
                     r"residual(?: stream)?", taught="residual"),
    "scratch": Term("scratch space", "numbers the model keeps in a token for its own later "
                    "use, unrelated to the part of the picture that token came from",
                    r"scratch space"),
    "rollout": Term("attention rollout", "attention followed through all blocks, not one: "
                    "each block's attention combined with the next one's, in order",
                    r"rollout", taught="rollout"),
    "daam": Term("DAAM", "a map of where the decision for one class is built: what [CLS] "
                 "gathers in each block, weighed by how much it moves that class's score",
                 r"DAAM", taught="daam"),
    "gradient": Term("gradient", "how much a score would change if one number changed a "
                     "little", r"gradients?"),
    "layernorm": Term("LayerNorm", "shifts each token's numbers to average 0 and spread 1, "
                      "then applies a learned scale and shift", r"LayerNorm|norms?"),
    "self_supervised": Term("self-supervised", "trained without labels, by matching pictures "
                            "with altered copies of themselves", r"self-supervised"),
    "imagenet": Term("ImageNet", "a collection of about 1.3 million photos labelled with "
                     "1000 classes, on which many image models are trained", r"ImageNet"),
    "knn": Term("k-NN vote", "the k stored examples most like this picture vote for their "
                "labels", r"k-NN"),
    "bank": Term("memory bank", "the stored features of labelled example pictures, which "
                 "the vote compares a picture with", r"memory bank|banks?"),
    "cosine": Term("cosine similarity", "how alike two lists of numbers are in direction: 1 "
                   "for the same direction, 0 for unrelated", r"cosine"),
    "vote_weight": Term("exp(cos/T)", "each voter's weight: e to the power of its "
                        "similarity divided by a small number T, so a slightly more similar "
                        "entry counts much more", r"exp\(cos/[\d.]+\)"),
    "class_score": Term("class score", "the number the model gives one class. For a k-NN "
                        "head, how alike the picture is to that class's nearest bank "
                        "pictures (1 = the same); for a classifier, its probability",
                        r"class score"),
    "logit_lens": Term("logit lens", "logits are a model's class scores before they become "
                       "shares; this reads them out after an early block",
                       r"logit(?: lens)?|logits"),
    "gradcam": Term("Grad-CAM", "a map of the class score's gradient at a late layer, "
                    "weighing where that layer's features support the class", r"Grad-CAM"),
    "feature": Term("feature", "the list of numbers the model sums the picture up in, which "
                    "its head turns into an answer", r"feature", taught="feature"),
}


def shown(match: re.Match) -> str:
    """The words a mark shows."""
    return match.group(2) if match.group(2) is not None else GLOSSARY[match.group(1)].term


def plain(text: str) -> str:
    """The text as a reader sees it: marks replaced by the words they show."""
    return MARK.sub(shown, text)


def marked(text: str) -> list[str]:
    """The term ids a text marks, in order."""
    return [m.group(1) for m in MARK.finditer(text)]


def explain_first_uses(texts: list[tuple[str, str, str]]) -> list[tuple[str, str]]:
    """(step id, lead, rest) in tour order -> (lead, rest) with each term explained in words
    where the tour first uses it: in brackets after its first mark in the rest, or, when
    that mark is in the one-line lead, as the rest's first sentence ("MLP: a small
    network..."). A step that teaches the term itself (`Term.taught`) needs neither. Later
    marks stay marks: the component's popover explains them."""
    seen: set[str] = set()

    def first_marks(step_id: str, text: str) -> list[str]:
        found = [term for term in dict.fromkeys(marked(text)) if term not in seen]
        seen.update(found)
        return [term for term in found if GLOSSARY[term].taught != step_id]

    def explain_in_brackets(text: str, terms: list[str]) -> str:
        pending = set(terms)

        def explain(match: re.Match) -> str:
            term = match.group(1)
            if term not in pending:
                return match.group(0)
            pending.discard(term)
            return f"{match.group(0)} ({GLOSSARY[term].words})"
        return MARK.sub(explain, text)

    explained = []
    for step_id, lead, rest in texts:
        in_lead = first_marks(step_id, lead)
        rest = explain_in_brackets(rest, first_marks(step_id, rest))
        said = " ".join(f"{GLOSSARY[term].term[0].upper()}{GLOSSARY[term].term[1:]}: "
                        f"{GLOSSARY[term].words}." for term in in_lead)
        explained.append((lead, f"{said} {rest}".strip()))
    return explained


def terms_of(*texts: str) -> dict[str, dict[str, str]]:
    """The terms these texts mark, with their words: what a step's popovers show."""
    ids = dict.fromkeys(term for text in texts for term in marked(text))
    return {term: {"term": GLOSSARY[term].term, "words": GLOSSARY[term].words} for term in ids}
