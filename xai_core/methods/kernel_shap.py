"""KernelSHAP (Lundberg & Lee 2017) on patch superpixels, computed by Captum.

Each superpixel (a patch on a ViT, a 16-pixel cell on a CNN) is a player; Captum samples
`samples` coalitions (seeded), paints the absent superpixels with a reference image, and
fits the Shapley-kernel-weighted linear model whose coefficients are the attributions.
The map is one coefficient per superpixel, on the cell grid. Slow: one forward pass per
coalition, so the comparison page leaves it off unless chosen.
"""

from __future__ import annotations

import numpy as np

from .attribution import (REFERENCE_NAMES, REFERENCES, attribute, cell_mask, cell_size,
                          reference_pixels)
from .base import ANY_FAMILY, ExplainRequest, ExplainResult, register

THEORY = (
    "Estimates each superpixel's Shapley value from the class score of many random "
    "coalitions of superpixels, the rest painted with a reference (Lundberg & Lee).",
    "One forward pass per sampled coalition (200 by default), batched; no gradient.",
    "Yes: the scores are the chosen class's.",
    "One value per superpixel (a patch on a ViT).",
    "A class score, a reference image and a superpixel grid.",
    "Game-theoretic attributions that add up to the score change; small grids.")


def kernel_shap(model, image, target: int, samples: int = 200, reference: str = "zeros",
                seed: int = 0, batch: int = 32, head=None) -> np.ndarray:
    """(3, H, W) per-pixel copy of each superpixel's coefficient, cached."""
    from captum.attr import KernelShap

    cell = cell_size(model)

    def compute(forward, pixels):
        mask = cell_mask(tuple(pixels.shape[-2:]), cell).to(pixels.device)
        attributions = KernelShap(forward).attribute(
            pixels, baselines=reference_pixels(model, pixels, reference), feature_mask=mask,
            n_samples=samples, perturbations_per_eval=batch)
        return attributions, {}

    return attribute(model, image, target, head,
                     ("kernel-shap", samples, reference, batch), compute, seed=seed)[0]


def per_cell(attributions: np.ndarray, cell: int) -> np.ndarray:
    """The (rows, cols) coefficients: the value at each cell's first pixel (every pixel of
    a cell carries the same coefficient)."""
    return attributions[0, ::cell, ::cell].astype(np.float32)


@register("kernel-shap", family=ANY_FAMILY, needs_target=True, theory=THEORY,
          off_by_default="one forward pass per sampled coalition: slow on a CPU",
          summary="KernelSHAP on patch superpixels through Captum (--set samples=N "
                  "reference=... seed=N batch=N).")
def explain(request: ExplainRequest) -> ExplainResult:
    samples = request.options.get_int("samples", 200, 10, 5000)
    reference = request.options.get_choice("reference", "zeros", REFERENCES)
    seed = request.options.get_int("seed", 0, 0, 2**31 - 1)
    batch = request.options.get_int("batch", 32, 1, 512)
    attributions = kernel_shap(request.model, request.image, request.target, samples,
                               reference, seed, batch, request.head)
    cell = cell_size(request.model)
    return ExplainResult(
        map=per_cell(attributions, cell), arrays={"attributions": attributions},
        meta={"samples": samples, "reference": reference, "seed": seed, "cell_pixels": cell,
              "convention": f"Captum KernelShap, {samples} coalitions (seed {seed}), "
                            f"superpixels of {cell}x{cell} px, absent ones filled with "
                            f"{REFERENCE_NAMES[reference]}; map = one coefficient per "
                            "superpixel, raw"})
