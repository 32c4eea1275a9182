"""Input x Gradient (Shrikumar et al. 2016).

Attribution of pixel i: x_i * d score / d x_i on the model input (normalised pixels, so
its implicit reference is model-input zeros, the training mean colour); the map sums the
signed attributions over the colour channels. The gradient is the shared capture's input
gradient, equal to Captum's `InputXGradient` on the same score (tested).
"""

from __future__ import annotations

from .attribution import captured_input_gradient, sum_channels
from .base import ANY_FAMILY, ExplainRequest, ExplainResult, Theory, method

THEORY = Theory(
    mechanism="Multiplies each input value by the class score's gradient there: a first-order "
              "estimate of what each pixel adds to the score (Shrikumar).",
    cost="One forward and one backward pass per class.",
    class_specificity="Yes: the gradient comes from the chosen class's score.",
    resolution="One value per input pixel.",
    supervision="A class score.",
    best_for="A cheap signed attribution; the one-step version of Integrated Gradients.")


@method("input-x-gradient", family=ANY_FAMILY, needs_target=True, cost="gradient",
        title="Input x Gradient",
        theory=THEORY,
        convention="x * d class score / dx on the normalised model input (implicit "
                   "reference: model-input zeros), from the shared capture's backward (equal "
                   "to Captum InputXGradient); map = summed over colour channels (signed, raw)",
        summary="Input x Gradient from the shared capture (no options).")
def explain(request: ExplainRequest) -> ExplainResult:
    """(3, H, W) x * d score / dx in `arrays`."""
    pixels, gradient = captured_input_gradient(request)
    attributions = pixels * gradient
    return ExplainResult(map=sum_channels(attributions), arrays={"attributions": attributions})
