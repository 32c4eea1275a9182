"""Does a picture look like anything the model knows? An open-set check for every head.

A classifier always names one of its classes, however unlike all of them the picture is:
the k-NN vote gave the Hubble deep field "rocket 97.5%". Next to every answer the app
therefore measures how familiar the picture is and compares that with a threshold taken
from the model's own known pictures (never a number picked by hand):

- k-NN head (DINOv2): the score is the cosine similarity of the picture's feature to its
  nearest memory-bank entry. The threshold is the `KNN_PERCENTILE`th percentile of the
  bank's own leave-one-out scores: each entry's similarity to its nearest OTHER entry (the
  other views of its photo included). A picture below it is less like the bank than 95 %
  of the bank's entries are like one another.
- ImageNet head: the score is the largest softmax probability (the maximum-softmax
  baseline of Hendrycks & Gimpel, 2017). The threshold is the lowest such score over the
  sample gallery's pictures: the model is less sure of this picture than of any picture
  the app ships.

Below the threshold, `known` is False and every page that shows an answer says that the
picture looks like none of what the model knows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..infra.cache import BoundedCache, cache_key
from ..images import SAMPLES, ImageError, fit_to_model, load_sample, to_model_tensor
from ..pipeline import head_of, model_output

KNN_PERCENTILE = 5
THRESHOLD_CACHE = BoundedCache(max_entries=32, max_bytes=2**20)
RULES = {
    "knn": (f"the {KNN_PERCENTILE}th percentile of the memory bank's leave-one-out scores "
            "(each entry's cosine similarity to its nearest other entry)"),
    "imagenet": "the lowest top probability over the sample gallery's pictures",
}


@dataclass(frozen=True)
class OpenSet:
    score: float
    threshold: float
    head: str  # the head's kind: "knn" or "imagenet"

    @property
    def known(self) -> bool:
        return self.score >= self.threshold

    @property
    def rule(self) -> str:
        return RULES[self.head]

    def as_dict(self) -> dict:
        return {"score": self.score, "threshold": self.threshold, "known": self.known,
                "measure": ("nearest bank entry's cosine similarity" if self.head == "knn"
                            else "top softmax probability"), "rule": self.rule}

    def why(self) -> str:
        """Why the picture counts as unknown, with its numbers."""
        if self.head == "knn":
            return (f"its nearest memory-bank picture has cosine similarity {self.score:.3f}, "
                    f"below {self.threshold:.3f}, which 95% of the bank's own pictures reach "
                    "with their nearest neighbour")
        return (f"the model gives its top class only {self.score:.1%}, less than the "
                f"{self.threshold:.1%} it gives even the least clear picture of the sample "
                "gallery")

    def warning(self) -> str:
        """The sentence a page shows next to the answer of an unknown picture."""
        return (f"**This picture looks like none of what the model knows:** {self.why()}. "
                "A classifier must still name one of its classes, so read its answer as the "
                "least unlike class, not as recognition.")


def open_set(model, image, head=None) -> OpenSet:
    """The picture's open-set score against its head's threshold (both cached)."""
    head = head_of(model, head)
    output = model_output(model, image)
    return OpenSet(_score(head, output), threshold(model, head), head.kind)


def _score(head, output: torch.Tensor) -> float:
    if head.kind == "knn":
        feature = F.normalize(output[0].detach().float().cpu(), dim=0)
        return float((head.bank.features @ feature).max())
    return float(head.probabilities(output).max())


def threshold(model, head=None) -> float:
    """The head's threshold, from the bank (k-NN) or the sample gallery (ImageNet)."""
    head = head_of(model, head)
    key = cache_key("open-set-threshold", model, head=head)
    if head.kind == "knn":
        return THRESHOLD_CACHE.get_or_compute(
            key, lambda: float(np.percentile(leave_one_out_scores(head.bank), KNN_PERCENTILE)))
    return THRESHOLD_CACHE.get_or_compute(key, lambda: float(gallery_scores(model, head).min()))


def leave_one_out_scores(bank) -> np.ndarray:
    """Each bank entry's cosine similarity to its nearest other entry."""
    similarity = bank.features @ bank.features.T
    similarity.fill_diagonal_(-np.inf)
    return similarity.max(dim=1).values.numpy()


def gallery_scores(model, head) -> np.ndarray:
    """The top softmax probability of every sample-gallery picture, each in a forward of its
    own as `pipeline.model_output` runs it (a batch may round differently, and the least
    clear gallery picture must meet its own threshold); kept out of the capture cache,
    which the pages' own pictures need."""
    spec, scores = model.spec, []
    for sample_id in SAMPLES:
        try:
            picture = load_sample(sample_id)
        except ImageError:  # its package is not installed: the others still count
            continue
        pixels = to_model_tensor(fit_to_model(picture, spec.input_size, spec.crop_pct,
                                              spec.interpolation), spec.mean, spec.std)
        with model.lock, torch.inference_mode():
            output = model.module(pixels.to(model.device)).float().cpu()
        scores.append(float(head.probabilities(output).max()))
    if not scores:
        raise ImageError("No sample picture is installed, so there is no gallery to compare "
                         "this picture with.")
    return np.array(scores)
