"""Gradient saliency (Simonyan et al. 2014), computed by Captum's Saliency.

|d score / d pixel| at input resolution; the map keeps the largest value over the colour
channels, as in the paper. Page 5 shows it beside Grad-CAM.
"""

from __future__ import annotations

import numpy as np

from .attribution import attribute, max_abs_channels
from .base import ANY_FAMILY, ExplainRequest, ExplainResult, register

THEORY = (
    "The size of the class score's gradient with respect to every input pixel (Simonyan).",
    "One forward and one backward pass per class.",
    "Weak: mostly the same edges whatever the class.",
    "One value per input pixel.", "A class score.",
    "A baseline every other map should beat; showing why raw gradients look noisy.")


def saliency(model, image, target: int, head=None) -> np.ndarray:
    """(3, H, W) |d score / d pixel|, cached."""
    from captum.attr import Saliency

    def compute(forward, pixels):
        return Saliency(forward).attribute(pixels, abs=True), {}

    return attribute(model, image, target, head, ("saliency",), compute)[0]


def saliency_map(model, image, target: int, head=None) -> np.ndarray:
    """(H, W) max over colour channels of |d score / d pixel| (raw)."""
    return max_abs_channels(saliency(model, image, target, head))


def saliency_for_display(values: np.ndarray, percentile: float = 99.0) -> np.ndarray:
    """Gradient saliency is dominated by a few pixels; clip at a high percentile (the usual
    display convention) so the rest stays visible. Display only: the raw map is unchanged."""
    return np.minimum(values, np.percentile(values, percentile)).astype(np.float32)


@register("saliency", family=ANY_FAMILY, needs_target=True, theory=THEORY,
          summary="Gradient saliency through Captum (no options).")
def explain(request: ExplainRequest) -> ExplainResult:
    attributions = saliency(request.model, request.image, request.target, request.head)
    return ExplainResult(
        map=max_abs_channels(attributions), arrays={"attributions": attributions},
        meta={"convention": "Captum Saliency (abs=True): |d class score / d pixel| on the model "
                            "input; map = max over colour channels (Simonyan), raw"})
