"""Text models: the bundled MiniLM loads offline; BERT-base says why it cannot."""

from pathlib import Path

import pytest
from apptest_helpers import chart_keys, charts
from streamlit.testing.v1 import AppTest

from xai_core.models import ModelUnavailableError, availability, get_model

ENTRY = str(Path(__file__).resolve().parent.parent / "dashboard" / "app.py")


def test_bert_base_offline_is_unavailable_with_a_reason():
    status = availability("bert-base")
    assert not status.available and "HF_HUB_OFFLINE" in status.reason
    with pytest.raises(ModelUnavailableError, match="tokenizer also comes from the hub"):
        get_model("bert-base", random_weights=True)


def test_page_8_switches_between_text_models():
    app = AppTest.from_file(ENTRY, default_timeout=300)
    app.session_state["text_model"] = "bert-base"
    app.run()
    app.switch_page("../pages/8_text_attention.py").run()
    assert not app.exception
    warning = " ".join(w.value for w in app.warning)
    assert "BERT-base" in warning and "HF_HUB_OFFLINE" in warning
    assert "random weights" not in warning
    assert not charts(app)  # nothing is drawn for a model that did not load
    app.selectbox(key="text_model").set_value("minilm-l6").run()
    assert not app.exception and not app.warning
    # the head view (the page's first) draws the attention heatmap and the line view
    assert chart_keys(app) >= {"text_heatmap", "text_lines"}
