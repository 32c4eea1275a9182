"""The model's answer beside the class's, for each kind of question.

- patches: the class's most-clicked k patches are removed like a learner's on page 9's
  "Predict, then reveal" (`cause_vs_claim` with those patches as the learner's, the same k,
  the same ways of removing), beside each method's top k and k random patches;
- head: each head of the block switched off on its own (`interventions.head_importance`):
  the drop of the target's score, the head with the largest drop matters most;
- classes: the model's top classes (`pipeline.predict`).

What Reveal stores (`head_answer`, `classes_answer`) is computed once, on the instructor's
press; the sentences (`head_sentence`, `classes_sentence`) are read off it and the answers.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from ..studies.cause_vs_claim import REMOVALS, cause_vs_claim
from ..studies.interventions import drop_words
from ..lessons.interventions_lab import reveal_rows


def most_clicked(answers: list[list[int]], k: int) -> list[int]:
    """The k patches clicked by most students (a tie goes to the lower patch number), sorted."""
    counts = Counter(int(p) for answer in answers for p in answer)
    ranked = sorted(counts, key=lambda patch: (-counts[patch], patch))
    return sorted(ranked[:k])


def click_grid(answers: list[list[int]], grid: tuple[int, int]) -> np.ndarray:
    """(rows, cols): how many students clicked each patch."""
    counts = np.zeros(grid[0] * grid[1])
    for answer in answers:
        counts[list(map(int, answer))] += 1
    return counts.reshape(grid)


def removed_words(what: str, drop: float, score: str, digits: int = 2) -> str:
    """'with the class's patches out, the cat score fell by 0.21' (rose, did not move: page
    9's words for a drop, `interventions.drop_words`)."""
    return f"with {what} out, {score} {drop_words(drop, digits)}"


def favourite(answers: list, choices: list):
    """The choice most students picked (a tie goes to the one listed first); None when no
    answer is one of `choices`."""
    counts = Counter(answers)
    best = max(choices, key=lambda c: (counts[c], -choices.index(c)), default=None)
    return best if best is not None and counts[best] else None


@dataclass(frozen=True)
class PatchReveal:
    patches: list[int]  # the class's most-clicked k
    test: object  # cause_vs_claim's ClaimTest, the class's patches as the learner's
    rows: list[dict]  # page 9's reveal rows, the learner renamed "the class"

    def sentence(self, removal: str) -> str:
        """In plain words: the class, the method whose patches cut most, and random."""
        part = self.test.removals[removal]
        index = self.test.ks.index(len(self.patches))
        score = f"the {self.test.label} score" if self.test.label else "the score"
        methods = {name: float(drops[index]) for name, drops in part.methods.items()}
        words = [removed_words("the class's patches", part.learner, score)]
        if methods:
            best = max(methods, key=methods.get)
            words.append(removed_words(f"{best}'s top {len(self.patches)}", methods[best], "it"))
        words.append(removed_words(f"{len(self.patches)} random patches",
                                   float(part.random_mean()[index]), "it") + " on average")
        return f"{REMOVALS[removal].capitalize()}: " + "; ".join(words) + "."


def patch_reveal(model, image, answers: list[list[int]], k: int, target=None, head=None,
                 methods=None, should_stop=None, progress=None) -> PatchReveal:
    """Page 9's reveal numbers for the class's most-clicked k patches (`methods`: page 7's
    list by default, as on page 9)."""
    patches = most_clicked(answers, k)
    removals = ("tokens", "pixels") if model.spec.family == "vit" else ("pixels",)
    found = cause_vs_claim(model, image, target=target, head=head, ks=(k,), removals=removals,
                           learner=patches, methods=methods, should_stop=should_stop,
                           progress=progress)
    rows = [{**row, "chooser": "the class"} if row["chooser"] == "you" else row
            for row in reveal_rows(found)]
    return PatchReveal(patches, found, rows)


def head_reveal(model, image, block: int, target=None, head=None, should_stop=None):
    """(drop per head of `block` when it alone is switched off, the grid it came from)."""
    from ..studies.interventions import head_importance

    grid = head_importance(model, image, target=target, head=head, should_stop=should_stop)
    return np.asarray(grid.drops[block], dtype=float), grid


HEAD_DIGITS = 3  # a head's drop is often a few hundredths: two decimals would say 0.00


def head_answer(model, image, block: int, should_stop=None) -> dict:
    """What Reveal stores for "which head matters most in this block?": each head's drop of
    the top class's score when it alone is switched off, and the head with the largest."""
    drops, grid = head_reveal(model, image, block, should_stop=should_stop)
    return {"drops": drops.tolist(), "answer": int(drops.argmax()), "block": block,
            "score_kind": grid.score_kind, "label": grid.label}


def head_sentence(result: dict, answers: list[int]) -> str:
    """'Switching head 3 off cut the tabby cat score most: by 0.212. The class chose head 1
    most often: switching it off cut it by 0.041.'"""
    drops, best = result["drops"], result["answer"]
    score = f"the {result['label']} score"
    if drops[best] >= 0:
        words = (f"Switching head {best} off cut {score} most: by "
                 f"{drops[best]:.{HEAD_DIGITS}f}.")
    else:  # every head's switch-off raised it
        words = (f"No head's switch-off cut {score}; head {best}'s raised it least: by "
                 f"{-drops[best]:.{HEAD_DIGITS}f}.")
    chosen = favourite(answers, list(range(len(drops))))
    if chosen is None:
        return words
    if chosen == best:
        return words + f" The class chose head {best} most often too."
    return words + (f" The class chose head {chosen} most often: "
                    + f"with it off, the score {drop_words(drops[chosen], HEAD_DIGITS)}.")


def classes_answer(model, image, topk: int = 5) -> dict:
    """What Reveal stores for "what will the model answer?": its top classes."""
    from ..pipeline import predict

    top = predict(model, image, topk=topk)
    return {"top": [[p.index, p.label, p.probability] for p in top], "answer": top[0].index}


def classes_sentence(result: dict, answers: list[int], options: list) -> str:
    """'The model answers tabby cat (62%). The class's most common answer: tiger cat (5 of
    12).' `options`: the question's [[index, label], ...]."""
    index, label, probability = result["top"][0]
    words = f"The model answers {label} ({probability:.0%})."
    labels = {int(i): name for i, name in options}
    chosen = favourite(answers, list(labels))
    if chosen is None:
        return words
    share = f"{answers.count(chosen)} of {len(answers)}"
    if chosen == index:
        return words + f" The class's most common answer was that too ({share})."
    return words + f" The class's most common answer: {labels[chosen]} ({share})."
