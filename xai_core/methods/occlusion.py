"""Occlusion (Zeiler & Fergus 2014), computed by Captum.

A window of `window` x `window` cells slides over the input in steps of `stride` cells and
is replaced by a reference image; a pixel's attribution is the drop in the class score,
averaged over the windows that covered it. A cell is one patch on a ViT (its patch side,
read from the model) and 16 pixels on a CNN. The map is that drop per pixel (the same for
the three colour channels), raw.
"""

from __future__ import annotations

import math

import numpy as np

from ..infra.errors import OptionError
from .attribution import (CNN_CELL, REFERENCE, REFERENCE_NAMES, attribute, cell_size,
                          reference_pixels)
from .base import (ANY_FAMILY, Cost, ExplainRequest, ExplainResult, FromModel, Int, Theory,
                   method)

THEORY = Theory(
    mechanism="Covers one window of the image at a time with a reference and records how much the "
              "class score drops (Zeiler & Fergus).",
    cost="One forward pass per window position (a 16x16 patch grid: 256), batched; no gradient.",
    class_specificity="Yes: the drop is measured on the chosen class's score.",
    resolution="One value per window position (patch-sized by default on a ViT).",
    supervision="A class score and a reference to paint in (model-input zeros by default).",
    best_for="A direct, model-agnostic test of what the score needs; the benchmark's perturbation "
             "baseline.")


CELLS_THAT_FIT = FromModel("the cells that fit the input",
                           lambda model: min(model.spec.input_size) // cell_size(model))


def _stride_within_window(values: dict, model) -> None:
    if values["stride"] > values["window"]:  # Captum refuses it, and cells would be skipped
        raise OptionError(f"Option stride={values['stride']} is larger than window="
                          f"{values['window']}: windows would skip cells.")


def _convention(values: dict) -> str:
    return (f"Captum Occlusion, window {values['window']}x{values['window']} cells, stride "
            f"{values['stride']} (a cell is the patch side on a ViT, {CNN_CELL} px on a CNN), "
            f"filled with {REFERENCE_NAMES[values['reference']]}; map = class-score drop per "
            "pixel averaged over covering windows, raw")


def window_positions(values: dict, model_or_spec) -> int:
    """Captum's count of window positions on the model input: per side
    ceil((input - window) / stride) + 1, in pixels (the last window may hang over the edge). The cell is read from the loaded model
    when there is one, else from its spec (the patch side it documents, or CNN_CELL)."""
    if hasattr(model_or_spec, "module"):
        cell, size = cell_size(model_or_spec), model_or_spec.spec.input_size
    else:
        cell, size = model_or_spec.patch_size or CNN_CELL, model_or_spec.input_size
    window, stride = values["window"] * cell, values["stride"] * cell
    return math.prod(max(0, -(-(side - window) // stride)) + 1 for side in size)


# one forward per window position (and one of the whole input first), no gradient
COST = Cost("passes", forwards=lambda values, model: window_positions(values, model) + 1,
            batch=lambda values, model: min(values["batch"], window_positions(values, model)))


@method("occlusion", family=ANY_FAMILY, needs_target=True, cost=COST,
        theory=THEORY, convention=_convention,
        off_by_default="one forward pass per window position (196-256): slow on a CPU",
        summary="Occlusion through Captum (--set window=CELLS stride=CELLS reference=... "
                "batch=N; a cell is a patch on a ViT, 16 px on a CNN).",
        options=(Int("window", 1, 1, CELLS_THAT_FIT, "Side of the covered square, in cells."),
                 Int("stride", 1, 1, 16, "Step between window positions, in cells."),
                 REFERENCE,
                 Int("batch", 32, 1, 512, "Window positions per forward pass (memory, not the "
                                          "result).")),
        check=_stride_within_window)
def explain(request: ExplainRequest, *, window: int, stride: int, reference: str,
            batch: int) -> ExplainResult:
    """(3, H, W) score drop per pixel in `arrays`."""
    from captum.attr import Occlusion

    model = request.model
    cell = cell_size(model)

    def compute(forward, pixels):
        attributions = Occlusion(forward).attribute(
            pixels, sliding_window_shapes=(3, window * cell, window * cell),
            strides=(3, stride * cell, stride * cell),
            baselines=reference_pixels(model, pixels, reference), perturbations_per_eval=batch)
        return attributions, {}

    attributions = attribute(request, compute)[0]
    return ExplainResult(
        map=attributions.mean(axis=0).astype(np.float32), arrays={"attributions": attributions},
        meta={"window": window, "stride": stride, "cell_pixels": cell, "reference": reference})
