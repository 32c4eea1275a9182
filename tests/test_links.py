"""Deep links carry stable ids (issue 16, item 0): a link opens the app on the image, models,
methods, classes, block and head it names, the URL follows the widgets with ids, an old link
with a displayed label still works, and a value the app does not have is refused in words."""

import numpy as np
from apptest_helpers import (ENTRY, chart_message, chart_specs, chart_title, charts, no_problems,
                             plotly_array, text_tables)
from streamlit.testing.v1 import AppTest

from xai_core import pipeline
from xai_core.images import SAMPLES, load_sample
from xai_core.methods.attention import query_attention
from xai_core.models import get_model


def open_link(page: str | None = None, **params) -> AppTest:
    """The app opened from a URL with these query parameters (then `page`, as a click on the
    menu would open it: the URL keeps its parameters)."""
    app = AppTest.from_file(ENTRY, default_timeout=300)
    for key, value in params.items():
        app.query_params[key] = value
    app.run()
    if page is not None:
        app.switch_page(f"../pages/{page}").run()
    return app


def home_image_title(app: AppTest) -> str:
    found = [chart_title(chart_message(c)["figure"]) for c in charts(app)
             if c.key == "home_image"]
    assert len(found) == 1
    return found[0]


def test_sidebar_link_opens_the_named_image_and_the_url_follows_with_ids():
    app = open_link(image_choice="motorcycle", presentation="true")
    no_problems(app)
    image = load_sample("motorcycle")
    assert app.selectbox(key="image_choice").value == "motorcycle"
    assert home_image_title(app) == f"{SAMPLES['motorcycle'].title} ({image.width}x{image.height})"
    assert app.toggle(key="presentation").value is True
    app.selectbox(key="image_choice").set_value("coffee").run()
    assert app.query_params == {"image_choice": "coffee", "presentation": "true"}
    app.selectbox(key="vit_model").set_value("deit-s16").run()
    assert app.query_params["vit_model"] == "deit-s16"
    # back to the defaults: a clean URL
    app.selectbox(key="vit_model").set_value("dinov2-s14")
    app.selectbox(key="image_choice").set_value("chelsea")
    app.toggle(key="presentation").set_value(False).run()
    assert app.query_params == {}


def test_old_label_link_still_works_and_is_rewritten_to_the_id():
    app = open_link(image_choice=SAMPLES["coffee"].title)
    no_problems(app)
    assert app.selectbox(key="image_choice").value == "coffee"
    assert app.query_params == {"image_choice": "coffee"}


def test_unknown_id_is_refused_in_words_and_dropped():
    app = open_link(image_choice="unicorn", vit_model="no-such-model")
    assert not app.exception
    warnings = " ".join(w.value for w in app.warning)
    assert "`unicorn`" in warnings and "`no-such-model`" in warnings
    assert app.selectbox(key="image_choice").value == "chelsea"
    assert app.selectbox(key="vit_model").value == "dinov2-s14"
    assert app.query_params == {}


def test_block_and_head_link_by_index_and_leave_the_url_with_their_page():
    app = open_link("2_self_attention.py", sa_block="3", sa_head="1")
    no_problems(app)
    assert app.slider(key="sa_block").value == 3
    assert app.selectbox(key="sa_head").value == 1  # 0-based: shown as "head 2"
    capture = pipeline.vit_capture(get_model("dinov2-s14"), load_sample("chelsea"))
    query = app.number_input(key="sa_query").value
    z = [plotly_array(s["data"][1]["z"]) for s in chart_specs(app)
         if chart_title(s).startswith("Block 3, head 2")]
    assert len(z) == 1
    np.testing.assert_allclose(z[0], query_attention(capture, 3, query)[1], atol=1e-6)
    # the link opened the view that holds its widgets, and the URL says so
    assert app.query_params == {"sa_view": "model", "sa_block": "3", "sa_head": "1"}
    app.switch_page("../pages/home.py").run()
    assert app.query_params == {}  # another page's choices leave the URL ...
    app.switch_page("../pages/2_self_attention.py").run()
    assert app.slider(key="sa_block").value == 3  # ... but stay with the session
    assert app.query_params == {"sa_view": "model", "sa_block": "3", "sa_head": "1"}


def test_class_and_method_links_on_the_cnn():
    model = get_model("efficientnet-lite0")
    names = model.head.class_names
    tabby = names.index("tabby, tabby cat")
    app = open_link("5_gradcam.py", image_choice="coffee", gc_cnn_target=str(tabby),
                    gc_family="Grad-CAM,Eigen-CAM")
    no_problems(app)
    assert app.selectbox(key="gc_cnn_target").value == tabby
    assert any(f"'{names[tabby]}'" in h.value for h in app.subheader)
    assert app.multiselect(key="gc_family").value == ["Grad-CAM", "Eigen-CAM"]
    assert list(text_tables(app)[0]["method"]) == ["Grad-CAM", "Eigen-CAM"]
    bad = open_link("5_gradcam.py", gc_cnn_target="5000", gc_family="Grad-CAM,Magic-CAM")
    assert not bad.exception
    warnings = " ".join(w.value for w in bad.warning)
    assert "`5000`" in warnings and "`Grad-CAM,Magic-CAM`" in warnings


def test_knn_class_links_by_its_label():
    model = get_model("dinov2-s14")
    cup = model.head.class_names.index("coffee cup")
    app = open_link("5_gradcam.py", gc_part="vit", gc_vit_target="coffee cup")
    no_problems(app)
    assert app.segmented_control(key="gc_part").value == "vit"
    assert app.selectbox(key="gc_vit_target").value == cup
    top = pipeline.predict(model, load_sample("chelsea"), topk=1)[0].index
    assert top != cup  # so the link, not the default, chose it
    assert app.query_params == {"gc_part": "vit", "gc_vit_target": "coffee cup"}


def test_block_and_head_links_of_pages_3_4_and_6_open_their_view():
    """Pages 3, 4 and 6 link their block and head pickers by index too; a link opens the
    view that holds them."""
    capture = pipeline.vit_capture(get_model("dinov2-s14"), load_sample("chelsea"))
    page3 = open_link("3_attention_distance.py", p3_block="5", p3_head="2")
    no_problems(page3)
    query = page3.number_input(key="p3_query").value
    z = [plotly_array(s["data"][1]["z"]).ravel() for s in chart_specs(page3)
         if chart_title(s) == f"Block 5, head 2: where patch {query} looks"]
    assert len(z) == 1
    np.testing.assert_allclose(z[0], capture.blocks[5].acts["attn"][0, 2, query + 1, 1:].numpy(),
                               rtol=1e-6)
    assert page3.query_params == {"p3_view": "head", "p3_block": "5", "p3_head": "2"}

    page4 = open_link("4_rollout_heads.py", p4_sink_block="10", p4_sink_head="0")
    no_problems(page4)
    received = [s for s in chart_specs(page4)
                if chart_title(s) == "Block 10, head 0: mean attention each patch receives"]
    assert len(received) == 1
    np.testing.assert_allclose(
        plotly_array(received[0]["data"][1]["z"]).ravel(),
        capture.blocks[10].acts["attn"][0, 0, :, 1:].double().mean(0).numpy(), rtol=1e-6)
    big = open_link("4_rollout_heads.py", p4_big_block="7", p4_big_head="4")
    no_problems(big)
    assert any(chart_title(s).startswith("Block 7, head 4") for s in chart_specs(big))

    page6 = open_link("6_daam_flow.py", daam_channel_block="3")
    no_problems(page6)
    assert page6.get("select_slider")[0].value == 3  # frame 3 = block 3 on DINOv2
    assert page6.query_params == {"daam_view": "channels", "daam_channel_block": "3"}
    refused = open_link("6_daam_flow.py", daam_channel_block="12")
    assert not refused.exception
    assert "`12`" in " ".join(w.value for w in refused.warning)
