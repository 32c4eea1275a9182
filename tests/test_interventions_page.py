"""Page 9 (Interventions) in AppTest: every view on DINOv2, its deep links, the CNN's pixel-only
views, and the random-weight DeiT-distilled and reg4 layouts. The numbers the page prints are
checked against the core's results and hand computations (rollout weights by linearity)."""

import numpy as np
import pytest
from apptest_helpers import (ENTRY, chart_keys, chart_specs, element_text, no_problems,
                             numbers, open_app, percent, plotly_array, quoting, show)
from scipy.stats import spearmanr
from streamlit.testing.v1 import AppTest

from xai_core.studies import cause_vs_claim as claims
from xai_core.studies import interventions as iv
from xai_core.lessons import interventions_lab
from xai_core.analysis.attention_sinks import analyse_sinks
from xai_core.metrics.statistics import t_interval
from xai_core.figures.intervention_figures import SCALED, short_score
from xai_core.images import load_sample
from xai_core.maps import min_max
from xai_core.methods import METHODS
from xai_core.methods.rollout import attention_rollout
from xai_core.models import get_model
from xai_core.pipeline import vit_capture
from xai_core.studies.readout import readout

PAGE = "9_interventions.py"


def open_link(**params) -> AppTest:
    app = AppTest.from_file(ENTRY, default_timeout=600)
    for key, value in params.items():
        app.query_params[key] = value
    app.run()
    return app.switch_page(f"../pages/{PAGE}").run()


def signed(value: float) -> str:
    """A change as the page writes it (f"{value:+.4f}"), as `numbers` reads it back."""
    return f"{value:+.4f}".lstrip("+")


def spec_of(app, key: str) -> dict:
    keys = [chart.key for chart in app.get("bidi_component")
            if chart.proto.component_name == "vit_lens.chart"]
    return chart_specs(app)[keys.index(key)]


def test_heads_view_switches_the_measured_sink_head_off_first(dinov2, image):
    app = open_app(PAGE, timeout=600)
    no_problems(app)
    sink = analyse_sinks(vit_capture(dinov2, image)).strongest()
    outcome = iv.intervene(dinov2, image, heads_off=f"{sink.block}.{sink.head}")
    text = element_text(app)
    # the suggestion quotes the sink analysis (page 4): block, head, its share of attention
    quoting(app, "markdown", "4", str(sink.block), str(sink.head), percent(sink.score, 0))
    assert f"(drop **{outcome.target['drop']:+.4f}**," in text
    assert app.multiselect(key="iv_heads").value == [f"{sink.block}.{sink.head}"]
    bars = spec_of(app, "iv_bars")["data"]
    np.testing.assert_allclose(plotly_array(bars[1]["x"])[::-1],
                               [p.probability for p in outcome.after], rtol=1e-6)
    maps = spec_of(app, "iv_maps")
    heatmaps = [t for t in maps["data"] if t["type"] == "heatmap"]
    np.testing.assert_allclose(plotly_array(heatmaps[4]["z"]),
                               min_max(outcome.maps["attention"]), atol=1e-6)
    assert heatmaps[3]["colorbar"]["title"]["text"] == SCALED
    app.radio(key="iv_fill").set_value("mean").run()
    mean = iv.intervene(dinov2, image, heads_off=f"{sink.block}.{sink.head}", heads_fill="mean")
    assert f"(drop **{mean.target['drop']:+.4f}**," in element_text(app)
    assert app.query_params["iv_fill"] == "mean"


def test_tokens_positions_and_attention_views(dinov2, image):
    app = show(open_app(PAGE, timeout=600), "iv_view", "tokens")
    assert "Click patches" in element_text(app, "info") and chart_keys(app) == {"iv_patch_pick"}
    app.multiselect(key="iv_patches").set_value([0, 1, 2, 40]).run()
    dropped = iv.intervene(dinov2, image, maps=False, tokens_drop="0-2,40")
    assert f"(drop **{dropped.target['drop']:+.4f}**," in element_text(app)
    skipped = iv.intervene(dinov2, image, tokens_drop="0-2,40").maps_skipped  # asked, refused
    assert skipped and skipped in element_text(app, "caption")  # the core's reason, said
    assert "iv_maps" not in chart_keys(app)
    assert app.query_params["iv_patches"] == "0,1,2,40"
    app.radio(key="iv_remove").set_value("pixels").run()
    masked = iv.intervene(dinov2, image, maps=False, patches_mask="0-2,40", mask_baseline="blur")
    assert f"(drop **{masked.target['drop']:+.4f}**," in element_text(app)
    assert {"iv_bars", "iv_maps"} <= chart_keys(app)
    show(app, "iv_view", "positions")
    shuffled = iv.intervene(dinov2, image, maps=False, positions="shuffle", seed=0)
    assert f"(drop **{shuffled.target['drop']:+.4f}**," in element_text(app)
    show(app, "iv_view", "attention")
    every = iv.intervene(dinov2, image, maps=False, sink_off="0-11")
    assert f"(drop **{every.target['drop']:+.4f}**," in element_text(app)
    app.radio(key="iv_change").set_value("registers_off").run()
    assert interventions_lab.attention_options(dinov2)["registers_off"] in element_text(app, "info")
    no_problems(app)


def test_readout_view_and_its_block_link(dinov2, image):
    app = open_link(iv_view="readout", iv_readout_block="3")
    no_problems(app)
    found = readout(dinov2, image)
    said = [m.value for m in app.markdown if f"**{found.top[-1][0].label}**" in m.value]
    assert numbers(said[0]) == [str(found.first_block)]  # the answer's class from that block on
    assert app.slider(key="iv_readout_block").value == 3
    # what compares across blocks: the margin over the runner-up, the rank at each point,
    # the blocks where every class scores alike drawn apart (hollow) and named in words
    points = [t for t in spec_of(app, "iv_readout")["data"] if "text" in t["mode"]]
    drawn = {}
    for trace in points:
        for block, margin, rank in zip(plotly_array(trace["x"]), plotly_array(trace["y"]),
                                       trace["text"]):
            drawn[int(block)] = (margin, rank, trace["name"].startswith("every class"))
    assert sorted(drawn) == list(range(12))
    for block, (margin, rank, alike) in drawn.items():
        assert margin == pytest.approx(found.margins[block], rel=1e-6)
        assert rank == f"#{found.ranks[block]}" and alike == found.alike[block]
    alike = [b for b in range(12) if found.alike[b]]
    assert alike and alike[0] == 0  # DINOv2's first blocks do not tell the classes apart
    said = next(m.value for m in app.markdown if "margin over the runner-up" in m.value)
    assert "within 0.1 of every other" in said
    assert (f"({found.target_scores[0]:.3f} at block 0, {found.target_scores[-1]:.3f} at the "
            "last)") in said  # the misleading scores, named as such
    patches = spec_of(app, "iv_readout_map")
    heat = next(t for t in patches["data"] if t["type"] == "heatmap")
    np.testing.assert_allclose(plotly_array(heat["z"]), found.patch_scores[3], rtol=1e-5)
    assert heat["colorbar"]["title"]["text"] == short_score(found.score_kind)


def test_rollout_weights_are_rollouts_patch_mass_through_each_head(dinov2, image):
    """Rollout's [CLS] row is linear in each head's attention (factor (mean + I) / 2): doubling
    head h of block b adds exactly that head's weight to the row's mass on the patches."""
    capture = vit_capture(dinov2, image)
    attns = [b.acts["attn"][0].double().numpy() for b in capture.blocks if b.kind == "self"]
    tokens, heads = attns[0].shape[-1], attns[0].shape[0]

    def patch_mass(changed=None):
        running = np.eye(tokens)
        for index, attn in enumerate(attns):
            attn = attn.copy()
            if changed == index:
                attn[changed_head] *= 2
            running = ((attn.sum(0) / heads + np.eye(tokens)) / 2) @ running
        return running[0, 1:].sum()

    weights = interventions_lab.rollout_weights(dinov2, image)
    plain = attention_rollout(capture).query_row(None)[0].sum()
    assert patch_mass() == pytest.approx(plain, rel=1e-6)  # the method reads float32
    for block, changed_head in [(0, 5), (6, 2), (11, 0)]:
        assert patch_mass(block) - patch_mass() == pytest.approx(weights[block, changed_head],
                                                                 rel=1e-6)


def test_importance_view_states_the_rank_correlations(dinov2, image):
    app = show(open_app(PAGE, timeout=600), "iv_view", "importance")
    no_problems(app)
    grid = iv.head_importance(dinov2, image)
    weights = interventions_lab.rollout_weights(dinov2, image)
    text = element_text(app)
    stories = interventions_lab.importance_stories(dinov2, image, grid)
    assert all(sentence in text for sentence in stories.sentences())
    for story, values in (("sink score", grid.sink_scores), ("entropy (nats)", grid.entropy),
                          ("rollout weight", weights)):
        rho = spearmanr(grid.drops.ravel(), values.ravel())[0]
        assert stories.rho[story] == pytest.approx(rho)
        assert f"{rho:.2f}" in numbers(interventions_lab.rho_words(rho))
    cells = next(t for t in spec_of(app, "iv_grid")["data"] if t["type"] == "heatmap")
    np.testing.assert_allclose(plotly_array(cells["z"]), grid.drops, rtol=1e-6)
    assert short_score(grid.score_kind) in cells["colorbar"]["title"]["text"]


def test_rho_words_and_story_sentences_wording():
    """The one wording test of `interventions_lab.rho_words` and `Stories.sentences`."""
    assert interventions_lab.rho_words(0.05) == "no rank correlation (ρ = +0.05)"
    assert interventions_lab.rho_words(0.2) == "a weak positive rank correlation (ρ = +0.20)"
    assert interventions_lab.rho_words(-0.4) == "a moderate negative rank correlation (ρ = -0.40)"
    assert interventions_lab.rho_words(0.75) == "a strong positive rank correlation (ρ = +0.75)"
    assert interventions_lab.rho_words(float("nan")) == "undefined (one of them is constant)"
    stories = interventions_lab.Stories(np.zeros(2), {}, {"sink score": -0.4})
    assert stories.sentences() == [
        "sink score and a head's importance: a moderate negative rank correlation (ρ = -0.40)."]


def test_cause_vs_claim_view(dinov2, image):
    app = open_link(iv_view="claims")
    no_problems(app)
    found = claims.cause_vs_claim(dinov2, image, removals="tokens")
    part = found.removals["tokens"]
    assert len(part.methods) == 8
    names = {m: METHODS[m].shown_name for m in part.methods}

    def drawn() -> dict:
        return {t.get("name"): t for t in spec_of(app, "iv_claims")["data"]}

    # three methods by name (the attention story, rollout, GAE), random as a grey band
    assert set(drawn()) == {"attention", "rollout", "GAE", "random: mean",
                            "random k patches: 95 % interval (20 draws)"}
    band = drawn()["random k patches: 95 % interval (20 draws)"]
    assert band["fillcolor"] == "rgba(127,127,127,0.3)"
    app.multiselect(key="iv_claim_methods").set_value(list(part.methods)).run()
    traces = drawn()
    for name, drops in part.methods.items():  # every method on demand, by its name
        np.testing.assert_allclose(plotly_array(traces[names[name]]["y"]), drops, rtol=1e-6)
    np.testing.assert_allclose(plotly_array(traces["random: mean"]["y"]), part.random_mean(),
                               rtol=1e-6)
    low, high = part.random_interval()[-1]
    said = quoting(app, "markdown", "95", str(found.ks[-1]), signed(low), signed(high))
    beat = [m for m in part.methods if part.methods[m][-1] > high]
    assert numbers(said)[-2:] == [str(len(beat)), "8"]
    assert all(names[m] in said for m in beat)


def test_reveal_words_say_which_way_the_score_went():
    """The one wording test of `interventions_lab.reveal_words`: signed words, and random's interval."""
    draws = np.array([[0.001], [0.003], [0.002], [0.004], [0.0]])
    low, high = t_interval(draws[:, 0])
    raised = claims.Removal("tokens", {}, draws, -0.0018)
    assert interventions_lab.reveal_words(raised, 4, 0) == (
        "your 4 patches **raised the score by 0.0018**: the model did not need them; that is "
        f"less than random patches do (random sets of 4 lower it by {low:+.4f} to "
        f"{high:+.4f}, the 95 % interval of their mean).")
    lowered = claims.Removal("tokens", {}, draws, 0.0123)
    assert interventions_lab.reveal_words(lowered, 1, 0).startswith(
        "your 1 patch **lowered the score by 0.0123**; that is more than random patches do")
    level = claims.Removal("tokens", {}, draws, 0.002)
    assert "did not move" not in interventions_lab.reveal_words(level, 2, 0)
    assert "about as much as random patches do" in interventions_lab.reveal_words(level, 2, 0)


def test_predict_then_reveal_shows_the_learners_drop(dinov2, image):
    app = open_link(iv_view="predict", iv_k="3")
    no_problems(app)
    assert "Picked: 0 of 3" in element_text(app)
    assert "iv_reveal" not in [button.key for button in app.button]  # (the sidebar has its own)
    assert chart_keys(app) == {"iv_predict_pick"}  # no map before the reveal
    app.session_state["iv_picked"] = [100, 101, 117]
    app.run()
    app.button(key="iv_reveal").click().run()
    no_problems(app)
    found = claims.cause_vs_claim(dinov2, image, ks=(3,), learner=(100, 101, 117))
    text = element_text(app)
    for removal in ("tokens", "pixels"):  # your 3 patches, which way and how far they move it
        part = found.removals[removal]
        said = quoting(app, "markdown", "3", f"{abs(part.learner):.4f}")
        assert ("raised the score" if part.learner < 0 else "lowered the score") in said
        low, high = part.random_interval()[0]
        assert numbers(said)[2:5] == ["3", signed(low), signed(high)]  # random's interval
        assert {"above": "more than random", "within": "about as much as random",
                "below": "less than random"}[interventions_lab.against_random(part.learner, low, high)] in said
        bars = spec_of(app, f"iv_reveal_{removal}")["data"][0]
        assert bars["y"][-1] == "you"  # on top
        assert plotly_array(bars["x"])[-1] == pytest.approx(part.learner)
    # the picture with your patches beside each method's top 3
    panels = spec_of(app, "iv_choices")
    titles = [a["text"] for a in panels["layout"]["annotations"]]
    shares = found.agreement()
    assert titles == ["your patches"] + [f"{METHODS[m].shown_name}: {shares[m]:.0%} shared"
                                         for m in found.chosen]
    assert len(panels["layout"]["shapes"]) == 3 * (1 + len(found.chosen)) + 3 * len(
        found.chosen)  # yours on every panel, each method's top 3 on its own
    name, share = found.closest_method()
    if share > 0:  # the closest method, its share of your patches among its top 3
        assert f"**{METHODS[name].shown_name}**" in quoting(app, "markdown", "3")
    assert claims.OVERLAP in text  # how the agreement is measured
    show(app, "iv_view", "claims")  # the revealed picks join the curves as a star
    curves = claims.cause_vs_claim(dinov2, image, removals="tokens", learner=(100, 101, 117))
    star = next(t for t in spec_of(app, "iv_claims")["data"] if t.get("name") == "your patches")
    assert list(plotly_array(star["x"])) == [3]
    assert plotly_array(star["y"])[0] == pytest.approx(curves.removals["tokens"].learner)
    assert curves.removals["tokens"].learner == pytest.approx(found.removals["tokens"].learner)
    assert f"the score {iv.drop_words(curves.removals['tokens'].learner)}" in element_text(app)


def test_links_open_the_view_they_name_and_a_bad_view_is_refused():
    app = open_link(iv_heads="2.1,3.4")
    assert app.segmented_control(key="iv_view").value == "heads"
    assert app.multiselect(key="iv_heads").value == ["2.1", "3.4"]
    app = open_link(iv_positions="zero")
    assert app.segmented_control(key="iv_view").value == "positions"
    assert app.radio(key="iv_positions").value == "zero"
    assert app.query_params["iv_view"] == "positions"
    bad = open_link(iv_view="nope")
    assert [w.value for w in bad.warning if "`nope`" in w.value]  # the refused value named
    assert bad.segmented_control(key="iv_view").value == "heads"


def test_the_cnn_takes_pixels_and_says_why_not_for_tokens_and_heads():
    app = open_link(iv_model="cnn")
    model, image = get_model("efficientnet-lite0"), load_sample("chelsea")
    assert interventions_lab.refusals(model)["heads"] in element_text(app, "info")
    show(app, "iv_view", "tokens")
    assert app.radio(key="iv_remove").options == ["mask the pixels"]
    app.multiselect(key="iv_patches").set_value([0, 15]).run()
    masked = iv.intervene(model, image, maps=False, patches_mask="0,15")
    assert f"(drop **{masked.target['drop']:+.4f}**," in element_text(app)
    show(app, "iv_view", "claims")
    no_problems(app)
    assert app.radio(key="iv_claim_remove").options == ["mask the pixels"]
    assert "iv_claims" in chart_keys(app)


@pytest.mark.parametrize("model_id, registers", [("deit-s16-distilled", False),
                                                 ("dinov2-s14-reg4", True)])
def test_random_weight_layouts(model_id, registers):
    app = open_app(PAGE, timeout=600, vit_model=model_id, vit_random=True)
    assert not app.exception, app.exception
    assert "RANDOM WEIGHTS" in element_text(app, "caption")
    assert {"iv_bars", "iv_maps"} <= chart_keys(app)
    show(app, "iv_view", "attention")
    app.radio(key="iv_change").set_value("registers_off").run()
    assert not app.exception, app.exception
    if registers:
        assert "iv_bars" in chart_keys(app)
    else:  # the core's reason, for this model
        model = get_model(model_id, random_weights=True)
        assert (interventions_lab.attention_options(model)["registers_off"]
                in element_text(app, "info"))
