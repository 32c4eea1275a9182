"""Page 2 (self-attention) in AppTest: the toy tables show the seed's numbers and follow an
edited cell, the temperature and the heads; the real model's part follows the query, the
block and the head, with the bundled DINOv2 and a random-weight distilled DeiT."""

import math
import re

import numpy as np
import pytest
from apptest_helpers import (ENTRY, chart_keys, element_text, keyed_chart, no_problems,
                             open_app, plotly_array, show)
from scipy.special import softmax as scipy_softmax
from streamlit.testing.v1 import AppTest
from test_distance import brute_force_mean_pairwise, keras_mean_attention_distance

from xai_core import pipeline
from xai_core.analysis import toy_attention as toy
from xai_core.images import load_sample
from xai_core.methods.attention import query_attention
from xai_core.models import get_model


def texts(spec: dict) -> np.ndarray:
    return np.asarray(spec["data"][0]["text"], dtype=float)


@pytest.fixture(scope="module")
def page2():
    return open_app("2_self_attention.py", timeout=180)


def test_page2_shows_the_seed_numbers(page2):
    no_problems(page2)
    # the first view is the worked example by hand: its four matrices, nothing else
    assert chart_keys(page2) == {"toy_scores", "toy_scaled", "toy_weights", "toy_output"}
    np.testing.assert_array_equal(texts(keyed_chart(page2, "toy_scores")),
                                  [[3.00, 6.00, 0.50], [4.00, 8.75, -0.50], [0.20, -0.80, 4.10]])
    np.testing.assert_array_equal(texts(keyed_chart(page2, "toy_weights")),
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
    shown = texts(keyed_chart(app, "toy_weights"))
    np.testing.assert_array_equal(shown, oracle)
    assert shown[0, 1] != 0.82
    app.session_state["toy_q"] = {"edited_rows": {1: {"background": None}}, "added_rows": [],
                                  "deleted_rows": []}
    app.run()
    assert not app.exception
    [error] = app.error  # it names the emptied cell: row Eye, column background of Q
    assert re.search(r"\bQ\b", error.value) and "Eye" in error.value and \
        "background" in error.value


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
    panels = keyed_chart(page2, "toy_heads_figure")["data"]
    assert len(panels) == 4
    x = toy.MULTIHEAD_X  # head h reads its own d_k = 1 slice of Q, K and V: one column each
    for h, panel in enumerate(panels):
        q, k = x @ toy.MULTIHEAD_WQ[:, h:h + 1], x @ toy.MULTIHEAD_WK[:, h:h + 1]
        oracle = scipy_softmax(q @ k.T / 1.0, axis=1)
        np.testing.assert_allclose(plotly_array(panel["z"]), oracle, atol=1e-6)
    output = keyed_chart(page2, "toy_mh_output")
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
        z = plotly_array(keyed_chart(page2, "sa_chart")["data"][1]["z"])
        np.testing.assert_allclose(z, query_attention(capture, last, query).mean(0), atol=1e-6)
        figures.append(z)
    assert np.abs(figures[0] - figures[1]).max() > 1e-3
    page2.selectbox(key="sa_head").set_value("head 2").run()
    no_problems(page2)
    z = plotly_array(keyed_chart(page2, "sa_chart")["data"][1]["z"])
    np.testing.assert_allclose(z, query_attention(capture, last, 200)[1], atol=1e-6)
    share = 1 - query_attention(capture, last, 200)[1].sum()
    shown = element_text(page2, "markdown")
    assert f"**{share:.1%}**" in shown
    # how far the first and last block's heads look on this image, by the Keras reference
    # formula (prefix rows and columns dropped), then the even spread: the page's distances
    # in pixels, in that order
    size, prefix = capture.layout.patch_size[0], capture.layout.num_prefix_tokens
    far = [keras_mean_attention_distance(
        size, capture.blocks[block].acts["attn"].double().numpy(), prefix).mean()
        for block in (0, last)]
    even = brute_force_mean_pairwise(capture.layout.grid, capture.layout.patch_size)
    distances = re.findall(r"(\d+) px\b", shown)
    expected = [f"{far[0]:.0f}", f"{far[1]:.0f}", f"{even:.0f}"]
    assert any(distances[i:i + 3] == expected for i in range(len(distances))), distances


def test_page2_distilled_deit_uses_cls_query():
    app = open_app("2_self_attention.py", timeout=180, vit_model="deit-s16-distilled",
                   vit_random=True, sa_view="model")
    assert not app.exception
    app.toggle(key="sa_use_cls").set_value(True).run()
    assert not app.exception
    z = plotly_array(keyed_chart(app, "sa_chart")["data"][1]["z"])
    capture = pipeline.vit_capture(get_model("deit-s16-distilled", random_weights=True),
                                   load_sample("chelsea"))
    np.testing.assert_allclose(z, query_attention(capture, 11, None).mean(0), atol=1e-6)
    # the [CLS] row's share on the 2 prefix keys ([CLS], [DIST]), as the page states it
    prefix_share = float(capture.blocks[11].acts["attn"][0, :, 0, :2].sum(-1).mean())
    assert f"**{prefix_share:.1%}**" in element_text(app, "markdown")
    assert math.isclose(z.sum() + prefix_share, 1.0, abs_tol=1e-5)


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
    z = plotly_array(keyed_chart(app, "sa_chart")["data"][1]["z"])
    np.testing.assert_allclose(z, query_attention(capture, 3, query)[1], atol=1e-6)
