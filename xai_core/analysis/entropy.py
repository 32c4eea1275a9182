"""Shannon entropy of probability distributions: the one definition behind the sink
analysis (nats), the text encoder's head metrics (nats), the toy attention tables (bits)
and the Explainer tour's sharpest head."""

from __future__ import annotations

import math

import numpy as np


def entropy(probabilities, axis: int = -1, base: float = math.e) -> np.ndarray:
    """-sum p log p along `axis`, with 0 log 0 = 0: in nats (base e) or bits (base 2).
    0 for a one-hot distribution, log N for a uniform one over N. The values along `axis`
    must already sum to 1 (an attention row does)."""
    p = np.asarray(probabilities, dtype=np.float64)
    logs = np.log(np.where(p > 0, p, 1.0))
    return -(p * logs).sum(axis=axis) / math.log(base)
