"""Occlusion (Zeiler & Fergus 2014), computed by Captum.

A window of `window` x `window` cells slides over the input in steps of `stride` cells and
is replaced by a reference image; a pixel's attribution is the drop in the class score,
averaged over the windows that covered it. A cell is one patch on a ViT (its patch side,
read from the model) and 16 pixels on a CNN. The map is that drop per pixel (the same for
the three colour channels), raw.
"""

from __future__ import annotations

import numpy as np

from ..errors import OptionError
from .attribution import REFERENCE_NAMES, REFERENCES, attribute, cell_size, reference_pixels
from .base import ANY_FAMILY, ExplainRequest, ExplainResult, register

THEORY = (
    "Covers one window of the image at a time with a reference and records how much the "
    "class score drops (Zeiler & Fergus).",
    "One forward pass per window position (a 16x16 patch grid: 256), batched; no gradient.",
    "Yes: the drop is measured on the chosen class's score.",
    "One value per window position (patch-sized by default on a ViT).",
    "A class score and a reference to paint in (model-input zeros by default).",
    "A direct, model-agnostic test of what the score needs; the benchmark's perturbation "
    "baseline.")


def occlusion(model, image, target: int, window: int = 1, stride: int = 1,
              reference: str = "zeros", batch: int = 32, head=None) -> np.ndarray:
    """(3, H, W) score drop per pixel, cached. `window`, `stride` in cells."""
    from captum.attr import Occlusion

    cell = cell_size(model)
    height, width = model.spec.input_size
    if window * cell > min(height, width):
        raise OptionError(f"A window of {window} cells ({window * cell} px) does not fit the "
                          f"{height}x{width} input.")

    def compute(forward, pixels):
        attributions = Occlusion(forward).attribute(
            pixels, sliding_window_shapes=(3, window * cell, window * cell),
            strides=(3, stride * cell, stride * cell),
            baselines=reference_pixels(model, pixels, reference), perturbations_per_eval=batch)
        return attributions, {}

    return attribute(model, image, target, head,
                     ("occlusion", window, stride, reference, batch), compute)[0]


@register("occlusion", family=ANY_FAMILY, needs_target=True, theory=THEORY,
          off_by_default="one forward pass per window position (196-256): slow on a CPU",
          summary="Occlusion through Captum (--set window=CELLS stride=CELLS reference=... "
                  "batch=N; a cell is a patch on a ViT, 16 px on a CNN).")
def explain(request: ExplainRequest) -> ExplainResult:
    window = request.options.get_int("window", 1, 1, 16)
    stride = request.options.get_int("stride", 1, 1, 16)
    reference = request.options.get_choice("reference", "zeros", REFERENCES)
    batch = request.options.get_int("batch", 32, 1, 512)
    attributions = occlusion(request.model, request.image, request.target, window, stride,
                             reference, batch, request.head)
    cell = cell_size(request.model)
    return ExplainResult(
        map=attributions.mean(axis=0).astype(np.float32), arrays={"attributions": attributions},
        meta={"window": window, "stride": stride, "cell_pixels": cell, "reference": reference,
              "convention": f"Captum Occlusion, window {window}x{window} cells, stride {stride} "
                            f"({cell} px per cell), filled with {REFERENCE_NAMES[reference]}; "
                            "map = class-score drop per pixel averaged over covering windows, "
                            "raw"})
