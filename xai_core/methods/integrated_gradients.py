"""Integrated Gradients (Sundararajan et al. 2017), computed by Captum.

Attribution of pixel i: (x_i - x'_i) times the average gradient along the straight path
from a reference image x' to x (Captum's Gauss-Legendre quadrature with `steps` points).
The map sums the signed attributions over the colour channels, so it adds up to
score(x) - score(x') up to the quadrature error Captum reports as the convergence delta;
`meta.completeness_error` is that delta relative to |score(x) - score(x')| (above
COMPLETENESS_LIMIT the page says the map does not add up and asks for more steps).
"""

from __future__ import annotations

from .attribution import REFERENCE, REFERENCE_NAMES, attribute, reference_pixels, sum_channels
from .base import ANY_FAMILY, Cost, ExplainRequest, ExplainResult, Int, Theory, method

COMPLETENESS_LIMIT = 0.05  # the share of the score change above which the page warns

THEORY = Theory(
    mechanism="Averages the class-score gradient along a straight path from a reference image "
              "to the input and multiplies by the input's difference from the reference "
              "(Sundararajan).",
    cost="One forward and one backward pass per path step (32 by default), batched.",
    class_specificity="Yes: the gradients come from the chosen class's score.",
    resolution="One value per input pixel.",
    supervision="A class score and a reference image (here: model-input zeros by default).",
    best_for="Attributions that add up to the score change from the reference (completeness).")


def _convention(values: dict) -> str:
    return (f"Captum IntegratedGradients (Gauss-Legendre, {values['steps']} steps) from "
            f"{REFERENCE_NAMES[values['reference']]}; target = the class score (logit, or k-NN "
            "class score); map = attributions summed over colour channels (signed, raw)")


# `steps` path points forward and back, `batch` of them at once; Captum's convergence delta
# adds one forward of the input and one of the reference.
COST = Cost("passes", forwards=lambda values, spec: values["steps"] + 2,
            backwards=lambda values, spec: values["steps"],
            batch=lambda values, spec: min(values["batch"], values["steps"]), graded=True)


@method("integrated-gradients", family=ANY_FAMILY, needs_target=True, cost=COST,
        title="Integrated Gradients",
        theory=THEORY, convention=_convention,
        off_by_default="one forward and backward pass per path step (32): seconds on a CPU",
        summary="Integrated Gradients through Captum (--set steps=N reference=zeros|black|"
                "blur|rise-blur|mean batch=N).",
        options=(Int("steps", 32, 2, 512, "Points on the path from the reference to the input."),
                 REFERENCE,
                 Int("batch", 16, 1, 512, "Path points per forward/backward pass (memory, "
                                          "not the result).")))
def explain(request: ExplainRequest, *, steps: int, reference: str, batch: int) -> ExplainResult:
    """(3, H, W) attributions in `arrays`; in `meta` Captum's convergence delta, the score
    change it should equal and the completeness error (the one relative to the other)."""
    from captum.attr import IntegratedGradients

    model = request.model

    def compute(forward, pixels):
        start = reference_pixels(model, pixels, reference)
        attributions, delta = IntegratedGradients(forward).attribute(
            pixels, baselines=start, n_steps=steps, internal_batch_size=batch,
            return_convergence_delta=True)
        # Captum's delta is sum(attributions) - (f(x) - f(reference)), from the two forwards
        # it runs itself: the score change follows without a pass of our own.
        change = attributions[0].detach().double().sum() - float(delta[0])
        return attributions, {"delta": float(delta[0]), "change": float(change)}

    attributions, extras = attribute(request, compute)
    return ExplainResult(
        map=sum_channels(attributions), arrays={"attributions": attributions},
        meta={"steps": steps, "reference": reference,
              "convergence_delta": abs(extras["delta"]), "score_change": extras["change"],
              "completeness_error": completeness_error(extras["delta"], extras["change"])})


def completeness_error(delta: float, change: float) -> float | None:
    """|delta| / |f(x) - f(reference)|: how far the attributions miss adding up to the score
    change, as a share of it (None when the score does not change: nothing to add up)."""
    return abs(delta) / abs(change) if change != 0 else None
