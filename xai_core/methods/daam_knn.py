"""DAAM's k-NN variant (seed 001 eq. 13): a self-supervised ViT has no class logit, so the
backward starts from <output, w>, where w are dimension-wise importance weights computed
from the bank entries of the target class among the k nearest neighbours. One forward and
one backward: w is computed from the output inside the capture."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..infra.cache import cache_key
from ..capture import Capture
from ..capture import capture as run_model_capture
from ..models.knn import KNN_K, KNN_TEMPERATURE, MemoryBank, Neighbour, knn_vote
from ..pipeline import CAPTURE_CACHE, head_of, prepare
from ..analysis.tokens import describe_neighbours

KNN_FORMULAS = ("official", "paper")
KNN_FORMULA_NAMES = {
    "official": "official code: mean over voters of x̂_d·ẑ_kd, divided by |their sum over d|, "
                "then min-max to [0, 1]",
    "paper": "paper eq. 13: mean over voters of x̂_d·ẑ_kd / |cos(x, z_k)|, then ReLU (eq. 14)",
}


@dataclass
class KnnWeights:
    """Eq. 13 for one image and one class of a k-NN memory bank."""

    weights: np.ndarray  # (D,) what the backward uses as d(target)/d(output)
    raw: np.ndarray  # (D,) before min-max / ReLU
    formula: str
    neighbours: list[Neighbour]  # the k nearest bank entries (the vote)
    voters: list[Neighbour]  # the bank entries the weights were computed from
    fallback: bool  # True: the class had no entry among the k nearest; its nearest were used
    class_label: str

    def fingerprint(self) -> str:
        return hashlib.sha256(self.weights.astype(np.float32).tobytes()).hexdigest()[:16]


def dimension_weights(feature: torch.Tensor, members: torch.Tensor,
                      formula: str = "official") -> tuple[np.ndarray, np.ndarray]:
    """Eq. 13 from a feature (D,) and the voting bank entries (K, D).

    Returns (weights, raw). "official": the released code (products averaged over
    voters, divided by |sum over d| = |mean cosine|, min-max to [0, 1]).
    "paper": each voter's products divided by its own |cosine|, averaged; ReLU.
    """
    x = F.normalize(feature.detach().double().reshape(-1), dim=0)
    z = F.normalize(members.detach().double().reshape(-1, x.numel()), dim=1)
    products = x.unsqueeze(0) * z  # (K, D): x̂_d * ẑ_kd
    if formula == "official":
        mean = products.mean(0)
        total = mean.sum().abs()
        raw = mean / total if total > 0 else mean
        span = raw.max() - raw.min()
        weights = (raw - raw.min()) / span if span > 0 else torch.ones_like(raw)
    elif formula == "paper":
        cosine = products.sum(1, keepdim=True).abs().clamp(min=1e-12)
        raw = (products / cosine).mean(0)
        weights = raw.clamp(min=0)
    else:
        raise ValueError(f"Unknown eq. 13 formula '{formula}' ({', '.join(KNN_FORMULAS)}).")
    return weights.float().numpy(), raw.float().numpy()


def knn_weights(bank: MemoryBank, feature: torch.Tensor, class_index: int,
                formula: str = "official", k: int = KNN_K,
                temperature: float = KNN_TEMPERATURE) -> KnnWeights:
    """The weights of eq. 13 from the target class's entries among the k nearest."""
    _, neighbours = knn_vote(bank, feature, k, temperature)
    label = bank.class_names[class_index]
    voters = [n for n in neighbours if n.label == label]
    fallback = not voters
    if fallback:  # "where would it look for this class": its own nearest entries
        query = F.normalize(feature.detach().float().reshape(1, -1), dim=1)[0]
        rows = [i for i, l in enumerate(bank.labels) if l == label]
        similarity = bank.features[rows] @ query
        order = similarity.argsort(descending=True)[:k].tolist()
        voters = [Neighbour(rows[i], label, bank.sources[rows[i]], float(similarity[i]))
                  for i in order]
    weights, raw = dimension_weights(feature, bank.features[[v.index for v in voters]], formula)
    return KnnWeights(weights, raw, formula, neighbours, voters, fallback, label)


def voter_rows(weights: KnnWeights) -> list[dict]:
    """The k nearest bank entries, in vote order, marked when they shaped w."""
    used = {v.index for v in weights.voters}
    rows = [{"rank": str(i + 1), "bank entry": view.source, "label": view.label,
             "cosine": round(view.similarity, 4), "used for w": "yes" if n.index in used else ""}
            for i, (n, view) in enumerate(zip(weights.neighbours,
                                              describe_neighbours(weights.neighbours)))]
    if weights.fallback:  # the class's own nearest entries, outside the vote
        rows += [{"rank": "-", "bank entry": view.source, "label": view.label,
                  "cosine": round(view.similarity, 4), "used for w": "yes (outside the vote)"}
                 for view in describe_neighbours(weights.voters)]
    return rows


def weighted_output_score(weights: np.ndarray):
    """score_fn(output) = <output, w>: its gradient at the output is w (eq. 13 -> 8)."""
    vector = torch.as_tensor(weights, dtype=torch.float32)

    def score(output: torch.Tensor) -> torch.Tensor:
        return (output * vector.to(output.device, output.dtype)).sum()
    return score


def knn_pass(model, pixels: torch.Tensor, target: int, head,
             formula: str = "official") -> tuple[KnnWeights, Capture]:
    """ONE forward + backward for the k-NN variant: the weights of eq. 13 are computed
    from the output inside the capture, and the backward starts from them
    (score = <output, w>, so d score / d output = w)."""
    found: dict[str, KnnWeights] = {}

    def score(output: torch.Tensor) -> torch.Tensor:
        found["weights"] = knn_weights(head.bank, output.detach()[0].float().cpu(), target,
                                       formula)
        return weighted_output_score(found["weights"].weights)(output)
    capture = run_model_capture(model, pixels, score)
    return found["weights"], capture


def knn_capture(model, image, target: int, head=None,
                formula: str = "official") -> tuple[KnnWeights, Capture]:
    """`knn_pass`, cached. The key names everything w depends on (image, weights of the
    model, bank fingerprint, class, formula), so equal keys mean equal w. Only DAAM reads
    it, and of the gradients only the context's: the others (as many bytes as the
    activations, 54 MB for DINOv2-S) are not kept."""
    head = head_of(model, head)
    prepared = prepare(model, image)
    key = cache_key("daam-knn-capture", model, target, formula, image=prepared.sha256, head=head)

    def compute() -> tuple[KnnWeights, Capture]:
        weights, found = knn_pass(model, prepared.pixels, target, head, formula)
        for record in found.blocks:
            record.grads = {"context": record.grads["context"]}
        return weights, found
    return CAPTURE_CACHE.get_or_compute(key, compute)
