"""Page 9: the intervention lab - change one thing in the model or the input, watch the answer."""

import streamlit as st

from dashboard import background_warmup, links, literal, state, ui
from dashboard.claims_views import REMOVE, claims_view, patch_picker, predict_view, toggle
from dashboard.clicks import apply_chart_click
from xai_core.studies import cause_vs_claim as claims
from xai_core.studies import interventions as iv
from xai_core.lessons import interventions_lab
from xai_core import pipeline
from xai_core.capture import model_layout
from xai_core.figures import intervention_figures as figs
from xai_core.analysis.perturbation import BASELINE_NAMES, BASELINES
from xai_core.studies.readout import ALIKE, readout
from xai_core.lessons.views.p9_interventions import LAB_PAGE

st.title("Interventions: test a map against the model")
st.markdown(
    "Every other page shows a map: a *claim* about what the model uses. Here you change the "
    "model or its input and watch the answer. Switch a head off, remove patches, scramble "
    "the positions, cut the attention to a sink: if the answer barely moves, what you removed "
    "was not needed, whatever a map says about it. Attention weights are not explanations by "
    "themselves (Jain & Wallace 2019), and most heads can go with little loss (Michel et al. "
    "2019). Blocks, heads and patches are numbered from 0; patches row by row.")

VIEWS = LAB_PAGE.picker_args("iv_view")
FILLS = {"zero": "zero: its output set to 0", "mean": "mean: its output over the image's tokens"}

warming = background_warmup.PROGRESS
if warming.running:
    st.caption(f":material/hourglass_top: The server is still preparing the gallery's "
               f"pictures ({warming.done} of {warming.total} steps done"
               + (f"; now: {warming.now}" if warming.now else "") + "). Until it is done, a "
               "view it has not reached yet takes longer to open.")

image = state.current_image()
if image is None:
    st.stop()
family = links.choice(st.radio, "Model", LAB_PAGE.choices("iv_model"), key="iv_model",
                      horizontal=True, format_func={"vit": "the sidebar's ViT", "cnn": "the "
                                                    "sidebar's CNN (pixels only)"}.get)
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
    found = outcome.target
    st.markdown(f"**{literal.text(found['label'])}**: {found['score_kind']} "
                f"{found['before']:.4f} → {found['after']:.4f}: it "
                f"{iv.drop_words(found['drop'])} (drop **{found['drop']:+.4f}**, before minus "
                f"after). Top class before: {literal.text(outcome.before[0].label)}; after: "
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


def tokens_view(model, image, target, head) -> None:
    apply_chart_click("iv_patch_pick", lambda d: toggle(int(d[0]), "iv_patches"))
    choices = ["tokens", "pixels"] if model.spec.family == "vit" else ["pixels"]
    remove = links.choice(st.radio, "How", choices, key="iv_remove", horizontal=True,
                          format_func=REMOVE.get)
    patches = links.choices(st.multiselect, "Patches (click them on the image)",
                            list(range(claims.num_patches(model))), key="iv_patches")
    baseline = LAB_PAGE.default("iv_baseline")
    if remove == "pixels":
        baseline = links.choice(st.selectbox, "Masked pixels show", list(BASELINES),
                                key="iv_baseline", default=baseline, format_func=BASELINE_NAMES.get)
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
    how = links.choice(cols[0].radio, "Position embeddings", LAB_PAGE.choices("iv_positions"),
                       key="iv_positions", horizontal=True)
    seed = links.number(cols[1].number_input, "Seed", *LAB_PAGE.bounds("iv_seed"), key="iv_seed",
                        default=LAB_PAGE.default("iv_seed"))
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


def block_runs(blocks) -> str:
    """[0, 1, 2, 5] -> 'blocks 0-2 and 5'."""
    runs, start = [], None
    for i, block in enumerate(blocks):
        start = block if start is None else start
        if i + 1 == len(blocks) or blocks[i + 1] != block + 1:
            runs.append(f"{start}" if start == block else f"{start}-{block}")
            start = None
    words = runs[0] if len(runs) == 1 else ", ".join(runs[:-1]) + " and " + runs[-1]
    return ("block " if runs == [str(blocks[0])] else "blocks ") + words


def readout_view(model, image, target, head) -> None:
    found = readout(model, image, target=target, head=head)
    label = literal.text(found.label)
    alike = [b for b, flag in enumerate(found.alike) if flag]
    st.markdown(f"The model's own ending (final norm, then its head) applied after each block, "
                f"as if the later blocks were not there. The answer "
                f"(**{literal.text(found.top[-1][0].label)}**) is the read-out's top class from "
                f"block {found.first_block} on.")
    st.markdown(
        f"Compare the blocks by **{label}'s rank** (#1: the top class) and its **margin over "
        f"the runner-up** (its score minus the best other class's): those mean the same at "
        f"every block. Its score alone does not"
        + (f": at {block_runs(alike)} every class scores within {ALIKE} of every other "
           f"(hollow points), so a high score there says nothing about {label} "
           f"({found.target_scores[alike[0]]:.3f} at block {alike[0]}, "
           f"{found.target_scores[-1]:.3f} at the last)." if alike else "."))
    ui.show_figure(figs.readout_figure(found.margins, found.ranks, found.target_scores,
                                       found.alike, found.score_kind, found.first_block),
                   key="iv_readout")
    last = len(found.top) - 1
    block = links.number(st.slider, "Block", LAB_PAGE.option("iv_readout_block").low, last,
                         key="iv_readout_block", default=last)
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


view = ui.view_picker(**VIEWS)
why_not = interventions_lab.refusals(model).get(view)
if why_not:
    st.info(f"{VIEWS['views'][view]} is not available for this model: {why_not}")
    st.stop()
with ui.friendly_errors():
    target = ui.target_picker(model, image, key="iv_target", head=head)
    {"heads": heads_view, "tokens": tokens_view, "positions": positions_view,
     "attention": attention_view, "readout": readout_view, "importance": importance_view,
     "claims": claims_view, "predict": predict_view}[view](model, image, target, head)
