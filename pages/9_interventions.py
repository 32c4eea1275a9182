"""Page 9: the intervention lab - change one thing in the model or the input, watch the answer."""

import streamlit as st

from dashboard import links, literal, state, ui
from dashboard.clicks import apply_chart_click
from xai_core.studies import cause_vs_claim as claims
from xai_core.studies import interventions as iv
from xai_core.lessons import interventions_lab
from xai_core import pipeline
from xai_core.capture import model_layout
from xai_core.figures import intervention_figures as figs
from xai_core.analysis.perturbation import BASELINE_NAMES, BASELINES
from xai_core.studies.readout import readout

st.title("Interventions: test a map against the model")
st.markdown(
    "Every other page shows a map: a *claim* about what the model uses. Here you change the "
    "model or its input and watch the answer. Switch a head off, remove patches, scramble "
    "the positions, cut the attention to a sink: if the answer barely moves, what you removed "
    "was not needed, whatever a map says about it. Attention weights are not explanations by "
    "themselves (Jain & Wallace 2019), and most heads can go with little loss (Michel et al. "
    "2019). Blocks, heads and patches are numbered from 0; patches row by row.")

VIEWS = {"heads": "Switch heads off", "tokens": "Drop tokens / mask patches",
         "positions": "Positions", "attention": "Sinks, registers, uniform",
         "readout": "Read-out per block", "importance": "Head importance",
         "claims": "Cause vs claim", "predict": "Predict, then reveal"}
OPENED_BY = {"heads": ("iv_heads",), "tokens": ("iv_patches", "iv_remove"),
             "positions": ("iv_positions", "iv_seed"), "attention": ("iv_change",),
             "readout": ("iv_readout_block",), "claims": ("iv_claim_remove",),
             "predict": ("iv_k",)}
FILLS = {"zero": "zero: its output set to 0", "mean": "mean: its output over the image's tokens"}
REMOVE = {"tokens": "drop the tokens", "pixels": "mask the pixels"}

image = state.current_image()
if image is None:
    st.stop()
family = links.choice(st.radio, "Model", ["vit", "cnn"], key="iv_model", horizontal=True,
                      format_func={"vit": "the sidebar's ViT", "cnn": "the sidebar's CNN "
                                   "(pixels only)"}.get)
model = state.current_vit() if family == "vit" else state.current_cnn()
if model is None:
    st.stop()
ui.model_caption(model)
head = ui.scoring_head(model, "no class score to change")
if head is None:
    st.stop()


def show_outcome(model, image, target, head, given: dict) -> None:
    """Top-5 and the target's score before and after, and the maps under the intervention."""
    outcome = iv.intervene(model, image, target=target, head=head, **given)
    change = outcome.target
    st.markdown(f"**{literal.text(change['label'])}**: {change['score_kind']} "
                f"{change['before']:.4f} → {change['after']:.4f} "
                f"(**{change['change']:+.4f}**). Top class before: "
                f"{literal.text(outcome.before[0].label)}; after: "
                f"{literal.text(outcome.after[0].label)}.")
    unit = "softmax probability" if head.kind == "imagenet" else "k-NN vote share"
    ui.show_figure(figs.before_after_bars(outcome.before, outcome.after, unit), key="iv_bars")
    if not outcome.maps:
        st.caption(f"Maps are not recomputed here: {outcome.maps_skipped}.")
        return
    plain = iv.intervene(model, image, target=target, head=head)
    layout = model_layout(model).tokens
    ui.show_figure(figs.maps_before_after(pipeline.prepare(model, image).model_image,
                                          plain.maps, outcome.maps, layout.patch_size),
                   key="iv_maps")
    st.caption("Top row: the maps of the plain forward; bottom row: the same maps recomputed "
               "under the intervention by the same capture code (attention of the last "
               "block's [CLS] row, rollout, GAE, ViT Grad-CAM).")


def heads_view(model, image, target, head) -> None:
    block, chosen_head, sink = interventions_lab.sink_suggestion(model, image)
    blocks, heads = len(model.module.blocks), model.module.blocks[0].attn.num_heads
    names = [f"{b}.{h}" for b in range(blocks) for h in range(heads)]
    st.markdown(f"The sink analysis (page 4) measures block {block}, head {chosen_head} as the "
                f"strongest attention sink: on average it sends {sink.score:.0%} of each "
                f"query's attention to one key ({literal.text(sink.key_name)}). It is switched "
                "off to start with: does the answer change?")
    cols = st.columns([2, 1])
    off = links.choices(cols[0].multiselect, "Heads switched off (block.head)", names,
                        key="iv_heads", default=[f"{block}.{chosen_head}"])
    fill = links.choice(cols[1].radio, "Convention", list(FILLS), key="iv_fill",
                        format_func=FILLS.get)
    if not off:
        st.info("Pick at least one head to switch off.")
        return
    show_outcome(model, image, target, head, {"heads_off": ",".join(off), "heads_fill": fill})


def toggle(patch: int, key: str, most: int | None = None) -> dict:
    """A click on a patch adds it to the list at `key`, or takes it out again."""
    chosen = list(st.session_state.get(key, []))
    if patch in chosen:
        chosen.remove(patch)
    elif most is None or len(chosen) < most:
        chosen.append(patch)
    return {key: chosen}


def patch_picker(model, image, key: str, chosen) -> None:
    grid = claims.patch_grid(model)
    side = model.spec.input_size[0] / grid[0], model.spec.input_size[1] / grid[1]
    ui.show_figure(figs.pick_figure(pipeline.prepare(model, image).model_image, grid, side,
                                    chosen), key=key, on_select="rerun",
                   selection_mode="points")


def tokens_view(model, image, target, head) -> None:
    apply_chart_click("iv_patch_pick", lambda d: toggle(int(d[0]), "iv_patches"))
    choices = ["tokens", "pixels"] if model.spec.family == "vit" else ["pixels"]
    remove = links.choice(st.radio, "How", choices, key="iv_remove", horizontal=True,
                          format_func=REMOVE.get)
    patches = links.choices(st.multiselect, "Patches (click them on the image)",
                            list(range(claims.num_patches(model))), key="iv_patches")
    baseline = "blur"
    if remove == "pixels":
        baseline = links.choice(st.selectbox, "Masked pixels show", list(BASELINES),
                                key="iv_baseline", default="blur", format_func=BASELINE_NAMES.get)
    patch_picker(model, image, "iv_patch_pick", patches)
    if not patches:
        st.info("Click patches on the image (or list them) to remove them.")
        return
    listed = ",".join(map(str, patches))
    given = ({"tokens_drop": listed} if remove == "tokens"
             else {"patches_mask": listed, "mask_baseline": baseline})
    show_outcome(model, image, target, head, given)


def positions_view(model, image, target, head) -> None:
    st.markdown("Each patch token carries a position embedding. Shuffle them among the "
                "patches (the same seed, the same order) or remove them: a model that ignored "
                "positions would not notice. Prefix tokens keep theirs.")
    cols = st.columns(2)
    how = links.choice(cols[0].radio, "Position embeddings", ["shuffle", "zero"],
                       key="iv_positions", horizontal=True)
    seed = links.number(cols[1].number_input, "Seed", 0, 9999, key="iv_seed", default=0)
    show_outcome(model, image, target, head, {"positions": how, "seed": seed})


def attention_view(model, image, target, head) -> None:
    allowed = interventions_lab.attention_options(model)
    change = links.choice(st.radio, "Change", list(allowed), key="iv_change", horizontal=True)
    if allowed[change]:
        st.info(f"{change} is not available here: {allowed[change]}")
        return
    blocks = list(range(len(model.module.blocks)))
    given = {"registers_off": "yes"}
    if change != "registers_off":
        picked = links.choices(st.multiselect, "Blocks", blocks, key=f"iv_{change}_blocks",
                               default=blocks if change == "sink_off" else blocks[-1:])
        if not picked:
            st.info("Pick at least one block.")
            return
        given = {change: ",".join(map(str, picked))}
    st.caption({"sink_off": "Each head's attention to its measured sink key is set to 0 and "
                            "every row renormalised to sum to 1.",
                "uniform": "Those blocks attend uniformly: 1/N on every key.",
                "registers_off": "The register tokens leave the sequence."}[change])
    show_outcome(model, image, target, head, given)


def readout_view(model, image, target, head) -> None:
    found = readout(model, image, target=target, head=head)
    st.markdown(f"The model's own ending (final norm, then its head) applied after each block, "
                f"as if the later blocks were not there. The answer "
                f"(**{literal.text(found.top[-1][0].label)}**) is the read-out's top class from "
                f"block {found.first_block} on.")
    ui.show_figure(figs.readout_figure(found.target_scores, found.score_kind,
                                       found.first_block), key="iv_readout")
    last = len(found.top) - 1
    block = links.number(st.slider, "Block", 0, last, key="iv_readout_block", default=last)
    grid = found.patch_scores.shape[1:]
    size = model.spec.input_size
    ui.show_figure(figs.readout_patch_figure(
        pipeline.prepare(model, image).model_image, found.patch_scores[block],
        (size[0] / grid[0], size[1] / grid[1]), block, found.score_kind), key="iv_readout_map")
    if found.bank:
        st.caption(f"The k-NN head compares block {block} with a {found.bank}.")


def importance_view(model, image, target, head) -> None:
    fill = links.choice(st.radio, "Convention", list(FILLS), key="iv_fill",
                        format_func=FILLS.get, horizontal=True)
    with st.spinner("Switching every head off, one at a time..."):
        grid = iv.head_importance(model, image, target=target, head=head, fill=fill,
                                  should_stop=ui.stop_check())
    stories = interventions_lab.importance_stories(model, image, grid)
    unit = figs.short_score(grid.score_kind)
    ui.show_figure(figs.importance_grid(grid.drops, grid.score_kind), key="iv_grid")
    ui.show_figure(figs.stories_figure(stories.drops, stories.stories, stories.rho,
                                       grid.score_kind), key="iv_stories")
    st.markdown("Over the heads, Spearman's rank correlation of the drop with each story: "
                + " ".join(stories.sentences()))
    st.caption(f"Drop = the target's {unit} in the plain forward minus with the head off "
               f"({FILLS[fill]}). Entropy: mean over queries, in nats. Rollout weight: "
               f"{interventions_lab.ROLLOUT_WEIGHT}.")


def claims_view(model, image, target, head) -> None:
    choices = ["tokens", "pixels"] if model.spec.family == "vit" else ["pixels"]
    remove = links.choice(st.radio, "Remove a patch by", choices, key="iv_claim_remove",
                          horizontal=True, format_func=REMOVE.get)
    baseline = "blur"
    if remove == "pixels":
        baseline = links.choice(st.selectbox, "Masked pixels show", list(BASELINES),
                                key="iv_claim_baseline", default="blur",
                                format_func=BASELINE_NAMES.get)
    revealed = st.session_state.get("iv_revealed", (None, ()))
    mine = revealed[1] if revealed[0] == model.label else ()  # the picks you revealed: a star
    with st.spinner("Removing each method's top patches and random ones..."), \
            ui.progress_bar() as progress:
        found = claims.cause_vs_claim(model, image, target=target, head=head, removals=remove,
                                      baseline=baseline, learner=mine,
                                      should_stop=ui.stop_check(), progress=progress)
    ui.show_figure(figs.claims_figure(found, remove), key="iv_claims")
    part, top = found.removals[remove], len(found.ks) - 1
    high = part.random_interval()[top, 1]
    beat = [name for name, drops in part.methods.items() if drops[top] > high]
    st.markdown(f"At k = {found.ks[top]}, removing the top patches of "
                f"{', '.join(beat) or 'no method'} costs more than the random patches' "
                f"95% interval (up to {high:+.4f}).")
    for name, why in found.failed.items():
        st.caption(f"{name} has no map here: {literal.text(why)}")


def predict_view(model, image, target, head) -> None:
    k = links.number(st.slider, "k: how many patches", 1, 16, key="iv_k", default=4)
    picked = st.session_state.setdefault("iv_picked", [])
    if len(picked) > k:
        st.session_state["iv_picked"] = picked = picked[:k]
    apply_chart_click("iv_predict_pick", lambda d: toggle(int(d[0]), "iv_picked", most=k))
    picked = st.session_state["iv_picked"]
    st.markdown(f"Before any map: click the **{k}** patches you think the model needs most "
                f"for {literal.text(head.class_names[target])}. Click a patch again to "
                f"unpick it. Picked: {len(picked)} of {k}.")
    patch_picker(model, image, "iv_predict_pick", picked)
    if len(picked) < k:
        return
    if st.button("Reveal", key="iv_reveal", type="primary"):
        st.session_state["iv_revealed"] = (model.label, tuple(picked))
    if st.session_state.get("iv_revealed") != (model.label, tuple(picked)):
        return
    removals = ("tokens", "pixels") if model.spec.family == "vit" else ("pixels",)
    with st.spinner("Removing your patches, each method's and random ones..."), \
            ui.progress_bar() as progress:
        found = claims.cause_vs_claim(model, image, target=target, head=head, ks=(k,),
                                      removals=removals, learner=picked,
                                      should_stop=ui.stop_check(), progress=progress)
    rows = interventions_lab.reveal_rows(found)
    for removal in removals:
        mine = found.removals[removal].learner
        st.markdown(f"**{REMOVE[removal].capitalize()}**: your {k} patch{'' if k == 1 else 'es'} "
                    f"drop the score by **{mine:+.4f}**.")
        ui.show_figure(figs.reveal_figure(rows, removal, found.score_kind),
                       key=f"iv_reveal_{removal}")
    name, share = found.closest_method()
    st.markdown((f"The method that agreed with you most: **{name}** ({share:.0%} of your "
                 f"patches among its top {k})." if share > 0 else
                 "None of the methods put any of your patches among its top "
                 f"{k}.") + f" Measure: {claims.OVERLAP}.")


view = ui.view_picker(VIEWS, key="iv_view", opened_by=OPENED_BY)
why_not = interventions_lab.refusals(model).get(view)
if why_not:
    st.info(f"{VIEWS[view]} is not available for this model: {why_not}")
    st.stop()
with ui.friendly_errors():
    target = ui.target_picker(model, image, key="iv_target", head=head)
    {"heads": heads_view, "tokens": tokens_view, "positions": positions_view,
     "attention": attention_view, "readout": readout_view, "importance": importance_view,
     "claims": claims_view, "predict": predict_view}[view](model, image, target, head)
