"""Faithfulness, agreement and localisation metrics against independent oracles.

The CNN checks use the real EfficientNet-Lite0 on the espresso photo; its Grad-CAM
map is computed here from the captured layer (alpha = spatial mean of the
gradients, ReLU of the weighted sum), independently of any method module.
"""

import json

import numpy as np
import pytest
import torch

from xai_core import maps, pipeline
from xai_core.cli.main import main
from xai_core.infra.errors import OptionError
from xai_core.images import load_sample
from xai_core.metrics import agreement, faithfulness, localisation
from xai_core.models import get_model
from xai_core.models.knn import class_score


@pytest.fixture(scope="module")
def cnn():
    model = get_model("efficientnet-lite0")
    image = load_sample("coffee")
    target = pipeline.resolve_target(model, None, image)
    capture = pipeline.cnn_capture(model, image, target)
    alpha = capture.gradients[0].mean(dim=(1, 2))  # (K,)
    cam = torch.relu((alpha[:, None, None] * capture.activations[0]).sum(0)).numpy()
    pixels = pipeline.prepare(model, image).pixels
    return model, image, target, cam, pixels


def probability(model, pixels, target) -> float:
    with torch.no_grad():
        return float(model.module(pixels).softmax(-1)[0, target])


def trapezoid(x, y) -> float:
    return float(sum((y[i] + y[i + 1]) / 2 * (x[i + 1] - x[i]) for i in range(len(x) - 1)))


def test_curves_start_and_end_at_the_right_scores_and_auc_is_the_trapezoid(cnn):
    model, image, target, cam, pixels = cnn
    full = probability(model, pixels, target)
    mean_colour = pixels.mean(dim=(2, 3), keepdim=True).expand_as(pixels)
    empty = probability(model, mean_colour, target)
    for metric, first, last in (("deletion", full, empty), ("insertion", empty, full)):
        curve = faithfulness.faithfulness(model, image, cam, metric, target, baseline="mean",
                                          steps=5)
        assert np.allclose(curve.fractions, [0, 0.2, 0.4, 0.6, 0.8, 1.0])
        assert curve.scores[0] == pytest.approx(first, abs=1e-5)
        assert curve.scores[-1] == pytest.approx(last, abs=1e-5)
        assert curve.full_score == pytest.approx(full, abs=1e-5)
        assert curve.baseline_score == pytest.approx(empty, abs=1e-5)
        assert curve.auc == pytest.approx(trapezoid(curve.fractions, curve.scores), abs=1e-12)
        assert "softmax probability" in curve.score_kind


def test_positive_perturbation_blanks_the_top_cells(cnn):
    """Step 2 of 5 blanks the 40 % most relevant cells (20 of 49) to model-input zeros."""
    model, image, target, cam, pixels = cnn
    curve = faithfulness.faithfulness(model, image, cam, "pos-perturb", target, "zeros", steps=5)
    assert np.allclose(curve.fractions, [0, 0.2, 0.4, 0.6, 0.8])
    rows, cols = cam.shape
    height, width = pixels.shape[-2:]
    top = np.argsort(-cam.ravel(), kind="stable")[:round(0.4 * cam.size)]
    manual = pixels.clone()
    for cell in top:
        r, c = divmod(int(cell), cols)
        manual[..., r * height // rows:(r + 1) * height // rows,
               c * width // cols:(c + 1) * width // cols] = 0
    assert curve.scores[2] == pytest.approx(probability(model, manual, target), abs=1e-5)
    assert curve.baseline_score == pytest.approx(
        probability(model, torch.zeros_like(pixels), target), abs=1e-5)
    negative = faithfulness.faithfulness(model, image, cam, "neg-perturb", target, "zeros", steps=5)
    assert negative.auc > curve.auc  # blanking the least relevant cells hurts less


def test_gradcam_beats_random_maps(cnn):
    """Sanity property (not a tuned number): the model's own Grad-CAM for its predicted class
    deletes faster and inserts faster than random maps on the same grid."""
    model, image, target, cam, _ = cnn
    rng = np.random.default_rng(7)
    randoms = [rng.random(cam.shape) for _ in range(3)]
    for metric, better in (("deletion", np.less), ("insertion", np.greater)):
        own = faithfulness.faithfulness(model, image, cam, metric, target, "zeros", steps=8).auc
        chance = np.mean([faithfulness.faithfulness(model, image, r, metric, target, "zeros",
                                               steps=8).auc for r in randoms])
        assert better(own, chance), (metric, own, chance)


def test_batched_equals_one_at_a_time_and_is_deterministic(cnn):
    model, _, target, cam, pixels = cnn
    scorer = pipeline.class_scorer(model, target)
    kind = pipeline.score_kind(model)

    def run(batch_size):
        return faithfulness.compute_curve(model, pixels, cam, "deletion", scorer, target, kind,
                                     "blur", steps=4, batch_size=batch_size)

    single, batched, again = run(1), run(16), run(16)
    assert single.batches == 5 and batched.batches == 1
    np.testing.assert_allclose(batched.scores, single.scores, atol=1e-5)
    np.testing.assert_array_equal(batched.scores, again.scores)


def test_curves_of_one_image_share_its_two_end_images(cnn):
    """The untouched image and the pure baseline are the same for every map: they go through
    the model once (one pass of two images) and each curve runs only the images between."""
    model, image, target, cam, pixels = cnn
    seen = []
    hook = model.module.register_forward_hook(lambda m, i, o: seen.append(int(o.shape[0])))
    try:
        deletion = faithfulness.faithfulness(model, image, cam, "deletion", target, "rise-blur",
                                             steps=6, batch_size=8)
        first = list(seen)
        seen.clear()
        flipped = faithfulness.faithfulness(model, image, -cam, "insertion", target, "rise-blur",
                                            steps=6, batch_size=8)
        positive = faithfulness.faithfulness(model, image, cam, "pos-perturb", target,
                                             "rise-blur", steps=6, batch_size=8)
    finally:
        hook.remove()
    assert sorted(first) == sorted([2, 5]) and deletion.images == 5  # ends, then the 5 inside
    assert seen == [5, 5] and (flipped.images, positive.images) == (5, 5)  # 0 % is known too
    scorer, kind = pipeline.class_scorer(model, target), pipeline.score_kind(model)
    for curve, saliency in ((deletion, cam), (flipped, -cam), (positive, cam)):
        alone = faithfulness.compute_curve(model, pixels, saliency, curve.metric, scorer, target,
                                           kind, "rise-blur", steps=6)  # every image run
        np.testing.assert_allclose(curve.scores, alone.scores, atol=1e-5)
        assert (curve.full_score, curve.baseline_score) == pytest.approx(
            (alone.full_score, alone.baseline_score), abs=1e-5)
    assert deletion.full_score == pytest.approx(probability(model, pixels, target), abs=1e-5)


def test_spearman_and_top_k_overlap():
    rng = np.random.default_rng(0)
    a = rng.random((16, 16))
    assert agreement.spearman(a, a) == pytest.approx(1.0)
    assert agreement.spearman(a, -a) == pytest.approx(-1.0)
    assert agreement.top_k_overlap(a, a, 10) == 1.0
    assert agreement.top_k_overlap(a, -a, 10) == 0.0
    # a 7x7 map and its bilinear 16x16 version rank the same way almost everywhere
    coarse = np.add.outer(np.arange(7.0), np.arange(7.0))
    assert agreement.spearman(coarse, maps.upsample(coarse, (16, 16))) == pytest.approx(1.0)
    names, rho, overlap = agreement.agreement_matrices({"a": a, "b": -a, "c": a}, 10)
    assert names == ["a", "b", "c"]
    assert rho[0, 1] == pytest.approx(-1) and rho[0, 2] == pytest.approx(1)
    assert overlap[1, 2] == 0 and np.allclose(rho, rho.T)


def test_agreement_matrices_are_cached_by_content_and_order():
    rng = np.random.default_rng(1)
    maps_ = {"x": rng.random((14, 14)), "y": rng.random((14, 14)), "z": rng.random((7, 7))}
    names, rho, overlap = agreement.agreement_matrices(maps_, 10)
    hits = agreement.AGREEMENT_CACHE.hits
    again = agreement.agreement_matrices({k: v.copy() for k, v in maps_.items()}, 10)
    assert agreement.AGREEMENT_CACHE.hits == hits + 2 and again[1] is rho  # equal content
    assert not rho.flags.writeable  # shared between sessions: read-only
    np.testing.assert_allclose(rho[0, 2], agreement.spearman(maps_["x"], maps_["z"]))
    # another order: the names and both matrices follow it
    flipped, rho_f, overlap_f = agreement.agreement_matrices(dict(reversed(maps_.items())), 10)
    assert flipped == ["z", "y", "x"]
    np.testing.assert_allclose(rho_f, rho[::-1, ::-1])
    np.testing.assert_allclose(overlap_f, overlap[::-1, ::-1])
    # one cell changed: recomputed, and the answer moves
    changed = dict(maps_, x=maps_["x"].copy())
    changed["x"][0, 0] += 5.0
    _, rho_c, _ = agreement.agreement_matrices(changed, 10)
    assert rho_c[0, 1] == pytest.approx(agreement.spearman(changed["x"], maps_["y"]))
    assert rho_c[0, 1] != rho[0, 1]
    # another top-k share is another question for the overlap only
    _, rho_20, overlap_20 = agreement.agreement_matrices(maps_, 20)
    assert rho_20 is rho and overlap_20 is not overlap
    assert overlap_20[0, 1] == agreement.top_k_overlap(maps_["x"], maps_["y"], 20)


def test_localisation_box_iou_and_pointing_game():
    # Two blobs on a 14x14 grid of a 224-pixel input: the larger one wins.
    grid = np.zeros((14, 14))
    grid[2:6, 3:9] = 1.0  # 4x6 cells
    grid[10:12, 10:12] = 0.8  # 2x2 cells
    size = (224, 224)
    box = localisation.largest_region_box(grid, size)
    values = maps.upsample(grid, size)
    mask = values >= 0.1 * values.max()
    from scipy import ndimage

    labels, _ = ndimage.label(mask, structure=np.ones((3, 3)))
    big = labels == labels[64, 96]
    ys, xs = np.nonzero(big)
    assert box == (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1)
    given = (40, 20, 150, 100)
    truth = np.zeros(size, bool)
    truth[given[1]:given[3], given[0]:given[2]] = True
    found = np.zeros(size, bool)
    found[box[1]:box[3], box[0]:box[2]] = True
    result = localisation.localise(grid, size, given)
    assert result.iou == pytest.approx((truth & found).sum() / (truth | found).sum())
    assert result.correct == (result.iou >= 0.5)
    assert result.pointing_hit
    assert not localisation.localise(grid, size, (200, 0, 224, 20)).pointing_hit
    with pytest.raises(OptionError):
        localisation.localise(grid, size, (50, 50, 40, 60))


def test_bad_options_are_refused(cnn):
    model, image, target, cam, _ = cnn
    with pytest.raises(OptionError):
        faithfulness.faithfulness(model, image, cam, "deletion", target, "noise", steps=5)
    with pytest.raises(OptionError):
        faithfulness.faithfulness(model, image, cam, "deletion", target, "zeros", steps=1)
    with pytest.raises(ValueError):
        faithfulness.faithfulness(model, image, np.full((7, 7), np.nan), "deletion", target)


def test_cli_metrics_on_dinov2_uses_the_knn_class_score(capsys):
    code = main(["metrics", "--model", "dinov2-s14", "--image", "sample:chelsea",
                 "--method", "attention", "--metric", "deletion", "--steps", "2", "--json"])
    assert code == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["auc"] == pytest.approx(trapezoid(payload["fractions"], payload["scores"]))
    assert payload["fractions"] == [0.0, 0.5, 1.0]
    model, image = get_model("dinov2-s14"), load_sample("chelsea")
    target = pipeline.resolve_target(model, None, image)
    assert payload["target"] == target
    expected = float(class_score(model.head.bank, pipeline.model_output(model, image), target))
    assert payload["scores"][0] == pytest.approx(expected, abs=1e-4)
    assert "k-NN class score" in payload["score_kind"]
    for bad in (["--steps", "1"], ["--method", "no-such-method"]):
        args = ["metrics", "--model", "dinov2-s14", "--image", "sample:chelsea",
                "--method", "attention", "--metric", "deletion"] + bad
        assert main(args) == 2
    assert "error:" in capsys.readouterr().err
