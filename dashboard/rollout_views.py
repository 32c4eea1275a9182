"""Page 4's views besides rollout itself: the sinks and registers of the model on this
image (sink score and entropy per head, one head drawn, what the model shows in words) and
every head of every block as small multiples."""

import numpy as np
import streamlit as st

from xai_core.analysis.attention_sinks import (DEFINITION, ENTROPY_DEFINITION, SINK_THRESHOLD,
                                               value_norm_ratio)
from xai_core.analysis.token_marks import HIGH_NORM_RATIO, largest_norm_ratio
from xai_core.figures.matrices import block_head_heatmap, head_mosaic
from xai_core.figures.overlays import token_map_figure
from xai_core.methods import METHODS

from . import links, ui
from .clicks import apply_chart_click
from .widgets import keep_valid


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
    maps = np.stack([METHODS["attention"](model, image, block=b, query=-1 if grid_query is None
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
