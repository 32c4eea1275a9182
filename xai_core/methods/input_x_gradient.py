"""Input x Gradient (Shrikumar et al. 2016), computed by Captum.

Attribution of pixel i: x_i * d score / d x_i on the model input (normalised pixels, so
its implicit reference is model-input zeros, the training mean colour); the map sums the
signed attributions over the colour channels.
"""

from __future__ import annotations

from .attribution import attribute, sum_channels
from .base import ANY_FAMILY, ExplainRequest, ExplainResult, Theory, method

THEORY = (
    "Multiplies each input value by the class score's gradient there: a first-order "
    "estimate of what each pixel adds to the score (Shrikumar).",
    "One forward and one backward pass per class.",
    "Yes: the gradient comes from the chosen class's score.",
    "One value per input pixel.", "A class score.",
    "A cheap signed attribution; the one-step version of Integrated Gradients.")


@method("input-x-gradient", family=ANY_FAMILY, needs_target=True, cost="gradient",
        theory=Theory(*THEORY),
        convention="Captum InputXGradient on the normalised model input (implicit reference: "
                   "model-input zeros); target = the class score; map = summed over colour "
                   "channels (signed, raw)",
        summary="Input x Gradient through Captum (no options).")
def explain(request: ExplainRequest) -> ExplainResult:
    """(3, H, W) x * d score / dx in `arrays`."""
    from captum.attr import InputXGradient

    def compute(forward, pixels):
        return InputXGradient(forward).attribute(pixels), {}

    attributions = attribute(request, compute)[0]
    return ExplainResult(map=sum_channels(attributions), arrays={"attributions": attributions})
