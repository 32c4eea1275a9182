"""Page 7 (comparison matrix) in AppTest: renders with both bundled models, runs the
faithfulness metrics with a small step count, and its export buttons produce files whose
contents match independent recomputation."""

import io
import json

import numpy as np
import pytest
import torch
from apptest_helpers import (chart_keys, chart_title, keyed_chart, numbers, open_app, show,
                             text_tables)
from PIL import Image
from scipy.stats import spearmanr
from streamlit.runtime.memory_media_file_storage import MemoryMediaFileStorage
from streamlit.testing.v1 import app_test as app_test_module

from xai_core import capture as capture_module
from xai_core.studies import method_runs
from xai_core import pipeline
from xai_core.images import image_sha256, load_sample
from xai_core.methods import METHODS
from xai_core.metrics.localisation import localise
from xai_core.models import get_model
from xai_core.models.registry import DEFAULT_CNN, get_spec

PAGE = "7_comparison.py"


@pytest.fixture
def media(monkeypatch):
    """Keep every AppTest media store, so download buttons' bytes can be read back."""
    stores = []

    class Recording(MemoryMediaFileStorage):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            stores.append(self)

    monkeypatch.setattr(app_test_module, "MemoryMediaFileStorage", Recording)

    def read(app, key) -> bytes:
        button = next(b for b in app.get("download_button") if b.proto.id.endswith(key))
        name = button.proto.url.rsplit("/", 1)[1]
        for store in reversed(stores):
            try:
                return store.get_file(name).content
            except Exception:
                continue
        raise AssertionError(f"no media file for {key}")

    return read


def trapezoid(x, y) -> float:
    return float(sum((y[i] + y[i + 1]) / 2 * (x[i + 1] - x[i]) for i in range(len(x) - 1)))


def test_comparison_page_renders_runs_metrics_and_exports(media):
    app = open_app(PAGE, timeout=600, image_choice="coffee",
                   cmp_methods_vit=["attention", "rollout"])  # forward-only: cheap
    assert not app.exception, app.exception
    assert not app.error, [e.value for e in app.error]
    captions = " ".join(c.value for c in app.caption)
    assert get_model("dinov2-s14").label in captions  # both bundled models, by their labels
    assert get_model(DEFAULT_CNN).label in captions
    assert chart_keys(app) == {"cmp_matrix"}  # the first view: the theory and the maps
    option_keys = lambda: [w.key for kind in ("number_input", "selectbox")  # noqa: E731
                           for w in app.get(kind) if (w.key or "").startswith("cmp_opt_vit_")]
    assert option_keys() == []  # drawn only on demand: hidden widgets cost the browser
    app.toggle(key="cmp_options_vit").set_value(True).run()
    assert "cmp_opt_vit_attention_block" in option_keys()
    app.number_input(key="cmp_opt_vit_attention_block").set_value(2).run()
    assert text_tables(app)[0].loc["Options here", "attention"] == "block=2"
    app.toggle(key="cmp_options_vit").set_value(False).run()  # off: every method at defaults
    assert option_keys() == [] and text_tables(app)[0].loc["Options here", "attention"] == "defaults"
    app.toggle(key="cmp_options_vit").set_value(True).run()  # the value set before is kept
    assert app.number_input(key="cmp_opt_vit_attention_block").value == 2
    app.toggle(key="cmp_options_vit").set_value(False).run()
    app.query_params["cmp_opt_vit_attention_block"] = "4"  # a link that sets an option shows it
    app.run()
    assert app.toggle(key="cmp_options_vit").value is True
    assert text_tables(app)[0].loc["Options here", "attention"] == "block=4"
    app.number_input(key="cmp_opt_vit_attention_block").set_value(
        app.number_input(key="cmp_opt_vit_attention_block").proto.default).run()
    app.toggle(key="cmp_options_vit").set_value(False).run()
    theory = text_tables(app)[0]
    # attention vs gradient: rho recomputed here from the capture, patch by patch
    model = get_model("dinov2-s14")
    image = load_sample("coffee")
    target = pipeline.resolve_target(model, None, image)
    capture = pipeline.vit_capture(model, image, target)
    rows, cols = capture.layout.grid
    ph, pw = capture.layout.patch_size
    attention = capture.blocks[-1].acts["attn"][0, :, 0, 1:].mean(0).numpy()
    norm = capture.input_grad[0].norm(dim=0).numpy()
    gradient = norm[:rows * ph, :cols * pw].reshape(rows, ph, cols, pw).mean(axis=(1, 3)).ravel()
    show(app, "cmp_view", "agree")
    rho = spearmanr(attention, gradient).statistic
    assert f"{rho:.3f}" in numbers(chart_title(keyed_chart(app, "cmp_scatter")))
    assert theory.loc["Measured here: map grid", "rollout"] == f"{rows}x{cols}"
    assert "fwd" in theory.loc["Measured here: passes, wall time", "attention"]

    show(app, "cmp_view", "faith")
    app.number_input(key="cmp_steps").set_value(2)
    app.checkbox(key="cmp_perturb").uncheck()
    app.button(key="cmp_run_metrics").click().run()
    assert not app.exception, app.exception
    assert "Done:" in app.get("progress")[0].proto.text

    show(app, "cmp_view", "export")  # the curves come from the cache
    archive = np.load(io.BytesIO(media(app, "cmp_dl_npz")))
    manifest = json.loads(str(archive["manifest"]))
    assert manifest["models"][0]["image_sha256"] == image_sha256(image)
    assert json.loads(media(app, "cmp_dl_json").decode()) == manifest
    vit = manifest["models"][0]
    assert vit["model"] == "dinov2-s14" and [m["name"] for m in vit["methods"]] == [
        "attention", "rollout"]
    cnn_methods = [i.name for i in METHODS.values() if i.fits("cnn")]
    assert [m["name"] for m in manifest["models"][1]["methods"]] == [
        n for n in cnn_methods if n not in method_runs.off_by_default()]
    # the exported rollout map is exactly what the registered method returns
    direct = METHODS["rollout"](model, image)
    np.testing.assert_array_equal(archive["dinov2-s14__rollout__map"], direct.map)
    # every exported curve: AUC in the manifest = trapezoid of the exported points
    for entry in manifest["models"]:
        for name, record in entry["faithfulness"].items():
            method, metric = name.split("/")
            stem = f"{entry['model']}__{method}__{metric}"
            fractions, scores = archive[f"{stem}__fractions"], archive[f"{stem}__scores"]
            assert np.allclose(fractions, [0, 0.5, 1])
            assert record["auc"] == pytest.approx(trapezoid(fractions, scores))
    assert {"attention/deletion", "rollout/insertion"} <= set(vit["faithfulness"])
    assert vit["target"] == target

    app.button(key="cmp_png_make").click().run()
    assert not app.exception, app.exception
    png = media(app, "cmp_dl_png")
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000


def test_comparison_page_with_an_unavailable_vit_still_shows_the_cnn():
    app = open_app(PAGE, timeout=600, vit_model="vit-b16")
    assert not app.exception, app.exception
    warned = " ".join(w.value for w in app.warning)  # the ViT's name, said unavailable
    assert "unavailable" in warned and get_spec("vit-b16").display_name in warned
    assert get_model(DEFAULT_CNN).label in " ".join(c.value for c in app.caption)


def test_measured_cost_counts_the_passes_a_method_really_ran():
    """An image no other test uses, so nothing is cached: Grad-CAM runs one forward and one
    backward pass; asking again returns the cached run; saliency and Input x Gradient then
    run no pass of their own; a failing option is reported."""
    from PIL import Image

    model = get_model("efficientnet-lite0")
    noise = Image.fromarray(np.random.default_rng(11).integers(0, 255, (96, 128, 3), np.uint8))
    target = pipeline.resolve_target(model, None, noise)  # one forward (the prediction)
    run = method_runs.run_method(model, noise, "gradcam", target)
    assert run.ok and run.error is None
    assert (run.forwards, run.images, run.backwards) == (1, 1, 1)
    assert run.wall_ms > 0 and run.cost_text().startswith("1 fwd + 1 bwd")
    assert method_runs.run_method(model, noise, "gradcam", target) is run
    for name in ("saliency", "input-x-gradient"):  # they read the same backward's input grad
        shared = method_runs.run_method(model, noise, name, target)
        assert shared.ok and (shared.forwards, shared.backwards) == (0, 0), name
    bad = method_runs.run_method(model, noise, "gradcam", target, options={"no_such": "1"})
    assert not bad.ok and "no_such" in bad.error


def test_comparison_page_runs_a_method_with_a_non_default_option(media):
    """attention at block 3 instead of the last block: the page shows the option, and the
    exported map is the method's own map at block 3, not its default."""
    app = open_app(PAGE, timeout=600, image_choice="coffee", cmp_methods_vit=["attention"],
                   cmp_options_vit=True, cmp_opt_vit_attention_block=3)
    assert not app.exception, app.exception
    assert not app.error, [e.value for e in app.error]
    assert app.number_input(key="cmp_opt_vit_attention_query").value == -1  # the default
    theory = text_tables(app)[0]
    assert theory.loc["Options here", "attention"] == "block=3"
    # the matrix labels the map with the option it ran with
    assert f"attention ({theory.loc['Options here', 'attention']})" in str(
        keyed_chart(app, "cmp_matrix"))
    show(app, "cmp_view", "export")
    model, image = get_model("dinov2-s14"), load_sample("coffee")
    archive = np.load(io.BytesIO(media(app, "cmp_dl_npz")))
    exported = archive["dinov2-s14__attention__map"]
    block_3 = METHODS["attention"](model, image, block=3).map
    np.testing.assert_array_equal(exported, block_3)
    assert not np.allclose(exported, METHODS["attention"](model, image).map)
    capture = pipeline.vit_capture(model, image)  # independent: the [CLS] row of block 3
    np.testing.assert_allclose(exported, capture.blocks[3].acts["attn"][0, :, 0, 1:].mean(0)
                               .reshape(capture.layout.grid).numpy(), atol=1e-6)
    manifest = json.loads(str(archive["manifest"]))
    entry = manifest["models"][0]["methods"][0]
    assert entry["name"] == "attention" and entry["options"]["block"] == 3
    assert manifest["settings"]["options"]["dinov2-s14"] == {"attention": {"block": 3}}

    # a box typed in the localisation view reaches the export made in another view
    show(app, "cmp_view", "local")
    app.checkbox(key="cmp_localise").check().run()
    app.number_input(key="cmp_box_x0").set_value(10).run()
    table = app.dataframe[0].value
    shown = table[(table["model"] == "ViT") & (table["method"] == "attention")]
    show(app, "cmp_view", "export")
    exported = json.loads(media(app, "cmp_dl_json").decode())["models"][0]["localisation"]
    expected = localise(block_3, (224, 224), (10, 56, 168, 168))  # the box on the input
    assert exported["attention"]["iou"] == pytest.approx(expected.iou)
    assert round(expected.iou, 3) == shown["IoU"].iloc[0]


def test_attention_methods_reuse_the_forward_of_the_gradient_methods_capture():
    """Chosen in the page's order (attention first), the methods with a target still run
    first: GAE's capture (1 forward + 1 backward) also answers attention's and rollout's
    forward-only request, so they run no pass, and return the maps a capture of their own
    gives. Results come back in the order asked."""
    from xai_core.capture import capture

    model = get_model("dinov2-s14")
    noise = Image.fromarray(np.random.default_rng(12).integers(0, 255, (90, 120, 3), np.uint8))
    target = pipeline.resolve_target(model, None, noise)
    names = ["attention", "rollout", "gae"]
    runs = method_runs.run_methods(model, noise, names, target)
    assert [run.name for run in runs] == names and all(run.ok for run in runs)
    attention, rollout, gae = runs
    assert (gae.forwards, gae.backwards) == (1, 1)
    assert (attention.forwards, attention.backwards) == (0, 0)
    assert (rollout.forwards, rollout.backwards) == (0, 0)
    graded = pipeline.vit_capture(model, noise, target)
    assert pipeline.vit_capture(model, noise) is graded
    own = capture(model, pipeline.prepare(model, noise).pixels)  # a forward-only pass
    for mine, shared in zip(own.blocks, graded.blocks):
        torch.testing.assert_close(mine.acts["attn"], shared.acts["attn"], rtol=0, atol=1e-6)
    last = own.blocks[-1].acts["attn"][0, :, 0, own.layout.num_prefix_tokens:].mean(0)
    np.testing.assert_allclose(attention.map.ravel(), last.numpy(), rtol=1e-5, atol=1e-7)


def test_gradient_methods_share_one_forward_and_give_the_maps_they_give_alone():
    """DAAM, GAE and LeGrad on one image inside `run_methods`: the first runs the forward
    and its backward, the others only their own backward passes, each counted for the
    method that ran it; every map equals the map of the method run on its own."""
    from tiny_models import images, tiny_vit

    from xai_core.methods.base import RESULT_CACHE
    from xai_core.methods.rollout import ROLLOUT_CACHE

    model = tiny_vit("test-tiny-knn-shared", knn=True)  # an id no other test uses
    image = images(1)[0]
    target = pipeline.resolve_target(model, None, image)
    names = ["daam", "gae", "legrad"]
    daam, gae, legrad = method_runs.run_methods(model, image, names, target)
    assert (daam.forwards, daam.backwards) == (1, 1)
    assert (gae.forwards, gae.backwards) == (0, 1)
    assert (legrad.forwards, legrad.backwards, legrad.partial_backwards) == (0, 0, 2)
    for cache in (pipeline.CAPTURE_CACHE, RESULT_CACHE, ROLLOUT_CACHE):
        cache.clear()
    alone = {name: METHODS[name](model, image, target=target).map for name in names}
    for run in (daam, gae, legrad):
        np.testing.assert_allclose(run.map, alone[run.name], rtol=1e-5, atol=1e-7,
                                   err_msg=run.name)
    assert capture_module.shared_outputs() == []  # the kept graph is gone afterwards


def test_the_prediction_forward_is_the_one_the_gradient_methods_reuse():
    """Page 7 predicts inside `shared_forwards()`: the prediction's forward pass is the
    one DAAM and GAE then differentiate, so predicting and running both costs one forward
    (two backward passes); the prediction equals a plain forward's and every map equals the
    method's map on its own."""
    from tiny_models import images, tiny_vit

    from xai_core.methods.base import RESULT_CACHE
    from xai_core.methods.rollout import ROLLOUT_CACHE

    model = tiny_vit("test-tiny-knn-predict-shared", knn=True)  # an id no other test uses
    image = images(1)[0]
    names = ["daam", "gae"]
    with capture_module.shared_forwards(), method_runs.PassCounter(model) as counter:
        target = pipeline.resolve_target(model, None, image)
        daam, gae = method_runs.run_methods(model, image, names, target)
        shared_output = pipeline.model_output(model, image)
    assert (counter.forwards, counter.backwards) == (1, 2)
    assert (daam.forwards, daam.backwards) == (0, 1)
    assert (gae.forwards, gae.backwards) == (0, 1)
    assert capture_module.shared_outputs() == []
    with torch.inference_mode():
        plain = model.module(pipeline.prepare(model, image).pixels)
    torch.testing.assert_close(shared_output, plain, rtol=1e-5, atol=1e-5)
    for cache in (pipeline.CAPTURE_CACHE, RESULT_CACHE, ROLLOUT_CACHE):
        cache.clear()
    assert pipeline.resolve_target(model, None, image) == target
    for run in (daam, gae):
        alone = METHODS[run.name](model, image, target=target).map
        np.testing.assert_allclose(run.map, alone, rtol=1e-5, atol=1e-7, err_msg=run.name)


def test_the_comparison_exports_what_its_views_computed_without_a_new_pass():
    """`comparison.Comparison` on a tiny ViT: the export records the curves, the agreement
    and the localisation asked for, each equal to an independent computation, and asking
    again (the page's PNG after its Export view) runs no pass through the model."""
    from scipy.stats import spearmanr
    from tiny_models import images, tiny_vit

    from xai_core.lessons.comparison import Comparison, ExportRequest, FaithSettings, default_box
    from xai_core.metrics.faithfulness import faithfulness

    assert default_box(224, 224) == [56, 56, 168, 168]
    assert default_box(518, 300) == [518 // 4, 300 // 4, 3 * 518 // 4, 3 * 300 // 4]
    model = tiny_vit("test-tiny-comparison-export", knn=True)  # an id no other test uses
    image = images(1)[0]
    target = pipeline.resolve_target(model, None, image)
    runs = method_runs.run_methods(model, image, ["attention", "rollout"], target)
    section = method_runs.ModelSection(model, target, model.head.class_names[target], "score", runs,
                                   head=model.head)
    comparison = Comparison(image, [section])
    size = comparison.first_input().size
    request = ExportRequest(FaithSettings(steps=2, perturb=False), box=default_box(*size))
    bundle = comparison.export(request).manifest
    entry = bundle["models"][0]
    assert set(entry["faithfulness"]) == {f"{m}/{c}" for m in ("attention", "rollout")
                                          for c in ("deletion", "insertion")}
    curve = faithfulness(model, image, runs[0].map, "deletion", target, "zeros", 2)
    assert entry["faithfulness"]["attention/deletion"]["auc"] == pytest.approx(curve.auc)
    expected = localise(runs[1].map, tuple(model.spec.input_size),
                        default_box(*size))  # the box typed on this same input
    assert entry["localisation"]["rollout"]["iou"] == pytest.approx(expected.iou)
    rho = bundle["agreement"]["spearman"]
    assert rho[0][1] == pytest.approx(spearmanr(runs[0].map.ravel(),
                                                runs[1].map.ravel()).statistic)
    assert bundle["settings"]["faithfulness"] == {"baseline": "zeros", "steps": 2,
                                                  "perturb": False}
    with method_runs.PassCounter(model) as counter:
        again = Comparison(image, [section]).export(request)
        again.figures()
    assert (counter.forwards, counter.backwards) == (0, 0)
    assert again.manifest == bundle


def test_png_export_stacks_each_figure_the_same_warm_cold_or_kept():
    """The stacked PNG is each figure's own render, top to bottom: rendered in the warm
    browser, kept by content (a figure asked again is not rendered again), or after the
    browser was closed (a new one starts)."""
    import plotly.graph_objects as go

    from xai_core.figures import export

    assert export.find_browser() is not None  # this machine has Chromium (make system-deps)
    first, second = go.Figure(go.Heatmap(z=[[0, 1], [2, 3]])), go.Figure(go.Bar(y=[3, 1, 2]))
    drawn = []
    original = export._render
    export._render = lambda figures, width: drawn.append(len(figures)) or original(figures, width)
    try:
        alone = [np.asarray(Image.open(io.BytesIO(export.comparison_png([f], width=400))))
                 for f in (first, second)]
        both = np.asarray(Image.open(io.BytesIO(export.comparison_png([first, second],
                                                                      width=400))))
        export._close_browser()
        export.PNG_CACHE.clear()
        cold = np.asarray(Image.open(io.BytesIO(export.comparison_png([first, second],
                                                                      width=400))))
    finally:
        export._render = original
    assert drawn == [1, 1, 0, 2]  # the pair was kept: no render; after clearing, both
    assert [a.shape[1] for a in alone] == [400, 400] and not np.array_equal(*alone)
    np.testing.assert_array_equal(both, np.concatenate(alone))
    np.testing.assert_array_equal(cold, both)
