"""Page 2: self-attention worked by hand, then in the real model."""

import math

import numpy as np
import pandas as pd
import streamlit as st

from dashboard import links, ui
from dashboard.widgets import keep_valid
from xai_core import pipeline
from xai_core.analysis import toy_attention as toy
from xai_core.analysis.entropy import entropy
from xai_core.figures.click_targets import clicked_index
from xai_core.figures.curves import distribution_figure, entropy_curve_figure
from xai_core.figures.matrices import matrix_figure, multihead_figure
from xai_core.figures.overlays import query_attention_figure
from xai_core.lessons.views.p2_self_attention import ATTENTION, MEAN_HEAD
from xai_core.methods import METHODS

st.title("Self-attention: queries, keys, values, heads")
st.markdown(
    "Every token asks the same question at once: *which other tokens matter to me?* It sends "
    "out a **query** vector q, every token offers a **key** vector k, and the dot product q·k "
    "says how well they match. The matches are scaled, turned into weights that sum to 1 "
    "(softmax), and used to average the tokens' **value** vectors v:")
st.latex(r"A = \mathrm{softmax}\!\left(\frac{QK^{\mathsf T}}{\sqrt{d_k}}\right), \qquad "
         r"\text{output} = A\,V")
st.caption("Convention (Vaswani et al. 2017, as in timm's ViT): rows of A are queries, columns "
           "are keys, and each row sums to 1.")

EDITORS = {"Q": ("toy_q", toy.SEED_Q), "K": ("toy_k", toy.SEED_K), "V": ("toy_v", toy.SEED_V)}


def _reset_tables():
    for key, _ in EDITORS.values():
        st.session_state.pop(key, None)




def _head_name(head) -> str:
    return "mean of heads" if head == MEAN_HEAD else f"head {head + 1}"


def _pick_query():
    patch = clicked_index(st.session_state.get("sa_chart"))
    if patch is not None:
        st.session_state["sa_query"] = patch
        st.session_state["sa_use_cls"] = False


@st.fragment
def by_hand_view():
    """Section 1; an edited cell reruns only this part."""
    st.header("1 · Three tokens by hand")
    st.markdown(
        "Three tokens, [CLS], an *Eye* patch and a *Background* patch, each described by three "
        "made-up features: face/eye, fur and background (so $d_k = 3$). Edit any cell of Q, K "
        "or V; everything below recomputes.")

    # two tables a row: three side by side hid their third column at 1280 px
    columns = [*st.columns(2), st.columns(2)[0]]
    tables = {}
    for column, (name, (key, start)) in zip(columns, EDITORS.items()):
        with column:
            st.markdown(f"**{name}** (rows: tokens)")
            frame = pd.DataFrame(start, index=list(toy.SEED_TOKENS), columns=list(toy.SEED_DIMS))
            tables[name] = st.data_editor(frame, key=key, num_rows="fixed", width="stretch")
    st.button("Back to the original numbers", on_click=_reset_tables)

    try:
        q, k, v = (toy.parse_matrix(tables[n], n, toy.SEED_TOKENS, toy.SEED_DIMS) for n in "QKV")
        steps = toy.attention_steps(q, k, v)
    except toy.ToyInputError as error:
        st.error(str(error))
        steps = None

    if steps is not None:
        labels = toy.SEED_TOKENS
        c1, c2 = st.columns(2)
        with c1:
            ui.show_figure(matrix_figure(steps.scores, labels, labels, "Scores QKᵀ"),
                           key="toy_scores")
        with c2:
            title = f"Scaled: QKᵀ / √{q.shape[1]} = QKᵀ / {steps.scale:.3f}"
            ui.show_figure(matrix_figure(steps.scaled, labels, labels, title),
                           key="toy_scaled")
        c3, c4 = st.columns(2)
        with c3:
            ui.show_figure(matrix_figure(steps.weights, labels, labels,
                                         "Attention A = softmax(row by row)", zmin=0, zmax=1),
                           key="toy_weights")
        with c4:
            ui.show_figure(matrix_figure(steps.output, labels, list(toy.SEED_DIMS),
                                         "Output AV (new token vectors)", colorscale="Greens"),
                           key="toy_output")
        top = int(np.argmax(steps.scores[0]))
        st.markdown(
            f"Read the first row: the [CLS] query matches the **{labels[top]}** key best (score "
            f"{steps.scores[0, top]:.2f}). After dividing by √{q.shape[1]} and the softmax, "
            f"{labels[top]} receives **{steps.weights[0, top]:.0%}** of [CLS]'s attention, so "
            f"[CLS]'s new vector is mostly {labels[top]}'s value. The softmax exaggerates "
            "differences: a score gap of a few units becomes a large gap in weight.")
        st.caption("Rows sum to " + ", ".join(f"{s:.6f}" for s in steps.weights.sum(1)) + ".")


@st.fragment
def temperature_view():
    st.header("2 · Temperature: from focused to diffuse")
    st.markdown(
        "Dividing the scores by $\\sqrt{d_k}$ is a *temperature* $T = \\sqrt{d_k}$. Turn the "
        "knob: a small T makes the softmax pick the single best match (one-hot), a large T "
        "flattens it towards a uniform average. Without the $\\sqrt{d_k}$, dot products of "
        "64-dimensional vectors (ViT-Base) grow large, the softmax saturates and its gradients "
        "vanish. Entropy measures the spread: 0 bits for one-hot, log₂ N bits for uniform.")
    t_labels = toy.TEMPERATURE_TOKENS
    d_k = toy.TEMPERATURE_Q.shape[1]
    sqrt_dk = math.sqrt(d_k)
    temperatures = [0.05, 0.1, 0.2, 0.5, 1.0, sqrt_dk, 4.0, 8.0, 16.0, 50.0, 200.0]
    temperature = st.select_slider(
        "Temperature T", temperatures, value=sqrt_dk, key="toy_temperature",
        format_func=lambda t: f"{t:g} (= √{d_k})" if t == sqrt_dk else f"{t:g}")
    query_name = st.radio("Query token", t_labels, horizontal=True, key="toy_temperature_query")
    scores = toy.TEMPERATURE_Q @ toy.TEMPERATURE_K.T
    weights = toy.softmax_with_temperature(scores, temperature)
    row = t_labels.index(query_name)
    bits = float(entropy(weights[row], base=2))
    m1, m2, m3 = st.columns(3)
    m1.metric("Entropy of this row", f"{bits:.3f} bits")
    m2.metric("Uniform would be", f"{math.log2(len(t_labels)):.3f} bits")
    m3.metric("Largest weight",
              f"{weights[row].max():.2f} on {t_labels[int(weights[row].argmax())]}")
    c1, c2 = st.columns(2)
    with c1:
        ui.show_figure(distribution_figure(t_labels, weights[row],
                                           f"{query_name}'s attention at T = {temperature:g}"),
                       key="toy_temperature_bars")
    with c2:
        sweep = np.geomspace(0.02, 500, 120)
        ui.show_figure(entropy_curve_figure(sweep, toy.temperature_sweep(scores, sweep), t_labels,
                                            temperature, sqrt_dk, math.log2(len(t_labels))),
                       key="toy_entropy_curve")
    ui.show_figure(matrix_figure(weights, t_labels, t_labels,
                                 f"All four rows at T = {temperature:g}", zmin=0, zmax=1),
                   key="toy_temperature_matrix")


@st.fragment
def heads_view():
    st.header("3 · Several heads look for different things")
    st.markdown(
        "A layer runs h attention heads side by side. The width D is split: each head gets its own "
        "slice of $d_k = D / h$ dimensions of Q, K and V, computes its own attention, and the "
        "heads' "
        "outputs are concatenated back to width D and mixed by an output matrix $W_O$. ViT-Base "
        "has D = 768 and h = 12, so $d_k = 64$. Here D = 4: the features are *head region*, "
        "*fur*, *face detail* and *summary*.")
    heads = st.radio("Number of heads h", [1, 2, 4], index=1, horizontal=True, key="toy_heads")
    multi = toy.multi_head_attention(toy.MULTIHEAD_X, toy.MULTIHEAD_WQ, toy.MULTIHEAD_WK,
                                     toy.MULTIHEAD_WV, toy.MULTIHEAD_WO, heads)
    mh_labels = toy.MULTIHEAD_TOKENS
    st.markdown(f"h = {heads} heads, each with $d_k = 4 / {heads} =$ **{multi.d_k}** dimensions.")
    ui.show_figure(multihead_figure([s.weights for s in multi.per_head], mh_labels),
                   key="toy_heads_figure")
    if heads == 2:
        st.markdown(
            "Head 1 reads the *where* dimensions: the Eye looks at the Ear (its neighbour on the "
            "head) and [CLS] looks at the Eye. Head 2 reads *fur*: Ear and Paw attend to the furry "
            "tokens (each other and themselves) and [CLS] splits between them. One head alone "
            "could not hold both relationships.")
    c1, c2, c3 = st.columns(3)
    dims = [f"h{h + 1}·{j + 1}" for h in range(heads) for j in range(multi.d_k)]
    with c1:
        ui.show_figure(matrix_figure(multi.concat, mh_labels, dims, "Heads concatenated",
                                     colorscale="Greens"), key="toy_concat")
    with c2:
        ui.show_figure(matrix_figure(toy.MULTIHEAD_WO, dims, [f"out {j + 1}" for j in range(4)],
                                     "Output projection W<sub>O</sub>", colorscale="RdBu_r",
                                     zmin=-1, zmax=1),
                       key="toy_wo")
    with c3:
        ui.show_figure(matrix_figure(multi.output, mh_labels, [f"out {j + 1}" for j in range(4)],
                                     "Layer output = concat · W<sub>O</sub>", colorscale="Greens"),
                       key="toy_mh_output")


def _how_far_heads_look(model, image) -> str:
    """The first and last block's mean attention distance on this image, measured (page 3's
    default convention), instead of the papers' "early heads look near, late ones far"."""
    measured = METHODS["distance"](model, image, prefix="exclude", renormalise="no").detail
    first, last = (float(measured.mad[i].mean()) for i in (0, -1))
    return (f"On this image the heads of block {measured.blocks[0]} look on average "
            f"**{first:.0f} px** from their query, those of block {measured.blocks[-1]} "
            f"**{last:.0f} px** (attention spread evenly over the patches would give "
            f"{measured.reference:.0f} px); page 3 measures every head.")


@st.fragment
def model_view():
    st.header("4 · The same thing in the real model")
    image, model = ui.vit_page_inputs()
    with ui.friendly_errors():
        capture = pipeline.vit_capture(model, image)
        prepared = pipeline.prepare(model, image)
        layout = capture.layout
        cols = layout.grid[1]
        blocks = capture.blocks
        c1, c2, c3 = st.columns(3)
        block = links.number(c1.slider, "Block", *ATTENTION.bounds("sa_block", model),
                             key="sa_block", default=ATTENTION.default("sa_block", model))
        record = blocks[block]
        head_choice = links.choice(c2.selectbox, "Head",
                                   [MEAN_HEAD] + list(range(record.num_heads)),
                                   key="sa_head", format_func=_head_name)
        has_cls = record.num_prefix_tokens > 0
        use_cls = c3.toggle("Use [CLS] as the query", key="sa_use_cls", disabled=not has_cls)
        if record.kind == "class":
            use_cls = True
        elif not has_cls:
            use_cls = False
        keep_valid("sa_query", range(layout.num_patches), ATTENTION.default("sa_query", model))
        query = st.number_input("Query patch (raster index; or click a patch on the image)",
                                *ATTENTION.bounds("sa_query", model), key="sa_query",
                                disabled=use_cls)
        per_head = METHODS["attention"](model, image, block=block,
                                        query=-1 if use_cls else int(query)).arrays["per_head"]
        values = per_head.mean(0) if head_choice == MEAN_HEAD else per_head[head_choice]
        where = None if use_cls else divmod(int(query), cols)
        who = "[CLS]" if use_cls else f"patch {int(query)} (row {where[0]}, col {where[1]})"
        left, right = st.columns([1.3, 1])
        with left:
            title = f"Block {block}, {_head_name(head_choice)}: where {who} looks"
            ui.show_figure(query_attention_figure(prepared.model_image, values,
                                                  layout.patch_size, where, title),
                           key="sa_chart", on_select=_pick_query, selection_mode="points")
        with right:
            prefix_share = 1.0 - float(values.sum())
            st.markdown(
                f"The colours are one row of this block's attention matrix A: the weights the "
                f"query **{who}** gives to each of the {layout.num_patches} patch keys "
                f"({'mean over' if head_choice == MEAN_HEAD else 'one of'} "
                f"{record.num_heads} heads). The full row also covers "
                f"{ui.count(record.num_prefix_tokens, 'prefix key')} (not pixels), which take "
                f"**{prefix_share:.1%}** of it; the patches take the other {1 - prefix_share:.1%}.")
            st.markdown(
                "Try a patch on the object and one on the background, an early block and a late "
                f"one, single heads and the mean. {_how_far_heads_look(model, image)} A head "
                "can also park nearly all its attention on one key whatever the query, an "
                "*attention sink* (a background patch, [CLS] or a register); page 4's *Sinks and "
                "registers* measures whether any head of this model does.")
            st.caption("Convention: post-softmax attention probabilities of one query row, prefix "
                       "keys dropped, not renormalised; the head mean is the plain average. "
                       "Distances: mean attention distance (Raghu et al. 2021) over the patch "
                       "queries and heads, prefix rows and columns dropped, as on page 3.")


view = ui.view_picker(**ATTENTION.picker_args("sa_view"))
{"hand": by_hand_view, "temperature": temperature_view, "heads": heads_view,
 "model": model_view}[view]()
