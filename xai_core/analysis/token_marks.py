"""High-norm patch tokens: patches whose hidden state is far longer than all the others.

Darcet et al. (2024, "Vision Transformers Need Registers") describe such tokens
in large, long-trained ViTs (DINOv2, OpenCLIP, DeiT-III): a few low-information
background patches whose output norm forms a separate high mode of the norm
distribution, re-used as storage for global information. We flag a patch only
when the capture shows that separate mode (the rule, named in the UI):

    for every self-attention block from the middle of the network on, take the
    L2 norm of each patch token's block output; sort them; flag the largest
    group of top patches in which every patch is >= HIGH_NORM_RATIO x the
    block's median patch norm AND the smallest of them is >= HIGH_NORM_GAP x
    the largest patch left out (a clear gap to the rest).

A patch is reported once, at the block where its ratio to the median peaks.
Prefix tokens are not considered: they have no pixels to mark.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..capture import Capture, CaptureError

HIGH_NORM_RATIO = 3.0
HIGH_NORM_GAP = 2.0
RULE = (f"patch output norm >= {HIGH_NORM_RATIO:g}x the block's median patch norm, and the "
        f"smallest flagged norm >= {HIGH_NORM_GAP:g}x the largest unflagged one (a separate "
        "high mode); self-attention blocks from the middle of the network on")


@dataclass(frozen=True)
class HighNormToken:
    patch: int  # raster index in the patch grid
    row: int
    col: int
    block: int  # the block where its ratio peaks
    ratio: float  # its norm / the median patch norm in that block
    gap: float  # that block's smallest flagged norm / largest unflagged norm (inf: none left)


def inspected_blocks(capture: Capture):
    records = [b for b in capture.blocks if b.kind == "self"]
    if not records:
        raise CaptureError("High-norm tokens are read from self-attention blocks; none here.")
    return records[len(records) // 2:]


def patch_norms(record) -> np.ndarray:
    return record.acts["out"][0, record.num_prefix_tokens:].double().norm(dim=-1).numpy()


def high_mode(norms: np.ndarray, ratio: float = HIGH_NORM_RATIO,
              gap: float = HIGH_NORM_GAP) -> tuple[np.ndarray, float]:
    """(indices of the separate high mode, its gap) under the rule above; empty if none."""
    norms = np.asarray(norms, dtype=np.float64)
    order = np.argsort(-norms, kind="stable")
    ranked = norms[order]
    floor = ratio * np.median(norms)
    if floor <= 0:
        return order[:0], 0.0
    count, found_gap = 0, 0.0
    for k in range(1, len(ranked) + 1):
        if ranked[k - 1] < floor:
            break
        below = ranked[k] if k < len(ranked) else 0.0
        if ranked[k - 1] >= gap * below:
            count, found_gap = k, (np.inf if below == 0 else ranked[k - 1] / below)
    return order[:count], found_gap


def high_norm_tokens(capture: Capture) -> list[HighNormToken]:
    """Patches in a separate high-norm mode (the rule above), largest ratio first."""
    cols = capture.layout.grid[1]
    best: dict[int, HighNormToken] = {}
    for record in inspected_blocks(capture):
        norms = patch_norms(record)
        median = float(np.median(norms))
        flagged, gap = high_mode(norms)
        for patch in flagged.tolist():
            ratio = float(norms[patch] / median)
            if patch not in best or ratio > best[patch].ratio:
                best[patch] = HighNormToken(patch, patch // cols, patch % cols, record.index,
                                            ratio, float(gap))
    return sorted(best.values(), key=lambda t: -t.ratio)


def largest_norm_ratio(capture: Capture) -> HighNormToken:
    """The patch with the largest norm / median over the inspected blocks, flagged or not
    (its `gap` is its norm over the next largest patch norm of that block), so a page can
    say how far the image is from the rule."""
    cols = capture.layout.grid[1]
    top = None
    for record in inspected_blocks(capture):
        norms = patch_norms(record)
        patch = int(norms.argmax())
        ratio = float(norms[patch] / np.median(norms))
        if top is None or ratio > top.ratio:
            second = np.partition(norms, -2)[-2] if norms.size > 1 else 0.0
            top = HighNormToken(patch, patch // cols, patch % cols, record.index, ratio,
                                float(norms[patch] / second) if second else float("inf"))
    return top
