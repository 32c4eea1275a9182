"""Page 7's seed stability (asked for with a checkbox: a theory-matrix row, unstable maps
greyed out with a sentence) and Integrated Gradients' completeness note, against the
library functions that compute them."""

import pytest
from apptest_helpers import chart_specs, element_text, open_app, text_tables

from xai_core import pipeline
from xai_core.images import load_sample
from xai_core.methods import METHODS
from xai_core.metrics.stability import seed_stability
from xai_core.models import get_model

PAGE = "7_comparison.py"


def test_stability_row_greyed_map_and_completeness_note():
    app = open_app(PAGE, timeout=600, image_choice="coffee",
                   cmp_methods_vit=["kernel-shap", "attention"],
                   cmp_options_vit=True, **{"cmp_opt_vit_kernel-shap_samples": 10},
                   cmp_methods_cnn=["integrated-gradients"],
                   cmp_options_cnn=True, **{"cmp_opt_cnn_integrated-gradients_steps": 2})
    assert not app.exception, app.exception
    assert "Measured here: seed stability" not in text_tables(app)[0].index  # not paid for

    cnn, image = get_model("efficientnet-lite0"), load_sample("coffee")
    target = pipeline.resolve_target(cnn, None, image)
    ig = METHODS["integrated-gradients"](cnn, image, target=target, steps=2)
    assert ig.meta["completeness_error"] > 0.05
    warnings = element_text(app, "warning")
    assert (f"miss the score change f(x) - f(reference) = {ig.meta['score_change']:.4g} by "
            f"{ig.meta['completeness_error']:.1%}") in warnings
    assert "Raise **steps**" in warnings

    app.button(key="cmp_more_steps_cnn").click().run()  # the offer: twice the steps
    assert not app.exception, app.exception
    assert app.query_params["cmp_opt_cnn_integrated-gradients_steps"] == "4"
    error = METHODS["integrated-gradients"](cnn, image, target=target,
                                            steps=4).meta["completeness_error"]
    assert error != ig.meta["completeness_error"]
    if error > 0.05:
        assert f"by {error:.1%} (Captum's convergence delta" in element_text(app, "warning")
        assert "at 4 steps)" in element_text(app, "warning")
    else:
        assert f"within {error:.1%}" in element_text(app, "caption")

    app.checkbox(key="cmp_stability").check().run()
    assert not app.exception, app.exception
    vit = get_model("dinov2-s14")
    shap = seed_stability(METHODS["kernel-shap"], vit, image,
                          target=pipeline.resolve_target(vit, None, image), samples=10)
    rho = shap["stability"]
    assert rho < 0.5
    theory = text_tables(app)[0]
    assert theory.loc["Measured here: seed stability", "kernel-shap"] == f"ViT: {rho:.2f}"
    assert theory.loc["Measured here: seed stability", "attention"] == "1 (no random draws)"
    assert (f"this map mostly reflects its random samples (seed-to-seed rank correlation "
            f"{rho:.2f}); raise samples.") in element_text(app, "warning")
    matrix = next(s for s in chart_specs(app) if "attention" in str(s["layout"]))
    titles = [a["text"] for a in matrix["layout"]["annotations"]]
    assert f"kernel-shap (samples=10) (unstable, rho {rho:.2f})" in titles
    greyed = [t for t in matrix["data"] if t.get("coloraxis") == "coloraxis2"]
    assert [t["name"] for t in greyed] == ["kernel-shap (samples=10)"]
    assert pytest.approx(0.3) == greyed[0]["opacity"]


def test_the_data_set_view_names_rank_ties_and_too_few_images():
    """A results.json of 3 images: no verdict, and the methods whose rank intervals overlap
    are named (the summary's own groups)."""
    import json

    from xai_core.benchmark.plan import Settings
    from xai_core.benchmark.summary import rank_tie_groups, summarise

    values = {"gradcam": [0.9, 0.2, 0.5], "saliency": [0.8, 0.3, 0.4], "random": [0.1, 0.1, 0.6]}
    rows = [{"image": f"i{k}", "model": "efficientnet-lite0", "method": method,
             "metric": "insertion", "value": v}
            for method, vs in values.items() for k, v in enumerate(vs)]
    settings = Settings(models=("efficientnet-lite0",), metrics=("insertion",))
    data = json.dumps({"settings": settings.as_dict(), "rows": rows}).encode()
    table = summarise(rows, settings, 9, 9)["tables"][0]
    groups = rank_tie_groups(table["methods"])
    assert groups  # three images cannot order these three methods
    app = open_app(PAGE, timeout=600, cmp_bench_source="load", image_choice="coffee",
                   cmp_methods_vit=["attention"], cmp_methods_cnn=["gradcam"],
                   cmp_view="dataset")
    app.get("file_uploader")[0].set_value(("results.json", data, "application/json")).run()
    assert not app.exception, app.exception
    captions = element_text(app, "caption")
    assert ("the data do not support the order between: "
            + "; ".join(f"{g[0]} ~ {', '.join(g[1:])}" for g in groups) + ".") in captions
    compared = [e["method"] for e in table["methods"] if e["method"] != "random"]
    assert ("Not shown better than the random floor on insertion: "
            f"{', '.join(compared)}.") in captions
    verdict = next(e for e in table["methods"] if e["method"] == "gradcam")["vs_random"]
    assert verdict["verdict"] == "too few images for a verdict (n = 3; 6 needed)"
