"""What the attribution methods share (Integrated Gradients, SmoothGrad, Occlusion and
KernelSHAP through Captum; gradient saliency and Input x Gradient from the shared capture).

- The forward function Captum differentiates is the model followed by our class score:
  the target logit for an ImageNet head, the k-NN class score for a self-supervised ViT -
  the same scalar every other gradient method uses - one value per image of the batch.
- Every forward holds the model's lock for that batch only, so other sessions go in
  between (the method's entry point caches the result, keyed by every option); methods
  that draw random numbers (SmoothGrad's noise, KernelSHAP's coalitions) do so from a
  seeded fork of torch's generator, one such block at a time in the process, so a map is
  reproducible even with many sessions at once. Lock order: the generator's, then the
  model's.
- Attributions come back as (3, H, W) on the model input; each method names how it
  reduces the colour channels to one map.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from ..infra.faults import StopCheck, check_stop, raise_if_out_of_memory
from ..pipeline import cnn_capture, head_of, prepare, vit_capture
from ..infra.rng import seeded
from .base import Choice, ExplainRequest, Int

REFERENCES = ("zeros", "black", "blur", "rise-blur", "mean")
REFERENCE_NAMES = {
    "zeros": "zeros in model-input space (the training mean colour)",
    "black": "a black image (pixel value 0 before normalisation)",
    "blur": "the image under torchvision's Gaussian blur (11x11, sigma 5)",
    "rise-blur": "the image under RISE's blur",
    "mean": "the image's mean colour",
}
CNN_CELL = 16  # pixels per occlusion / superpixel cell on a CNN (it has no patches)

# Options the Captum methods share (each method lists the ones it takes).
REFERENCE = Choice("reference", "zeros", REFERENCES,
                   "The reference image: " + "; ".join(f"{k} = {v}"
                                                       for k, v in REFERENCE_NAMES.items()) + ".")
SEED = Int("seed", 0, 0, 2**31 - 1, "Seed of the random draws: the same seed, the same map.")


def score_forward(model, target: int, head=None, should_stop: StopCheck | None = None
                  ) -> Callable[[torch.Tensor], torch.Tensor]:
    """x (B, 3, H, W) -> (B,) class score of each image (the head's score_fn sums over its
    batch, so it is applied image by image). Each call holds the model's lock for its own
    forward only: Captum calls it once per batch, and other sessions' model calls go in
    between (the lock is first come, first served), so a method of hundreds of passes does
    not hold up everyone else's page. `should_stop()` is asked before each forward, so a
    stopped run ends within one batch."""
    score = head_of(model, head).score_fn(target)
    module = model.module

    def forward(pixels: torch.Tensor) -> torch.Tensor:
        check_stop(should_stop)
        with model.lock:
            output = module(pixels)
        return torch.stack([score(output[i:i + 1]) for i in range(output.shape[0])])

    return forward


def reference_pixels(model, pixels: torch.Tensor, name: str) -> torch.Tensor:
    """The reference ("baseline") input of Integrated Gradients, Occlusion and KernelSHAP,
    in model-input space, shaped like `pixels`."""
    from ..analysis.perturbation import baseline_pixels

    pixels = pixels.detach()
    if name == "black":
        mean = torch.tensor(model.spec.mean, dtype=pixels.dtype, device=pixels.device)
        std = torch.tensor(model.spec.std, dtype=pixels.dtype, device=pixels.device)
        return (-mean / std)[None, :, None, None].expand_as(pixels).clone()
    return baseline_pixels(pixels, name)


def cell_size(model) -> int:
    """Pixels per cell for window and superpixel options: a ViT's patch side (read from
    the model), CNN_CELL for a CNN."""
    patch = getattr(getattr(model.module, "patch_embed", None), "patch_size", None)
    if patch is None:
        return CNN_CELL
    return int(patch if isinstance(patch, int) else patch[0])


def cell_mask(size: tuple[int, int], cell: int) -> torch.Tensor:
    """(1, 1, H, W) long: the index of the cell (superpixel) every pixel belongs to."""
    rows = torch.arange(size[0]) // cell
    cols = torch.arange(size[1]) // cell
    columns = -(-size[1] // cell)
    return (rows[:, None] * columns + cols[None, :])[None, None]


def attribute(request: ExplainRequest,
              compute: Callable[[Callable, torch.Tensor], tuple[torch.Tensor, dict]],
              seed: int | None = None) -> tuple[np.ndarray, dict]:
    """Run `compute(forward, pixels) -> (attributions (1, 3, H, W), extras)` for the
    request's model, image, target and head, each forward under the model's lock and after
    the request's stop check (`score_forward`), the whole call, given a seed, under torch's
    seeded generator. Returns the attributions as (3, H, W) float32 numpy and the extras.
    Not cached here: the method's entry point caches its result by every option."""
    model = request.model
    # a leaf that asks for gradients (Captum would otherwise switch it on and warn)
    pixels = prepare(model, request.image).pixels.to(model.device).clone().requires_grad_(True)
    forward = score_forward(model, request.target, head_of(model, request.head),
                            request.should_stop)
    try:
        with seeded(model.device, seed):
            attributions, extras = compute(forward, pixels)
    except Exception as error:  # a backward runs outside the lock: it may run out of memory too
        raise_if_out_of_memory(error)
        raise
    return attributions.detach()[0].float().cpu().numpy(), extras


def captured_input_gradient(request: ExplainRequest) -> tuple[np.ndarray, np.ndarray]:
    """(pixels, d score / d pixels), each (3, H, W) float32, from the shared cached capture:
    the same forward + backward that Grad-CAM (CNN) or GAE and the ViT Grad-CAM taxonomy
    read, so a page that shows them too pays no extra pass. The score is the one
    `score_forward` gives Captum (tests compare with Captum's Saliency and InputXGradient)."""
    model = request.model
    if model.spec.family == "cnn":
        capture = cnn_capture(model, request.image, request.target)
    else:
        capture = vit_capture(model, request.image, request.target, request.head)
    pixels = prepare(model, request.image).pixels
    return (pixels[0].float().cpu().numpy(), capture.input_grad[0].float().numpy())


def sum_channels(attributions: np.ndarray) -> np.ndarray:
    """Signed attributions summed over colour: per-pixel contributions that add up to the
    total (the completeness convention of Integrated Gradients and Input x Gradient)."""
    return attributions.sum(axis=0).astype(np.float32)


def max_abs_channels(attributions: np.ndarray) -> np.ndarray:
    """The largest |value| over colour (Simonyan et al.'s saliency convention)."""
    return np.abs(attributions).max(axis=0).astype(np.float32)
