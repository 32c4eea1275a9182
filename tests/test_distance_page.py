"""Page 3 (attention distance) in AppTest: it renders on the bundled DINOv2 and on a
random-weight distilled DeiT, every control is exercised, and the charts carry the numbers of
the method (checked against formulas computed here)."""

import numpy as np
import pytest
from apptest_helpers import (RANDOM_DEIT, chart_keys, chart_quoting, element_text, numbers, ok,
                             open_app, percent, plotly_array, quoting, show, sink_columns)

from xai_core import pipeline
from xai_core.analysis.attention_sinks import SINK_THRESHOLD
from xai_core.images import COLLAGE_ID, SAMPLES, load_sample
from xai_core.methods import distance
from xai_core.methods.distance import CONVENTION_NAMES
from xai_core.models import get_model
from xai_core.models.registry import DEFAULT_CNN



def uniform_reference(grid, patch):
    r, c = np.divmod(np.arange(grid[0] * grid[1]), grid[1])
    y, x = r * patch[0], c * patch[1]
    return np.hypot(y[:, None] - y[None], x[:, None] - x[None]).mean()


def independent_mad(capture, prefix, patch):
    """(blocks, heads) mean attention distance: prefix dropped, rows not renormalised."""
    rows, cols = capture.layout.grid
    attn = np.stack([b.acts["attn"][0].double().numpy()[:, prefix:, prefix:]
                     for b in capture.blocks])
    centres = np.stack(np.divmod(np.arange(rows * cols), cols), 1) * float(patch)
    dist = np.linalg.norm(centres[:, None] - centres[None], axis=-1)
    return (attn * dist).sum(-1).mean(-1)


def test_page_3_on_dinov2_all_controls():
    app = ok(open_app("3_attention_distance.py"))
    scatter = chart_quoting(app, "p3_scatter")
    heads = [t for t in scatter["data"] if t["name"].startswith("head")]
    assert len(heads) == 6 and all(plotly_array(t["y"]).shape == (12,) for t in heads)
    capture = pipeline.vit_capture(get_model("dinov2-s14"), load_sample("chelsea"))
    expected = independent_mad(capture, 1, 14)
    np.testing.assert_allclose(np.array([plotly_array(t["y"]) for t in heads]).T, expected,
                               rtol=1e-6)
    assert scatter["layout"]["shapes"][0]["y0"] == pytest.approx(
        uniform_reference((16, 16), (14, 14)))
    # sink heads (score >= 0.5) are ringed where they sit; a patch sink's distance is
    # little more than every query's distance to that one patch
    scores, keys = sink_columns(capture)
    ringed = [t for t in scatter["data"] if t["name"] == "sink head"][0]
    sink_cells = list(zip(*np.nonzero(scores >= SINK_THRESHOLD)))
    assert sorted(plotly_array(ringed["y"]).tolist()) == sorted(
        expected[b, h] for b, h in sink_cells)
    head = int(scores[0].argmax())
    # the note under the scatter names that sink head, its patch and its distance
    patch = int(keys[0, head]) - 1  # named with its row and column on the 16 x 16 grid
    quoting(app, "markdown", percent(SINK_THRESHOLD, 0), "4", "0", str(head), str(patch),
            str(patch // 16), str(patch % 16), f"{expected[0, head]:.0f}")
    cnn = get_model(DEFAULT_CNN)  # the receptive field is the session's CNN's own
    caption = [c for c in app.caption if cnn.spec.display_name in str(c.value)][0]
    assert str(len(distance.cnn_receptive_fields(cnn.module))) in numbers(str(caption.value))
    rf = chart_quoting(app, "p3_rf")
    assert plotly_array(rf["data"][1]["y"]).tolist() == [3, 7, 19, 67, 147, 339, 787, 851]

    app.radio(key="p3_prefix").set_value("centre").run()
    ok(app)
    assert app.checkbox(key="p3_renorm").disabled
    assert CONVENTION_NAMES[("centre", False)] in element_text(app, "caption")
    app.radio(key="p3_prefix").set_value("exclude").run()
    app.checkbox(key="p3_renorm").check().run()
    ok(app)
    assert CONVENTION_NAMES[("exclude", True)] in element_text(app, "caption")
    show(app, "p3_view", "head")
    app.selectbox(key="p3_block").set_value(3).run()
    app.selectbox(key="p3_head").set_value(2).run()
    app.number_input(key="p3_query").set_value(10).run()
    ok(app)
    head_map = chart_quoting(app, "p3_head_map", "3", "2", "10")
    np.testing.assert_allclose(plotly_array(head_map["data"][1]["z"]).ravel(),
                               capture.blocks[3].acts["attn"][0, 2, 11, 1:].numpy(), rtol=1e-6)


def test_page_3_scatter_click_opens_that_head():
    app = ok(open_app("3_attention_distance.py"))
    assert chart_keys(app) == {"p3_scatter", "p3_rf"}  # the first view: every head, the CNN
    app.session_state["p3_scatter"] = {"selection": {"points": [{"customdata": [4, 1]}]}}
    app.run()
    ok(app)
    assert app.segmented_control(key="p3_view").value == "head"
    assert (app.selectbox(key="p3_block").value, app.selectbox(key="p3_head").value) == (4, 1)
    capture = pipeline.vit_capture(get_model("dinov2-s14"), load_sample("chelsea"))
    query = app.number_input(key="p3_query").value
    head_map = chart_quoting(app, "p3_head_map", "4", "1", str(query))
    np.testing.assert_allclose(plotly_array(head_map["data"][1]["z"]).ravel(),
                               capture.blocks[4].acts["attn"][0, 1, query + 1, 1:].numpy(),
                               rtol=1e-6)
    assert app.query_params == {"p3_view": "head", "p3_block": "4", "p3_head": "1"}


def test_page_3_random_deit_with_gallery():
    app = ok(open_app("3_attention_distance.py", **RANDOM_DEIT))
    assert "RANDOM WEIGHTS" in element_text(app, "error")
    show(app, "p3_view", "head")
    assert "[CLS]" in element_text(app, "caption") and "[DIST]" in element_text(app, "caption")
    show(app, "p3_view", "gallery")
    ok(app)
    averaged = chart_quoting(app, "p3_gallery_scatter", "9", "1")  # 9 images, bars ±1 std
    assert all("error_y" in t for t in averaged["data"] if t["name"].startswith("head"))
    model = get_model("deit-s16-distilled", random_weights=True)
    per_image = np.stack([independent_mad(pipeline.vit_capture(model, load_sample(s)), 2, 16)
                          for s in [*SAMPLES, COLLAGE_ID]])
    heads = [t for t in averaged["data"] if t["name"].startswith("head")]
    np.testing.assert_allclose(np.array([plotly_array(t["y"]) for t in heads]).T,
                               per_image.mean(0), rtol=1e-6)
    np.testing.assert_allclose(np.array([plotly_array(t["error_y"]["array"]) for t in heads]).T,
                               per_image.std(0), rtol=1e-5, atol=1e-9)
    # the verdict quotes the median spread between images and between a block's heads
    quoting(app, "markdown", "9", f"{np.median(per_image.std(0)):.1f}",
            f"{np.median(per_image.mean(0).std(1)):.1f}")
    variation = chart_quoting(app, "p3_gallery_std")
    np.testing.assert_allclose(plotly_array(variation["data"][0]["z"]), per_image.std(0).T,
                               rtol=1e-5, atol=1e-9)
