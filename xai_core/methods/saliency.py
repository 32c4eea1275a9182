"""Gradient saliency (Simonyan et al. 2014): |d score / d pixel| at input resolution; the
map keeps the largest value over the colour channels, as in the paper. Page 5 shows it
beside Grad-CAM.

The gradient is the shared capture's input gradient (one backward serves Grad-CAM or GAE
and this), equal to Captum's `Saliency(abs=True)` on the same score (tested).
"""

from __future__ import annotations

import numpy as np

from .attribution import captured_input_gradient, max_abs_channels
from .base import ANY_FAMILY, ExplainRequest, ExplainResult, Theory, method

THEORY = Theory(
    mechanism="The size of the class score's gradient with respect to every input pixel "
              "(Simonyan).",
    cost="One forward and one backward pass per class.",
    class_specificity="Weak: mostly the same edges whatever the class.",
    resolution="One value per input pixel.",
    supervision="A class score.",
    best_for="A baseline every other map should beat; showing why raw gradients look noisy.")


def saliency_for_display(values: np.ndarray, percentile: float = 99.0) -> np.ndarray:
    """Gradient saliency is dominated by a few pixels; clip at a high percentile (the usual
    display convention) so the rest stays visible. Display only: the raw map is unchanged."""
    return np.minimum(values, np.percentile(values, percentile)).astype(np.float32)


@method("saliency", family=ANY_FAMILY, needs_target=True, cost="gradient",
        theory=THEORY,
        convention="|d class score / d pixel| on the model input, from the shared capture's "
                   "backward (equal to Captum Saliency, abs=True); map = max over colour "
                   "channels (Simonyan), raw",
        summary="Gradient saliency from the shared capture (no options).")
def explain(request: ExplainRequest) -> ExplainResult:
    """(3, H, W) |d score / d pixel| in `arrays`; the map is its max over colour channels."""
    attributions = np.abs(captured_input_gradient(request)[1])
    return ExplainResult(map=max_abs_channels(attributions),
                         arrays={"attributions": attributions})
