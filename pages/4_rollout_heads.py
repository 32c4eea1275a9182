"""Page 4: attention rollout, gradient-weighted attention, and every head of every block."""

import numpy as np
import streamlit as st

from dashboard import state, ui
from dashboard.clicks import apply_chart_click
from xai_core import pipeline
from xai_core.figures_attention import difference_figure, head_mosaic, token_map_figure
from xai_core.methods import gae, rollout
from xai_core.methods.attention import query_attention
from xai_core.token_marks import DEFAULT_THRESHOLD, high_norm_tokens
from xai_core.tokens import prefix_token_names

st.title("Rollout and the heads behind it")
st.markdown(
    "The last block's attention is not the whole story: every block also passes its input "
    "straight on through the residual connection, and each block mixes what the blocks before "
    "it already mixed. **Attention rollout** (Abnar & Zuidema, 2020) follows that flow: for each "
    "block it fuses the heads into one matrix, adds the identity for the skip path, rescales "
    "every row to sum to 1, and multiplies the blocks together in forward order.")
st.latex(r"\hat A_l = \frac{\bar A_l + I}{\mathrm{rowsum}(\bar A_l + I)}, \qquad "
         r"R = \hat A_{\mathrm{end}} \cdots \hat A_{\mathrm{start}}, \qquad "
         r"\text{map} = R[\mathrm{CLS},\ \text{patches}]")

image, model = ui.vit_page_inputs()


def _prefix_text(names, values, total, what="row") -> str:
    if not len(values):
        return "No prefix token in these blocks."
    parts = [f"{n} {v / total:.1%}" for n, v in zip(names, values)]
    return f"Share of the {what} on prefix tokens (not drawn, they have no pixels): " + \
        ", ".join(parts) + "."


@st.fragment
def heads_grid(capture, eligible, prefix, model_image, marks, centre):
    """Blocks x heads small multiples; clicks and pickers here rerun only this part."""
    with ui.friendly_errors():
        _heads_grid(capture, eligible, prefix, model_image, marks, centre)


def _heads_grid(capture, eligible, prefix, model_image, marks, centre):
    layout = capture.layout
    st.subheader("Every head of every block")
    has_cls = prefix > 0
    use_cls = has_cls and st.radio("Query", ["[CLS]", "a patch"], horizontal=True,
                                   key="p4_grid_query_kind") == "[CLS]"
    if not use_cls:
        if st.session_state.get("p4_grid_query") not in range(layout.num_patches):
            st.session_state["p4_grid_query"] = centre
        grid_query = st.number_input("Query patch for the grid", 0, layout.num_patches - 1,
                                     key="p4_grid_query")
        if not has_cls:
            st.caption("These blocks have no [CLS] token, so a patch is the query.")
    else:
        grid_query = None
    maps = np.stack([query_attention(capture, b, grid_query) for b in eligible])
    who = "[CLS]" if grid_query is None else f"patch {grid_query}"
    ui.show_figure(head_mosaic(maps, eligible, f"{who} → patches, per head (each tile scaled "
                                               "to its own range). Click a tile to enlarge."),
                   key="p4_mosaic", on_select="rerun", selection_mode="points")
    apply_chart_click("p4_mosaic",
                      lambda d: {"p4_big_block": int(d[0]), "p4_big_head": int(d[1])})
    heads = maps.shape[1]
    for key, valid, default in (("p4_big_block", eligible, eligible[-1]),
                                ("p4_big_head", range(heads), 0)):
        if st.session_state.get(key) not in valid:
            st.session_state[key] = default
    e1, e2 = st.columns([1, 2])
    with e1:
        big_block = st.selectbox("Block", eligible, key="p4_big_block")
        big_head = st.selectbox("Head", list(range(heads)), key="p4_big_head")
        tile = maps[eligible.index(big_block), big_head]
        st.markdown(f"Block {big_block}, head {big_head}: the {who} query puts "
                    f"**{tile.sum():.1%}** of its attention on image patches; its strongest "
                    f"patch gets {tile.max():.1%}.")
    with e2:
        ui.show_figure(token_map_figure(model_image, tile, layout.patch_size,
                                        f"Block {big_block}, head {big_head} ({who} query)",
                                        marks=marks, query=grid_query, grid=layout.grid),
                       key="p4_big")


with ui.friendly_errors():
    capture = pipeline.vit_capture(model, image)
    layout = capture.layout
    eligible = rollout.rollout_blocks(capture)
    last = len(eligible) - 1
    prefix = capture.blocks[eligible[0]].num_prefix_tokens
    names = prefix_token_names(model.module)[:prefix]
    model_image = pipeline.prepare(model, image).model_image
    centre = (layout.grid[0] // 2) * layout.grid[1] + layout.grid[1] // 2
    if len(eligible) < len(capture.blocks):
        st.info(f"Rollout needs one token set shared by every block it multiplies, so it runs "
                f"over this model's {len(eligible)} self-attention (patch) blocks only and "
                f"leaves out its {len(capture.blocks) - len(eligible)} class-attention blocks. "
                "Those patch blocks have no [CLS] token: the rollout map below is the mean over "
                "all patch rows, or one patch's row if you pick a query patch.")

    # --- controls -------------------------------------------------------------------------------
    st.subheader("Rollout")
    for key, valid, default in (("p4_range", None, (0, last)),
                                ("p4_query", range(-1, layout.num_patches),
                                 -1 if prefix else centre)):
        value = st.session_state.get(key)
        if (valid is None and not (isinstance(value, (tuple, list)) and len(value) == 2
                                   and 0 <= value[0] <= value[1] <= last)) or \
                (valid is not None and value not in valid):
            st.session_state[key] = default
    c1, c2, c3, c4 = st.columns([1, 1.2, 1.6, 1.2])
    fusion = c1.selectbox("Head fusion", rollout.FUSIONS, key="p4_fusion",
                          persist_state="session",
                          help="How the heads of one block become one matrix.")
    discard = c2.slider("Discard ratio", 0.0, 0.95, step=0.05, key="p4_discard",
                        persist_state="session",
                        help="Zero this fraction of the weakest entries of each fused matrix "
                             "(never [CLS]→[CLS]) before adding the identity.")
    start, end = c3.slider("Blocks (start, end): rollout up to block `end`", 0, last,
                           key="p4_range")
    query = c4.number_input("Query patch (−1 = [CLS])" if prefix else "Query patch "
                            "(−1 = mean of all rows)", -1, layout.num_patches - 1, key="p4_query")
    query = None if query < 0 else int(query)

    rolled = rollout.image_rollout(model, image, start, end, fusion, discard, "oracle")
    roll_map, roll_prefix, roll_row = rolled.query_row(query)
    raw_map, raw_prefix, raw_row = rollout.last_block_cls_attention(capture, query)
    threshold = st.session_state.get("p4_z", DEFAULT_THRESHOLD)
    marks = high_norm_tokens(capture, threshold)

    head = state.session_head(model)
    left, middle, right = st.columns(3)
    with left:
        ui.show_figure(token_map_figure(
            model_image, roll_map, layout.patch_size,
            f"Rollout, blocks {eligible[start]}–{eligible[end]} ({fusion}, discard {discard:.2f})",
            marks=marks, query=query, grid=layout.grid), key="p4_rollout")
        st.caption(f"{roll_row}. " + _prefix_text(names, roll_prefix, roll_map.sum()
                                                  + roll_prefix.sum()))
    with middle:
        ui.show_figure(token_map_figure(
            model_image, raw_map, layout.patch_size,
            f"Raw attention, last block {eligible[-1]} (head mean)", marks=marks, query=query,
            grid=layout.grid), key="p4_raw")
        st.caption(f"{raw_row}, heads averaged, no rollout. "
                   + _prefix_text(names, raw_prefix, raw_map.sum() + raw_prefix.sum()))
    with right:
        target = ui.target_picker(model, image, key="p4_target",
                                  label="Target for gradient-weighted attention", head=head)
        gae_map, gae_prefix, gae_row = gae.image_gae_map(model, image, target, head, query)
        ui.show_figure(token_map_figure(
            model_image, gae_map, layout.patch_size,
            f"GAE for '{head.class_names[target][:28]}'", marks=marks, query=query,
            grid=layout.grid), key="p4_gae")
        kind = ("the k-NN class score (cosine similarity to that class's nearest memory-bank "
                "features)" if head.kind == "knn" else "the class logit")
        st.caption(f"Chefer's gradient-weighted attention: per block, the positive part of "
                   f"gradient × attention, heads averaged, accumulated through the residual "
                   f"stream (R ← R + Ā·R, no row normalisation). Gradient of {kind}; "
                   f"{gae_row}. " + _prefix_text(names, gae_prefix,
                                                 gae_map.sum() + gae_prefix.sum()))

    with st.expander("Marked tokens: prefix tokens and high-norm outliers"):
        st.slider("Outlier threshold (robust z-score of a patch's output norm)", 3.0, 15.0,
                  key="p4_z", value=DEFAULT_THRESHOLD, step=0.5)
        st.markdown(
            "Prefix tokens have no pixels, so they cannot be drawn on the image; the caption "
            "under each map says how much of the row they take. Patches marked ✕ have an "
            "outlying hidden-state norm: in some block from the middle of the network on, the "
            "length of their output vector is far above the other patches' (robust z-score = "
            "(norm − median) / (1.4826 · median absolute deviation)). DINOv2 is known to "
            "re-use a few low-information background patches as scratch space this way "
            "(Darcet et al., *Vision Transformers Need Registers*).")
        if marks:
            st.table({"patch": [t.patch for t in marks], "row": [t.row for t in marks],
                      "col": [t.col for t in marks], "block": [t.block for t in marks],
                      "robust z": [round(t.z, 1) for t in marks],
                      "norm / median": [round(t.ratio, 2) for t in marks]})
        else:
            st.write(f"No patch reaches z ≥ {threshold:g} on this image.")

    # --- conventions ----------------------------------------------------------------------------
    with st.expander("Conventions: why two rollout libraries disagree", expanded=False):
        copied = rollout.image_rollout(model, image, start, end, fusion, discard, "vit-explain")
        copied_map = copied.query_row(query)[0]
        difference = roll_map - copied_map
        st.markdown(
            "The widely copied *vit-explain* code writes the row normalisation as "
            "`a / a.sum(dim=-1)`. Without `keepdim=True`, broadcasting divides **column** j by "
            "**row** j's sum, so it rescales the wrong axis. When the fused rows already sum to "
            "1 (head mean, nothing discarded) every row of (A + I)/2 sums to 1 and the bug is "
            "invisible; with max/min fusion or a discard ratio it changes the map.")
        d1, d2, d3 = st.columns(3)
        with d1:
            ui.show_figure(token_map_figure(model_image, roll_map, layout.patch_size,
                                            "Correct rows (this page)"), key="p4_conv_a")
        with d2:
            ui.show_figure(token_map_figure(model_image, copied_map, layout.patch_size,
                                            "vit-explain convention"), key="p4_conv_b")
        with d3:
            ui.show_figure(difference_figure(model_image, difference, layout.patch_size,
                                             "Correct − vit-explain"), key="p4_conv_diff")
        scale = float(np.abs(roll_map).max()) or 1.0
        st.markdown(f"Largest difference: **{np.abs(difference).max():.3g}** "
                    f"({np.abs(difference).max() / scale:.1%} of the largest rollout value) "
                    f"with fusion = {fusion}, discard = {discard:.2f}."
                    + (" At head mean and discard 0 the two agree up to floating-point "
                       "rounding, as they should." if fusion == "mean" and discard == 0 else ""))

    heads_grid(capture, eligible, prefix, model_image, marks, centre)
