"""Scaled dot-product attention on tables small enough to check by hand.

Everything here is plain numpy on tiny matrices: the self-attention page shows
each intermediate (scores, scaling, softmax, output) so a learner can follow
the arithmetic. Conventions (Vaswani et al.; the same in timm's ViT):

    scores  S = Q K^T                       rows are queries, columns keys
    scaled  S / sqrt(d_k)                   (or S / T for a temperature T)
    weights A = softmax(S / sqrt(d_k))      row-wise, every row sums to 1
    output  A V

Multi-head: Q = X W_Q, K = X W_K, V = X W_V (D x D each); head h uses columns
h*d_k .. (h+1)*d_k - 1 with d_k = D / heads; the heads' outputs are
concatenated in head order and multiplied by W_O (D x D).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .entropy import entropy


class ToyInputError(ValueError):
    """A table cell that is empty or not a number (message names the cell)."""


# --- the 3-token example (seed "Self-Attention 101") ------------------------------------------

SEED_TOKENS = ("[CLS]", "Eye", "Bg")
SEED_DIMS = ("face/eye", "fur", "background")
# Rows are tokens, columns the three feature dimensions.
SEED_Q = np.array([[2.0, 1.0, 0.0],
                   [3.0, 1.0, -0.5],
                   [0.0, 0.2, 2.0]])
SEED_K = np.array([[1.0, 1.0, 0.0],
                   [2.5, 1.0, -0.5],
                   [0.0, 0.5, 2.0]])
# Our own illustrative values (the seed gives none): what each token passes on.
SEED_V = np.array([[0.0, 1.0, 0.0],
                   [2.0, 1.5, 0.0],
                   [0.0, 0.0, 1.0]])

# --- the 4-token temperature example (our numbers) -------------------------------------------

TEMPERATURE_TOKENS = ("[CLS]", "Ear", "Eye", "Paw")
TEMPERATURE_Q = np.array([[2.0, 1.0, 3.0, 0.4],
                          [2.4, 0.4, 0.0, 1.6],
                          [0.8, 2.8, 1.2, 0.0],
                          [0.0, 0.6, 0.4, 3.0]])
TEMPERATURE_K = np.array([[0.5, 0.5, 0.5, 0.5],
                          [1.0, 0.0, 0.4, 1.2],
                          [0.6, 1.0, 1.6, 0.0],
                          [0.0, 0.6, 0.1, 1.4]])

# --- the multi-head example (our numbers) -----------------------------------------------------

MULTIHEAD_TOKENS = ("[CLS]", "Ear", "Eye", "Paw")
# columns (features): head region, fur, face detail, summary
MULTIHEAD_X = np.array([[0.0, 0.0, 0.0, 1.0],   # [CLS]: only the summary slot
                        [1.0, 1.0, 0.0, 0.0],   # Ear: on the head, furry
                        [1.0, 0.0, 1.0, 0.0],   # Eye: on the head, a face detail
                        [0.0, 1.0, 0.0, 0.0]])  # Paw: furry, far from the head
# Columns 0-1 of the projections read "where" (head region, face detail) and
# columns 2-3 read "what" (fur); with 2 heads, head 1 gets the first pair.
MULTIHEAD_WQ = np.array([[3.0, 0.0, 0.0, 0.0],
                         [0.0, 0.0, 3.0, 0.0],
                         [0.0, 0.0, 0.0, 0.0],
                         [0.0, 3.0, 0.0, 3.0]])
MULTIHEAD_WK = np.array([[3.0, 0.0, 0.0, 0.0],
                         [0.0, 0.0, 3.0, 3.0],
                         [-2.0, 3.0, 0.0, 0.0],
                         [0.0, 0.0, 0.0, 0.0]])
MULTIHEAD_WV = np.eye(4)
MULTIHEAD_WO = np.array([[0.5, 0.5, 0.0, 0.0],
                         [0.5, -0.5, 0.0, 0.0],
                         [0.0, 0.0, 0.5, 0.5],
                         [0.0, 0.0, 0.5, -0.5]])


# --- reading tables ---------------------------------------------------------------------------

def parse_matrix(cells, name: str = "table", row_labels=None, column_labels=None) -> np.ndarray:
    """A float matrix from table cells (numbers or text); empty, non-numeric or
    infinite cells raise ToyInputError naming the cell."""
    rows = [list(row) for row in (cells.values.tolist() if hasattr(cells, "values") else cells)]
    if not rows or not rows[0]:
        raise ToyInputError(f"The {name} table is empty.")
    width = len(rows[0])
    out = np.empty((len(rows), width))
    for i, row in enumerate(rows):
        if len(row) != width:
            raise ToyInputError(f"Row {i + 1} of the {name} table has {len(row)} cells, "
                                f"the first row has {width}.")
        for j, cell in enumerate(row):
            where = (f"{name}[{row_labels[i] if row_labels else i + 1}, "
                     f"{column_labels[j] if column_labels else j + 1}]")
            out[i, j] = _cell_value(cell, where)
    return out


def _cell_value(cell, where: str) -> float:
    if cell is None or (isinstance(cell, str) and not cell.strip()):
        raise ToyInputError(f"Cell {where} is empty: type a number.")
    try:
        value = float(cell.strip() if isinstance(cell, str) else cell)
    except (TypeError, ValueError):
        raise ToyInputError(f"Cell {where} holds '{cell}', which is not a number.") from None
    if math.isnan(value):
        raise ToyInputError(f"Cell {where} is empty: type a number.")
    if math.isinf(value):
        raise ToyInputError(f"Cell {where} is infinite: type a finite number.")
    return value


# --- the arithmetic ---------------------------------------------------------------------------

def softmax(values: np.ndarray, axis: int = -1) -> np.ndarray:
    """Numerically stable softmax (subtract the row maximum first)."""
    values = np.asarray(values, dtype=np.float64)
    shifted = values - values.max(axis=axis, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=axis, keepdims=True)


def softmax_with_temperature(scores: np.ndarray, temperature: float) -> np.ndarray:
    """softmax(scores / T). T = 0 is the limit: one-hot on the row maximum
    (ties share equally); T = inf is the other limit: uniform."""
    scores = np.asarray(scores, dtype=np.float64)
    if temperature < 0 or math.isnan(temperature):
        raise ToyInputError(f"The temperature must be >= 0, got {temperature}.")
    if temperature == 0:
        best = scores == scores.max(axis=-1, keepdims=True)
        return best / best.sum(axis=-1, keepdims=True)
    if math.isinf(temperature):
        return np.full_like(scores, 1.0 / scores.shape[-1])
    return softmax(scores / temperature)


@dataclass(frozen=True)
class AttentionSteps:
    """Every intermediate of one attention head, for display."""

    scores: np.ndarray  # Q K^T
    scale: float  # what the scores are divided by (sqrt(d_k) or a temperature)
    scaled: np.ndarray  # Q K^T / scale
    weights: np.ndarray  # softmax(scaled), rows sum to 1
    output: np.ndarray | None  # weights @ V


def attention_steps(q: np.ndarray, k: np.ndarray, v: np.ndarray | None = None,
                    scale: float | None = None) -> AttentionSteps:
    """softmax(Q K^T / scale) V; `scale` defaults to sqrt(d_k) (columns of Q)."""
    q, k = np.asarray(q, dtype=np.float64), np.asarray(k, dtype=np.float64)
    if q.ndim != 2 or k.ndim != 2 or q.shape[1] != k.shape[1]:
        raise ToyInputError(f"Q {q.shape} and K {k.shape} need the same number of columns (d_k).")
    if v is not None and len(v) != len(k):
        raise ToyInputError(f"V has {len(v)} rows but there are {len(k)} keys.")
    scale = math.sqrt(q.shape[1]) if scale is None else float(scale)
    if not scale > 0:
        raise ToyInputError(f"The scale must be positive, got {scale}.")
    scores = q @ k.T
    scaled = scores / scale
    weights = softmax(scaled)
    output = None if v is None else weights @ np.asarray(v, dtype=np.float64)
    return AttentionSteps(scores, scale, scaled, weights, output)


def temperature_sweep(scores: np.ndarray, temperatures: np.ndarray) -> np.ndarray:
    """Entropy (bits) of softmax(scores / T) for each T: shape (len(T), rows)."""
    return np.stack([entropy(softmax_with_temperature(scores, t), base=2) for t in temperatures])


@dataclass(frozen=True)
class MultiHeadSteps:
    heads: int
    d_k: int
    q: np.ndarray  # (N, D) = X W_Q
    k: np.ndarray
    v: np.ndarray
    per_head: list[AttentionSteps]  # each with weights (N, N) and output (N, d_k)
    concat: np.ndarray  # (N, D): head outputs side by side, head order
    output: np.ndarray  # concat @ W_O


def multi_head_attention(x: np.ndarray, w_q: np.ndarray, w_k: np.ndarray, w_v: np.ndarray,
                         w_o: np.ndarray, heads: int) -> MultiHeadSteps:
    """Multi-head self-attention with d_k = D / heads and no biases."""
    x = np.asarray(x, dtype=np.float64)
    width = x.shape[1]
    if heads < 1 or width % heads:
        raise ToyInputError(f"{heads} heads do not divide the width D = {width}; "
                            f"pick a divisor of {width}.")
    d_k = width // heads
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    per_head = [attention_steps(q[:, h * d_k:(h + 1) * d_k], k[:, h * d_k:(h + 1) * d_k],
                                v[:, h * d_k:(h + 1) * d_k]) for h in range(heads)]
    concat = np.concatenate([steps.output for steps in per_head], axis=1)
    return MultiHeadSteps(heads, d_k, q, k, v, per_head, concat, concat @ np.asarray(w_o))


def seed_steps(q: np.ndarray = SEED_Q, k: np.ndarray = SEED_K,
               v: np.ndarray = SEED_V) -> AttentionSteps:
    """The 3-token example with the standard sqrt(d_k) scaling."""
    return attention_steps(q, k, v)
