"""Pages 1 (tokenization) and 2 (self-attention toy) in AppTest: they render with the
bundled models and a random-weight distilled DeiT, and their numbers follow the widgets."""

import math

import numpy as np
import pytest
import torch
from apptest_helpers import (ENTRY, chart_keys, chart_message, charts, no_problems, open_app,
                             plotly_array, show)
from scipy.special import softmax as scipy_softmax
from sklearn.metrics.pairwise import cosine_similarity
from streamlit.testing.v1 import AppTest
from test_distance import brute_force_mean_pairwise, keras_mean_attention_distance

from xai_core import pipeline
from xai_core.analysis import toy_attention as toy
from xai_core.figures.click_targets import clicked_index
from xai_core.images import load_sample
from xai_core.methods.attention import query_attention
from xai_core.models import get_model


def chart(app, key: str) -> dict:
    found = [c for c in charts(app) if c.key == key]
    assert len(found) == 1, f"no single chart with key {key}"
    return chart_message(found[0])["figure"]


def texts(spec: dict) -> np.ndarray:
    return np.asarray(spec["data"][0]["text"], dtype=float)


def test_clicked_index_reads_both_shapes_of_customdata():
    # The dict shape is what Chromium sent for a typed-array customdata (seen in e2e).
    as_dict = {"selection": {"points": [{"point_index": 6, "customdata": {"0": 6, "1": 1}}]}}
    as_list = {"selection": {"points": [{"customdata": [53, 3, 5]}]}}
    assert clicked_index(as_dict) == 6 and clicked_index(as_list) == 53
    assert clicked_index({"selection": {"points": [{"x": 1}]}}) is None
    assert clicked_index(None) is None and clicked_index({"selection": {"points": []}}) is None


# --- page 1 -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def page1():
    return open_app("1_tokenization.py", timeout=180)


def test_page1_renders_with_bundled_models(page1):
    no_problems(page1)
    # the first view is the first lesson only: the patch grid and the sequence
    assert chart_keys(page1) == {"tok_grid", "tok_strip"}
    assert [m.value for m in page1.metric][:3] == ["16 x 16", "256", "257"]
    assert any("256 + 1 = 257" in latex.value for latex in page1.latex)
    grid = chart(page1, "tok_grid")
    # a JSON list: a typed array would come back from the browser as {"0": .., "1": ..}
    assert isinstance(grid["data"][-1]["customdata"], list)
    boxes = plotly_array(grid["data"][-1]["customdata"])  # index, row, col, x0, x1, y0, y1, token
    assert boxes.shape == (256, 8)
    np.testing.assert_array_equal(boxes[17], [17, 1, 1, 14, 28, 14, 28, 18])
    show(page1, "tok_view", "prediction")
    assert chart(page1, "tok_pred_vit") and chart(page1, "tok_pred_cnn")
    captions = " ".join(c.value for c in page1.caption)
    assert "similarity" in captions and "cat" in captions  # k-NN neighbours of the cat
    show(page1, "tok_view", "embedding")
    pca = chart(page1, "tok_pca")
    assert sum("PC" in a["text"] for a in pca["layout"]["annotations"]) == 28
    show(page1, "tok_view", "patches")


def test_page1_calculator_follows_the_sliders(page1):
    page1.slider(key="tok_calc_h_dinov2-s14").set_value(300).run()
    no_problems(page1)
    conv = torch.nn.Conv2d(3, 1, 14, stride=14)(torch.zeros(1, 3, 300, 224))
    rows, cols = conv.shape[-2:]
    assert [m.value for m in page1.metric][:3] == [f"{rows} x {cols}", str(rows * cols),
                                                  str(rows * cols + 1)]
    assert "not a multiple of 14" in " ".join(w.value for w in page1.warning)
    page1.slider(key="tok_calc_p_dinov2-s14").set_value(64).run()
    page1.slider(key="tok_calc_h_dinov2-s14").set_value(50).run()
    assert not page1.exception
    assert "smaller than one 64x64 patch" in " ".join(e.value for e in page1.error)
    page1.slider(key="tok_calc_p_dinov2-s14").set_value(14).run()  # leave it as found
    page1.slider(key="tok_calc_h_dinov2-s14").set_value(224).run()
    no_problems(page1)


def test_page1_position_map_follows_the_patch(page1):
    show(page1, "tok_view", "position")
    page1.number_input(key="tok_pos_patch").set_value(0).run()
    no_problems(page1)
    spec = chart(page1, "tok_pos_one")
    assert "row 0, col 0" in spec["layout"]["title"]["text"]
    table = get_model("dinov2-s14").module.pos_embed[0, 1:].double().numpy()
    oracle = cosine_similarity(table)[0].reshape(16, 16)
    np.testing.assert_allclose(plotly_array(spec["data"][0]["z"]), oracle, atol=1e-5)
    # near and far, pair by pair on the 16x16 grid
    cosine, near, far = cosine_similarity(table), [], []
    for a in range(256):
        for b in range(256):
            (ra, ca), (rb, cb) = divmod(a, 16), divmod(b, 16)
            if abs(ra - rb) + abs(ca - cb) == 1:
                near.append(cosine[a, b])
            elif math.hypot(ra - rb, ca - cb) > 8:
                far.append(cosine[a, b])
    said = (f"cosine **{np.mean(near):.2f}** on average, patches more than half the grid apart "
            f"**{np.mean(far):.2f}**")
    assert said in " ".join(m.value for m in page1.markdown)
    assert np.mean(near) > np.mean(far) + 0.2  # the trained DINOv2 has learned its layout


def test_page1_collage_shows_split_confidence():
    app = open_app("1_tokenization.py", timeout=180, image_choice="collage",
                   tok_view="prediction")
    no_problems(app)
    message = " ".join(i.value for i in app.info)
    assert "One summary, two objects" in message and "DINOv2" in message
    assert "EfficientNet" in message


def test_page1_distilled_deit_shows_two_prefix_tokens():
    app = open_app("1_tokenization.py", timeout=180, vit_model="deit-s16-distilled",
                   vit_random=True)
    assert not app.exception
    assert [m.value for m in app.metric][:3] == ["14 x 14", "196", "198"]
    strip = chart(app, "tok_strip")
    labels = [a["text"] for a in strip["layout"]["annotations"]]
    assert labels[:4] == ["[CLS]", "token 0", "[DIST]", "token 1"]
    assert "RANDOM WEIGHTS" in " ".join(e.value for e in app.error)


# --- page 2 -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def page2():
    return open_app("2_self_attention.py", timeout=180)


def test_page2_shows_the_seed_numbers(page2):
    no_problems(page2)
    # the first view is the worked example by hand: its four matrices, nothing else
    assert chart_keys(page2) == {"toy_scores", "toy_scaled", "toy_weights", "toy_output"}
    np.testing.assert_array_equal(texts(chart(page2, "toy_scores")),
                                  [[3.00, 6.00, 0.50], [4.00, 8.75, -0.50], [0.20, -0.80, 4.10]])
    np.testing.assert_array_equal(texts(chart(page2, "toy_weights")),
                                  [[0.15, 0.82, 0.03], [0.06, 0.94, 0.00], [0.09, 0.05, 0.86]])


def test_page2_edited_q_cell_changes_the_weights():
    app = open_app(timeout=180)
    app.switch_page("../pages/2_self_attention.py")
    app.session_state["toy_q"] = {"edited_rows": {0: {"fur": 4.0}}, "added_rows": [],
                                  "deleted_rows": []}
    app.run()
    no_problems(app)
    q = toy.SEED_Q.copy()
    q[0, 1] = 4.0
    oracle = np.round(scipy_softmax(q @ toy.SEED_K.T / np.sqrt(3), axis=1), 2)
    shown = texts(chart(app, "toy_weights"))
    np.testing.assert_array_equal(shown, oracle)
    assert shown[0, 1] != 0.82
    app.session_state["toy_q"] = {"edited_rows": {1: {"background": None}}, "added_rows": [],
                                  "deleted_rows": []}
    app.run()
    assert not app.exception
    assert "Q[Eye, background] is empty" in " ".join(e.value for e in app.error)


def test_page2_temperature_changes_the_entropy(page2):
    show(page2, "sa_view", "temperature")
    scores = toy.TEMPERATURE_Q @ toy.TEMPERATURE_K.T
    shown = {}
    for temperature in (0.05, 2.0, 200.0):
        page2.select_slider(key="toy_temperature").set_value(temperature).run()
        no_problems(page2)
        shown[temperature] = page2.metric[0].value
        p = scipy_softmax(scores[0] / temperature)
        oracle = float(-(p[p > 0] * np.log2(p[p > 0])).sum())
        assert shown[temperature] == f"{oracle:.3f} bits"
    values = [float(shown[t].split()[0]) for t in (0.05, 2.0, 200.0)]
    assert values[0] < 0.01 and values[0] < values[1] < values[2] and values[2] > 1.99


def test_page2_heads_view_splits_the_width(page2):
    show(page2, "sa_view", "heads")
    page2.radio(key="toy_heads").set_value(4).run()
    no_problems(page2)
    panels = chart(page2, "toy_heads_figure")["data"]
    assert len(panels) == 4
    x = toy.MULTIHEAD_X  # head h reads its own d_k = 1 slice of Q, K and V: one column each
    for h, panel in enumerate(panels):
        q, k = x @ toy.MULTIHEAD_WQ[:, h:h + 1], x @ toy.MULTIHEAD_WK[:, h:h + 1]
        oracle = scipy_softmax(q @ k.T / 1.0, axis=1)
        np.testing.assert_allclose(plotly_array(panel["z"]), oracle, atol=1e-6)
    output = chart(page2, "toy_mh_output")
    assert plotly_array(output["data"][0]["z"]).shape == (len(toy.MULTIHEAD_TOKENS), 4)


def test_page2_query_patch_and_head_change_the_attention_figure(page2):
    show(page2, "sa_view", "model")
    assert chart_keys(page2) == {"sa_chart"}  # the real model's part alone
    capture = pipeline.vit_capture(get_model("dinov2-s14"), load_sample("chelsea"))
    last = len(capture.blocks) - 1
    figures = []
    for query in (0, 200):
        page2.number_input(key="sa_query").set_value(query).run()
        no_problems(page2)
        z = plotly_array(chart(page2, "sa_chart")["data"][1]["z"])
        np.testing.assert_allclose(z, query_attention(capture, last, query).mean(0), atol=1e-6)
        figures.append(z)
    assert np.abs(figures[0] - figures[1]).max() > 1e-3
    page2.selectbox(key="sa_head").set_value("head 2").run()
    no_problems(page2)
    z = plotly_array(chart(page2, "sa_chart")["data"][1]["z"])
    np.testing.assert_allclose(z, query_attention(capture, last, 200)[1], atol=1e-6)
    share = 1 - query_attention(capture, last, 200)[1].sum()
    shown = " ".join(m.value for m in page2.markdown)
    assert f"**{share:.1%}**" in shown
    # how far the first and last block's heads look on this image, by the Keras reference
    # formula (prefix rows and columns dropped)
    size, prefix = capture.layout.patch_size[0], capture.layout.num_prefix_tokens
    for block in (0, last):
        attention = capture.blocks[block].acts["attn"].double().numpy()
        far = keras_mean_attention_distance(size, attention, prefix).mean()
        assert f"block {block} look on average **{far:.0f} px**" in shown or \
            f"those of block {block} **{far:.0f} px**" in shown, (block, far)
    even = brute_force_mean_pairwise(capture.layout.grid, capture.layout.patch_size)
    assert f"would give {even:.0f} px" in shown


def test_page2_distilled_deit_uses_cls_query():
    app = open_app("2_self_attention.py", timeout=180, vit_model="deit-s16-distilled",
                   vit_random=True, sa_view="model")
    assert not app.exception
    app.toggle(key="sa_use_cls").set_value(True).run()
    assert not app.exception
    z = plotly_array(chart(app, "sa_chart")["data"][1]["z"])
    capture = pipeline.vit_capture(get_model("deit-s16-distilled", random_weights=True),
                                   load_sample("chelsea"))
    np.testing.assert_allclose(z, query_attention(capture, 11, None).mean(0), atol=1e-6)
    assert "2 prefix keys (not pixels)" in " ".join(m.value for m in app.markdown)
    assert math.isclose(z.sum() + float(capture.blocks[11].acts["attn"][0, :, 0, :2].sum(-1)
                                        .mean()), 1.0, abs_tol=1e-5)


def test_page2_deep_link_opens_block_and_head():
    app = AppTest.from_file(ENTRY, default_timeout=180)
    app.query_params["sa_block"] = "3"
    app.query_params["sa_head"] = "head 2"
    app.run()
    app.switch_page("../pages/2_self_attention.py").run()
    no_problems(app)
    assert app.slider(key="sa_block").value == 3
    capture = pipeline.vit_capture(get_model("dinov2-s14"), load_sample("chelsea"))
    query = app.number_input(key="sa_query").value
    z = plotly_array(chart(app, "sa_chart")["data"][1]["z"])
    np.testing.assert_allclose(z, query_attention(capture, 3, query)[1], atol=1e-6)
