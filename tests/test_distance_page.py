"""Page 3 (attention distance) in AppTest: it renders on the bundled DINOv2 and on a
random-weight distilled DeiT, every control is exercised, and the charts carry the numbers of
the method (checked against formulas computed here)."""

import numpy as np
import pytest
from apptest_helpers import (chart_specs, chart_title, element_text, open_app,
                             plotly_array, show, sink_columns)

from xai_core import pipeline
from xai_core.analysis.sinks import SINK_THRESHOLD
from xai_core.images import COLLAGE_ID, SAMPLES, load_sample
from xai_core.models import get_model

DEIT = {"vit_model": "deit-s16-distilled", "vit_random": True}


def chart(app, title_part: str) -> dict:
    found = [c for c in chart_specs(app) if title_part in chart_title(c)]
    assert found, f"no chart titled '{title_part}'"
    return found[0]


def ok(app):
    assert not app.exception, app.exception
    return app


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
    scatter = chart(app, "this image")
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
    assert f"block 0, head {head} → patch {keys[0, head] - 1}" in element_text(app)
    assert "EfficientNet-Lite0" in element_text(app, "caption")
    rf = chart(app, "receptive field")
    assert plotly_array(rf["data"][1]["y"]).tolist() == [3, 7, 19, 67, 147, 339, 787, 851]

    app.radio(key="p3_prefix").set_value("centre").run()
    ok(app)
    assert app.checkbox(key="p3_renorm").disabled
    assert "image centre" in element_text(app, "caption")
    app.radio(key="p3_prefix").set_value("exclude").run()
    app.checkbox(key="p3_renorm").check().run()
    ok(app)
    assert "renormalised to sum 1" in element_text(app, "caption")
    show(app, "p3_view", "head")
    app.selectbox(key="p3_block").set_value(3).run()
    app.selectbox(key="p3_head").set_value(2).run()
    app.number_input(key="p3_query").set_value(10).run()
    ok(app)
    head_map = chart(app, "Block 3, head 2: where patch 10 looks")
    np.testing.assert_allclose(plotly_array(head_map["data"][1]["z"]).ravel(),
                               capture.blocks[3].acts["attn"][0, 2, 11, 1:].numpy(), rtol=1e-6)


def test_page_3_scatter_click_opens_that_head():
    app = ok(open_app("3_attention_distance.py"))
    assert {c["layout"]["title"]["text"] for c in chart_specs(app)} == {
        "Mean attention distance, this image", "A CNN's receptive field grows with depth"}
    app.session_state["p3_scatter"] = {"selection": {"points": [{"customdata": [4, 1]}]}}
    app.run()
    ok(app)
    assert app.segmented_control(key="p3_view").value == "head"
    assert (app.selectbox(key="p3_block").value, app.selectbox(key="p3_head").value) == (4, 1)
    capture = pipeline.vit_capture(get_model("dinov2-s14"), load_sample("chelsea"))
    query = app.number_input(key="p3_query").value
    head_map = chart(app, f"Block 4, head 1: where patch {query} looks")
    np.testing.assert_allclose(plotly_array(head_map["data"][1]["z"]).ravel(),
                               capture.blocks[4].acts["attn"][0, 1, query + 1, 1:].numpy(),
                               rtol=1e-6)
    assert app.query_params == {"p3_view": "head", "p3_block": "4", "p3_head": "1"}


def test_page_3_random_deit_with_gallery():
    app = ok(open_app("3_attention_distance.py", **DEIT))
    assert "RANDOM WEIGHTS" in element_text(app, "error")
    show(app, "p3_view", "head")
    assert "[CLS]" in element_text(app, "caption") and "[DIST]" in element_text(app, "caption")
    show(app, "p3_view", "gallery")
    ok(app)
    averaged = chart(app, "Mean over 9 images")
    assert all("error_y" in t for t in averaged["data"] if t["name"].startswith("head"))
    assert "Measured over 9 images" in element_text(app)
    model = get_model("deit-s16-distilled", random_weights=True)
    per_image = np.stack([independent_mad(pipeline.vit_capture(model, load_sample(s)), 2, 16)
                          for s in [*SAMPLES, COLLAGE_ID]])
    heads = [t for t in averaged["data"] if t["name"].startswith("head")]
    np.testing.assert_allclose(np.array([plotly_array(t["y"]) for t in heads]).T,
                               per_image.mean(0), rtol=1e-6)
    np.testing.assert_allclose(np.array([plotly_array(t["error_y"]["array"]) for t in heads]).T,
                               per_image.std(0), rtol=1e-5, atol=1e-9)
    variation = chart(app, "varies between images")
    np.testing.assert_allclose(plotly_array(variation["data"][0]["z"]), per_image.std(0).T,
                               rtol=1e-5, atol=1e-9)
