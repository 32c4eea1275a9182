"""Page 6 (DAAM flow) in AppTest: the bundled DINOv2 with its k-NN bank, and the token
layouts of a distilled DeiT and CaiT with random weights (offline)."""

import json
import re

import numpy as np
from apptest_helpers import (chart_keys, chart_specs, element_text, keyed_chart, open_app,
                             percent, plotly_array, quoting, show)

from xai_core.methods import METHODS
from xai_core.methods.daam import DISPLAY_MODES

PAGE = "6_daam_flow.py"


def flow_spec(app) -> dict:
    flows = [spec for spec in chart_specs(app) if spec.get("frames")]
    assert len(flows) == 1
    return flows[0]


def frame_maps(spec) -> np.ndarray:
    """(frames, 2, rows, cols): the L_b and D_b heatmaps of every frame."""
    return np.array([[plotly_array(trace["z"]) for trace in frame["data"]]
                     for frame in spec["frames"]], dtype=float)


def token_layout(app) -> tuple[int, str]:
    """The prefix-token count and the parenthesised names the page's layout note gives."""
    found = re.search(r"(\d+) prefix tokens? \(([^)]*)\)", element_text(app, "info"))
    assert found, element_text(app, "info")
    return int(found.group(1)), found.group(2)


def check_flow(spec, blocks: int) -> np.ndarray:
    assert len(spec["frames"]) == blocks
    assert all(frame["traces"] == [1, 3] for frame in spec["frames"])  # the images stay
    assert [t["type"] for t in spec["data"]] == ["image", "heatmap", "image", "heatmap"]
    layout = spec["layout"]
    assert layout["updatemenus"][0]["buttons"][0]["method"] == "animate"
    assert len(layout["sliders"][0]["steps"]) == blocks
    maps = frame_maps(spec)
    assert maps.min() >= 0 and maps.max() <= 1 + 1e-9
    return maps


def test_dinov2_knn_flow_voters_and_target_change():
    app = open_app(PAGE, vit_model="dinov2-s14", image_choice="collage")
    assert not app.exception, app.exception
    assert not app.error, element_text(app, "error")
    assert chart_keys(app) == {"daam_flow", "daam_contrib"}  # the flow view alone
    maps = check_flow(flow_spec(app), 12)
    # Official display: every D frame is min-max scaled after the sigmoid.
    assert np.allclose(maps[:, 1].reshape(12, -1).max(1), 1.0)
    assert token_layout(app) == (1, "[CLS]")
    # blocks are numbered from 0, as on every page: the slider and the titles say so
    spec = flow_spec(app)
    assert [s["label"] for s in spec["layout"]["sliders"][0]["steps"]] == [
        f"block {b}" for b in range(12)]
    assert spec["layout"]["title"]["text"] == "block 11"
    show(app, "daam_view", "vote")
    voters = app.dataframe[0].value
    assert len(voters) == 20 and (voters["used for w"] != "").any()
    show(app, "daam_view", "flow")
    display = app.radio(key="daam_display").value  # the default: the paper's display
    assert display == "official" and f"**{DISPLAY_MODES[display]}**" in element_text(app, "caption")

    target = app.selectbox(key="daam_target")
    first = target.value  # a class index: the top prediction
    app.selectbox(key="daam_target").set_value(1 if first != 1 else 0).run()
    assert not app.exception
    changed = frame_maps(flow_spec(app))
    assert changed.shape == maps.shape
    assert np.abs(changed - maps).max() > 0.05  # another class, another flow

    app.radio(key="daam_display").set_value("shared").run()
    shared = frame_maps(flow_spec(app))
    # One scale for every frame: only the last D frame reaches 1 (D is non-decreasing).
    assert np.isclose(shared[-1, 1].max(), 1.0) and shared[0, 1].max() < 1.0


def test_distilled_deit_random_weights_layout():
    app = open_app(PAGE, vit_model="deit-s16-distilled", vit_random=True)
    assert not app.exception, app.exception
    assert "RANDOM WEIGHTS" in element_text(app, "caption") + element_text(app, "error")
    check_flow(flow_spec(app), 12)
    assert token_layout(app) == (2, "[CLS], [DIST]")
    show(app, "daam_view", "sanity")
    assert not app.exception, app.exception
    titles = [a["text"] for a in keyed_chart(app, "daam_sanity_row")["layout"]["annotations"]]
    # 12 blocks (0-11): randomised from the top down to blocks 11, 8, 5, 2 and 0, with rho.
    assert titles[0] == "trained model" and len(titles) == 6
    assert [t.split(" random")[0] for t in titles[1:]] == [
        "block 11", *(f"blocks {k}-11" for k in (8, 5, 2, 0))]
    assert all(-1 <= float(t.split("ρ = ")[1]) <= 1 for t in titles[1:])


def test_cait_random_weights_runs_over_class_blocks():
    app = open_app(PAGE, vit_model="cait-s24", vit_random=True, image_choice="coffee")
    assert not app.exception, app.exception
    maps = check_flow(flow_spec(app), 2)
    assert token_layout(app) == (1, "[CLS]")
    # the flow runs over the two class-attention blocks only, numbered after the 24 others
    assert [s["label"] for s in flow_spec(app)["layout"]["sliders"][0]["steps"]] == [
        "class block 24", "class block 25"]
    assert "class block 24" in json.dumps(flow_spec(app)["frames"][0]["layout"])
    target = app.selectbox(key="daam_target")
    target.set_value((target.value + 1) % 1000).run()
    assert not app.exception
    assert np.abs(frame_maps(flow_spec(app)) - maps).max() > 0.05


def test_dinov2_sink_frame_is_named_and_left_in():
    """On the coffee photo the first frame's brightest patch is the patch that block 0's
    sink head sends ~all its attention to: the page says so, and keeps every block."""
    from xai_core import pipeline
    from xai_core.images import load_sample
    from xai_core.models import get_model

    app = open_app(PAGE, vit_model="dinov2-s14", image_choice="coffee")
    assert not app.exception, app.exception
    maps = check_flow(flow_spec(app), 12)  # every block stays in the flow
    capture = pipeline.vit_capture(get_model("dinov2-s14"), load_sample("coffee"))
    received = capture.blocks[0].acts["attn"][0].double().mean(1).numpy()  # (heads, keys)
    head = int(received.max(-1).argmax())
    patch = int(received[head].argmax()) - 1
    assert received[head].max() > 0.99 and patch >= 0
    assert int(maps[0, 0].argmax()) == patch  # the L frame of block 0 shows the sink
    # the caption names frame 0, the sink patch (row, col), the head and its share, and what
    # that frame and patch take of the final map D_B (from the method's raw L and D)
    flow = METHODS["daam"](get_model("dinov2-s14"), load_sample("coffee")).detail
    total = flow.D[-1].sum()
    quoting(app, "caption", "0", str(patch), str(patch // 16), str(patch % 16), str(head),
            percent(received[head].max(), 0), "4", percent(flow.L[0].sum() / total),
            percent(flow.D[-1].ravel()[patch] / total))
    assert int(maps[-1, 1].argmax()) != patch  # the accumulated map is not the sink
