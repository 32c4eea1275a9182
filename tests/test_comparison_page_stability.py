"""Page 7's seed stability (asked for with a checkbox: a theory-matrix row, unstable maps
greyed out with a sentence) and Integrated Gradients' completeness note, against the
library functions that compute them."""

import pytest
from apptest_helpers import keyed_chart, numbers, open_app, percent, quoting, text_tables
from streamlit.testing.v1 import AppTest

from xai_core import pipeline
from xai_core.images import load_sample
from xai_core.methods import METHODS
from xai_core.methods.integrated_gradients import COMPLETENESS_LIMIT
from xai_core.metrics.stability import seed_stability
from xai_core.models import get_model

PAGE = "7_comparison.py"


def completeness_numbers(meta: dict, steps: int) -> list[str]:
    """What the completeness note quotes, in order: f(x) - f(reference), the share it misses
    by, Captum's convergence delta and the steps."""
    return [f"{meta['score_change']:.4g}", percent(meta["completeness_error"]),
            f"{meta['convergence_delta']:.3g}", str(steps)]


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
    # the note (worded in test_completeness_note_wording) quotes IG's own numbers, and offers
    # twice the steps
    quoting(app, "warning", *completeness_numbers(ig.meta, 2), percent(COMPLETENESS_LIMIT, 0))
    assert numbers(app.button(key="cmp_more_steps_cnn").label) == ["4"]

    app.button(key="cmp_more_steps_cnn").click().run()  # the offer: twice the steps
    assert not app.exception, app.exception
    assert app.query_params["cmp_opt_cnn_integrated-gradients_steps"] == "4"
    meta = METHODS["integrated-gradients"](cnn, image, target=target, steps=4).meta
    assert meta["completeness_error"] != ig.meta["completeness_error"]
    quoting(app, "warning" if meta["completeness_error"] > COMPLETENESS_LIMIT else "caption",
            *completeness_numbers(meta, 4))

    app.checkbox(key="cmp_stability").check().run()
    assert not app.exception, app.exception
    vit = get_model("dinov2-s14")
    shap = seed_stability(METHODS["kernel-shap"], vit, image,
                          target=pipeline.resolve_target(vit, None, image), samples=10)
    rho = shap["stability"]
    assert rho < 0.5
    theory = text_tables(app)[0]
    assert theory.loc["Measured here: seed stability", "kernel-shap"] == f"ViT: {rho:.2f}"
    # attention draws nothing at random: a perfect rank correlation, not a measured one
    assert numbers(theory.loc["Measured here: seed stability", "attention"]) == ["1"]
    quoting(app, "warning", "10", f"{rho:.2f}")  # the greyed map named, with its rho
    matrix = keyed_chart(app, "cmp_matrix")
    greyed = [t for t in matrix["data"] if t.get("coloraxis") == "coloraxis2"]
    assert [t["name"] for t in greyed] == ["kernel-shap (samples=10)"]
    titles = [a["text"] for a in matrix["layout"]["annotations"]]
    assert [numbers(t) for t in titles if t.startswith(greyed[0]["name"])] == [
        ["10", f"{rho:.2f}"]]  # its title quotes rho
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
    captions = [str(c.value) for c in app.caption]
    # one caption names the tied groups, another the methods not shown above the random floor
    ties = "; ".join(f"{g[0]} ~ {', '.join(g[1:])}" for g in groups)
    compared = [e["method"] for e in table["methods"] if e["method"] != "random"]
    assert [c for c in captions if c.endswith(f": {ties}.")]
    assert [c for c in captions if c.endswith(f"insertion: {', '.join(compared)}.")]
    verdict = next(e for e in table["methods"] if e["method"] == "gradcam")["vs_random"]
    assert not verdict["better_than_random"]  # worded in test_statistics: too few images
    assert numbers(verdict["verdict"]) == ["3", "6"]  # n = 3, 6 needed


def test_completeness_note_wording():
    """The one wording test of `comparison_parts.completeness_note`: within the limit a
    caption, beyond it a warning and a button that offers twice the steps."""
    def script(meta, steps):
        from types import SimpleNamespace

        from dashboard import comparison_parts
        from xai_core.methods import METHODS
        from xai_core.models import get_model

        model = get_model("efficientnet-lite0")  # a run's options: every one, resolved
        options = METHODS["integrated-gradients"].resolve(model, {"steps": steps})
        comparison_parts.completeness_note(
            SimpleNamespace(model=model),
            SimpleNamespace(name="integrated-gradients", meta=meta, options=options))

    def note(error, steps):
        meta = {"completeness_error": error, "score_change": 2.5, "convergence_delta": 0.5}
        app = AppTest.from_function(script, args=(meta, steps), default_timeout=60).run()
        assert not app.exception, app.exception
        return app

    within = note(0.01, 8)
    assert [c.value for c in within.caption] == [
        "CNN Integrated Gradients: the attributions add up to the score change "
        "f(x) - f(reference) = 2.5 within 1.0% (convergence delta 0.5, 8 steps)."]
    missed = note(0.2, 2)
    assert [w.value for w in missed.warning] == [
        "CNN Integrated Gradients: the attributions miss the score change f(x) - f(reference) "
        "= 2.5 by 20.0% (Captum's convergence delta 0.5 at 2 steps), more than 5%: the map "
        "does not add up. Raise **steps** under 'Change the methods' options' above (the error "
        "shrinks as steps grow)."]
    assert [b.label for b in missed.button] == ["Rerun CNN Integrated Gradients with 4 steps"]
