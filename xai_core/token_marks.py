"""Patch tokens a map should point out rather than hide (prefix tokens are named by
`xai_core.tokens.prefix_token_names`): patch
tokens whose hidden state has an outlying norm (DINOv2's "high-norm artifact"
tokens, Darcet et al. 2024, "Vision Transformers Need Registers").

The outlier rule, named in the UI: for every self-attention block from the
middle of the network on, take the L2 norm of each patch token's block output,
and its robust z-score (x - median) / (1.4826 * MAD) over the patches of that
block; a patch is flagged when its largest z-score reaches `threshold`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .capture import Capture

DEFAULT_THRESHOLD = 6.0


@dataclass(frozen=True)
class HighNormToken:
    patch: int  # raster index in the patch grid
    row: int
    col: int
    z: float  # largest robust z-score over the blocks inspected
    block: int  # the block where it peaks
    ratio: float  # its norm / median patch norm in that block


def robust_z(values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    median = np.median(values)
    spread = 1.4826 * np.median(np.abs(values - median))
    if spread <= 0:
        return np.zeros_like(values)
    return (values - median) / spread


def high_norm_tokens(capture: Capture, threshold: float = DEFAULT_THRESHOLD) -> list[HighNormToken]:
    records = [b for b in capture.blocks if b.kind == "self"]
    records = records[len(records) // 2:]
    cols = capture.layout.grid[1]
    best: dict[int, HighNormToken] = {}
    for record in records:
        norms = record.acts["out"][0, record.num_prefix_tokens:].double().norm(dim=-1).numpy()
        scores = robust_z(norms)
        median = float(np.median(norms))
        for patch in np.flatnonzero(scores >= threshold):
            z = float(scores[patch])
            if patch not in best or z > best[patch].z:
                best[int(patch)] = HighNormToken(int(patch), int(patch // cols), int(patch % cols),
                                                 z, record.index, float(norms[patch] / median))
    return sorted(best.values(), key=lambda t: -t.z)

