"""Seed stability (mean pairwise Spearman of the maps at three seeds) and Integrated
Gradients' completeness error, against scipy's Spearman and Captum's own convergence delta,
on tiny random-weight models; the CLI's `explain --stability` and the benchmark's columns."""

import itertools
import json

import numpy as np
import pytest
import torch
from captum.attr import IntegratedGradients
from scipy.stats import spearmanr
from tiny_models import images, tiny_vit

from xai_core import pipeline
from xai_core.cli.main import main
from xai_core.methods import METHODS
from xai_core.metrics.stability import UNSTABLE_BELOW, seed_stability


@pytest.fixture(scope="module")
def fine_vit():
    """256 patches of 4 px: as many KernelSHAP players as DINOv2's 16x16 grid."""
    return tiny_vit("test-tiny-vit-p4", knn=False, patch=4, depth=1), images(1)[0]


def mean_spearman(maps) -> float:
    return float(np.mean([spearmanr(a.ravel(), b.ravel()).statistic
                          for a, b in itertools.combinations(maps, 2)]))


def test_kernel_shap_at_200_samples_is_unstable_and_saliency_is_not(fine_vit):
    model, image = fine_vit
    found = seed_stability(METHODS["kernel-shap"], model, image, target=0, samples=200)
    assert found["seeds"] == [0, 1, 2]
    maps = [METHODS["kernel-shap"](model, image, target=0, samples=200, seed=s).map
            for s in (0, 1, 2)]
    assert maps[0].shape == (16, 16)
    assert found["stability"] == pytest.approx(mean_spearman(maps), abs=1e-12)
    assert found["stability"] < UNSTABLE_BELOW
    saliency = seed_stability(METHODS["saliency"], model, image, target=0)
    assert saliency == {"stability": 1.0, "seeds": []}


def test_stability_starts_at_the_maps_own_seed(fine_vit):
    model, image = fine_vit
    found = seed_stability(METHODS["smoothgrad"], model, image, target=0, samples=2, seed=7)
    maps = [METHODS["smoothgrad"](model, image, target=0, samples=2, seed=s).map
            for s in (7, 8, 9)]
    assert found["seeds"] == [7, 8, 9]
    assert found["stability"] == pytest.approx(mean_spearman(maps), abs=1e-12)


@pytest.mark.numeric
def test_integrated_gradients_reports_captums_delta_and_the_relative_error():
    model, image = tiny_vit("test-tiny-vit", knn=False), images(1)[0]
    result = METHODS["integrated-gradients"](model, image, target=3, steps=8, batch=8)
    pixels = pipeline.prepare(model, image).pixels
    zeros = torch.zeros_like(pixels)
    _, delta = IntegratedGradients(model.module).attribute(
        pixels.clone().requires_grad_(True), baselines=zeros, target=3, n_steps=8,
        internal_batch_size=8, return_convergence_delta=True)
    with torch.no_grad():
        change = float(model.module(pixels)[0, 3] - model.module(zeros)[0, 3])
    assert result.meta["convergence_delta"] == pytest.approx(abs(float(delta[0])), rel=1e-4)
    assert result.meta["score_change"] == pytest.approx(change, rel=1e-5)
    assert result.meta["completeness_error"] == pytest.approx(
        abs(float(delta[0])) / abs(change), rel=1e-4)


def test_explain_writes_its_stability_to_meta(tmp_path, capsys):
    out = tmp_path / "map.npz"
    code = main(["explain", "--model", "efficientnet-lite0", "--image", "sample:coffee",
                 "--method", "smoothgrad", "--set", "samples=2", "--stability",
                 "--out", str(out), "--json"])
    assert code == 0
    meta = json.loads(capsys.readouterr().out)["meta"]
    from xai_core.images import load_sample
    from xai_core.models import get_model

    model, image = get_model("efficientnet-lite0"), load_sample("coffee")
    maps = [METHODS["smoothgrad"](model, image, target=meta["target"], samples=2, seed=s).map
            for s in (0, 1, 2)]
    assert meta["stability_seeds"] == [0, 1, 2]
    assert meta["stability"] == pytest.approx(mean_spearman(maps), abs=1e-12)
    saved = json.loads(str(np.load(out)["meta"]))
    assert saved["stability"] == meta["stability"]


def test_the_benchmark_records_completeness_and_stability_per_image(tmp_path):
    from xai_core.benchmark.scoring import random_map
    from xai_core.images import load_sample
    from xai_core.models import get_model

    code = main(["benchmark", "--model", "efficientnet-lite0", "--images", "sample:coffee,rocket",
                 "--methods", "integrated-gradients,saliency", "--metrics", "deletion",
                 "--steps", "2", "--stability", "--out", str(tmp_path), "--progress", "off"])
    assert code == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    rows = {(r["image"], r["method"]): r
            for r in json.loads((tmp_path / "results.json").read_text())["rows"]}
    model = get_model("efficientnet-lite0")
    for name in ("coffee", "rocket"):
        image = load_sample(name)
        ig = rows[(f"sample:{name}", "integrated-gradients")]
        expected = METHODS["integrated-gradients"](model, image, target=ig["target"])
        assert ig["completeness_error"] == pytest.approx(
            expected.meta["completeness_error"], rel=1e-6)
        assert ig["stability"] == 1.0 and rows[(f"sample:{name}", "saliency")]["stability"] == 1.0
        floors = [random_map(model, f"sample:{name}", s) for s in (0, 1, 2)]
        assert rows[(f"sample:{name}", "random")]["stability"] == pytest.approx(
            mean_spearman(floors), abs=1e-12)
        assert "completeness_error" not in rows[(f"sample:{name}", "saliency")]
    entry = next(e for e in summary["tables"][0]["methods"]
                 if e["method"] == "integrated-gradients")
    assert entry["completeness_error"] == pytest.approx(np.mean(
        [rows[(f"sample:{n}", "integrated-gradients")]["completeness_error"]
         for n in ("coffee", "rocket")]))
    # a folder with the column is not resumed without it (nor the other way round)
    code = main(["benchmark", "--model", "efficientnet-lite0", "--images", "sample:coffee",
                 "--methods", "saliency", "--metrics", "deletion", "--steps", "2",
                 "--out", str(tmp_path)])
    assert code == 2
