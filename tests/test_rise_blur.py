"""The RISE blur baseline against an independent recomputation of RISE's kernel.

RISE's code builds its kernel with scipy's `gaussian_filter(impulse, 5)` on an 11x11
impulse (reflect mode, truncate 4) and blurs with `conv2d(..., padding=5)` (zero padding).
The oracle below rebuilds that kernel from the 1-D Gaussian weights and the reflect rule by
hand, and blurs with scipy.signal (zero fill), never calling the code under test.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy.signal import correlate2d

from xai_core import pipeline
from xai_core.analysis import perturbation
from xai_core.metrics.faithfulness import faithfulness
from xai_core.images import load_sample
from xai_core.models import get_model

SIZE, SIGMA = 11, 5.0


def reflect(index: int, length: int) -> int:
    """scipy's 'reflect' (half-sample symmetric) boundary: d c b a | a b c d | d c b a."""
    period = 2 * length
    index %= period
    return index if index < length else period - 1 - index


def kernel_by_hand() -> np.ndarray:
    radius = int(4.0 * SIGMA + 0.5)  # scipy's truncate=4
    offsets = np.arange(-radius, radius + 1)
    weights = np.exp(-0.5 * (offsets / SIGMA) ** 2)
    weights /= weights.sum()
    centre = SIZE // 2
    line = np.zeros(SIZE)  # the 1-D filter of an impulse at the centre
    for out in range(SIZE):
        for offset, weight in zip(offsets, weights):
            if reflect(out + offset, SIZE) == centre:
                line[out] += weight
    return np.outer(line, line)  # the filter is separable and so is the impulse


def test_rise_kernel_matches_the_hand_built_kernel_and_its_centre():
    kernel = perturbation.rise_kernel()
    expected = kernel_by_hand()
    np.testing.assert_allclose(kernel, expected, atol=1e-12)
    assert kernel[5, 5] == pytest.approx(0.0088326, abs=1e-6)  # the 0.0088
    assert kernel.sum() == pytest.approx(1.0)
    # the torchvision "blur" baseline is a different kernel: its centre weight is 0.0120
    impulse = torch.zeros(1, 1, 21, 21)
    impulse[0, 0, 10, 10] = 1
    sampled = perturbation.baseline_pixels(impulse.expand(1, 3, 21, 21).contiguous(), "blur")
    assert float(sampled[0, 0, 10, 10]) == pytest.approx(0.01196, abs=1e-4)


def test_rise_blur_is_zero_padded_convolution_per_channel():
    rng = np.random.default_rng(3)
    pixels = rng.normal(size=(1, 3, 30, 26)).astype(np.float32)
    ours = perturbation.baseline_pixels(torch.from_numpy(pixels), "rise-blur")[0].numpy()
    kernel = kernel_by_hand()
    for channel in range(3):
        expected = correlate2d(pixels[0, channel].astype(np.float64), kernel, mode="same",
                               boundary="fill", fillvalue=0)
        np.testing.assert_allclose(ours[channel], expected, atol=1e-5)


def test_deletion_auc_with_rise_blur_equals_an_independent_loop():
    model, image = get_model("efficientnet-lite0"), load_sample("coffee")
    target = pipeline.resolve_target(model, None, image)
    capture = pipeline.cnn_capture(model, image, target)
    alpha = capture.gradients[0].mean(dim=(1, 2))
    cam = torch.relu((alpha[:, None, None] * capture.activations[0]).sum(0)).numpy()
    steps = 8
    curve = faithfulness(model, image, cam, "deletion", target, "rise-blur", steps)

    pixels = pipeline.prepare(model, image).pixels
    height, width = pixels.shape[-2:]
    blurred = np.stack([correlate2d(pixels[0, c].double().numpy(), kernel_by_hand(), mode="same",
                                    boundary="fill") for c in range(3)])
    blurred = torch.from_numpy(blurred).float()[None]
    ranking = F.interpolate(torch.from_numpy(cam)[None, None].float(), size=(height, width),
                            mode="bilinear", align_corners=False).ravel().numpy()
    order = np.argsort(-ranking, kind="stable")
    scores = []
    for step in range(steps + 1):
        removed = order[:round(step / steps * height * width)]
        mask = torch.zeros(height * width, dtype=torch.bool)
        mask[torch.from_numpy(removed)] = True
        mixed = torch.where(mask.reshape(1, 1, height, width), blurred, pixels)
        with torch.no_grad():
            scores.append(float(model.module(mixed).softmax(-1)[0, target]))
    expected_auc = float(np.trapezoid(scores, np.linspace(0, 1, steps + 1)))
    np.testing.assert_allclose(curve.scores, scores, atol=2e-5)
    assert curve.auc == pytest.approx(expected_auc, abs=2e-5)
    # and it is a different baseline from the torchvision blur: the AUCs differ
    sampled = faithfulness(model, image, cam, "deletion", target, "blur", steps)
    assert abs(sampled.auc - curve.auc) > 1e-3
