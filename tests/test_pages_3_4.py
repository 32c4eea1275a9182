"""Pages 3 and 4 in AppTest: both render on the bundled DINOv2 and on a random-weight
distilled DeiT, every control is exercised, and the charts carry the numbers of
the methods (checked against formulas computed here)."""

import numpy as np
import pytest
from apptest_helpers import chart_specs, chart_title, element_text, open_app, plotly_array
from streamlit.testing.v1 import AppTest

from xai_core import pipeline
from xai_core.images import COLLAGE_ID, SAMPLES, load_sample
from xai_core.methods import gae, rollout
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
    app.selectbox(key="p3_block").set_value(3).run()
    app.selectbox(key="p3_head").set_value(2).run()
    app.number_input(key="p3_query").set_value(10).run()
    ok(app)
    head_map = chart(app, "Block 3, head 2: where patch 10 looks")
    np.testing.assert_allclose(plotly_array(head_map["data"][1]["z"]).ravel(),
                               capture.blocks[3].acts["attn"][0, 2, 11, 1:].numpy(), rtol=1e-6)


def test_page_3_random_deit_with_gallery():
    app = ok(open_app("3_attention_distance.py", **DEIT))
    assert "RANDOM WEIGHTS" in element_text(app, "error")
    assert "[CLS]" in element_text(app, "caption") and "[DIST]" in element_text(app, "caption")
    app.toggle(key="p3_gallery").set_value(True).run()
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


def test_page_4_on_dinov2_all_controls():
    app = ok(open_app("4_rollout_heads.py"))
    model, image = get_model("dinov2-s14"), load_sample("chelsea")
    capture = pipeline.vit_capture(model, image)
    first = chart(app, "Rollout, blocks 0–11 (mean")
    np.testing.assert_allclose(plotly_array(first["data"][1]["z"]),
                               rollout.attention_rollout(capture).query_row()[0], rtol=1e-6)
    assert "GAE for 'cat'" in str(chart_specs(app))
    assert "Share of the row on prefix tokens" in element_text(app, "caption")

    app.selectbox(key="p4_fusion").set_value("max").run()
    app.slider(key="p4_discard").set_value(0.5).run()
    app.slider(key="p4_range").set_value((2, 8)).run()
    ok(app)
    rolled = chart(app, "Rollout, blocks 2–8 (max, discard 0.50)")
    expected = rollout.attention_rollout(capture, 2, 8, "max", 0.5).query_row()[0]
    np.testing.assert_allclose(plotly_array(rolled["data"][1]["z"]), expected, rtol=1e-6)
    bugged = rollout.attention_rollout(capture, 2, 8, "max", 0.5, "vit-explain").query_row()[0]
    largest = np.abs(expected - bugged).max()
    assert largest > 0 and f"{largest:.3g}" in element_text(app)

    app.number_input(key="p4_query").set_value(20).run()
    ok(app)
    first_target = app.selectbox(key="p4_target").value
    app.selectbox(key="p4_target").select_index(1).run()
    ok(app)
    target = app.selectbox(key="p4_target").value
    head = model.head
    assert target != first_target
    gae_chart = chart(app, f"GAE for '{head.class_names[target][:28]}'")
    graded = pipeline.vit_capture(model, image, target=target, head=head)
    np.testing.assert_allclose(plotly_array(gae_chart["data"][1]["z"]),
                               gae.gae_map(graded, 20)[0], rtol=1e-5)

    app.slider(key="p4_z").set_value(3.0).run()
    ok(app)
    # marked tokens: robust z of output norms, blocks 6-11, computed here from the capture
    flagged = set()
    for block in capture.blocks[6:]:
        norms = block.acts["out"][0, 1:].double().norm(dim=-1).numpy()
        z = (norms - np.median(norms)) / (1.4826 * np.median(np.abs(norms - np.median(norms))))
        flagged |= set(np.flatnonzero(z >= 3.0).tolist())
    assert flagged and sorted(app.table[0].value["patch"]) == sorted(flagged)
    marked = [t for t in chart(app, "Rollout, blocks 2–8")["data"] if t.get("name") ==
              "high-norm token"]
    assert len(plotly_array(marked[0]["x"])) == len(flagged)
    app.radio(key="p4_grid_query_kind").set_value("a patch").run()
    app.number_input(key="p4_grid_query").set_value(100).run()
    app.selectbox(key="p4_big_block").set_value(5).run()
    app.selectbox(key="p4_big_head").set_value(3).run()
    ok(app)
    big = chart(app, "Block 5, head 3 (patch 100 query)")
    np.testing.assert_allclose(plotly_array(big["data"][1]["z"]).ravel(),
                               capture.blocks[5].acts["attn"][0, 3, 101, 1:].numpy(), rtol=1e-6)
    mosaic = chart(app, "patch 100 → patches")
    assert len(plotly_array(mosaic["data"][1]["customdata"])) == 12 * 6


def test_page_4_random_deit_marks_both_prefix_tokens():
    app = ok(open_app("4_rollout_heads.py", **DEIT))
    assert "RANDOM WEIGHTS" in element_text(app, "error")
    captions = element_text(app, "caption")
    assert "[CLS]" in captions and "[DIST]" in captions
    assert "the class logit" in captions
    app.selectbox(key="p4_fusion").set_value("min").run()
    app.radio(key="p4_grid_query_kind").set_value("a patch").run()
    ok(app)


def test_chart_click_sets_widgets_once():
    def script():
        import streamlit as st

        from dashboard.clicks import apply_chart_click

        apply_chart_click("chart", lambda d: {"block": int(d[0]), "head": int(d[1])})
        st.selectbox("Block", list(range(12)), key="block")
        st.selectbox("Head", list(range(6)), key="head")

    app = AppTest.from_function(script)
    app.session_state["chart"] = {"selection": {"points": [{"customdata": [3, 2]}]}}
    app.run()
    assert (app.selectbox(key="block").value, app.selectbox(key="head").value) == (3, 2)
    app.selectbox(key="block").set_value(7).run()  # the old click is not applied again
    assert app.selectbox(key="block").value == 7
    app.session_state["chart"] = {"selection": {"points": [{"customdata": [9, 4]}]}}
    app.run()
    assert (app.selectbox(key="block").value, app.selectbox(key="head").value) == (9, 4)
    app.session_state["chart"] = {"selection": {"points": [{"x": 1}]}}  # no customdata
    app.run()
    assert not app.exception and app.selectbox(key="block").value == 9
