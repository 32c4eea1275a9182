"""Page 4: attention rollout, gradient-weighted attention, and every head of every block."""

import numpy as np
import streamlit as st

from dashboard import literal, rollout_views, state, ui
from xai_core import pipeline
from xai_core.analysis.token_marks import RULE as HIGH_NORM_RULE
from xai_core.analysis.token_marks import high_norm_tokens, largest_norm_ratio
from xai_core.capture import shared_forwards
from xai_core.figures.overlays import difference_figure, token_map_figure
from xai_core.lessons.views.p4_rollout_heads import ROLLOUT
from xai_core.methods import METHODS, rollout
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


def _rollout_controls(eligible, prefix, layout, auto):
    """The rollout method's own options (fusion, discard, start, end, query: their ranges and
    defaults are its declaration's) in five columns; returns their values and the start
    block that `start` (a block, or auto) means here."""
    last, moved = len(eligible) - 1, []
    columns = st.columns([1, 1.2, 1.3, 1.3, 1.2])

    def start_of(chosen) -> int:
        return auto.start if chosen == rollout.AUTO else int(chosen)

    def end_not_before_start(values: dict) -> None:
        """Keep the chosen end unless it lies before the new start: then move it, and say so."""
        start, end = start_of(values["start"]), st.session_state.get("p4_end", last)
        if isinstance(end, int) and end < start:
            st.session_state["p4_end"] = start
            moved.append(f"End moved from block {eligible[end]} to block {eligible[start]}: "
                         "a rollout cannot end before it starts.")

    widgets = {
        "fusion": ui.OptionWidget("Head fusion", container=columns[0]),
        "discard": ui.OptionWidget("Discard ratio", slider=True, container=columns[1]),
        "start": ui.OptionWidget("Start block", container=columns[2], format_func=lambda s: (
            f"auto: block {eligible[auto.start]}" if s == rollout.AUTO
            else f"block {eligible[s]}")),
        # a fixed range: a slider whose min changed would be a new widget to the browser,
        # which sends back its own first value (start 0 used to reset End to block 0)
        "end": ui.OptionWidget("End block: rollout up to here", slider=True, format="%d",
                               container=columns[3], before=end_not_before_start),
        "query": ui.OptionWidget("Query patch (−1 = [CLS])" if prefix else
                                 "Query patch (−1 = mean of all rows)", container=columns[4])}
    shown = ("fusion", "discard", "start", "end", "query") if last else (
        "fusion", "discard", "start", "query")  # one block: no end to choose
    values = ui.method_options(METHODS["rollout"], model, "p4", only=shown, widgets=widgets,
                               every=True)
    if values is None:  # over the server's budget: said in one sentence
        st.stop()
    start = start_of(values["start"])
    if not last:
        columns[3].markdown(f"End block: **{eligible[0]}**")
    if moved or values["end"] < start:  # a link may name an end before the start
        columns[3].caption(moved[0] if moved else f"Ends at block {eligible[start]}, its "
                           "start: a rollout cannot end before it starts.")
    return (values["fusion"], values["discard"], values["start"], start,
            max(values["end"], start), values["query"])


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
        self.analysis = METHODS["sinks"](model, image).detail
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

    rolled = METHODS["rollout"](model, image, start=chosen, end=end, fusion=fusion, discard=discard,
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
    whole_map = METHODS["rollout"](inputs.model, inputs.image, start=0, end=end, fusion=fusion,
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
        gae_result = METHODS["gae"](model, image, target=target, head=head, query=query)
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
    copied_map = METHODS["rollout"](inputs.model, inputs.image, start=chosen, end=end,
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


# one forward pass for the capture, the prediction and GAE's backward
with ui.friendly_errors(), shared_forwards():
    inputs = RolloutInputs(model, image)
    view = ui.view_picker(**ROLLOUT.picker_args("p4_view"))
    if view == "rollout":
        rollout_view(inputs)
    elif view == "sinks":
        rollout_views.sinks_section(inputs.capture, inputs.analysis, model, inputs.model_image,
                                    inputs.marks)
    else:
        rollout_views.heads_grid(model, image, inputs.layout, inputs.eligible, inputs.prefix,
                   inputs.model_image, inputs.marks)
