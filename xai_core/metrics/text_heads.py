"""Numbers about the attention heads of a text encoder (page 8) over a token sequence: head
specialisation, layer progression, rollout, and how attention compares with gradient
importance.

All functions take post-softmax attention with rows = queries (each row sums to 1) and any
leading dimensions, e.g. (L, H, N, N) for every layer and head of a text capture.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..analysis.entropy import entropy
from ..methods.rollout import fuse_heads, residual_step

# name -> (column title, what a high value means); the order is the table's order
METRICS = {
    "self": ("self", "each token attends to itself (the diagonal)"),
    "previous": ("previous token", "each token attends to the token just before it"),
    "next": ("next token", "each token attends to the token just after it"),
    "cls": ("[CLS]-directed", "attention lands on [CLS]"),
    "sep": ("[SEP]-directed", "attention lands on [SEP] (often a 'no-op' parking spot)"),
    "entropy": ("entropy (nats)", "attention is spread over many tokens (log N = uniform)"),
}


def _as_float64(attention) -> np.ndarray:
    if hasattr(attention, "detach"):  # a torch tensor
        attention = attention.detach().cpu().numpy()
    attention = np.asarray(attention, dtype=np.float64)
    if attention.ndim < 2 or attention.shape[-1] != attention.shape[-2]:
        raise ValueError(f"Expected square attention matrices (..., N, N), got {attention.shape}.")
    return attention


def head_metrics(attention, cls_index: int = 0, sep_indices=()) -> dict[str, np.ndarray]:
    """Specialisation of every head, averaged over query rows; arrays of the leading shape.

    self      mean_i A[i, i]
    previous  mean over i >= 1 of A[i, i-1]        (NaN for a single token)
    next      mean over i < N-1 of A[i, i+1]       (NaN for a single token)
    cls       mean_i A[i, cls_index]
    sep       mean_i sum over [SEP] columns of A[i, j]   (0 when there is no [SEP])
    entropy   mean_i of the row entropy in nats    (log N for uniform rows)
    """
    attention = _as_float64(attention)
    n = attention.shape[-1]
    diagonal = np.diagonal(attention, 0, -2, -1)
    nan = np.full(attention.shape[:-2], np.nan)
    sep_columns = list(sep_indices)
    return {
        "self": diagonal.mean(-1),
        "previous": np.diagonal(attention, -1, -2, -1).mean(-1) if n > 1 else nan,
        "next": np.diagonal(attention, 1, -2, -1).mean(-1) if n > 1 else nan,
        "cls": attention[..., :, cls_index].mean(-1),
        "sep": attention[..., :, sep_columns].sum(-1).mean(-1) if sep_columns
        else np.zeros(attention.shape[:-2]),
        "entropy": entropy(attention).mean(-1),
    }


def specialisation_rows(attentions, cls_index: int = 0, sep_indices=()) -> list[dict]:
    """One row per (layer, head) of an (L, H, N, N) stack, layers and heads counted from 0."""
    metrics = head_metrics(attentions, cls_index, sep_indices)
    layers, heads = np.asarray(attentions).shape[:2]
    return [{"layer": layer, "head": head,
             **{name: float(values[layer, head]) for name, values in metrics.items()}}
            for layer in range(layers) for head in range(heads)]


# "find the heads that ..." -> (metric, highest first?)
HEAD_QUESTIONS = {
    "attend to themselves": ("self", True),
    "look at the previous token": ("previous", True),
    "look at the next token": ("next", True),
    "collect on [CLS]": ("cls", True),
    "park on [SEP]": ("sep", True),
    "spread attention widely": ("entropy", True),
    "focus sharply": ("entropy", False),
}


def find_heads(rows: list[dict], question: str, count: int = 5) -> list[dict]:
    """The `count` rows that best answer one of HEAD_QUESTIONS."""
    if question not in HEAD_QUESTIONS:
        raise ValueError(f"Unknown question '{question}'. Ask one of: {', '.join(HEAD_QUESTIONS)}.")
    metric, highest = HEAD_QUESTIONS[question]
    ordered = sorted((r for r in rows if np.isfinite(r[metric])), key=lambda r: r[metric],
                     reverse=highest)
    return ordered[:count]


def layer_progression(attentions, cls_index: int = 0, sep_indices=()) -> dict[str, np.ndarray]:
    """Per layer of an (L, H, N, N) stack, averaged over heads: every head metric, plus the
    entropy as a fraction of log N (1 = uniform attention)."""
    attentions = _as_float64(attentions)
    per_layer = {name: values.mean(-1)
                 for name, values in head_metrics(attentions, cls_index, sep_indices).items()}
    n = attentions.shape[-1]
    per_layer["entropy_fraction"] = per_layer["entropy"] / np.log(n) if n > 1 \
        else np.zeros_like(per_layer["entropy"])
    return per_layer


def text_rollout(attentions) -> np.ndarray:
    """Attention rollout (Abnar & Zuidema) over every layer of an (L, H, N, N) stack, in the
    same "oracle" convention as the image pages (`xai_core.methods.rollout`, after Chefer's
    `compute_rollout_attention`; ../shared/REFERENCE_CONVENTIONS.md):

        F_b = mean over heads of A_b;  Â_b = (F_b + I) / rowsum(F_b + I);
        R = Â_L ... Â_2 Â_1   (left multiplication in forward order).

    Returns R (N, N) float64; row q says how much of token q's final state traces back to
    each input token, so R[cls] is the text counterpart of the image map R[0, prefix:].
    """
    attentions = _as_float64(attentions)
    if attentions.ndim != 4:
        raise ValueError(f"Expected (layers, heads, N, N), got {attentions.shape}.")
    rollout = np.eye(attentions.shape[-1])
    for layer_attention in attentions:
        rollout = residual_step(fuse_heads(layer_attention, "mean"), "oracle") @ rollout
    return rollout


# How attention is turned into one number per token, to set beside gradient importance.
ATTENTION_SOURCES = {
    "cls_last": "attention from [CLS], last layer, mean of heads",
    "received_last": "attention each token receives, last layer, mean of heads and queries",
    "rollout_cls": "rollout from [CLS]",
    "rollout_mean": "rollout averaged over all queries (what mean pooling reads)",
}


def token_attention(attentions, source: str, cls_index: int = 0) -> np.ndarray:
    """(N,) attention per token from an (L, H, N, N) stack, as named in ATTENTION_SOURCES."""
    attentions = _as_float64(attentions)
    if source == "cls_last":
        return attentions[-1].mean(0)[cls_index]
    if source == "received_last":
        return attentions[-1].mean(0).mean(0)
    if source == "rollout_cls":
        return text_rollout(attentions)[cls_index]
    if source == "rollout_mean":
        return text_rollout(attentions).mean(0)
    raise ValueError(f"Unknown attention source '{source}'. Known: {', '.join(ATTENTION_SOURCES)}.")


@dataclass(frozen=True)
class RankAgreement:
    rho: float  # Spearman's rank correlation (NaN when undefined)
    p_value: float
    count: int  # tokens compared


def spearman(a, b) -> RankAgreement:
    """Spearman's rho of two equal-length vectors; NaN with fewer than 3 values or a
    constant vector (no ranking to compare)."""
    from scipy.stats import spearmanr

    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"Need two vectors of one length, got {a.shape} and {b.shape}.")
    if a.size < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return RankAgreement(float("nan"), float("nan"), int(a.size))
    result = spearmanr(a, b)
    return RankAgreement(float(result.statistic), float(result.pvalue), int(a.size))
