"""SmoothGrad (Smilkov et al. 2017), computed by Captum's NoiseTunnel over Saliency.

The gradient saliency of `samples` copies of the input, each with Gaussian noise of
standard deviation `noise` x (the input's max - min), averaged; as with plain saliency the
map is the largest |value| over the colour channels. The noise comes from a seeded
generator, so the same options give the same map.
"""

from __future__ import annotations

import numpy as np

from .attribution import attribute, max_abs_channels
from .base import ANY_FAMILY, ExplainRequest, ExplainResult, register

THEORY = (
    "Averages gradient saliency over noisy copies of the input, which washes out the "
    "gradient's pixel-level noise (Smilkov).",
    "One forward and one backward pass per noisy copy (16 by default), batched.",
    "Weak: like plain saliency it mostly traces the same edges for every class.",
    "One value per input pixel.", "A class score.",
    "A less speckled gradient map; seeing what plain gradients would show without the noise.")


def smoothgrad(model, image, target: int, samples: int = 16, noise: float = 0.15, seed: int = 0,
               batch: int = 16, head=None) -> np.ndarray:
    """(3, H, W) mean over noisy samples of |d score / d pixel|, cached."""
    from captum.attr import NoiseTunnel, Saliency

    def compute(forward, pixels):
        spread = float(pixels.detach().max() - pixels.detach().min())
        attributions = NoiseTunnel(Saliency(forward)).attribute(
            pixels, nt_type="smoothgrad", nt_samples=samples, nt_samples_batch_size=batch,
            stdevs=noise * spread, abs=True)
        return attributions, {}

    return attribute(model, image, target, head, ("smoothgrad", samples, noise, batch), compute,
                     seed=seed)[0]


@register("smoothgrad", family=ANY_FAMILY, needs_target=True, theory=THEORY,
          off_by_default="one forward and backward pass per noisy sample (16): seconds on a CPU",
          summary="SmoothGrad through Captum's NoiseTunnel (--set samples=N noise=F seed=N "
                  "batch=N).")
def explain(request: ExplainRequest) -> ExplainResult:
    samples = request.options.get_int("samples", 16, 1, 256)
    noise = request.options.get_float("noise", 0.15, 0.0, 1.0)
    seed = request.options.get_int("seed", 0, 0, 2**31 - 1)
    batch = request.options.get_int("batch", 16, 1, 256)
    attributions = smoothgrad(request.model, request.image, request.target, samples, noise,
                              seed, batch, request.head)
    return ExplainResult(
        map=max_abs_channels(attributions), arrays={"attributions": attributions},
        meta={"samples": samples, "noise": noise, "seed": seed,
              "convention": f"Captum NoiseTunnel(Saliency), smoothgrad, {samples} samples, "
                            f"noise sigma = {noise} x (input max - min) in model-input space, "
                            f"seed {seed}; mean |gradient| of the class score; map = max over "
                            "colour channels (raw)"})
