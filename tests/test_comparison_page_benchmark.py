"""Page 7's data-set view in AppTest: a results.json written by the benchmark command is
loaded and shown as rankings whose numbers are the summary's; a small run started from the
page draws the same kind of view; a file that is not a result gives a message."""

import json

import numpy as np
import pytest
from apptest_helpers import (chart_keys, chart_title, element_text, keyed_chart, open_app,
                             plotly_array)

from xai_core.benchmark.plan import Settings
from xai_core.benchmark.run import run_benchmark
from xai_core.benchmark.summary import load_results
from xai_core.infra.errors import OptionError

PAGE = "7_comparison.py"
CHEAP = dict(image_choice="coffee", cmp_methods_vit=["attention"], cmp_methods_cnn=["gradcam"],
             cmp_view="dataset")


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    summary = run_benchmark(Settings(models=("efficientnet-lite0",),
                                     images="sample:coffee,chelsea,rocket",
                                     methods=("gradcam", "saliency"),
                                     metrics=("deletion", "insertion"), steps=3),
                            out, progress_bar=False)
    return (out / "results.json").read_bytes(), summary


def test_loaded_results_show_the_summary(results):
    data, summary = results
    app = open_app(PAGE, timeout=600, cmp_bench_source="load", **CHEAP)
    app.get("file_uploader")[0].set_value(("results.json", data, "application/json")).run()
    assert not app.exception, app.exception
    assert not app.error, [e.value for e in app.error]
    for table in summary["tables"]:  # one ranking per model and metric, its title says which
        spec = keyed_chart(app, f"cmp_bench_rank_{table['model']}_{table['metric']}")
        assert all(word in chart_title(spec) for word in (table["model"], table["metric"],
                                                          table["better"]))
        trace = spec["data"][0]
        shown = dict(zip(trace["y"], plotly_array(trace["x"])))
        for entry in table["methods"]:
            assert shown[entry["method"]] == pytest.approx(entry["mean"])
        assert list(trace["y"]) == [e["method"] for e in table["methods"]]  # by mean rank
    curves = keyed_chart(app, "cmp_bench_curves_efficientnet-lite0")
    rows = json.loads(data)["rows"]
    coffee_gradcam = [r["scores"] for r in rows if r["method"] == "gradcam"
                      and r["metric"] == "deletion"]
    line = next(t for t in curves["data"] if t["name"] == "gradcam")
    np.testing.assert_allclose(plotly_array(line["y"]), np.mean(coffee_gradcam, axis=0),
                               rtol=1e-6)
    assert "cmp_bench_agree_efficientnet-lite0" in chart_keys(app)


def test_a_file_that_is_not_a_result_gives_a_message():
    app = open_app(PAGE, timeout=600, cmp_bench_source="load", **CHEAP)
    app.get("file_uploader")[0].set_value(("x.json", b'{"rows": 3}', "application/json")).run()
    assert not app.exception
    with pytest.raises(OptionError) as refused:  # the core's refusal, said on the page
        load_results({"rows": 3})
    assert str(refused.value) in element_text(app, "error")


def test_a_small_run_from_the_page():
    app = open_app(PAGE, timeout=600, cmp_bench_source="run", cmp_bench_images=["coffee"],
                   cmp_bench_methods=["gradcam"], cmp_bench_steps=2, **CHEAP)
    app.button(key="cmp_bench_run").click().run()
    assert not app.exception, app.exception
    assert not app.error, [e.value for e in app.error]
    assert "Done." in app.get("progress")[-1].proto.text
    ranked = {key for key in chart_keys(app) if key.startswith("cmp_bench_rank_")}
    assert ranked == {f"cmp_bench_rank_{model}_{metric}"  # a ranking per model and metric;
                      for model in ("efficientnet-lite0", "dinov2-s14")  # the ViT: its
                      for metric in ("deletion", "insertion")}  # random floor alone


def test_a_small_run_is_one_request_of_the_budget(monkeypatch):
    """Counted by hand for coffee, Grad-CAM, deletion + insertion at 10 steps: on the CNN a
    prediction (1), Grad-CAM (1 forward + 1 backward) and a curve per metric for Grad-CAM and
    the random floor (2 x 2 x (9 perturbed + the image + the baseline)); on the ViT, where
    Grad-CAM does not fit, the prediction and the random floor's curves."""
    from xai_core.benchmark import small
    from xai_core.infra.budget import ENV_PASSES, OverBudget

    run = small.SmallRun(("dinov2-s14", "efficientnet-lite0"), ("coffee",), ("gradcam",), 10)
    cnn = 1 + 2 + 2 * 2 * 11
    vit = 1 + 2 * 11
    assert run.passes() == cnn + vit == 70
    monkeypatch.setenv(ENV_PASSES, "70")
    small.check_budget(run)  # exactly the budget: allowed
    monkeypatch.setenv(ENV_PASSES, "69")
    with pytest.raises(OverBudget) as refused:
        small.check_budget(run)
    # 6 * steps + 10 passes: 9 steps (64) fit, 10 (70) do not
    assert run.passes(9) == 64 and "70 passes" in str(refused.value)
    assert "69 passes" in str(refused.value) and "Steps to 9" in str(refused.value)


def test_a_small_run_over_the_budget_is_refused_before_it_runs(monkeypatch):
    from xai_core.benchmark import run as bench_run
    from xai_core.infra.budget import ENV_PASSES

    started = []
    monkeypatch.setattr(bench_run, "run_benchmark", lambda *a, **k: started.append(a))
    monkeypatch.setenv(ENV_PASSES, "69")
    app = open_app(PAGE, timeout=600, cmp_bench_source="run", cmp_bench_images=["coffee"],
                   cmp_bench_methods=["gradcam"], cmp_bench_steps=10, **CHEAP)
    app.button(key="cmp_bench_run").click().run()
    assert not app.exception, app.exception
    assert started == [] and not app.get("progress")  # nothing ran, no bar
    refusal = element_text(app, "error")
    assert "70 passes" in refusal and "69 passes" in refusal and "Steps to 9" in refusal
