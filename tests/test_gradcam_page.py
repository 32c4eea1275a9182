"""Page 5 (Grad-CAM) in AppTest: the CNN part on the cat + coffee cup collage, and the ViT
taxonomy with the bundled DINOv2 and its k-NN targets. Pickers must change the maps."""

import re

import numpy as np
from apptest_helpers import (chart_keys, chart_specs, chart_title, element_text, keyed_chart,
                             no_problems, open_app, plotly_array, show, text_tables)

from tolerance import network_tolerance
from xai_core import pipeline
from xai_core.images import load_sample
from xai_core.methods import METHODS
from xai_core.methods.vit_gradcam import ZERO_GRADIENT
from xai_core.models import get_model

PAGE = "5_gradcam.py"


def chart(app, title_start: str) -> dict:
    found = [spec for spec in chart_specs(app) if chart_title(spec).startswith(title_start)]
    assert len(found) == 1, title_start
    return found[0]


def heatmap(app, title_start: str) -> np.ndarray:
    return heatmap_of(chart(app, title_start))


def heatmap_of(spec: dict) -> np.ndarray:
    return plotly_array(next(t for t in spec["data"] if t["type"] == "heatmap")["z"])


def mosaic(app) -> dict:
    found = [s for s in chart_specs(app)
             if str(s["layout"].get("xaxis", {}).get("ticktext", [""])[0]).startswith("F1")]
    assert len(found) == 1
    return found[0]


def left_share(values: np.ndarray) -> float:
    half = values.shape[1] // 2
    return float(values[:, :half].sum() / values.sum())


def test_cnn_part_explains_matches_the_library_and_pickers_change_maps():
    model = get_model("efficientnet-lite0")
    cat = pipeline.resolve_target(model, "Egyptian cat")
    espresso = pipeline.resolve_target(model, "espresso")
    app = open_app(PAGE, image_choice="collage", gc_family=["Grad-CAM"])
    no_problems(app)
    assert chart_keys(app) == {"gc_alpha", "gc_sum", "gc_relu", "gc_up"}  # step by step
    captions = element_text(app, "caption")
    difference = float(re.search(r"largest difference ([0-9.e+-]+)\.", captions).group(1))
    # the page's own check against pytorch-grad-cam: float32 rounding of a [0, 1] map only
    assert difference <= network_tolerance(model.module, np.ones(1), passes=2)
    alpha = keyed_chart(app, "gc_alpha")  # one weight per channel of bn2
    assert len(plotly_array(alpha["data"][0]["y"])) == 1280 and "bn2" in chart_title(alpha)

    app.selectbox(key="gc_cnn_target").set_value(cat).run()
    no_problems(app)
    cat_map = heatmap_of(keyed_chart(app, "gc_relu"))
    app.selectbox(key="gc_cnn_target").set_value(espresso).run()
    no_problems(app)
    cup_map = heatmap_of(keyed_chart(app, "gc_relu"))
    assert cat_map.shape == cup_map.shape == (7, 7)
    assert left_share(cat_map) > 0.7 and left_share(cup_map) < 0.3  # cat left, cup right

    app.selectbox(key="gc_layer_efficientnet-lite0").set_value("blocks.3.2.bn3").run()
    no_problems(app)
    assert heatmap_of(keyed_chart(app, "gc_relu")).shape == (14, 14)  # a stride-16 stage
    show(app, "gc_cnn_view", "classes")
    pair = [s for s in chart_specs(app)
            if [t["type"] for t in s["data"]] == ["image", "heatmap"] * 4]
    assert len(pair) == 1  # Grad-CAM and saliency for class A and class B
    show(app, "gc_cnn_view", "family")
    table = text_tables(app)[0]
    assert list(table["method"]) == ["Grad-CAM"]


def test_vit_part_taxonomy_and_pickers_change_maps():
    model = get_model("dinov2-s14")
    names = model.head.class_names
    cat, cup = names.index("cat"), names.index("coffee cup")
    app = open_app(PAGE, image_choice="collage", gc_part="vit", gc_vit_target=cat)
    no_problems(app)
    variants, zero_gradient = [m.value for m in app.metric][:2]  # the counts, in page order
    assert variants == "192"  # 12 blocks x 16
    assert zero_gradient == "5"

    grid = mosaic(app)
    notes = [a["text"] for a in grid["layout"]["annotations"]]
    assert notes.count("zero grad") == 4  # last block F3, F4, F5, F6 with patch weights
    cat_tiles = plotly_array(grid["data"][0]["z"])
    assert cat_tiles.shape == (12 * 17 - 1, 6 * 17 - 1)

    block_11 = heatmap(app, "F1 · block 11")
    app.slider(key="gc_block").set_value(5).run()
    no_problems(app)
    block_5 = heatmap(app, "F1 · block 5")
    assert block_5.shape == (16, 16) and not np.allclose(block_5, block_11)

    app.selectbox(key="gc_location").set_value("F2").run()
    no_problems(app)
    heads = [s for s in chart_specs(app)
             if len(s["data"]) == 6 and all(t["type"] == "heatmap" for t in s["data"])]
    assert len(heads) == 1  # one panel per DINOv2 head

    app.selectbox(key="gc_vit_target").set_value(cup).run()
    no_problems(app)
    cup_tiles = plotly_array(mosaic(app)["data"][0]["z"])
    both = np.isfinite(cat_tiles) & np.isfinite(cup_tiles)
    assert both.sum() > 0 and not np.allclose(cat_tiles[both], cup_tiles[both])

    app.radio(key="gc_weights").set_value("cls").run()
    no_problems(app)
    notes = [a["text"] for a in mosaic(app)["layout"]["annotations"]]
    assert "zero grad" not in notes  # [CLS] gradients reach every location of every block


def test_vit_part_with_cait_layout_marks_undefined_cells():
    """CaiT (random weights, offline): 24 patch blocks without [CLS] and 2 class-attention
    blocks whose F3-F6 hold only [CLS]. Those cells are labelled n/a, asking for one gives
    a message, and a block index beyond another model's depth is brought back in range."""
    app = open_app(PAGE, image_choice="coffee", gc_part="vit", vit_model="cait-s24",
                   vit_random=True)
    assert not app.exception
    assert "RANDOM WEIGHTS" in " ".join(e.value for e in app.error)  # the model's label
    variants = app.metric[0].value
    # patch blocks: F1, F3 x 2 head modes, F4, F5, F6 with patch weights = 6 each (x 24);
    # class blocks: F1 x 2 weightings + F2 x 2 weightings x 2 head modes = 6 each (x 2)
    assert variants == str(24 * 6 + 2 * 6)
    notes = [a["text"] for a in mosaic(app)["layout"]["annotations"]]
    assert notes.count("n/a") == 24 + 2 * 4  # F2 of each patch block, F3-F6 of class blocks

    app.slider(key="gc_block").set_value(25).run()
    app.selectbox(key="gc_location").set_value("F5").run()
    assert not app.exception
    # the refusal names the cell asked for: F5 of class block 25
    assert any(re.search(r"\bF5\b", e.value) and re.search(r"\b25\b", e.value)
               for e in app.error)

    app.session_state["vit_model"] = "dinov2-s14"
    app.session_state["vit_random"] = False
    app.run()
    no_problems(app)
    assert app.slider(key="gc_block").value == 11
    # F5 of the last block has a zero gradient: a warning with the taxonomy's reason, no map
    model = get_model("dinov2-s14")
    cell = METHODS["vit-gradcam-all"](
        model, load_sample("coffee"), target=app.selectbox(key="gc_vit_target").value,
        head=model.head).detail.cell(11, "F5", app.radio(key="gc_weights").value)
    assert cell.status == ZERO_GRADIENT
    [warning] = app.warning
    assert cell.reason in warning.value and "gc_cell" not in chart_keys(app)
