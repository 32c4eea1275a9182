"""Cause vs claim against hand computations: a method's top-k drop equals timm's forward on the
hand-shortened sequence (and on hand-masked pixels), the random draws are numpy's permutations
from the seed, the interval is the benchmark's t interval of those drops; bad requests exit 2
with one line before the model loads."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from tolerance import assert_close, class_score_tolerance
from xai_core.studies import cause_vs_claim as C
from xai_core.metrics.statistics import t_interval
from xai_core.cli.main import main
from xai_core.studies.method_runs import run_method
from xai_core.images import load_sample
from xai_core.infra.errors import OptionError
from xai_core.methods.attribution import reference_pixels
from xai_core.pipeline import class_scorer
from xai_core.models import get_model
from xai_core.pipeline import model_output, prepare

METHODS = ("attention", "rollout")  # forward-only: cheap, and two different rankings
KS = (1, 4)


def drop_tolerance(model, image, target) -> float:
    """A drop is the difference of two scores, each from a forward in float32: the batched
    removals add in other orders than one forward here (tests/tolerance.py)."""
    return 2 * class_score_tolerance(model, target, model_output(model, image))


@pytest.fixture(scope="module")
def found(dinov2, image):
    return C.cause_vs_claim(dinov2, image, ks=KS, methods=METHODS, learner=(40, 41, 56),
                            draws=20, seed=7)


def hand_score(model, image, target, tokens_out=(), pixels_out=(), baseline="blur"):
    """The target's score with those patches removed, written out: timm's blocks on the
    sequence without the dropped tokens; pixels replaced patch by patch."""
    module = model.module
    pixels = prepare(model, image).pixels.clone()
    side = module.patch_embed.patch_size[0]
    columns = model.spec.input_size[1] // side
    reference = reference_pixels(model, pixels, baseline)
    for patch in pixels_out:
        row, col = divmod(int(patch), columns)
        window = (..., slice(row * side, (row + 1) * side), slice(col * side, (col + 1) * side))
        pixels[window] = reference[window]
    prefix, patches = module.num_prefix_tokens, module.patch_embed.num_patches
    keep = list(range(prefix)) + [prefix + p for p in range(patches) if p not in set(tokens_out)]
    with torch.inference_mode():
        sequence = module._pos_embed(module.patch_embed(pixels))[:, keep]
        output = module.forward_head(module.norm(module.blocks(module.norm_pre(sequence))))
    return float(class_scorer(model, target)(output.float())[0])


@pytest.mark.numeric
def test_a_methods_token_drop_equals_the_hand_forward(dinov2, image, found):
    attention = run_method(dinov2, image, "attention", None).map
    top = np.argsort(-attention.ravel(), kind="stable")[:4]
    hand = found.score - hand_score(dinov2, image, found.target, tokens_out=top)
    assert_close(found.removals["tokens"].methods["attention"][KS.index(4)], hand,
                 drop_tolerance(dinov2, image, found.target))
    assert abs(hand) > 0  # the removal did something


@pytest.mark.numeric
def test_a_methods_pixel_mask_equals_the_hand_masked_forward(dinov2, image, found):
    rollout = run_method(dinov2, image, "rollout", None).map
    top = np.argsort(-rollout.ravel(), kind="stable")[:4]
    hand = found.score - hand_score(dinov2, image, found.target, pixels_out=top)
    assert_close(found.removals["pixels"].methods["rollout"][KS.index(4)], hand,
                 drop_tolerance(dinov2, image, found.target))


@pytest.mark.numeric
def test_random_draws_come_from_the_seed_and_match_hand_forwards(dinov2, image, found):
    rng = np.random.default_rng(7)
    orders = np.stack([rng.permutation(256) for _ in range(20)])
    np.testing.assert_array_equal(C.random_orders(256, 20, 7), orders)
    assert not np.array_equal(C.random_orders(256, 20, 8), orders)
    drops = found.removals["tokens"].random
    assert drops.shape == (20, len(KS))
    for draw in (0, 13):
        hand = found.score - hand_score(dinov2, image, found.target, tokens_out=orders[draw, :4])
        assert_close(drops[draw, 1], hand, drop_tolerance(dinov2, image, found.target))
    pixel_drops = found.removals["pixels"].random
    for draw, column in ((5, 0), (19, 1)):
        patches = orders[draw, :KS[column]]
        hand = found.score - hand_score(dinov2, image, found.target, pixels_out=patches)
        assert_close(pixel_drops[draw, column], hand,
                     drop_tolerance(dinov2, image, found.target))
    again = C._measure(dinov2, image, found.target, dinov2.head,
                       C.check_request(dinov2, "tokens", KS, 20, 7, (), METHODS), "tokens", None)
    np.testing.assert_array_equal(again.random, drops)


def test_the_interval_is_the_benchmarks_t_interval_of_the_draws(found):
    removal = found.removals["pixels"]
    for column, (low, high) in enumerate(removal.random_interval()):
        assert (low, high) == t_interval(removal.random[:, column])
        assert low < removal.random[:, column].mean() < high


@pytest.mark.numeric
def test_the_learners_drop_and_agreement(dinov2, image, found):
    hand = found.score - hand_score(dinov2, image, found.target, tokens_out=(40, 41, 56))
    assert_close(found.removals["tokens"].learner, hand,
                 drop_tolerance(dinov2, image, found.target))
    attention = run_method(dinov2, image, "attention", None).map.ravel()
    top3 = set(np.argsort(-attention, kind="stable")[:3].tolist())
    assert found.agreement()["attention"] == len(top3 & {40, 41, 56}) / 3


def test_a_learner_reuses_everything_but_their_own_patches(dinov2, image, found):
    """Predict-then-reveal asks both removals with the learner's patches; the view of one
    removal asks it alone with none. After those, another learner costs one new result per
    removal (their own image), and each removal's drops are the very arrays of the first."""
    request = dict(ks=KS, methods=METHODS, draws=20, seed=7)
    alone = C.cause_vs_claim(dinov2, image, removals="pixels", **request)
    assert alone.removals["pixels"].learner is None
    assert alone.removals["pixels"].random is found.removals["pixels"].random
    misses = C.RESULTS.misses
    other = C.cause_vs_claim(dinov2, image, learner=(3, 4, 5), **request)
    assert C.RESULTS.misses - misses == 2  # the learner's image, tokens and pixels
    assert other.removals["tokens"].methods is found.removals["tokens"].methods
    hand = found.score - hand_score(dinov2, image, found.target, pixels_out=(3, 4, 5))
    assert other.removals["pixels"].learner == pytest.approx(hand, abs=1e-5)


def test_patch_scores_average_a_pixel_map_over_each_patch(dinov2):
    pixel_map = np.random.default_rng(0).random((224, 224))
    hand = pixel_map.reshape(16, 14, 16, 14).mean(axis=(1, 3)).ravel()
    np.testing.assert_allclose(C.patch_scores(dinov2, pixel_map), hand, rtol=1e-5)
    grid_map = np.arange(256.0).reshape(16, 16)
    np.testing.assert_array_equal(C.patch_scores(dinov2, grid_map), grid_map.ravel())


@pytest.mark.numeric
def test_a_cnn_masks_16_pixel_cells():
    model, image = get_model("efficientnet-lite0"), load_sample("chelsea")
    found = C.cause_vs_claim(model, image, removals="pixels", ks=(2,), methods=("gradcam",),
                             draws=20, seed=0)
    order = found.chosen["gradcam"][:2]
    pixels = prepare(model, image).pixels.clone()
    reference = reference_pixels(model, pixels, "blur")
    for patch in order:
        row, col = divmod(int(patch), 14)
        window = (..., slice(row * 16, row * 16 + 16), slice(col * 16, col * 16 + 16))
        pixels[window] = reference[window]
    with torch.inference_mode():
        score = float(class_scorer(model, found.target)(model.module(pixels).float())[0])
    assert_close(found.removals["pixels"].methods["gradcam"][0], found.score - score,
                 drop_tolerance(model, image, found.target))
    with pytest.raises(OptionError, match="no tokens to drop"):
        C.cause_vs_claim(model, image, removals="tokens", ks=(2,), methods=("gradcam",))


def test_progress_is_reported_per_removal_and_k_while_computing(dinov2, image):
    reports = []
    C.RESULTS.clear()
    request = dict(removals=("tokens", "pixels"), ks=(1, 2), methods=("attention",), seed=3)
    C.cause_vs_claim(dinov2, image, progress=lambda *report: reports.append(report), **request)
    assert [fraction for fraction, _ in reports] == [0.25, 0.5, 0.75, 1.0]
    assert reports[0][1].startswith("tokens dropped from the sequence: k = 1 done")
    assert reports[-1][1].startswith("pixels masked: k = 2 done")
    reports.clear()
    C.cause_vs_claim(dinov2, image, progress=lambda *report: reports.append(report), **request)
    assert reports == []  # the cached answer


def test_the_default_grid_stops_below_the_models_patch_count():
    """A 4x4-patch ViT takes k = 1, 2, 4, 8 by default; asking 16 of its 16 is refused."""
    from tiny_models import tiny_vit

    model = tiny_vit("test-tiny-vit-claims", knn=False)
    assert C.num_patches(model) == 16 and C.default_ks(model) == (1, 2, 4, 8)
    values = C.check_request(model, "tokens", None, 20, 0)
    assert values["ks"] == (1, 2, 4, 8)
    with pytest.raises(OptionError, match="k=16 leaves no patch of the 16"):
        C.check_request(model, "tokens", (1, 16), 20, 0)


@pytest.mark.parametrize("args, words", [
    (["--k", "0"], "at least 1"),
    (["--k", "256"], "leaves no patch"),
    (["--k", "1,x"], "whole numbers"),
    (["--draws", "5"], "out of range (20-200)"),
    (["--remove", "pixel"], "not one of: tokens, pixels"),
    (["--methods", "nope"], "Unknown method 'nope'"),
    (["--methods", "gradcam"], "needs a CNN model"),
    (["--learner", "3-"], "learner takes patches"),
    (["--learner", "999"], "out of range"),
    (["--baseline", "black"], "not one of: zeros, blur"),
    (["--budget", "100"], "needs 336 passes"),
])
def test_cli_bad_requests_exit_2_with_one_line_before_loading(args, words, capsys,
                                                              monkeypatch):
    import xai_core.models as models

    monkeypatch.setattr(models, "get_model", lambda *a, **k: pytest.fail("model loaded"))
    code = main(["cause-vs-claim", "--model", "dinov2-s14", "--image", "sample:chelsea", *args])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and words in err, err


def test_cli_json(capsys, found):
    code = main(["cause-vs-claim", "--model", "dinov2-s14", "--image", "sample:chelsea",
                 "--k", "1,4", "--methods", "attention,rollout", "--learner", "40,41,56",
                 "--seed", "7", "--json"])
    payload = json.loads(capsys.readouterr().out)
    assert code == 0 and payload["k"] == [1, 4] and payload["draws"] == 20
    tokens = payload["removals"]["tokens"]
    assert tokens["methods"]["attention"] == found.removals["tokens"].methods[
        "attention"].tolist()
    assert tokens["learner"] == found.removals["tokens"].learner
    assert tokens["random"]["low"][1] == found.removals["tokens"].random_interval()[1, 0]
    assert payload["closest"]["method"] == found.closest_method()[0]


def test_docs_numbers_are_recomputed(dinov2):
    """Every row of docs/interventions.md's table on the eight sample images, recomputed: the
    strongest sink head, the score change with it off, and Spearman's rho of the head
    importance grid with the sink score, entropy and rollout weight."""
    from pathlib import Path

    from scipy.stats import spearmanr

    from xai_core.studies import interventions as I
    from xai_core.lessons import interventions_lab
    from xai_core.analysis.attention_sinks import analyse_sinks
    from xai_core.images import SAMPLES
    from xai_core.pipeline import vit_capture

    root = Path(__file__).resolve().parent.parent
    docs = (root / "docs" / "interventions.md").read_text()
    changes, rhos = [], []
    for sample in SAMPLES:
        image = load_sample(sample)
        analysis = analyse_sinks(vit_capture(dinov2, image))
        sink = analysis.strongest()
        block = analysis.blocks.index(sink.block)
        off = I.intervene(dinov2, image, maps=False, heads_off=f"{block}.{sink.head}").target
        grid = I.head_importance(dinov2, image)
        rho = [spearmanr(grid.drops.ravel(), story.ravel())[0] for story in
               (analysis.scores, analysis.entropy,
                interventions_lab.rollout_weights(dinov2, image))]
        row = (f"| `{sample}` | {off['label']} | {block}.{sink.head} ({sink.score:.2f}) | "
               f"{off['before']:.4f} | {off['drop']:+.4f} | "
               + " | ".join(f"{r:+.2f}" for r in rho) + " |")
        assert row in docs, row
        changes.append(off["drop"])
        rhos.append(rho)
    # the README's summary of the same table
    readme = " ".join((root / "README.md").read_text().split())
    assert f"changes the class score by at most {max(map(abs, changes)):.4f};" in readme
    for story, low, high in zip(("sink score is", "attention entropy", "rollout weight"),
                                np.min(rhos, axis=0), np.max(rhos, axis=0)):
        assert f"with its {story} {low:+.2f} to {high:+.2f}" in readme, story

    found = C.cause_vs_claim(dinov2, load_sample("chelsea"))
    assert found.ks[-1] == 32 and found.draws == 20 and found.seed == 0
    for removal, part in found.removals.items():
        low, high = part.random_interval()[-1]
        row = (f"| {removal} | {part.random_mean()[-1]:+.4f} [{low:+.4f}, {high:+.4f}] | "
               + " | ".join(f"{part.methods[name][-1]:+.4f}" for name in (
                   "attention", "daam", "rollout", "gae", "input-x-gradient", "legrad",
                   "saliency", "vit-gradcam")) + " |")
        assert row in docs, row


def test_the_suggested_sink_head_comes_from_the_sinks_result_not_the_capture(dinov2, image):
    """Page 9's first view names the strongest sink head: the one the analysis of the capture
    finds, read from the `sinks` method's small result (a replica's first visit of a picture
    must not read a 124 MB capture for it)."""
    from xai_core.lessons import interventions_lab
    from xai_core import pipeline
    from xai_core.analysis.attention_sinks import analyse_sinks

    analysis = analyse_sinks(pipeline.vit_capture(dinov2, image))
    sink = analysis.strongest()
    interventions_lab.sink_suggestion(dinov2, image)  # its method result, computed once
    pipeline.CAPTURE_CACHE.clear()
    misses = pipeline.CAPTURE_CACHE.misses
    block, head, found = interventions_lab.sink_suggestion(dinov2, image)
    assert (block, head) == (analysis.blocks.index(sink.block), sink.head)
    assert found.score == pytest.approx(sink.score) and found.key == sink.key
    assert pipeline.CAPTURE_CACHE.misses == misses


def test_the_importance_stories_are_kept_and_read_no_capture_again(dinov2, image):
    """A class opening page 9's importance view: the stories are computed once (the rollout
    weights read the capture), then read without it; a different grid is its own entry."""
    from xai_core.studies import interventions as I
    from xai_core.lessons import interventions_lab
    from xai_core import pipeline

    grid = I.head_importance(dinov2, image)
    first = interventions_lab.importance_stories(dinov2, image, grid)
    pipeline.CAPTURE_CACHE.clear()
    misses = pipeline.CAPTURE_CACHE.misses
    again = interventions_lab.importance_stories(dinov2, image, grid)
    assert again is first and pipeline.CAPTURE_CACHE.misses == misses
    mean = I.head_importance(dinov2, image, fill="mean")
    other = interventions_lab.importance_stories(dinov2, image, mean)
    np.testing.assert_array_equal(other.drops, mean.drops)
    assert not np.array_equal(other.drops, first.drops)
