"""The perturbation baselines: what an input becomes where it is removed. Used by the
faithfulness curves (`metrics.faithfulness`), the reference image of the attribution methods
(`methods.attribution`) and cause vs claim's pixel removal.

Baselines: "zeros" = zeros in model-input space (the training mean colour once
normalised); "blur" = torchvision's Gaussian blur, an 11x11 kernel sampled from a
Gaussian with sigma 5, reflect padding (centre weight 0.0120); "rise-blur" = the
kernel of the RISE authors' code: scipy's `gaussian_filter` (sigma 5) applied to an
11x11 impulse, convolved with zero padding (centre weight 0.0088; image borders fade
towards zero, i.e. towards the training mean colour); "mean" = the image's own mean
colour. All are computed in model-input space, as RISE does.
"""

from __future__ import annotations

import numpy as np
import torch

from ..infra.errors import OptionError

BASELINES = ("zeros", "blur", "rise-blur", "mean")
BASELINE_NAMES = {"zeros": "zeros in model-input space (the training mean colour)",
                  "blur": "Gaussian blur (torchvision: sampled 11x11 kernel, sigma 5, reflect "
                          "padding)",
                  "rise-blur": "RISE's blur (scipy gaussian_filter of an 11x11 impulse, sigma 5, "
                               "zero padding)",
                  "mean": "the image's mean colour"}
BLUR_KERNEL, BLUR_SIGMA = 11, 5.0


def baseline_pixels(pixels: torch.Tensor, baseline: str) -> torch.Tensor:
    """The fully perturbed image, in model-input (normalised) space, same shape as `pixels`."""
    if baseline == "zeros":
        return torch.zeros_like(pixels)
    if baseline == "blur":
        from torchvision.transforms.v2.functional import gaussian_blur

        return gaussian_blur(pixels, [BLUR_KERNEL, BLUR_KERNEL], [BLUR_SIGMA, BLUR_SIGMA])
    if baseline == "rise-blur":
        return rise_blur(pixels)
    if baseline == "mean":
        return pixels.mean(dim=(-2, -1), keepdim=True).expand_as(pixels).clone()
    raise OptionError(f"Baseline '{baseline}' is not one of: {', '.join(BASELINES)}.")


def rise_kernel(size: int = BLUR_KERNEL, sigma: float = BLUR_SIGMA) -> np.ndarray:
    """The RISE code's blur kernel: scipy's gaussian_filter (its defaults: reflect mode,
    truncate 4) run on a size x size impulse. Sigma 5 reaches past the 11x11 window, so
    the reflected tails fold back in: the weights still sum to 1 but are flatter than a
    sampled Gaussian."""
    from scipy.ndimage import gaussian_filter

    impulse = np.zeros((size, size))
    impulse[size // 2, size // 2] = 1.0
    return gaussian_filter(impulse, sigma)


def rise_blur(pixels: torch.Tensor) -> torch.Tensor:
    """(B, C, H, W) blurred channel by channel with `rise_kernel`, zero padding, as RISE's
    `conv2d(x, kern, padding=klen // 2)` with a kernel on the channel diagonal."""
    channels = pixels.shape[1]
    kernel = torch.as_tensor(rise_kernel(), dtype=pixels.dtype, device=pixels.device)
    weight = kernel[None, None].expand(channels, 1, *kernel.shape)
    return torch.nn.functional.conv2d(pixels, weight, padding=BLUR_KERNEL // 2, groups=channels)

