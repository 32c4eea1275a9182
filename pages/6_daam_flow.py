"""Page 6: DAAM flow - how the decision forms, block by block."""

import pandas as pd
import streamlit as st

from dashboard import links, literal, state, ui
from xai_core import pipeline
from xai_core.capture import shared_forwards
from xai_core.figures.curves import contributions_figure, weights_figure
from xai_core.figures.overlays import flow_figure, map_row_figure
from xai_core.images import COLLAGE_ID
from xai_core.methods import METHODS, daam, daam_knn
from xai_core.metrics import daam_sanity
from xai_core.analysis.tokens import prefix_token_names

st.title("DAAM flow: how the decision forms, block by block")
st.markdown(
    "Most explanation maps look only at the end of the network. The **Dynamic Accumulated "
    "Attention Map** (DAAM, Liao et al.) asks a different question: *which image regions has "
    "the [CLS] token collected by block b, for this class?* In every block the [CLS] token "
    "gathers the value vectors of all tokens, weighted by its attention row. Keeping those "
    "weighted values apart instead of summing them gives a spatial map per channel; the "
    "gradient of the class score at the [CLS] context says which channels matter. One forward "
    "and ONE backward pass give every block's map at once.")
# two rows: on one the five equations ran past the column at presentation size
st.latex(r"\begin{gathered}S_b[n,\,c] = a^0_b[h,n]\,V_b[h,n,j],\quad "
         r"\textstyle\sum_n S_b[n,:] = T_b,\quad C_b = \frac{\partial y}{\partial T_b},\\ "
         r"L_b = \mathrm{ReLU}\Big(\sum_c \mathrm{ReLU}(C_b)_c\, S_b[\text{patches},c]\Big),"
         r"\quad D_b = \sum_{i\le b} L_i\end{gathered}")
st.caption("c = h·d + j numbers the channels head by head, as they enter the attention's "
           "output projection; T_b is the [CLS] context at that point.")

DISPLAY_LABELS = {"official": "Official (sigmoid, shared max)", "frame": "Per-frame min-max",
                  "shared": "One scale for all frames"}
RELU_LABELS = {"auto": "As the official code", "yes": "ReLU(C_b): positive only",
               "no": "C_b as is (signed)"}
FORMULA_LABELS = {"official": "Official code", "paper": "Paper's formula"}

image, model = ui.vit_page_inputs()
head = ui.scoring_head(model)
if head is None:
    st.stop()

def controls(model, image, head, knn: bool):
    """Target class, display normalisation, channel weights (and the k-NN formula)."""
    c1, c2, c3 = st.columns([1.3, 1.6, 1.3])
    with c1:
        target = ui.target_picker(model, image, key="daam_target", head=head)
        if state.selection().image_choice == COLLAGE_ID:
            st.caption("Two objects, one decision: pick the cat's class, then the coffee "
                       "cup's, and watch where each flow settles.")
    with c2:
        display = st.radio("Display normalisation", list(daam.DISPLAY_MODES), key="daam_display",
                           persist_state="session", format_func=DISPLAY_LABELS.get,
                           help="Only the colours change; the raw maps (and the CLI's arrays) "
                                "are the same.")
    with c3:
        relu = st.selectbox("Channel weights", daam.CHANNEL_RELU, key="daam_relu",
                            persist_state="session", format_func=RELU_LABELS.get,
                            help="The official code clips the gradient to its positive part for "
                                 "classifiers, and does not clip it in the k-NN variant.")
        formula = "official"
        if knn:
            formula = st.selectbox("Eq. 13 weights", daam_knn.KNN_FORMULAS, key="daam_formula",
                                   persist_state="session", format_func=FORMULA_LABELS.get,
                                   help=" · ".join(daam_knn.KNN_FORMULA_NAMES.values()))
    return target, display, relu, formula


def flow_view(result, model, image, head, top, display, formula, relu, model_image) -> None:
    """The first lesson: the flow, block by block, and what each block adds."""
    st.subheader(f"The flow for “{literal.text(result.target_label)}”"
                 + ("  (the top prediction)" if result.target == top.index else ""))
    L = daam.display_frames(result.L, display)
    D = daam.display_frames(result.D, display)
    ui.show_figure(flow_figure(model_image, L, D, result.patch_size, result.block_labels,
                               result.short_labels), key="daam_flow")
    st.caption(f"Colours: **{daam.DISPLAY_MODES[display]}**, applied separately to the L row and "
               f"to the D row. Channel weights: "
               f"{'ReLU(C_b)' if result.channel_relu else 'C_b unclipped'}; each L_b is ReLU'd. "
               "Press ▶ or drag the slider: the browser swaps the frames, nothing is recomputed.")
    for sink in daam.sink_frames(result, METHODS["sinks"](model, image).detail):
        st.caption(
            f"Frame “{sink['label']}” shows an attention sink, not the object: its brightest "
            f"patch is {sink['key']}, the key that head {sink['head']} of that block sends "
            f"{sink['score']:.0%} of its attention to (page 4, *Sinks and registers*). That "
            f"frame adds {sink['frame_share']:.1%} of the final map's total and the sink patch "
            f"holds {sink['patch_share']:.1%} of the final map, so the accumulated flow D is "
            "not hidden by it and every block stays in.")
    ui.show_figure(contributions_figure(result.L, result.block_labels), key="daam_contrib")

    if result.target != top.index:
        st.subheader("Why this prediction, and where would it look for the other class?")
        predicted = METHODS["daam"](model, image, target=top.index, head=head,
                                    knn_weights=formula, channel_relu=relu).detail
        ui.show_figure(map_row_figure(
            model_image, [predicted.D[-1], result.D[-1]],
            [f"predicted: {literal.figure(top.label)}",
             f"chosen: {literal.figure(result.target_label)}"], result.patch_size, height=340),
            key="daam_compare")
        st.caption("Final accumulated maps D_B, each min-max scaled. As in the paper's analysis "
                   "of wrong predictions: the first shows what the decision used, the second "
                   "where the model finds evidence for the class you picked.")


def vote_view(result) -> None:
    """Where a k-NN model's weights come from."""
    st.subheader("Where the weights come from: the memory bank's vote")
    weights = result.knn
    st.markdown(
        "This self-supervised model has no class logits. Its [CLS] feature is compared with "
        f"every entry of the memory bank and the {len(weights.neighbours)} most similar vote "
        f"(cosine, weight exp(sim/0.07)). Entries of the target class "
        f"“{literal.text(weights.class_label)}” "
        "among them give the **dimension-wise importance weights** w (eq. 13), and the "
        "backward pass starts from w at the model output instead of a classifier row. "
        f"Formula: {daam_knn.KNN_FORMULA_NAMES[weights.formula]}.")
    if weights.fallback:
        st.warning(f"No entry of “{literal.text(weights.class_label)}” is among the nearest "
                   f"{len(weights.neighbours)}: the weights use that class's own "
                   f"{len(weights.voters)} nearest entries instead. This shows where the "
                   "model would look for that class, not why it decided.")
    st.dataframe(pd.DataFrame(daam_knn.voter_rows(weights)), hide_index=True, height=260,
                 key="daam_voters")
    ui.show_figure(weights_figure(weights.weights), key="daam_weights")


@st.fragment
def channel_inspector(result, model_image) -> None:
    """The block picker reruns only this part."""
    st.subheader("Channel inspector")
    frames = list(range(len(result.L)))
    frame = links.choice(st.select_slider, "Block", frames, key="daam_channel_block",
                         default=frames[-1], to_id=lambda i: str(result.block_indices[i]),
                         what="block", format_func=lambda i: result.short_labels[i])
    views = daam.top_channels(result, frame, count=6)
    ui.show_figure(map_row_figure(
        model_image, [v.contribution for v in views],
        [f"ch {v.channel} (h{v.head}, j{v.dim})<br>w={v.weight:.2g}" for v in views],
        result.patch_size, signed=True), key="daam_channels")
    st.caption("The six channels with the largest weight in this block and what each adds to "
               "L_b before its ReLU: weight × S_b[patches, c]. Values can be negative (value "
               "vectors have both signs): red adds, blue takes away; each map is divided by its "
               "own largest |value|. Channel c = h·d + j is dimension j of head h's values.")


def sanity_check(result, model, image, head, formula, relu, model_image) -> None:
    st.subheader("Sanity check: randomise the model, the map should break")
    st.markdown(
        "A map that survives random weights explains nothing about the model (Adebayo et al.). "
        "As in the paper's section 4.4, a private copy of the model gets its attention's linear "
        "layers re-drawn at random (Gaussian, each tensor keeping its own spread), from the top "
        "block down to block k, one step more each time; the same target scalar is explained "
        "again and compared with the trained model's final map by Spearman rank correlation.")
    with st.spinner("Randomising a copy of the model (a few extra forward + backward "
                    "passes)..."):
        check = daam_sanity.cascading_randomisation(model, image, result.target, head, formula,
                                                    relu)
    last = check.num_blocks - 1
    titles = ["trained model"] + [
        (f"block {k} random" if k == last else f"blocks {k}-{last} random") + "<br>ρ = "
        + ("n/a (flat map)" if r != r else f"{r:.2f}")
        for k, r in zip(check.first_randomised, check.rho)]
    ui.show_figure(map_row_figure(model_image, [check.original] + check.maps, titles,
                                  result.patch_size), key="daam_sanity_row")
    st.caption(f"Final maps D_B, each min-max scaled. Blocks are numbered 0-{last} over every "
               f"transformer block of the model. Took {check.seconds:.1f} s. "
               "The shared model used by everyone else is never modified.")


# one forward pass for the prediction, DAAM's backward and the sink check
with ui.friendly_errors(), shared_forwards():
    knn = head.kind == "knn"
    top = pipeline.predict(model, image, topk=1, head=head)[0]
    target, display, relu, formula = controls(model, image, head, knn)
    result = METHODS["daam"](model, image, target=target, head=head, knn_weights=formula,
                             channel_relu=relu).detail
    model_image = pipeline.prepare(model, image).model_image
    names = prefix_token_names(model.module)
    prefix = result.prefix_tokens[0]
    where = ("its class-attention blocks, the only blocks with a [CLS] query (the patch blocks "
             "before them have no [CLS] token)" if result.block_kind == "class"
             else f"all {len(result.L)} blocks")
    st.info(f"Token layout read from the model: "
            f"{ui.count(prefix, 'prefix token')} "
            f"({', '.join(names[:prefix]) or 'none'}) and a {result.grid[0]}x{result.grid[1]} "
            f"patch grid. The flow runs over {where}; prefix tokens are left out of the maps "
            "because they have no pixels.")

    views = {"flow": "The flow", "vote": "The memory bank's vote",
             "channels": "Channel inspector", "sanity": "Sanity check"}
    if not (knn and result.knn is not None):
        del views["vote"]
    view = ui.view_picker(views, key="daam_view",
                          opened_by={"channels": ("daam_channel_block",)})
    if view == "flow":
        flow_view(result, model, image, head, top, display, formula, relu, model_image)
    elif view == "vote":
        vote_view(result)
    elif view == "channels":
        channel_inspector(result, model_image)
    else:
        sanity_check(result, model, image, head, formula, relu, model_image)
