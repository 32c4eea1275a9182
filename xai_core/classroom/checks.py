"""The learning check: four multiple-choice questions asked before the tour and again after,
each tied to the tour step that teaches it (by the step's title). The first choice listed is
the correct one; the app shows the choices in a fixed shuffled order (`shown_order`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CheckItem:
    question: str
    choices: tuple[str, ...]  # the first is correct
    step_title: str  # the tour step that teaches it

    def shown_order(self) -> tuple[int, ...]:
        """The choices' indices in the order shown: the correct one not always first, the
        same order for everyone (a rotation by the question's length)."""
        shift = len(self.question) % len(self.choices)
        indices = tuple(range(len(self.choices)))
        return indices[shift:] + indices[:shift]


ITEMS = (
    CheckItem("What is a patch token?",
              ("A small square of the picture, turned into a list of numbers the model reads",
               "One pixel of the picture",
               "A word the model writes about the picture",
               "The model's final answer"),
              "Patches become tokens"),
    CheckItem("What is an attention sink?",
              ("A token that many heads send most of their attention to, although it carries "
               "little of the picture",
               "The patch that matters most for the answer",
               "A head that is broken and can be removed",
               "The last block of the model"),
              "Attention sinks"),
    CheckItem("You switch one head off and the answer barely changes. What does that show?",
              ("The model did not need that head for this answer",
               "That head's attention map was wrong",
               "That head looks at the whole picture",
               "The model stopped working"),
              "Switch that head off"),
    CheckItem("A map lights up some patches. How can you test whether the model needs them?",
              ("Remove them and compare the score's drop with removing as many random patches",
               "Check that the map is sharp",
               "Look at a second map: if it agrees, the model needs them",
               "Count how many patches light up"),
              "Test a claim"),
)
PHASES = {"before": "before the tour", "after": "after the tour"}
CORRECT = 0
