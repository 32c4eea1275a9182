"""Page 4 (rollout and the heads behind it) in AppTest: it renders on the bundled DINOv2, a
register model and a random-weight distilled DeiT, every control is exercised, the charts
carry the numbers of the methods (checked against formulas computed here), and its rollout
controls are the rollout method's declared options."""

import numpy as np
import torch
from apptest_helpers import (RANDOM_DEIT, chart_keys, chart_quoting, chart_specs, chart_title,
                             element_text, keyed_chart, numbers, ok, open_app, percent,
                             plotly_array, quoting, show, sink_columns)
from streamlit.testing.v1 import AppTest

from xai_core import pipeline
from xai_core.analysis.attention_sinks import SINK_THRESHOLD
from xai_core.analysis.token_marks import largest_norm_ratio
from xai_core.images import load_sample
from xai_core.methods import METHODS, gae, rollout
from xai_core.models import get_model



def test_page_4_on_dinov2_all_controls():
    app = ok(open_app("4_rollout_heads.py"))
    model, image = get_model("dinov2-s14"), load_sample("chelsea")
    capture = pipeline.vit_capture(model, image)
    # first view: start=auto leaves out block 0, whose head sends ~all attention to one patch
    scores, keys = sink_columns(capture)
    sink_head = int(scores[0].argmax())
    sink_patch = int(keys[0, sink_head]) - 1
    assert app.selectbox(key="p4_start").value == "auto"
    # the controls are the method's declared options: its range, not one of the page's own
    declared = rollout.explain.option("discard")
    discard = app.slider(key="p4_discard")
    assert (discard.min, discard.max, discard.value) == (declared.low, declared.high,
                                                         declared.default) == (0, 0.99, 0)
    assert app.selectbox(key="p4_fusion").options == list(rollout.FUSIONS)
    assert chart_keys(app) == {"p4_rollout", "p4_raw", "p4_gae"}  # the rollout view alone
    first = chart_quoting(app, "p4_rollout", "1", "11", "0.00")
    auto_map = rollout.attention_rollout(capture, 1).query_row()[0]
    np.testing.assert_allclose(plotly_array(first["data"][1]["z"]), auto_map, rtol=1e-6)
    assert auto_map.max() / auto_map.sum() < 0.04
    captions = element_text(app, "caption")
    auto = rollout.auto_start(METHODS["sinks"](model, image).detail)  # what start=auto read
    assert [entry["block"] for entry in auto.left_out] == [0]
    named = auto.left_out[0]["sink_heads"][0]  # the head the caption names first
    assert (named["head"], named["key_index"] - 1) == (sink_head, sink_patch)
    assert named["score"] >= 0.995  # "100 %" of its attention
    assert auto.summary() in captions  # its sentence: worded in test_auto_start_summary
    assert "GAE for 'cat'" in str(chart_specs(app))
    # the rollout caption quotes [CLS]'s share of the row, which the map leaves out
    rolled = METHODS["rollout"](model, image)
    prefix = rolled.arrays["prefix_values"]
    share = prefix[0] / (rolled.map.sum() + prefix.sum())
    assert f"[CLS] {percent(share)}%" in quoting(app, "caption", *numbers(auto.summary()))
    assert not [t for spec in chart_specs(app) for t in spec["data"]
                if t.get("name") == "high-norm token"]  # none meets the rule on chelsea
    top = largest_norm_ratio(capture)  # said instead of a table of marked patches
    quoting(app, "markdown", f"{top.ratio:.2f}", str(top.patch), str(top.row), str(top.col),
            str(top.block), f"{top.gap:.2f}")

    # one click: the full rollout from block 0 next to it, its bright patch ringed
    app.toggle(key="p4_full").set_value(True).run()
    ok(app)
    full = chart_quoting(app, "p4_rollout_full", "0", "11")
    full_map = rollout.attention_rollout(capture, 0).query_row()[0]
    np.testing.assert_allclose(plotly_array(full["data"][1]["z"]), full_map, rtol=1e-6)
    ring = [t for t in full["data"] if t.get("name") == "sink key"][0]
    assert plotly_array(ring["x"]).tolist() == [(sink_patch % 16) * 14 + 7]
    assert plotly_array(ring["y"]).tolist() == [(sink_patch // 16) * 14 + 7]
    assert int(full_map.argmax()) == sink_patch
    quoting(app, "caption", str(sink_patch), str(sink_patch // 16), str(sink_patch % 16),
            percent(full_map.max() / full_map.sum()), percent(1 / 256))

    # sinks and registers: scores, entropy, one head drawn on the image
    show(app, "p4_view", "sinks")
    heat = chart_quoting(app, "p4_sink_scores")
    np.testing.assert_allclose(plotly_array(heat["data"][0]["z"]), scores, rtol=1e-9)
    entropy = np.stack([torch.special.entr(b.acts["attn"][0].double()).sum(-1).mean(-1).numpy()
                        for b in capture.blocks])
    np.testing.assert_allclose(plotly_array(chart_quoting(app, "p4_sink_entropy")["data"][0]["z"]),
                               entropy, rtol=1e-9)
    assert (app.selectbox(key="p4_sink_block").value,
            app.selectbox(key="p4_sink_head").value) == (0, sink_head)
    app.selectbox(key="p4_sink_block").set_value(10).run()
    app.selectbox(key="p4_sink_head").set_value(0).run()
    ok(app)
    received = chart_quoting(app, "p4_sink_image", "10", "0")
    np.testing.assert_allclose(
        plotly_array(received["data"][1]["z"]).ravel(),
        capture.blocks[10].acts["attn"][0, 0, :, 1:].double().mean(0).numpy(), rtol=1e-6)
    analysis = METHODS["sinks"](model, image).detail
    sink = analysis.head(10, 0)  # measured: 0.35 on [CLS], a prefix token, so nothing ringed
    assert sink.key_name == "[CLS]" and not sink.on_patch
    assert f"**{sink.key_name}**" in quoting(
        app, "caption", "257", percent(sink.score), f"{analysis.entropy[10, 0]:.2f}",
        f"{np.log(257):.2f}")
    assert "No registers" in element_text(app)

    show(app, "p4_view", "rollout")
    assert "p4_conv_diff" not in chart_keys(app)  # the conventions run when opened
    app.session_state["p4_conventions"] = True  # a click on the expander
    app.selectbox(key="p4_fusion").set_value("max").run()
    app.slider(key="p4_discard").set_value(0.5).run()
    app.selectbox(key="p4_start").set_value(2).run()
    app.slider(key="p4_end").set_value(8).run()
    ok(app)
    rolled = chart_quoting(app, "p4_rollout", "2", "8", "0.50")
    expected = rollout.attention_rollout(capture, 2, 8, "max", 0.5).query_row()[0]
    np.testing.assert_allclose(plotly_array(rolled["data"][1]["z"]), expected, rtol=1e-6)
    assert auto.summary() not in element_text(app, "caption")  # the caption: start 2, by hand
    quoting(app, "caption", "2")
    bugged = rollout.attention_rollout(capture, 2, 8, "max", 0.5, "vit-explain").query_row()[0]
    largest = np.abs(expected - bugged).max()
    np.testing.assert_allclose(
        plotly_array(keyed_chart(app, "p4_conv_diff")["data"][1]["z"]).ravel(),
        (expected - bugged).ravel(), rtol=1e-5, atol=1e-9)
    assert largest > 0
    quoting(app, "markdown", f"{largest:.3g}", percent(largest / np.abs(expected).max()),
            "0.50")

    app.number_input(key="p4_query").set_value(20).run()
    ok(app)
    first_target = app.selectbox(key="p4_target").value
    app.selectbox(key="p4_target").select_index(1).run()
    ok(app)
    target = app.selectbox(key="p4_target").value
    head = model.head
    assert target != first_target
    gae_chart = chart_quoting(app, "p4_gae")
    assert chart_title(gae_chart) == f"GAE for '{head.class_names[target][:28]}'"
    graded = pipeline.vit_capture(model, image, target=target, head=head)
    np.testing.assert_allclose(plotly_array(gae_chart["data"][1]["z"]),
                               gae.gae_map(graded, 20)[0], rtol=1e-5)

    show(app, "p4_view", "heads")
    app.radio(key="p4_grid_query_kind").set_value("a patch").run()
    app.number_input(key="p4_grid_query").set_value(100).run()
    app.selectbox(key="p4_big_block").set_value(5).run()
    app.selectbox(key="p4_big_head").set_value(3).run()
    ok(app)
    big = chart_quoting(app, "p4_big", "5", "3", "100")
    np.testing.assert_allclose(plotly_array(big["data"][1]["z"]).ravel(),
                               capture.blocks[5].acts["attn"][0, 3, 101, 1:].numpy(), rtol=1e-6)
    mosaic = chart_quoting(app, "p4_mosaic")
    assert "100" in numbers(chart_title(mosaic))
    assert len(plotly_array(mosaic["data"][1]["customdata"])) == 12 * 6


def test_auto_start_summary():
    """The one wording test of `AutoStart.summary` (page 4's caption under rollout)."""
    model, image = get_model("dinov2-s14"), load_sample("chelsea")
    scores, keys = sink_columns(pipeline.vit_capture(model, image))
    head = int(scores[0].argmax())
    summary = rollout.auto_start(METHODS["sinks"](model, image).detail).summary()
    assert summary.startswith(f"Left out: block 0, where head {head} sends 100% of its "
                              "attention")
    assert f"patch {int(keys[0, head]) - 1} (row" in summary


def test_page_4_register_model_lists_registers_as_possible_sinks():
    app = ok(open_app("4_rollout_heads.py", vit_model="dinov2-s14-reg4", vit_random=True))
    assert "RANDOM WEIGHTS" in element_text(app, "error") + element_text(app)
    # random weights spread attention evenly: nothing is left out, rollout starts at block 0
    chart_quoting(app, "p4_rollout", "0", "11")
    assert app.toggle(key="p4_full").disabled
    show(app, "p4_view", "sinks")
    text = element_text(app)
    model = get_model("dinov2-s14-reg4", random_weights=True)
    registers = list(METHODS["sinks"](model, load_sample("chelsea")).detail.prefix_names[1:])
    assert registers == ["[REG1]", "[REG2]", "[REG3]", "[REG4]"]
    findings = [str(m.value) for m in app.markdown if ", ".join(registers) in str(m.value)]
    quoted = numbers(findings[0])  # the count, then the names' digits
    assert any(quoted[i:i + 5] == ["4", "1", "2", "3", "4"] for i in range(len(quoted)))
    assert "RANDOM WEIGHTS" in text  # the findings say they describe an untrained network
    capture = pipeline.vit_capture(model, load_sample("chelsea"))
    scores, keys = sink_columns(capture)
    heat = chart_quoting(app, "p4_sink_scores")
    np.testing.assert_allclose(plotly_array(heat["data"][0]["z"]), scores, rtol=1e-9)
    assert capture.layout.num_prefix_tokens == 5 and capture.layout.grid == (16, 16)
    hover = heat["data"][1]["text"]
    assert len(hover) == 12 * 6 and all("→" in h for h in hover)
    # random weights spread attention evenly: nothing is left out, rollout starts at block 0
    assert scores.max() < SINK_THRESHOLD


def test_page_4_random_deit_marks_both_prefix_tokens():
    app = ok(open_app("4_rollout_heads.py", **RANDOM_DEIT))
    assert "RANDOM WEIGHTS" in element_text(app, "error")
    captions = element_text(app, "caption")
    assert "[CLS]" in captions and "[DIST]" in captions
    assert get_model("deit-s16-distilled", random_weights=True).head.score_description \
        in captions  # what GAE differentiates
    app.selectbox(key="p4_fusion").set_value("min").run()
    show(app, "p4_view", "heads")
    app.radio(key="p4_grid_query_kind").set_value("a patch").run()
    ok(app)


def test_chart_click_sets_widgets_once():
    def script():
        import streamlit as st

        from dashboard.clicks import apply_chart_click

        apply_chart_click("chart", lambda d: {"block": int(d[0]), "head": int(d[1])})
        st.selectbox("Block", list(range(12)), key="block")
        st.selectbox("Head", list(range(6)), key="head")

    app = AppTest.from_function(script)
    app.session_state["chart"] = {"selection": {"points": [{"customdata": [3, 2]}]}}
    app.run()
    assert (app.selectbox(key="block").value, app.selectbox(key="head").value) == (3, 2)
    app.selectbox(key="block").set_value(7).run()  # the old click is not applied again
    assert app.selectbox(key="block").value == 7
    app.session_state["chart"] = {"selection": {"points": [{"customdata": [9, 4]}]}}
    app.run()
    assert (app.selectbox(key="block").value, app.selectbox(key="head").value) == (9, 4)
    app.session_state["chart"] = {"selection": {"points": [{"x": 1}]}}  # no customdata
    app.run()
    assert not app.exception and app.selectbox(key="block").value == 9
