"""KernelSHAP (Lundberg & Lee 2017) on patch superpixels, computed by Captum.

Each superpixel (a patch on a ViT, a 16-pixel cell on a CNN) is a player; Captum samples
`samples` coalitions (seeded), paints the absent superpixels with a reference image, and
fits the Shapley-kernel-weighted linear model whose coefficients are the attributions.
The map is one coefficient per superpixel, on the cell grid. Slow: one forward pass per
coalition. At the default 200 samples the map is mostly sampling noise (DINOv2's 256
players: seed-to-seed Spearman 0.015, and 0.024 at 600 samples; `bench/bench_stability.py`),
and a map of that size
already took over a minute on the 2-core CPU, so raising the default cannot give a stable map
within a minute there: the comparison page leaves it off unless chosen, and says why.
"""

from __future__ import annotations

import numpy as np

from .attribution import (CNN_CELL, REFERENCE, REFERENCE_NAMES, SEED, attribute, cell_mask,
                          cell_size, reference_pixels)
from .base import ANY_FAMILY, Cost, ExplainRequest, ExplainResult, Int, Theory, method

THEORY = Theory(
    mechanism="Estimates each superpixel's Shapley value from the class score of many random "
              "coalitions of superpixels, the rest painted with a reference (Lundberg & Lee).",
    cost="One forward pass per sampled coalition (200 by default), batched; no gradient.",
    class_specificity="Yes: the scores are the chosen class's.",
    resolution="One value per superpixel (a patch on a ViT).",
    supervision="A class score, a reference image and a superpixel grid.",
    best_for="Game-theoretic attributions that add up to the score change; small grids.")


def per_cell(attributions: np.ndarray, cell: int) -> np.ndarray:
    """The (rows, cols) coefficients: the value at each cell's first pixel (every pixel of
    a cell carries the same coefficient)."""
    return attributions[0, ::cell, ::cell].astype(np.float32)


def _convention(values: dict) -> str:
    return (f"Captum KernelShap, {values['samples']} coalitions (seed {values['seed']}), "
            f"superpixels of one patch on a ViT, {CNN_CELL}x{CNN_CELL} px on a CNN, absent ones "
            f"filled with {REFERENCE_NAMES[values['reference']]}; map = one coefficient per "
            "superpixel, raw")


# one forward per coalition, `batch` at once, no gradient
COST = Cost("passes", forwards=lambda values, spec: values["samples"],
            batch=lambda values, spec: min(values["batch"], values["samples"]))


@method("kernel-shap", family=ANY_FAMILY, needs_target=True, cost=COST,
        title="Kernel SHAP",
        theory=THEORY, convention=_convention,
        off_by_default="this map mostly reflects its random samples (seed-to-seed rank "
                       "correlation 0.02 on DINOv2 at the default 200 samples, and one map "
                       "took 3 min on the loaded 2-core test host, so a stable map does not "
                       "fit a minute on a CPU); raise samples",
        benchmark_skip="hundreds of forward passes per image; name it to include it",
        summary="KernelSHAP on patch superpixels through Captum (--set samples=N "
                "reference=... seed=N batch=N).",
        options=(Int("samples", 200, 10, 5000, "Sampled coalitions of superpixels."),
                 REFERENCE, SEED,
                 Int("batch", 32, 1, 512, "Coalitions per forward pass (memory, not the "
                                          "result).")))
def explain(request: ExplainRequest, *, samples: int, reference: str, seed: int,
            batch: int) -> ExplainResult:
    """(3, H, W) per-pixel copy of each superpixel's coefficient in `arrays`."""
    from captum.attr import KernelShap

    model = request.model
    cell = cell_size(model)

    def compute(forward, pixels):
        mask = cell_mask(tuple(pixels.shape[-2:]), cell).to(pixels.device)
        attributions = KernelShap(forward).attribute(
            pixels, baselines=reference_pixels(model, pixels, reference), feature_mask=mask,
            n_samples=samples, perturbations_per_eval=batch)
        return attributions, {}

    attributions = attribute(request, compute,
                             seed=seed)[0]
    return ExplainResult(
        map=per_cell(attributions, cell), arrays={"attributions": attributions},
        meta={"samples": samples, "reference": reference, "seed": seed, "cell_pixels": cell})
