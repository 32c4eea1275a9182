"""Page 8: attention in a text transformer - head view, head specialisation, layer
progression, rollout, and where attention and gradient importance part ways."""

import math

import pandas as pd
import streamlit as st

from dashboard import links, literal, state, ui
from xai_core.analysis import text_attention as text
from xai_core.figures import text as ft
from xai_core.lessons.views.p8_text_attention import EXAMPLES, TEXT, TEXT_MODELS
from xai_core.metrics import text_heads as tm
from xai_core.models import get_spec

CUSTOM = "(type your own)"


def use_example() -> None:
    chosen = st.session_state["text_example"]
    if chosen in EXAMPLES:
        st.session_state["text_input"], st.session_state["text_reference"] = EXAMPLES[chosen]


def clicked_token(chart_key: str) -> int | None:
    """The token index of the last clicked marker in a lines chart, if any."""
    event = st.session_state.get(chart_key)
    points = (event or {}).get("selection", {}).get("points", []) if event else []
    for point in points:
        if point.get("customdata") is not None:
            return int(point["customdata"])
    return None


@st.fragment
def head_view(capture) -> None:
    """Layer/head controls and their two charts: moving them reruns only this part."""
    tokens = capture.tokens
    n, layers, heads = capture.num_tokens, capture.num_layers, capture.num_heads
    view_options = TEXT.choices("text_view")
    left, middle, right = st.columns(3)
    layer = links.number(left.slider, "Layer", TEXT.option("text_layer").low, layers - 1,
                         key="text_layer", default=layers - 1)
    view = middle.radio("Show", view_options, key="text_view", horizontal=True)
    head = links.number(right.slider, "Head", TEXT.option("text_head").low, heads - 1,
                        key="text_head", default=TEXT.default("text_head"),
                        disabled=view != "one head")

    if view == "all heads of the layer":
        ui.show_figure(ft.all_heads_grid(capture.attentions[layer], tokens,
                                         f"Layer {layer}: all {heads} heads (rows = queries)"),
                       key="text_heads_grid")
    else:
        matrix = capture.attentions[layer, head] if view == "one head" \
            else capture.attentions[layer].mean(0)
        label = f"layer {layer}, head {head}" if view == "one head" \
            else f"layer {layer}, mean of {heads} heads"
        lines_key, highlight_key = "text_lines", f"text_highlight_{hash(tokens)}"
        clicked = clicked_token(lines_key)
        fresh = clicked != st.session_state.get("text_last_click")
        if clicked is not None and clicked < n and fresh:
            st.session_state["text_last_click"] = clicked
            st.session_state[highlight_key] = clicked
        highlight = st.selectbox("Highlight the row of", [None] + list(range(n)),
                                 key=highlight_key, format_func=lambda i: "no token"
                                 if i is None else f"{i}: {tokens[i]}")
        top_k = 8 if n > 64 else None
        heat, lines = st.columns([1.15, 1])
        with heat:
            ui.show_figure(ft.attention_heatmap(matrix, tokens, f"Attention, {label}",
                                                highlight=highlight), key="text_heatmap")
        with lines:
            ui.show_figure(ft.attention_lines(matrix, tokens, f"Lines, {label}",
                                              highlight=highlight, top_k=top_k),
                           key=lines_key, on_select="rerun", selection_mode="points")
        st.caption("Lines below 0.01 are not drawn"
                   + (f"; with {n} tokens only each query's {top_k} largest weights are."
                      if top_k else "."))


@st.fragment
def find_heads_view(capture, rows) -> None:
    """The "find the heads that ..." question and its per-head map."""
    question = st.selectbox("Find the heads that ...", list(tm.HEAD_QUESTIONS),
                            key="text_question")
    metric, highest = tm.HEAD_QUESTIONS[question]
    found = tm.find_heads(rows, question, count=5)
    st.markdown("Best matches: " + ", ".join(
        f"**L{r['layer']} H{r['head']}** ({r[metric]:.2f})" for r in found)
        + f" ({'highest' if highest else 'lowest'} {tm.METRICS[metric][0]} first; a high value "
        f"means {tm.METRICS[metric][1]}).")
    metrics = tm.head_metrics(capture.attentions, capture.cls_index, capture.sep_indices)
    per_head = ft.head_metric_heatmap(metrics[metric], f"{tm.METRICS[metric][0]} for every layer "
                                      "and head", tm.METRICS[metric][0])
    ui.show_figure(per_head, key="text_metric_heatmap")


st.title("Attention in a text transformer")
st.markdown(
    "Vision Transformers borrowed their attention from language models. Here is the original "
    "setting: a sentence becomes word pieces, and in every layer each of the 12 heads decides, "
    "for every token, how to split one unit of attention over all the tokens. This page lets "
    "you read those weights, find heads with a recognisable habit, follow how attention "
    "changes with depth - and then check whether the tokens that get the attention are the "
    "ones the output actually depends on.")

text_model = links.choice(st.selectbox, "Text model", TEXT_MODELS, key="text_model",
                          format_func=lambda i: get_spec(i).display_name, what="text model",
                          help="The bundled MiniLM works offline; BERT-base needs the hub.")
model = state.load_model_or_explain(text_model)
if model is None:
    st.stop()
ui.model_caption(model)

st.session_state.setdefault("text_input", TEXT.default("text_input"))
st.session_state.setdefault("text_reference", TEXT.default("text_reference"))
st.selectbox("Example", list(EXAMPLES) + [CUSTOM], key="text_example", on_change=use_example,
             persist_state="session",
             help="Choosing an example fills both sentences below; then edit freely.")
sentence = st.text_area("Sentence to inspect", key="text_input", height=90,
                        max_chars=TEXT.option("text_input").most,
                        persist_state="session")

try:
    capture = text.text_capture(model, sentence)
except text.TextInputError as error:
    st.warning(str(error))
    st.stop()

if capture.tokenised.truncated:
    st.warning(capture.tokenised.notice())

tokens = capture.tokens
n, layers, heads = capture.num_tokens, capture.num_layers, capture.num_heads

st.subheader("The tokens the model sees")
st.markdown(" ".join(literal.code(token) for token in tokens))
st.caption(f"{n} tokens. [CLS] opens and [SEP] closes every input; a piece starting with ## "
           "continues the word before it. The uncased model lower-cases everything first.")



def head_section() -> None:
    st.subheader("Head view")
    st.markdown(
        "Each row of the heatmap is one **query** token; its colours show how that token's "
        "attention is split over the **keys** (columns), and every row adds up to 1. The line "
        "view shows the same numbers the way bertviz does: queries on the left, keys on the "
        "right, thicker and darker lines for larger weights. Click a token on the left (or pick "
        "it below) to pick out its row.")
    head_view(capture)


def specialisation_view() -> None:
    st.subheader("Head specialisation")
    st.markdown(
        "Some heads have a habit that shows on almost any sentence: looking at the previous or "
        "next word, at the token itself, or parking their attention on [CLS] or [SEP] (Clark et "
        "al., 2019, read heavy [SEP] attention as a head having nothing to do). Each number "
        "below is averaged over all query rows of this sentence: **self** is the mean of the "
        "diagonal, **previous/next token** the mean of the diagonal just below/above it, "
        "**[CLS]/[SEP]-directed** the mean weight landing on those tokens, and **entropy** the "
        f"mean row entropy in nats (0 = all on one token; log {n} = {math.log(n):.2f} = spread "
        "evenly). Click a column header to sort.")
    rows = tm.specialisation_rows(capture.attentions, capture.cls_index, capture.sep_indices)
    table = pd.DataFrame(rows).rename(columns={k: title for k, (title, _) in tm.METRICS.items()})
    st.dataframe(table, hide_index=True, height=260, key="text_spec_table",
                 column_config={title: st.column_config.NumberColumn(format="%.3f")
                                for title, _ in tm.METRICS.values()})
    find_heads_view(capture, rows)


def layers_view() -> None:
    st.subheader("Layer by layer")
    progression = tm.layer_progression(capture.attentions, capture.cls_index, capture.sep_indices)
    ui.show_figure(ft.layer_progression_figure(progression, "Averages over heads and queries"),
                   key="text_progression")
    st.markdown(
        "Entropy is shown as a fraction of log N, the entropy of perfectly even attention, so "
        "sentences of different lengths compare. A drop means the layer's heads focus on fewer "
        "tokens; a large [CLS] or [SEP] share is often read as heads idling on a special token "
        "rather than reading a particular word.")


def rollout_view() -> None:
    st.subheader("Rollout next to raw attention")
    rollout = tm.text_rollout(capture.attentions)
    last = capture.attentions[-1].mean(0)
    cls = capture.cls_index
    ui.show_figure(ft.token_bars(
        tokens, {"raw attention from [CLS], last layer (mean of heads)": last[cls],
                 "rollout from [CLS] through all layers": rollout[cls]},
        "Where [CLS] looks: one layer vs. all layers", "weight (each sums to 1)"),
        key="text_rollout")
    st.markdown(
        "Rollout (Abnar & Zuidema, 2020) follows attention through every layer: each layer's "
        "heads are averaged, the identity is added for the residual connection, rows are "
        "renormalised, and the layers are multiplied in order - the convention of Chefer et al.'s "
        "`compute_rollout_attention`, the same one page 4 uses for images. The added identity "
        "stands for the residual path, which carries each token's own state forward: here the "
        f"rollout row of [CLS] keeps **{rollout[cls, cls]:.0%}** on [CLS] itself, the last "
        f"layer alone **{last[cls, cls]:.0%}**. Compare the two bars for each word: rollout "
        "says where information *could* have flowed from, not which word mattered.")


@st.fragment
def importance_view() -> None:
    """The second sentence and the attention summary rerun only this part."""
    st.subheader("Attention vs. importance")
    st.markdown(
        "MiniLM has no classifier; it turns a sentence into an embedding (the mean of its last "
        "token states, scaled to length 1). So the target here is the **cosine similarity** "
        "between this sentence's embedding and a second sentence's. **Gradient x input** asks "
        "how much that number moves per token: the gradient of the similarity with respect to "
        "each input word embedding, multiplied by the embedding itself, summarised by its length "
        "per token.")
    reference = st.text_input("Second sentence (the target is the similarity to it)",
                              key="text_reference", persist_state="session",
                              max_chars=TEXT.option("text_reference").most)
    source_col, special_col = st.columns([2, 1])
    source = source_col.selectbox("Attention summary to compare", list(tm.ATTENTION_SOURCES),
                                  format_func=tm.ATTENTION_SOURCES.get, key="text_source")
    with_special = special_col.checkbox("Include [CLS] and [SEP]", key="text_special",
                                        value=TEXT.default("text_special"),
                                        help="Special tokens collect a lot of attention; including "
                                             "them mostly measures that.")
    try:
        importance = text.gradient_importance(model, sentence, reference)
    except text.TextInputError as error:
        st.warning(f"Second sentence: {error}")
        st.stop()

    keep = list(range(n)) if with_special else list(capture.word_indices)
    attention = tm.token_attention(capture.attentions, source, capture.cls_index)[keep]
    gradient = importance.importance[keep]
    agreement = tm.spearman(attention, gradient)
    shown_tokens = [tokens[i] for i in keep]
    st.metric("Cosine similarity of the two sentence embeddings", f"{importance.similarity:.3f}")
    ui.show_figure(ft.attention_vs_gradient_figure(shown_tokens, attention, gradient,
                                                   tm.ATTENTION_SOURCES[source], agreement.rho),
                   key="text_vs_gradient")
    if not math.isnan(agreement.rho):
        st.markdown(f"**Spearman rank correlation: {agreement.rho:+.2f}** over {agreement.count} "
                    f"tokens (p = {agreement.p_value:.2g}).")
    else:
        st.info(f"With {ui.count(agreement.count, 'token')}, or a constant signal, there is "
                "no ranking to compare: use a longer sentence.")
    st.markdown(
        "**The lesson.** Attention says where a head *looked*; gradient x input says which "
        "tokens the *output* is sensitive to. They answer different questions, and a weak or "
        "even negative rank correlation is common. Jain & Wallace (2019) showed that attention "
        "often disagrees with gradient and leave-one-out importance and that very different "
        "attention can give the same prediction; Wiegreffe & Pinter (2019) answered that "
        "attention can still be a useful explanation when tested properly. Note also that this "
        "model never reads [CLS] for its embedding - it averages all tokens - so the [CLS] row, "
        "the favourite picture in tutorials, is not even on the path to this output. Treat "
        "attention maps as a view of the computation, and check any claim of importance with a "
        "method that asks the output.")


view = ui.view_picker(**TEXT.picker_args("text_part"))
{"head": head_section, "special": specialisation_view, "layers": layers_view,
 "rollout": rollout_view, "importance": importance_view}[view]()
