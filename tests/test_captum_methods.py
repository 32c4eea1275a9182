"""The Captum-based methods equal Captum's own attribute() called here on the same model,
image and target; their maps pass basic sanity checks (completeness for Integrated
Gradients, the ViT's k-NN score given to Captum by hand, class sensitivity on the cat +
coffee collage for the class-discriminative ones)."""

import numpy as np
import pytest
import torch
from captum.attr import (InputXGradient, IntegratedGradients, KernelShap, NoiseTunnel, Occlusion,
                         Saliency)

from tolerance import assert_close, network_tolerance
from xai_core import pipeline
from xai_core.cli.main import main
from xai_core.infra.errors import OptionError
from xai_core.images import load_sample
from xai_core.methods import METHODS
from xai_core.models import get_model
from xai_core.models.knn import class_score


@pytest.fixture(scope="module")
def cnn():
    model = get_model("efficientnet-lite0")
    image = load_sample("coffee")
    target = pipeline.resolve_target(model, None, image)
    return model, image, target, pipeline.prepare(model, image).pixels


def run(model, image, target, name, **options):
    return METHODS[name](model, image, target=target,
                         **{k: str(v) for k, v in options.items()})


@pytest.mark.numeric
def test_cnn_methods_equal_captum_on_the_logit(cnn):
    model, image, target, pixels = cnn
    module = model.module
    x = pixels.clone().requires_grad_(True)
    zeros = torch.zeros_like(pixels)
    expected = {
        "saliency": Saliency(module).attribute(x, target=target, abs=True),
        "input-x-gradient": InputXGradient(module).attribute(x, target=target),
        "integrated-gradients": IntegratedGradients(module).attribute(
            x, baselines=zeros, target=target, n_steps=6, internal_batch_size=6),
        "occlusion": Occlusion(module).attribute(
            x, sliding_window_shapes=(3, 64, 64), strides=(3, 48, 48), baselines=zeros,
            target=target, perturbations_per_eval=8),
    }
    options = {"integrated-gradients": {"steps": 6, "batch": 6},
               "occlusion": {"window": 4, "stride": 3, "batch": 8}}
    for name, reference in expected.items():  # Captum batches the passes its own way
        result = run(model, image, target, name, **options.get(name, {}))
        attributions = reference.detach()[0].numpy()
        passes = 1 if name == "occlusion" else 2  # forwards only, or forward and back
        assert_close(result.arrays["attributions"], attributions,
                     network_tolerance(module, attributions, passes=passes), name)
    # the maps reduce the channels as each method's convention says
    ig = run(model, image, target, "integrated-gradients", steps=6, batch=6)
    np.testing.assert_allclose(ig.map, ig.arrays["attributions"].sum(0), rtol=1e-6)
    saliency = run(model, image, target, "saliency")
    np.testing.assert_allclose(saliency.map, np.abs(saliency.arrays["attributions"]).max(0))


@pytest.mark.numeric
def test_seeded_methods_equal_captum_under_the_same_seed(cnn):
    model, image, target, pixels = cnn
    module = model.module
    x = pixels.clone().requires_grad_(True)
    spread = float(pixels.max() - pixels.min())
    with torch.random.fork_rng():
        torch.manual_seed(5)
        smooth = NoiseTunnel(Saliency(module)).attribute(
            x, nt_type="smoothgrad", nt_samples=4, nt_samples_batch_size=4, stdevs=0.2 * spread,
            target=target, abs=True)
    ours = run(model, image, target, "smoothgrad", samples=4, noise=0.2, seed=5, batch=4)
    expected = smooth.detach()[0].numpy()
    assert_close(ours.arrays["attributions"], expected,
                 network_tolerance(module, expected, passes=2), "smoothgrad")
    mask = (torch.arange(224)[:, None] // 16 * 14 + torch.arange(224)[None, :] // 16)[None, None]
    with torch.random.fork_rng():
        torch.manual_seed(3)
        shap = KernelShap(module).attribute(x, baselines=torch.zeros_like(pixels), target=target,
                                            feature_mask=mask, n_samples=30,
                                            perturbations_per_eval=16)
    ours = run(model, image, target, "kernel-shap", samples=30, seed=3, batch=16)
    expected = shap.detach()[0].numpy()
    assert_close(ours.arrays["attributions"], expected, network_tolerance(module, expected),
                 "kernel-shap")
    assert ours.map.shape == (14, 14)  # one coefficient per 16-pixel superpixel
    assert_close(ours.map, expected[0, ::16, ::16], network_tolerance(module, expected))


def test_integrated_gradients_is_complete(cnn):
    """sum of attributions = f(x) - f(reference), up to the quadrature error."""
    model, image, target, pixels = cnn
    result = run(model, image, target, "integrated-gradients", steps=32, reference="mean")
    mean = pixels.mean(dim=(2, 3), keepdim=True).expand_as(pixels)
    with torch.no_grad():
        change = float(model.module(pixels)[0, target] - model.module(mean)[0, target])
    assert float(result.map.sum()) == pytest.approx(change, abs=0.02 * abs(change) + 1e-3)
    assert result.meta["convergence_delta"] < 0.02 * abs(change) + 1e-3


@pytest.mark.numeric
def test_vit_knn_score_equals_captum_and_the_capture_gradient():
    """DINOv2's target is the k-NN class score; Captum is given that score here by hand."""
    model, image = get_model("dinov2-s14"), load_sample("chelsea")
    target = pipeline.resolve_target(model, None, image)
    pixels = pipeline.prepare(model, image).pixels

    def knn_score(x):
        features = model.module(x)
        return torch.stack([class_score(model.head.bank, features[i:i + 1], target)
                            for i in range(len(features))])

    x = pixels.clone().requires_grad_(True)
    expected = IntegratedGradients(knn_score).attribute(x, baselines=torch.zeros_like(pixels),
                                                        n_steps=4, internal_batch_size=4)
    ours = run(model, image, target, "integrated-gradients", steps=4, batch=4)
    expected = expected.detach()[0].numpy()
    assert_close(ours.arrays["attributions"], expected,
                 network_tolerance(model.module, expected, passes=2), "integrated-gradients")
    # saliency and Input x Gradient read the shared capture's backward of the same score
    # (its attention written out, Captum's through timm's fused kernel)
    for name, reference in (("saliency", Saliency(knn_score).attribute(x, abs=True)),
                            ("input-x-gradient", InputXGradient(knn_score).attribute(x))):
        expected = reference.detach()[0].numpy()
        assert_close(run(model, image, target, name).arrays["attributions"], expected,
                     network_tolerance(model.module, expected, passes=2), name)


def halves(values: np.ndarray) -> tuple[float, float]:
    positive = np.clip(values, 0, None)
    half = positive.shape[1] // 2
    return float(positive[:, :half].sum()), float(positive[:, half:].sum())


@pytest.mark.parametrize("name,options", [
    ("integrated-gradients", {"steps": 8, "batch": 8}),
    ("input-x-gradient", {}),
    ("occlusion", {"window": 2, "stride": 2}),
])
def test_class_discriminative_on_the_collage(name, options):
    """Tabby cat on the left, espresso cup on the right: each class's map holds more of its
    positive evidence on its own half than the other class's map does."""
    model, image = get_model("efficientnet-lite0"), load_sample("collage")
    cat = pipeline.resolve_target(model, "tabby", image)
    cup = pipeline.resolve_target(model, "espresso", image)
    cat_left, cat_right = halves(run(model, image, cat, name, **options).map)
    cup_left, cup_right = halves(run(model, image, cup, name, **options).map)
    assert cat_left / (cat_left + cat_right) > cup_left / (cup_left + cup_right) + 0.05


def test_bad_options_are_refused(cnn, capsys):
    model, image, target, _ = cnn
    with pytest.raises(OptionError):
        run(model, image, target, "occlusion", window=15)  # 240 px > 224
    with pytest.raises(OptionError):
        run(model, image, target, "integrated-gradients", reference="noise")
    code = main(["explain", "--model", "efficientnet-lite0", "--image", "sample:coffee",
                 "--method", "smoothgrad", "--set", "samples=0", "--out", "/tmp/x.npz"])
    assert code == 2 and capsys.readouterr().err.startswith("error:")
