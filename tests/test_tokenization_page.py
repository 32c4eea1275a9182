"""Page 1 (tokenization) in AppTest: it renders with the bundled models and a random-weight
distilled DeiT, and its numbers follow the widgets."""

import math
import re

import numpy as np
import pytest
import torch
from apptest_helpers import (chart_keys, element_text, keyed_chart, no_problems, numbers,
                             open_app, plotly_array, show)
from sklearn.metrics.pairwise import cosine_similarity

from xai_core.figures.click_targets import clicked_index
from xai_core.models import get_model


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
    grid = keyed_chart(page1, "tok_grid")
    # a JSON list: a typed array would come back from the browser as {"0": .., "1": ..}
    assert isinstance(grid["data"][-1]["customdata"], list)
    boxes = plotly_array(grid["data"][-1]["customdata"])  # index, row, col, x0, x1, y0, y1, token
    assert boxes.shape == (256, 8)
    np.testing.assert_array_equal(boxes[17], [17, 1, 1, 14, 28, 14, 28, 18])
    show(page1, "tok_view", "prediction")
    assert keyed_chart(page1, "tok_pred_vit") and keyed_chart(page1, "tok_pred_cnn")
    captions = " ".join(c.value for c in page1.caption)
    assert "similarity" in captions and "cat" in captions  # k-NN neighbours of the cat
    show(page1, "tok_view", "embedding")
    pca = keyed_chart(page1, "tok_pca")
    assert sum("PC" in a["text"] for a in pca["layout"]["annotations"]) == 28
    show(page1, "tok_view", "patches")


def test_page1_calculator_follows_the_sliders(page1):
    page1.slider(key="tok_calc_h_dinov2-s14").set_value(300).run()
    no_problems(page1)
    conv = torch.nn.Conv2d(3, 1, 14, stride=14)(torch.zeros(1, 3, 300, 224))
    rows, cols = conv.shape[-2:]
    assert [m.value for m in page1.metric][:3] == [f"{rows} x {cols}", str(rows * cols),
                                                  str(rows * cols + 1)]
    # the warning quotes the size, the leftover pixels and both ways out, by hand: 300 = 21 x 14
    # + 6, so 6 rows of 224 px are dropped; padding gives 22 x 16 patches and 353 tokens
    [warning] = page1.warning
    assert numbers(warning.value)[:5] == ["300", "224", "14", "6", "0"]
    assert {"21", "16", str(6 * 224), "22", str(22 * 16 + 1)} <= set(numbers(warning.value))
    page1.slider(key="tok_calc_p_dinov2-s14").set_value(64).run()
    page1.slider(key="tok_calc_h_dinov2-s14").set_value(50).run()
    assert not page1.exception
    [error] = page1.error  # a 50 x 224 image under a 64 x 64 patch: no token at all
    assert {"50", "224", "64"} <= set(numbers(error.value)) and not page1.metric
    page1.slider(key="tok_calc_p_dinov2-s14").set_value(14).run()  # leave it as found
    page1.slider(key="tok_calc_h_dinov2-s14").set_value(224).run()
    no_problems(page1)


def test_page1_position_map_follows_the_patch(page1):
    show(page1, "tok_view", "position")
    page1.number_input(key="tok_pos_patch").set_value(0).run()
    no_problems(page1)
    spec = keyed_chart(page1, "tok_pos_one")
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
    bold = re.findall(r"\*\*(-?\d+\.\d+)\*\*", element_text(page1, "markdown"))
    assert (f"{np.mean(near):.2f}", f"{np.mean(far):.2f}") in zip(bold, bold[1:])
    assert np.mean(near) > np.mean(far) + 0.2  # the trained DINOv2 has learned its layout


def test_page1_collage_shows_split_confidence():
    app = open_app("1_tokenization.py", timeout=180, image_choice="collage",
                   tok_view="prediction")
    no_problems(app)
    # one note, one line per model with its top three classes and their shares
    [note] = app.info
    lines = re.findall(r"^- \*\*(.+?)\*\*: (.+)$", note.value, re.M)
    assert len(lines) == 2
    assert "DINOv2" in lines[0][0] and "EfficientNet" in lines[1][0]
    for _, top in lines:
        shares = [int(share) for share in re.findall(r"(\d+)%", top)]
        assert len(shares) == 3 and shares == sorted(shares, reverse=True) and sum(shares) <= 101


def test_page1_distilled_deit_shows_two_prefix_tokens():
    app = open_app("1_tokenization.py", timeout=180, vit_model="deit-s16-distilled",
                   vit_random=True)
    assert not app.exception
    assert [m.value for m in app.metric][:3] == ["14 x 14", "196", "198"]
    strip = keyed_chart(app, "tok_strip")
    labels = [a["text"] for a in strip["layout"]["annotations"]]
    assert labels[:4] == ["[CLS]", "token 0", "[DIST]", "token 1"]
    assert "RANDOM WEIGHTS" in " ".join(e.value for e in app.error)
