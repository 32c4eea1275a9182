"""The app shell: starts, home renders per bundled model, uploads, offline hub models."""

import io
import json

import pytest
from apptest_helpers import chart_specs, element_text, open_app, text_tables
from PIL import Image
from streamlit.testing.v1 import AppTest


def test_home_renders_with_bundled_models():
    app = open_app(timeout=180)
    assert not app.exception
    assert "DINOv2" in " ".join(h.value for h in app.subheader)
    card = text_tables(app)[0]
    assert "16x16 = 256 patches" in card.to_string()
    assert "257" in card.to_string()
    assert len(chart_specs(app)) >= 3  # image + two prediction charts
    # a newcomer is pointed to the Explainer's guided tour, opened at its first step
    [start] = app.get("page_link")
    assert start.proto.page == "vit_explainer" and start.proto.query_string == "tour=1"
    assert "guided tour" in start.proto.label


@pytest.mark.parametrize("sample", ["coffee", "collage"])
def test_home_renders_for_other_images(sample):
    app = open_app(timeout=180, image_choice=sample)
    assert not app.exception


def png_bytes(size=(64, 48), color=(10, 200, 30)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, format="PNG")
    return buffer.getvalue()


def test_upload_works_and_bad_upload_shows_message():
    app = open_app(timeout=180, image_choice="upload")
    assert "Upload an image" in element_text(app, "info")
    app.sidebar.get("file_uploader")[0].set_value(("green.png", png_bytes(), "image/png")).run()
    assert not app.exception and not app.error
    assert "(64x48)" in json.dumps(chart_specs(app)[0])
    app.sidebar.get("file_uploader")[0].set_value(("fake.png", b"<html>no</html>", "image/png")).run()
    assert not app.exception
    assert "not an image we can read" in element_text(app, "error")


def test_hub_model_offline_shows_reason():
    app = open_app(timeout=180, vit_model="vit-b16")
    assert not app.exception
    assert "HF_HUB_OFFLINE" in element_text(app, "warning")


def test_text_table_is_one_markdown_block_that_reads_back():
    def script():
        import pandas as pd

        from dashboard import ui

        ui.text_table(pd.DataFrame({"method": ["a|b", "two\nlines"], "blocks": [3, 12],
                                    "ratio": [0.5, 1.25]}))
        ui.text_table({"grid": "16x16 = 256 patches", "tokens (N)": "257"})

    app = AppTest.from_function(script).run()
    assert not app.exception
    first, card = (str(m.value) for m in app.markdown)
    assert first.split("\n")[:3] == ["| method | blocks | ratio |", "| --- | ---: | ---: |",
                                     "| a\\|b | 3 | 0.5 |"]  # ints stay ints; numbers right
    assert "two lines" in first and len(first.split("\n")) == 4  # a newline cannot end a row
    table, facts = text_tables(app)
    assert table.to_dict("list") == {"method": ["a|b", "two lines"], "blocks": ["3", "12"],
                                     "ratio": ["0.5", "1.25"]}
    assert facts.loc["tokens (N)", "value"] == "257" and list(facts.index) == ["grid", "tokens (N)"]
