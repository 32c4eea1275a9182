"""What turns a model's output into class probabilities and a target scalar."""

from __future__ import annotations

import torch

from .knn import MemoryBank, class_score, knn_vote


class ImageNetHead:
    """Supervised classifiers: the output is 1000 logits; the target is one logit."""

    kind = "imagenet"

    def __init__(self, class_names: list[str]):
        self.class_names = class_names

    def probabilities(self, output: torch.Tensor) -> torch.Tensor:
        return output.float().softmax(-1)[0]

    def class_id(self, class_index: int) -> str:
        """A class's stable name in links: its index (names are edited, indices are not)."""
        return str(int(class_index))

    def score_fn(self, class_index: int):
        def logit(output: torch.Tensor) -> torch.Tensor:
            return output[:, class_index].sum()
        return logit

    def fingerprint(self) -> str:
        return "imagenet"


class KnnHead:
    """Self-supervised ViTs: the output is the CLS feature; classes come from a bank."""

    kind = "knn"

    def __init__(self, bank: MemoryBank):
        self.bank = bank

    @property
    def class_names(self) -> list[str]:
        return self.bank.class_names

    def probabilities(self, output: torch.Tensor) -> torch.Tensor:
        return knn_vote(self.bank, output[0])[0]

    def class_id(self, class_index: int) -> str:
        """A class's stable name in links: its label (a bank's class is its label; the
        index depends on which examples the bank holds)."""
        return self.class_names[class_index]

    def neighbours(self, output: torch.Tensor):
        return knn_vote(self.bank, output[0])[1]

    def score_fn(self, class_index: int):
        def similarity(output: torch.Tensor) -> torch.Tensor:
            return class_score(self.bank, output, class_index)
        return similarity

    def fingerprint(self) -> str:
        return "knn-" + self.bank.fingerprint()
