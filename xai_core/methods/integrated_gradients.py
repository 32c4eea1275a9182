"""Integrated Gradients (Sundararajan et al. 2017), computed by Captum.

Attribution of pixel i: (x_i - x'_i) times the average gradient along the straight path
from a reference image x' to x (Captum's Gauss-Legendre quadrature with `steps` points).
The map sums the signed attributions over the colour channels, so it adds up to
score(x) - score(x') up to the quadrature error Captum reports as the convergence delta.
"""

from __future__ import annotations

import numpy as np

from .attribution import REFERENCE_NAMES, REFERENCES, attribute, reference_pixels, sum_channels
from .base import ANY_FAMILY, ExplainRequest, ExplainResult, register

THEORY = (
    "Averages the class-score gradient along a straight path from a reference image to the "
    "input and multiplies by the input's difference from the reference (Sundararajan).",
    "One forward and one backward pass per path step (32 by default), batched.",
    "Yes: the gradients come from the chosen class's score.",
    "One value per input pixel.",
    "A class score and a reference image (here: model-input zeros by default).",
    "Attributions that add up to the score change from the reference (completeness).")


def integrated_gradients(model, image, target: int, steps: int = 32, reference: str = "zeros",
                         batch: int = 16, head=None) -> tuple[np.ndarray, float]:
    """(3, H, W) attributions and Captum's convergence delta, cached."""
    from captum.attr import IntegratedGradients

    def compute(forward, pixels):
        attributions, delta = IntegratedGradients(forward).attribute(
            pixels, baselines=reference_pixels(model, pixels, reference), n_steps=steps,
            internal_batch_size=batch, return_convergence_delta=True)
        return attributions, {"delta": float(delta.abs().max())}

    attributions, extras = attribute(model, image, target, head,
                                     ("integrated-gradients", steps, reference, batch), compute)
    return attributions, extras["delta"]


@register("integrated-gradients", family=ANY_FAMILY, needs_target=True, theory=THEORY,
          off_by_default="one forward and backward pass per path step (32): seconds on a CPU",
          summary="Integrated Gradients through Captum (--set steps=N reference=zeros|black|"
                  "blur|rise-blur|mean batch=N).")
def explain(request: ExplainRequest) -> ExplainResult:
    steps = request.options.get_int("steps", 32, 2, 512)
    reference = request.options.get_choice("reference", "zeros", REFERENCES)
    batch = request.options.get_int("batch", 16, 1, 512)
    attributions, delta = integrated_gradients(request.model, request.image, request.target,
                                               steps, reference, batch, request.head)
    return ExplainResult(
        map=sum_channels(attributions), arrays={"attributions": attributions},
        meta={"steps": steps, "reference": reference, "convergence_delta": delta,
              "convention": "Captum IntegratedGradients (Gauss-Legendre, "
                            f"{steps} steps) from {REFERENCE_NAMES[reference]}; target = the "
                            "class score (logit, or k-NN class score); map = attributions "
                            "summed over colour channels (signed, raw)"})
