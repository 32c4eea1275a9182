"""SmoothGrad (Smilkov et al. 2017), computed by Captum's NoiseTunnel over Saliency.

The gradient saliency of `samples` copies of the input, each with Gaussian noise of
standard deviation `noise` x (the input's max - min), averaged; as with plain saliency the
map is the largest |value| over the colour channels. The noise comes from a seeded
generator, so the same options give the same map.
"""

from __future__ import annotations

from .attribution import SEED, attribute, max_abs_channels
from .base import ANY_FAMILY, Cost, ExplainRequest, ExplainResult, Float, Int, Theory, method

THEORY = Theory(
    mechanism="Averages gradient saliency over noisy copies of the input, which washes out the "
              "gradient's pixel-level noise (Smilkov).",
    cost="One forward and one backward pass per noisy copy (16 by default), batched.",
    class_specificity="Weak: like plain saliency it mostly traces the same edges for every "
                      "class.",
    resolution="One value per input pixel.",
    supervision="A class score.",
    best_for="A less speckled gradient map; seeing what plain gradients would show without "
             "the noise.")


def _convention(values: dict) -> str:
    return (f"Captum NoiseTunnel(Saliency), smoothgrad, {values['samples']} samples, noise "
            f"sigma = {values['noise']} x (input max - min) in model-input space, seed "
            f"{values['seed']}; mean |gradient| of the class score; map = max over colour "
            "channels (raw)")


# every noisy copy forward and back, `batch` of them at once
COST = Cost("passes", forwards=lambda values, spec: values["samples"],
            backwards=lambda values, spec: values["samples"],
            batch=lambda values, spec: min(values["batch"], values["samples"]), graded=True)


@method("smoothgrad", family=ANY_FAMILY, needs_target=True, cost=COST,
        title="SmoothGrad",
        theory=THEORY, convention=_convention,
        off_by_default="one forward and backward pass per noisy sample (16): seconds on a CPU",
        summary="SmoothGrad through Captum's NoiseTunnel (--set samples=N noise=F seed=N "
                "batch=N).",
        options=(Int("samples", 16, 1, 256, "Noisy copies of the input."),
                 Float("noise", 0.15, 0.0, 1.0,
                       "Noise standard deviation, as a fraction of the input's max - min."),
                 SEED,
                 Int("batch", 16, 1, 256, "Noisy copies per forward/backward pass (memory, not "
                                          "the result).")))
def explain(request: ExplainRequest, *, samples: int, noise: float, seed: int,
            batch: int) -> ExplainResult:
    """(3, H, W) mean over noisy samples of |d score / d pixel| in `arrays`."""
    from captum.attr import NoiseTunnel, Saliency

    def compute(forward, pixels):
        spread = float(pixels.detach().max() - pixels.detach().min())
        attributions = NoiseTunnel(Saliency(forward)).attribute(
            pixels, nt_type="smoothgrad", nt_samples=samples, nt_samples_batch_size=batch,
            stdevs=noise * spread, abs=True)
        return attributions, {}

    attributions = attribute(request, compute, seed=seed)[0]
    return ExplainResult(
        map=max_abs_channels(attributions), arrays={"attributions": attributions},
        meta={"samples": samples, "noise": noise, "seed": seed})
