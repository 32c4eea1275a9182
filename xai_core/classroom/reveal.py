"""The model's answer beside the class's, for each kind of question.

- patches: the class's most-clicked k patches are removed like a learner's on page 9's
  "Predict, then reveal" (`cause_vs_claim` with those patches as the learner's, the same k,
  the same ways of removing), beside each method's top k and k random patches;
- head: each head of the block switched off on its own (`interventions.head_importance`):
  the drop of the target's score, the head with the largest drop matters most;
- classes: the model's top classes (`pipeline.predict`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from ..studies.cause_vs_claim import REMOVALS, cause_vs_claim
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


def drop_words(who: str, drop: float, score: str) -> str:
    """'the class's patches cut the cat's score by 0.21' (or raised it, when it rose)."""
    verb = "cut" if drop >= 0 else "raised"
    return f"{who} {verb} {score} by {abs(drop):.2f}"


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
        words = [drop_words("the class's patches", part.learner, score)]
        if methods:
            best = max(methods, key=methods.get)
            words.append(drop_words(f"{best}'s top {len(self.patches)}", methods[best], "it"))
        words.append(drop_words(f"{len(self.patches)} random patches",
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
