"""Page 4: attention rollout, gradient-weighted attention, and every head of every block."""

import numpy as np
import streamlit as st

from dashboard import links, literal, state, ui
from dashboard.clicks import apply_chart_click
from dashboard.widgets import keep_valid
from xai_core import pipeline
from xai_core.capture import shared_forwards
from xai_core.figures.matrices import block_head_heatmap, head_mosaic
from xai_core.figures.overlays import difference_figure, token_map_figure
from xai_core.methods import attention, gae, rollout, sinks
from xai_core.analysis.sinks import (
    DEFINITION,
    ENTROPY_DEFINITION,
    SINK_THRESHOLD,
    value_norm_ratio,
)
from xai_core.analysis.token_marks import HIGH_NORM_RATIO, high_norm_tokens, largest_norm_ratio
from xai_core.analysis.token_marks import RULE as HIGH_NORM_RULE
from xai_core.analysis.tokens import prefix_token_names

st.title("Rollout and the heads behind it")
st.markdown(
    "The last block's attention is not the whole story: every block also passes its input "
    "straight on through the residual connection, and each block mixes what the blocks before "
    "it already mixed. **Attention rollout** (Abnar & Zuidema, 2020) follows that flow: for each "
    "block it fuses the heads into one matrix, adds the identity for the skip path, rescales "
    "every row to sum to 1, and multiplies the blocks together in forward order. By default "
    "the product starts after any early block that an *attention sink* dominates (see "
    "the *Sinks and registers* view).")
st.latex(r"\begin{gathered}\hat A_l = \frac{\bar A_l + I}{\mathrm{rowsum}(\bar A_l + I)},"
         r"\qquad R = \hat A_{\mathrm{end}} \cdots \hat A_{\mathrm{start}},\\ "
         r"\text{map} = R[\mathrm{CLS},\ \text{patches}]\end{gathered}")  # fits a projector

image, model = ui.vit_page_inputs()


def _prefix_text(names, values, total, what="row") -> str:
    if not len(values):
        return "No prefix token in these blocks."
    parts = [f"{n} {v / total:.1%}" for n, v in zip(names, values)]
    return f"Share of the {what} on prefix tokens (not drawn, they have no pixels): " + \
        ", ".join(parts) + "."


@st.fragment
def heads_grid(model, image, layout, eligible, prefix, model_image, marks):
    """Blocks x heads small multiples; clicks and pickers here rerun only this part."""
    with ui.friendly_errors():
        _heads_grid(model, image, layout, eligible, prefix, model_image, marks)


def _heads_grid(model, image, layout, eligible, prefix, model_image, marks):
    st.subheader("Every head of every block")
    has_cls = prefix > 0
    use_cls = has_cls and st.radio("Query", ["[CLS]", "a patch"], horizontal=True,
                                   key="p4_grid_query_kind") == "[CLS]"
    if not use_cls:
        keep_valid("p4_grid_query", range(layout.num_patches), layout.centre_patch)
        grid_query = st.number_input("Query patch for the grid", 0, layout.num_patches - 1,
                                     key="p4_grid_query")
        if not has_cls:
            st.caption("These blocks have no [CLS] token, so a patch is the query.")
    else:
        grid_query = None
    maps = np.stack([attention.explain(model, image, block=b, query=-1 if grid_query is None
                                       else grid_query).arrays["per_head"] for b in eligible])
    who = "[CLS]" if grid_query is None else f"patch {grid_query}"
    ui.show_figure(head_mosaic(maps, eligible, f"{who} → patches, per head (each tile scaled "
                                               "to its own range). Click a tile to enlarge."),
                   key="p4_mosaic", on_select="rerun", selection_mode="points")
    apply_chart_click("p4_mosaic",
                      lambda d: {"p4_big_block": int(d[0]), "p4_big_head": int(d[1])})
    heads = maps.shape[1]
    e1, e2 = st.columns([1, 2])
    with e1:
        big_block = links.choice(st.selectbox, "Block", eligible, key="p4_big_block",
                                 default=eligible[-1])
        big_head = links.choice(st.selectbox, "Head", list(range(heads)), key="p4_big_head",
                                default=0)
        tile = maps[eligible.index(big_block), big_head]
        st.markdown(f"Block {big_block}, head {big_head}: the {who} query puts "
                    f"**{tile.sum():.1%}** of its attention on image patches; its strongest "
                    f"patch gets {tile.max():.1%}.")
    with e2:
        ui.show_figure(token_map_figure(model_image, tile, layout.patch_size,
                                        f"Block {big_block}, head {big_head} ({who} query)",
                                        marks=marks, query=grid_query, grid=layout.grid),
                       key="p4_big")


def _end_not_before(start: int, last: int, eligible) -> str:
    """Keep the chosen end block unless it lies before the new start; then move it to the
    start and say so (the sentence, or "" when nothing moved)."""
    end = st.session_state.get("p4_end", last)
    if not isinstance(end, int) or end >= start:
        return ""
    st.session_state["p4_end"] = start
    return (f"End moved from block {eligible[end]} to block {eligible[start]}: a rollout "
            "cannot end before it starts.")


def _rollout_controls(eligible, prefix, layout, auto):
    """Head fusion, discard ratio, start (auto or a block), end and query; returns them."""
    last = len(eligible) - 1
    starts = [rollout.AUTO, *range(last + 1)]
    keep_valid("p4_query", range(-1, layout.num_patches), -1 if prefix else layout.centre_patch)
    c1, c2, c3, c4, c5 = st.columns([1, 1.2, 1.3, 1.3, 1.2])
    fusion = c1.selectbox("Head fusion", rollout.FUSIONS, key="p4_fusion",
                          persist_state="session",
                          help="How the heads of one block become one matrix.")
    discard = c2.slider("Discard ratio", 0.0, 0.95, step=0.05, key="p4_discard",
                        persist_state="session",
                        help="Zero this fraction of the weakest entries of each fused matrix "
                             "(never [CLS]→[CLS]) before adding the identity.")
    chosen = links.choice(
        c3.selectbox, "Start block", starts, key="p4_start",
        format_func=lambda s: (f"auto: block {eligible[auto.start]}" if s == rollout.AUTO
                               else f"block {eligible[s]}"),
        help="auto starts after the sink-dominated blocks: blocks with a head that sends at "
             f"least {SINK_THRESHOLD:.0%} of its attention (mean over all queries) to one "
             "image patch. See the 'Sinks and registers' view.")
    start = auto.start if chosen == rollout.AUTO else int(chosen)
    moved = _end_not_before(start, last, eligible)
    # a fixed range: a slider whose min changes is a new widget to the browser, which then
    # sends back its own first value (start 0 used to reset End to block 0)
    if last:
        end = links.number(c4.slider, "End block: rollout up to here", 0, last,
                           key="p4_end", default=last, format="%d",
                           help="Positions among the self-attention blocks; never before "
                                "the start block.")
    else:  # one block: nothing to choose (a slider needs min < max)
        c4.markdown(f"End block: **{eligible[0]}**")
        end = 0
    if moved or end < start:  # a link may name an end before the start
        c4.caption(moved or f"Ends at block {eligible[start]}, its start: a rollout cannot "
                             "end before it starts.")
    end = max(end, start)
    query = c5.number_input("Query patch (−1 = [CLS])" if prefix else "Query patch "
                            "(−1 = mean of all rows)", -1, layout.num_patches - 1, key="p4_query")
    return fusion, discard, chosen, start, end, int(query)


def _sink_rings(analysis, auto):
    """(patch, hover) of the patch sinks in the blocks that start=auto leaves out."""
    return [(entry["key_index"] - analysis.num_prefix_tokens,
             f"sink key of block {block['block']}, head {entry['head']}: "
             f"{entry['score']:.0%} of its attention")
            for block in auto.left_out for entry in block["sink_heads"]]


def _sink_share(values, auto, analysis) -> str:
    """How much of a patch map the sink keys that start=auto leaves out take."""
    patches = sorted({patch for patch, _ in _sink_rings(analysis, auto)})
    if not patches:
        return ""
    share = values.ravel()[patches].sum() / values.sum()
    return (f"The sink key{'s' if len(patches) > 1 else ''} of the left-out block"
            f"{'s' if len(auto.left_out) > 1 else ''} take{'' if len(patches) > 1 else 's'} "
            f"{share:.1%} of this map (an even spread: {len(patches) / values.size:.1%}). ")


SINKS_TEXT = """
**Attention sinks.** Each row of an attention matrix is a softmax, so it always adds up to 1: a
head cannot attend to *nothing*. When a head has nothing useful to add for a query, it still has
to put that attention somewhere, and trained transformers learn to park it on one fixed key, a
*sink*. Language models usually pick the first token (Xiao et al., 2023); a ViT can pick
[CLS], a register, or a plain background patch. A head that parks nearly all its attention on
one key hands every query the same value vector, so it cannot treat tokens differently: it is
close to what Bondarenko et al. (2023) call a *no-op head*, a head that has learned to do
(almost) nothing.

**High-norm tokens and registers.** Darcet et al. (2024, *Vision Transformers Need Registers*)
found that large ViTs trained for long (DINOv2, OpenCLIP, DeiT-III) recycle a few
low-information background patches as scratch space for global information. Those patches'
hidden states get far larger norms than all the others, and attention maps show bright spikes on
them. The fix they propose is *registers*: a few extra learned tokens next to [CLS], dropped at
the output, that give the model scratch space of its own; the artifacts move there and the maps
clean up. Jiang et al. (2025, *Vision Transformers Don't Need Trained Registers*) trace the
artifacts to a handful of MLP neurons and, at test time, move those neurons' output into one
extra, untrained token, which removes the artifacts without retraining.

**Why rollout cares.** Rollout reads every attention weight as information flow. A sink head in
an early block writes one bright column into its block's matrix; rollout multiplies it through
every later block, and the sink patch ends up as the brightest pixel of the map. That is why
rollout's *start = auto* begins after the sink-dominated blocks.
"""


def _findings(capture, analysis, model, marks) -> str:
    """What this model shows on this image, and what it does not, as a list."""
    sink_heads = analysis.sink_heads()
    lines = []
    if sink_heads:
        top = sink_heads[0]
        ratio = value_norm_ratio(capture, top.block, top.head, top.key)
        shown = "; ".join(f"block {s.block} head {s.head} → {s.key_name} ({s.score:.2f})"
                          for s in sink_heads[:4])
        more = f" and {len(sink_heads) - 4} more" if len(sink_heads) > 4 else ""
        lines.append(f"**Sink heads (score ≥ {SINK_THRESHOLD:g}):** {shown}{more}.")
        dominated = [analysis.blocks[p] for p in analysis.sink_dominated()]
        lines.append("**Sink-dominated blocks** (a sink head whose key is a patch): "
                     + (f"block{'s' if len(dominated) > 1 else ''} "
                        + ", ".join(map(str, dominated)) if dominated else "none") + ".")
        lines.append(
            f"**Not shown: whether the strongest sink head is a no-op.** Attention alone cannot "
            f"say. Block {top.block}, head {top.head} gives on average {top.score:.0%} of every "
            f"query's attention to one key whose value vector is {ratio:.2f}× the median value "
            "length of that head, so it adds nearly the same vector to every token: that mixes "
            "little between tokens, but it is not a zero vector unless the ratio is near 0.")
    else:
        lines.append(f"**No sink head:** no head sends {SINK_THRESHOLD:.0%} or more of its "
                     "attention (mean over queries) to a single key on this image.")
    registers = [n for n in analysis.prefix_names if n.startswith("[REG")]
    if registers:
        into = [s for s in sink_heads if s.key_name in registers]
        lines.append(f"**Registers:** this model has {len(registers)} register tokens "
                     f"({', '.join(registers)}), prefix tokens like [CLS], so they can be sink "
                     f"keys. Sink heads that park their attention on a register here: {len(into)}.")
    elif analysis.prefix_names:
        lines.append(f"**No registers:** the prefix tokens are {', '.join(analysis.prefix_names)}"
                     "; any scratch space the model needs has to be a patch or one of them.")
    else:
        lines.append("**No registers:** these blocks have no prefix token at all; any scratch "
                     "space the model needs has to be a patch.")
    if marks:
        lines.append(f"**High-norm patches:** {len(marks)} patch(es) meet the rule (✕ on the "
                     f"maps); the strongest is {marks[0].ratio:.1f}× the median norm.")
    else:
        top = largest_norm_ratio(capture)
        lines.append(f"**No high-norm artifact tokens:** the largest patch norm is "
                     f"{top.ratio:.2f}× the median (block {top.block}), below the rule's "
                     f"{HIGH_NORM_RATIO:g}×; no patch here is a high-norm token in Darcet et "
                     "al.'s sense.")
    if model.random_weights:
        lines.append("**RANDOM WEIGHTS:** these numbers describe an untrained network and say "
                     "nothing about sinks in the trained model.")
    return "\n".join(f"- {line}" for line in lines)


@st.fragment
def sinks_section(capture, analysis, model, model_image, marks):
    """Sink scores and entropy per head, one head's sink drawn on the image; clicks here
    rerun only this part."""
    with ui.friendly_errors():
        _sinks_section(capture, analysis, model, model_image, marks)


def _sinks_section(capture, analysis, model, model_image, marks):
    st.subheader("Sinks and registers")
    st.markdown(SINKS_TEXT)
    blocks, layout = analysis.blocks, capture.layout
    for chart in ("p4_sink_scores", "p4_sink_entropy"):
        apply_chart_click(chart, lambda d: {"p4_sink_block": int(d[0]),
                                            "p4_sink_head": int(d[1])})
    strongest = analysis.strongest()
    heads = analysis.scores.shape[1]
    hover = [[f"block {b}, head {h}<br>sink score {analysis.scores[p, h]:.2f} → "
              f"{analysis.key_name(int(analysis.keys[p, h]))}<br>entropy "
              f"{analysis.entropy[p, h]:.2f} nats" for h in range(heads)]
             for p, b in enumerate(blocks)]
    uniform = float(np.log(analysis.num_keys))
    left, middle, right = st.columns([1, 1, 1.25])
    with left:
        ui.show_figure(block_head_heatmap(
            analysis.scores, blocks, f"Sink score per head (boxed: ≥ {SINK_THRESHOLD:g})",
            "score", hover, zmin=0, zmax=1, outline=analysis.scores >= SINK_THRESHOLD),
            key="p4_sink_scores", on_select="rerun", selection_mode="points")
    with middle:
        ui.show_figure(block_head_heatmap(
            analysis.entropy, blocks, f"Entropy per head (nats; uniform {uniform:.2f})",
            "nats", hover, zmin=0, zmax=uniform, colorscale="Cividis"),
            key="p4_sink_entropy", on_select="rerun", selection_mode="points")
    with right:
        s1, s2 = st.columns(2)
        block = links.choice(s1.selectbox, "Block", blocks, key="p4_sink_block",
                             default=strongest.block)
        head = links.choice(s2.selectbox, "Head", list(range(heads)), key="p4_sink_head",
                            default=strongest.head)
        position = blocks.index(block)
        chosen = analysis.head(position, head)
        ring = [(chosen.key - analysis.num_prefix_tokens,
                 f"sink key: {chosen.key_name}, {chosen.score:.0%}")] if chosen.on_patch else []
        ui.show_figure(token_map_figure(
            model_image, analysis.patch_map(position, head), layout.patch_size,
            f"Block {block}, head {head}: mean attention each patch receives", zmin=0,
            grid=layout.grid, sink_keys=ring, marks=marks), key="p4_sink_image")
        where = ("ringed on the image" if chosen.on_patch else
                 "a prefix token, so it is not drawn on the image")
        st.caption(f"Averaged over all {capture.blocks[block].num_queries} queries. "
                   f"This head's sink key is **{chosen.key_name}** ({where}); it receives "
                   f"**{chosen.score:.1%}** of the head's attention. Entropy "
                   f"{analysis.entropy[position, head]:.2f} nats (uniform {uniform:.2f}).")
    st.markdown("**What this model shows on this image**\n\n"
                + _findings(capture, analysis, model, marks))
    excluded = len(capture.blocks) - len(blocks)
    st.caption(f"Definitions: {DEFINITION}. {ENTROPY_DEFINITION}."
               + (f" The {excluded} class-attention blocks are left out: with one query "
                  "([CLS]) there is no key that all queries agree on." if excluded else ""))


class RolloutInputs:
    """What the rollout view reads from the capture, computed once per full run."""

    def __init__(self, model, image):
        self.model, self.image = model, image
        self.capture = pipeline.vit_capture(model, image)
        self.layout = self.capture.layout
        self.eligible = rollout.rollout_blocks(self.capture)
        self.prefix = self.capture.blocks[self.eligible[0]].num_prefix_tokens
        self.names = prefix_token_names(model.module)[:self.prefix]
        self.model_image = pipeline.prepare(model, image).model_image
        self.analysis = sinks.explain(model, image).detail
        self.auto = rollout.auto_start(self.analysis)
        self.marks = high_norm_tokens(self.capture)


@st.fragment
def rollout_view(inputs: RolloutInputs) -> None:
    """Rollout next to raw attention and GAE; its controls rerun only this view."""
    with ui.friendly_errors():
        _rollout_view(inputs)


def _rollout_view(inputs: RolloutInputs) -> None:
    model, image, capture, layout = inputs.model, inputs.image, inputs.capture, inputs.layout
    eligible, prefix, names, auto = inputs.eligible, inputs.prefix, inputs.names, inputs.auto
    model_image, marks = inputs.model_image, inputs.marks
    if len(eligible) < len(capture.blocks):
        st.info(f"Rollout needs one token set shared by every block it multiplies, so it runs "
                f"over this model's {len(eligible)} self-attention (patch) blocks only and "
                f"leaves out its {len(capture.blocks) - len(eligible)} class-attention blocks. "
                "Those patch blocks have no [CLS] token: the rollout map below is the mean over "
                "all patch rows, or one patch's row if you pick a query patch.")

    st.subheader("Rollout")
    fusion, discard, chosen, start, end, query = _rollout_controls(eligible, prefix, layout, auto)
    row = None if query < 0 else query  # the query patch drawn on the maps
    full = st.toggle(f"Show the full rollout from block {eligible[0]} next to it", key="p4_full",
                     disabled=start == 0,
                     help="The same rollout with every block, sinks included." if start else
                          "This rollout already starts at the first block.")
    full = full and start > 0

    rolled = rollout.explain(model, image, start=chosen, end=end, fusion=fusion, discard=discard,
                             query=query)
    roll_map, roll_prefix, roll_row = rolled.map, rolled.arrays["prefix_values"], rolled.meta["row"]
    raw_map, raw_prefix, raw_row = rollout.last_block_cls_attention(capture, row)

    columns = st.columns(4 if full else 3)
    with columns[0]:
        ui.show_figure(token_map_figure(
            model_image, roll_map, layout.patch_size,
            f"Rollout, blocks {eligible[start]}–{eligible[end]}<br>({fusion}, discard "
            f"{discard:.2f})",
            marks=marks, query=row, grid=layout.grid), key="p4_rollout")
        how = (f"Start: auto. {auto.summary()} " if chosen == rollout.AUTO
               else f"Start chosen by hand: block {eligible[start]}. ")
        st.caption(how + f"{roll_row}. " + _prefix_text(names, roll_prefix, roll_map.sum()
                                                        + roll_prefix.sum()))
    if full:
        with columns[1]:
            _full_rollout(inputs, fusion, discard, end, query, row)
    with columns[2 if full else 1]:
        ui.show_figure(token_map_figure(
            model_image, raw_map, layout.patch_size,
            f"Raw attention, last block {eligible[-1]}<br>(head mean)", marks=marks, query=row,
            grid=layout.grid), key="p4_raw")
        st.caption(f"{raw_row}, heads averaged, no rollout. "
                   + _prefix_text(names, raw_prefix, raw_map.sum() + raw_prefix.sum()))
    with columns[-1]:
        gae_panel(inputs, query, row)

    _marked_tokens(capture, marks)
    conventions = st.expander("Conventions: why two rollout libraries disagree",
                              key="p4_conventions", on_change="rerun")
    if conventions.open:  # drawn (and computed) only when opened
        with conventions:
            _conventions(inputs, roll_map, chosen, end, fusion, discard, query)


def _full_rollout(inputs: RolloutInputs, fusion, discard, end, query, row) -> None:
    layout, eligible = inputs.layout, inputs.eligible
    whole_map = rollout.explain(inputs.model, inputs.image, start=0, end=end, fusion=fusion,
                                discard=discard, query=query).map
    rings = _sink_rings(inputs.analysis, inputs.auto)
    ui.show_figure(token_map_figure(
        inputs.model_image, whole_map, layout.patch_size,
        f"Full rollout, blocks {eligible[0]}–{eligible[end]}<br>(sinks included)",
        marks=inputs.marks, query=row, grid=layout.grid, sink_keys=rings), key="p4_rollout_full")
    top = int(whole_map.argmax())
    ringed = {patch for patch, _ in rings}
    st.caption(
        f"Every block included. The brightest patch, {top} (row {top // layout.grid[1]}, "
        f"col {top % layout.grid[1]}), takes {whole_map.max() / whole_map.sum():.1%} of "
        f"the map (an even spread would give each patch "
        f"{1 / layout.num_patches:.1%}). "
        + ("It is the ringed sink key: the head that sends its attention there in an "
           "early block makes every token carry a share of that one patch, and rollout "
           "multiplies that share through every later block."
           if top in ringed else
           "Ringed: the sink keys of the blocks that auto leaves out."))


@st.fragment
def gae_panel(inputs: RolloutInputs, query: int, row: int | None) -> None:
    """GAE and its target picker: a new target reruns only this panel."""
    with ui.friendly_errors():
        model, image, layout = inputs.model, inputs.image, inputs.layout
        head = state.session_head(model)
        target = ui.target_picker(model, image, key="p4_target",
                                  label="Target for gradient-weighted attention", head=head)
        gae_result = gae.explain(model, image, target=target, head=head, query=query)
        gae_map, gae_prefix = gae_result.map, gae_result.arrays["prefix_values"]
        ui.show_figure(token_map_figure(
            inputs.model_image, gae_map, layout.patch_size,
            f"GAE for '{literal.figure(head.class_names[target][:28])}'", marks=inputs.marks,
            query=row, grid=layout.grid, scale_title="relevance"), key="p4_gae")
        st.caption(f"Chefer's gradient-weighted attention: per block, the positive part of "
                   f"gradient × attention, heads averaged, accumulated through the residual "
                   f"stream (R ← R + Ā·R, no row normalisation). Gradient of "
                   f"{head.score_description}; {gae_result.meta['row']}; every block included. "
                   + _sink_share(gae_map, inputs.auto, inputs.analysis)
                   + _prefix_text(inputs.names, gae_prefix, gae_map.sum() + gae_prefix.sum()))


def _marked_tokens(capture, marks) -> None:
    with st.expander("Marked tokens: prefix tokens and high-norm outliers"):
        st.markdown(
            "Prefix tokens have no pixels, so they cannot be drawn on the image; the caption "
            "under each map says how much of the row they take. A patch is marked ✕ only when "
            "its hidden state is a **high-norm outlier**: rule: " + HIGH_NORM_RULE + ". "
            "Darcet et al. (*Vision Transformers Need Registers*) describe large ViTs that "
            "re-use a few background patches as scratch space this way; their norms stand "
            "apart from all the others. The rule marks a patch only when this model, on this "
            "image, shows such a separate mode.")
        if marks:
            ui.text_table({"patch": [t.patch for t in marks], "row": [t.row for t in marks],
                           "col": [t.col for t in marks], "block": [t.block for t in marks],
                           "norm / median": [round(t.ratio, 2) for t in marks],
                           "gap to the rest": [round(t.gap, 2) for t in marks]})
        else:
            top = largest_norm_ratio(capture)
            st.markdown(
                f"**No patch meets the rule on this image.** The largest patch norm is "
                f"{top.ratio:.2f}× the median (patch {top.patch}, row {top.row}, col {top.col}, "
                f"block {top.block}), and only {top.gap:.2f}× the next largest: one "
                "continuous spread of norms, no separate high mode.")


def _conventions(inputs: RolloutInputs, roll_map, chosen, end, fusion, discard, query) -> None:
    model_image, patch_size = inputs.model_image, inputs.layout.patch_size
    copied_map = rollout.explain(inputs.model, inputs.image, start=chosen, end=end,
                                 fusion=fusion, discard=discard, convention="vit-explain",
                                 query=query).map
    difference = roll_map - copied_map
    st.markdown(
        "The widely copied *vit-explain* code writes the row normalisation as "
        "`a / a.sum(dim=-1)`. Without `keepdim=True`, broadcasting divides **column** j by "
        "**row** j's sum, so it rescales the wrong axis. When the fused rows already sum to "
        "1 (head mean, nothing discarded) every row of (A + I)/2 sums to 1 and the bug is "
        "invisible; with max/min fusion or a discard ratio it changes the map.")
    d1, d2, d3 = st.columns(3)
    with d1:
        ui.show_figure(token_map_figure(model_image, roll_map, patch_size,
                                        "Correct rows (this page)"), key="p4_conv_a")
    with d2:
        ui.show_figure(token_map_figure(model_image, copied_map, patch_size,
                                        "vit-explain convention"), key="p4_conv_b")
    with d3:
        ui.show_figure(difference_figure(model_image, difference, patch_size,
                                         "Correct − vit-explain"), key="p4_conv_diff")
    scale = float(np.abs(roll_map).max()) or 1.0
    st.markdown(f"Largest difference: **{np.abs(difference).max():.3g}** "
                f"({np.abs(difference).max() / scale:.1%} of the largest rollout value) "
                f"with fusion = {fusion}, discard = {discard:.2f}."
                + (" At head mean and discard 0 the two agree up to floating-point "
                   "rounding, as they should." if fusion == "mean" and discard == 0 else ""))


VIEWS = {"rollout": "Rollout", "sinks": "Sinks and registers", "heads": "Every head"}

# one forward pass for the capture, the prediction and GAE's backward
with ui.friendly_errors(), shared_forwards():
    inputs = RolloutInputs(model, image)
    view = ui.view_picker(VIEWS, key="p4_view",
                          opened_by={"sinks": ("p4_sink_block", "p4_sink_head"),
                                     "heads": ("p4_big_block", "p4_big_head")})
    if view == "rollout":
        rollout_view(inputs)
    elif view == "sinks":
        sinks_section(inputs.capture, inputs.analysis, model, inputs.model_image, inputs.marks)
    else:
        heads_grid(model, image, inputs.layout, inputs.eligible, inputs.prefix,
                   inputs.model_image, inputs.marks)
