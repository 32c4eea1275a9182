"""Mean attention distance and CNN receptive fields against independent oracles:
identities, a brute-force pairwise distance, the Keras probing-ViTs formula, and
the receptive field measured from input gradients of a linearised CNN."""

import math

import numpy as np
import pytest
import timm
import torch

from xai_core import pipeline
from xai_core.images import load_sample
from xai_core.methods import distance
from xai_core.models import get_model


def brute_force_mean_pairwise(grid, patch):
    rows, cols = grid
    total, count = 0.0, 0
    for i in range(rows * cols):
        for j in range(rows * cols):
            dy = (i // cols - j // cols) * patch[0]
            dx = (i % cols - j % cols) * patch[1]
            total += math.hypot(dy, dx)
            count += 1
    return total / count


def keras_mean_attention_distance(patch_size, attention_weights, num_cls_tokens):
    """The Keras "probing ViTs" example (square grids, square patches), as published."""
    attention_weights = attention_weights[..., num_cls_tokens:, num_cls_tokens:]
    num_patches = attention_weights.shape[-1]
    length = int(np.sqrt(num_patches))
    distance_matrix = np.zeros((num_patches, num_patches))
    for i in range(num_patches):
        for j in range(num_patches):
            if i == j:
                continue
            xi, yi = (int(i / length)), (i % length)
            xj, yj = (int(j / length)), (j % length)
            distance_matrix[i, j] = patch_size * np.linalg.norm([xi - xj, yi - yj])
    mean_distances = attention_weights * distance_matrix.reshape(1, 1, num_patches, num_patches)
    return np.mean(np.sum(mean_distances, axis=-1), axis=-1)


def test_identity_attention_gives_zero():
    for prefix in (0, 1, 2):
        n = prefix + 6 * 4
        eye = np.broadcast_to(np.eye(n), (3, n, n))
        for mode, renorm in (("exclude", False), ("exclude", True), ("centre", False)):
            got = distance.mean_attention_distance(eye, prefix, (6, 4), (16, 16), mode, renorm)
            np.testing.assert_allclose(got, 0, atol=1e-12)


@pytest.mark.parametrize("grid,patch", [((2, 2), (16, 16)), ((14, 14), (16, 16)),
                                        ((3, 5), (14, 10))])
def test_uniform_attention_gives_mean_pairwise_distance(grid, patch):
    n = grid[0] * grid[1]
    expected = brute_force_mean_pairwise(grid, patch)
    if grid == (2, 2):
        assert expected == pytest.approx((0 + 16 + 16 + 16 * math.sqrt(2)) / 4)
    prefix = 1
    uniform = np.zeros((2, prefix + n, prefix + n))
    uniform[:, :, prefix:] = 1 / n
    got = distance.mean_attention_distance(uniform, prefix, grid, patch)
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    assert distance.mean_pairwise_distance(grid, patch) == pytest.approx(expected, rel=1e-12)


def test_renormalisation_and_centre_convention():
    grid, patch, prefix = (4, 4), (16, 16), 1
    n = 16
    reference = distance.mean_pairwise_distance(grid, patch)
    half = np.zeros((1, prefix + n, prefix + n))
    half[:, :, 0] = 0.5  # every token gives half its attention to [CLS]
    half[:, :, 1:] = 0.5 / n
    plain = distance.mean_attention_distance(half, prefix, grid, patch)
    renorm = distance.mean_attention_distance(half, prefix, grid, patch, renormalise=True)
    np.testing.assert_allclose(plain, reference / 2, rtol=1e-12)
    np.testing.assert_allclose(renorm, reference, rtol=1e-12)
    # centre: all attention on [CLS] (placed at the image centre, 32, 32)
    on_cls = np.zeros((1, prefix + n, prefix + n))
    on_cls[:, :, 0] = 1
    r, c = np.divmod(np.arange(n), 4)
    to_centre = np.hypot((r + 0.5) * 16 - 32, (c + 0.5) * 16 - 32)
    expected = np.concatenate([[0.0], to_centre]).mean()  # [CLS] query -> itself: 0
    got = distance.mean_attention_distance(on_cls, prefix, grid, patch, prefix="centre")
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    with pytest.raises(ValueError):
        distance.mean_attention_distance(on_cls, prefix, grid, patch, "centre", True)


def test_distance_scales_with_patch_size():
    rng = np.random.default_rng(0)
    attn = rng.random((4, 1 + 49, 1 + 49))
    attn /= attn.sum(-1, keepdims=True)
    small = distance.mean_attention_distance(attn, 1, (7, 7), (8, 8))
    large = distance.mean_attention_distance(attn, 1, (7, 7), (16, 16))
    np.testing.assert_allclose(large, 2 * small, rtol=1e-12)
    uneven = distance.mean_attention_distance(attn, 1, (7, 7), (16, 8))
    assert np.all(small < uneven) and np.all(uneven < large)


@pytest.fixture(scope="module")
def dinov2_capture():
    return pipeline.vit_capture(get_model("dinov2-s14"), load_sample("chelsea"))


def test_real_model_matches_keras_formula_and_bounds(dinov2_capture):
    capture = dinov2_capture
    result = distance.capture_distances(capture)
    attn = np.stack([b.acts["attn"][0].double().numpy() for b in capture.blocks])
    expected = keras_mean_attention_distance(14, attn, num_cls_tokens=1)
    np.testing.assert_allclose(result.mad, expected, rtol=1e-9)
    assert result.mad.shape == (12, 6) and result.per_query.shape == (12, 6, 16, 16)
    for mode, renorm in (("exclude", False), ("exclude", True), ("centre", False)):
        values = distance.capture_distances(capture, mode, renorm).mad
        assert values.min() >= 0 and values.max() <= result.max_distance
    assert result.max_distance == pytest.approx(14 * 15 * math.sqrt(2))
    np.testing.assert_allclose(result.per_query.mean((2, 3)), result.mad, rtol=1e-9)


def test_two_prefix_tokens_are_dropped_for_distilled_deit():
    model = get_model("deit-s16-distilled", random_weights=True)
    capture = pipeline.vit_capture(model, load_sample("coffee"))
    attn = np.stack([b.acts["attn"][0].double().numpy() for b in capture.blocks])
    np.testing.assert_allclose(distance.capture_distances(capture).mad,
                               keras_mean_attention_distance(16, attn, num_cls_tokens=2),
                               rtol=1e-9)


def test_gallery_reuses_cached_captures(dinov2_capture):
    model = get_model("dinov2-s14")
    images = {"cat": load_sample("chelsea"), "coffee": load_sample("coffee")}
    names, first = distance.gallery_distances(model, images)
    misses = pipeline.CAPTURE_CACHE.misses
    hits = distance.DISTANCE_CACHE.hits
    names, again = distance.gallery_distances(model, images, "exclude", True)
    assert pipeline.CAPTURE_CACHE.misses == misses  # a new convention, no new forward pass
    names, same = distance.gallery_distances(model, images)
    assert distance.DISTANCE_CACHE.hits >= hits + 2
    np.testing.assert_array_equal(first, same)
    np.testing.assert_allclose(first[0], distance.capture_distances(dinov2_capture).mad)
    assert names == ["cat", "coffee"] and first.shape == (2, 12, 6)


def test_textbook_receptive_field():
    assert distance.textbook_receptive_field(5) == [3, 5, 7, 9, 11]
    assert distance.receptive_field_recurrence([(3, 2, 1), (3, 1, 2), (2, 2, 1)]) == \
        [(1 + 2, 2), (3 + (2 * 2) * 2, 2), (11 + 1 * 2, 4)]  # dilation 2: k_eff = 5


def measured_receptive_fields(module, stage_names, size):
    """Per stage: the height and width of the input region that reaches the stage's
    centre unit, read from input gradients of a copy made linear with positive
    weights (so nothing inside the field can cancel), and whether it fits inside."""
    pixels = torch.ones(1, 3, size, size, requires_grad=True)
    store = {}
    hooks = [module.get_submodule(name).register_forward_hook(
        lambda _m, _i, out, name=name: store.__setitem__(name, out)) for name in stage_names]
    try:
        module(pixels)
    finally:
        for hook in hooks:
            hook.remove()
    measured = {}
    for name in stage_names:
        out = store[name]
        unit = out[0, :, out.shape[2] // 2, out.shape[3] // 2].sum()
        grad = torch.autograd.grad(unit, pixels, retain_graph=True)[0][0].abs().sum(0).numpy()
        rows, cols = np.flatnonzero(grad.sum(1) > 0), np.flatnonzero(grad.sum(0) > 0)
        inside = rows[0] > 0 and cols[0] > 0 and rows[-1] < size - 1 and cols[-1] < size - 1
        measured[name] = (rows[-1] - rows[0] + 1, cols[-1] - cols[0] + 1, inside)
    return measured


def linearised_lite0():
    model = timm.create_model("tf_efficientnet_lite0", pretrained=False).eval()
    for name, child in list(model.named_modules()):
        for attr, sub in list(child.named_children()):
            if isinstance(sub, (torch.nn.ReLU, torch.nn.ReLU6, torch.nn.SiLU)):
                setattr(child, attr, torch.nn.Identity())
    with torch.no_grad():
        for layer in model.modules():
            if isinstance(layer, torch.nn.Conv2d):
                layer.weight.copy_(layer.weight.abs() + 0.01)
            if isinstance(layer, torch.nn.BatchNorm2d):
                layer.weight.fill_(1), layer.bias.zero_()
                layer.running_mean.zero_(), layer.running_var.fill_(1)
    return model


def test_efficientnet_lite0_stage_receptive_fields_match_gradients():
    real = get_model("efficientnet-lite0").module
    stages = distance.stage_receptive_fields(real)
    assert [s.stage for s in stages] == ["conv_stem"] + [f"blocks.{i}" for i in range(7)]
    assert [s.rf for s in stages][:2] == [3, 7]  # 3x3 s2 stem; then a 3x3 at jump 2
    model = linearised_lite0()
    assert [(s.name, s.rf, s.jump) for s in distance.stage_receptive_fields(model)] == \
        [(s.name, s.rf, s.jump) for s in stages]
    fitting = stages[:6]  # up to blocks.4 (rf 339) fits a 416 px input
    measured = measured_receptive_fields(model, [s.stage for s in fitting], 416)
    for stage in fitting:
        height, width, inside = measured[stage.stage]
        assert inside, stage.stage
        assert (height, width) == (stage.rf, stage.rf), stage.stage
    assert stages[-1].rf > 224  # the last stage could see more than the whole input


def test_cli_distance(tmp_path):
    import json

    from xai_core.cli import main as cli

    out = tmp_path / "mad.npz"
    assert cli.main(["explain", "--model", "deit-s16-distilled", "--random-weights",
                     "--image", "sample:coffee", "--method", "distance", "--set",
                     "renormalise=yes", "--set", "block=4", "--out", str(out)]) == 0
    saved = np.load(out)
    capture = pipeline.vit_capture(get_model("deit-s16-distilled", random_weights=True),
                                   load_sample("coffee"))
    attn = capture.blocks[4].acts["attn"][0].double().numpy()[:, 2:, 2:]
    attn = attn / attn.sum(-1, keepdims=True)
    centres = np.stack(np.divmod(np.arange(196), 14), 1) * 16.0
    per_query = (attn * np.linalg.norm(centres[:, None] - centres[None], axis=-1)).sum(-1)
    np.testing.assert_allclose(saved["map"], per_query.mean(0).reshape(14, 14), rtol=1e-5)
    assert saved["mean_attention_distance"].shape == (12, 6)
    meta = json.loads(str(saved["meta"]))
    assert meta["unit"] == "pixels" and "renormalised" in meta["convention"]
    assert cli.main(["explain", "--model", "deit-s16-distilled", "--random-weights",
                     "--image", "sample:coffee", "--method", "distance", "--set",
                     "prefix=centre", "--set", "renormalise=yes", "--out", str(out)]) == 2
