"""Page 3: how far each attention head looks, next to a CNN's receptive field."""

import numpy as np
import streamlit as st

from dashboard import links, state, ui
from dashboard.clicks import apply_chart_click
from dashboard.widgets import keep_valid
from xai_core import pipeline
from xai_core.figures.curves import distance_scatter, receptive_field_figure
from xai_core.figures.matrices import distance_variation
from xai_core.figures.overlays import token_map_figure
from xai_core.images import COLLAGE_ID, SAMPLES, load_sample
from xai_core.methods import METHODS, distance
from xai_core.methods.attention import query_prefix_attention
from xai_core.analysis.attention_sinks import SINK_THRESHOLD
from xai_core.analysis.token_marks import high_norm_tokens
from xai_core.analysis.tokens import prefix_token_names

st.title("How far does each head look?")
st.markdown(
    "A convolution can only see a small window, and that window grows layer by layer. "
    "Self-attention has no such limit: every patch may attend to every other patch from the "
    "first block on. **Mean attention distance** measures how far a head actually looks: for "
    "every query patch, add up the distances (in pixels, between patch centres) to every patch "
    "it attends to, weighted by the attention; then average over the query patches.")
st.latex(r"\bar D_h = \frac{1}{N}\sum_{i=1}^{N}\sum_{j=1}^{N} A^{(h)}_{ij}\,"
         r"\lVert \mathrm{pos}(i) - \mathrm{pos}(j) \rVert_2")

image, model = ui.vit_page_inputs()

PREFIX_LABELS = {"exclude": "Excluded (as the papers do)",
                 "centre": "Included, placed at the image centre"}


def _sink_note(sink_heads, result) -> str:
    """What the ringed sink heads do to the distances (see page 4, 'Sinks and registers')."""
    on_patches = [s for s in sink_heads if s.on_patch]
    text = (f"Ringed: **sink heads**, which send at least {SINK_THRESHOLD:.0%} of their "
            "attention (mean over queries) to one key (page 4, *Sinks and registers*). ")
    if on_patches:
        s = on_patches[0]
        mad = result.mad[result.blocks.index(s.block), s.head]
        text += (f"A head that parks its attention on one patch measures little more than how "
                 f"far each query is from that patch: block {s.block}, head {s.head} → "
                 f"{s.key_name} gives {mad:.0f} px, a number about where the sink sits, not "
                 "about how widely the head gathers information. ")
    if len(on_patches) < len(sink_heads):
        text += ("Attention parked on a prefix token lands on no patch, so it adds no distance "
                 "and pulls the head's number down, unless rows are renormalised.")
    return text


def every_head_view(model, image, result, sink_heads) -> None:
    """The first lesson: every head's distance per block, next to a CNN's receptive field."""
    rings = [(result.blocks.index(s.block), s.head,
              f"sink head: block {s.block}, head {s.head} sends {s.score:.0%} of its attention "
              f"to {s.key_name}") for s in sink_heads]
    left, right = st.columns([1.35, 1])
    with left:
        ui.show_figure(
            distance_scatter(result.mad, result.blocks, result.reference,
                             "Mean attention distance, this image", rings=rings),
            key="p3_scatter", on_select="rerun", selection_mode="points")
        first, last = result.mad[0], result.mad[-1]
        st.markdown(
            f"In the first block the heads range from **{first.min():.0f} px to "
            f"{first.max():.0f} px**; in the last block from **{last.min():.0f} px to "
            f"{last.max():.0f} px** (mean {last.mean():.0f} px, against {result.reference:.0f} px "
            "for uniform attention). Click a point to open that head.")
        if rings:
            st.markdown(_sink_note(sink_heads, result))
    cnn = state.current_cnn()
    with right:
        if cnn is not None:
            stages = distance.stage_receptive_fields(cnn.module)
            everything = distance.cnn_receptive_fields(cnn.module)
            positions = [next(i for i, layer in enumerate(everything) if layer.name == s.name) + 1
                         for s in stages]
            ui.show_figure(receptive_field_figure(
                distance.textbook_receptive_field(len(everything)), stages, positions,
                max(cnn.spec.input_size), "A CNN's receptive field grows with depth",
                cnn.spec.display_name), key="p3_rf")
            st.caption(
                f"Computed from {cnn.spec.display_name}'s own modules: the kernel, stride and "
                "dilation of each of its "
                f"{len(everything)} spatial layers (1x1 convolutions change nothing), with "
                "rf ← rf + (k − 1)·jump and jump ← jump·stride. The grey line is the textbook "
                "stack of 3x3 stride-1 convolutions, rf = 1 + 2l. The receptive field is the "
                "most a unit *could* see; mean attention distance is how far a head *does* look.")


@st.fragment
def one_head_view(model, image, capture, result) -> None:
    """One head, one query: its pickers and a click on its map rerun only this part."""
    with ui.friendly_errors():
        _one_head(model, image, capture, result)


def _one_head(model, image, capture, result) -> None:
    st.subheader("Open one head")
    layout, blocks = capture.layout, result.blocks
    apply_chart_click("p3_head_map", lambda d: {"p3_query": int(d[0])})
    heads = result.mad.shape[1]
    keep_valid("p3_query", range(layout.num_patches), layout.centre_patch)
    pick = st.columns(3)
    block = links.choice(pick[0].selectbox, "Block", blocks, key="p3_block", default=blocks[-1])
    head = links.choice(pick[1].selectbox, "Head", list(range(heads)), key="p3_head", default=0)
    query = pick[2].number_input("Query patch (raster index; or click the left image)", 0,
                                 layout.num_patches - 1, key="p3_query")
    position = blocks.index(block)
    row_map = METHODS["attention"](model, image, block=block, query=query).arrays["per_head"][head]
    prefix_share = query_prefix_attention(capture, block, query)[head].tolist()
    names = ", ".join(f"{name} {value:.1%}" for name, value in
                      zip(prefix_token_names(model.module), prefix_share))
    marks = high_norm_tokens(capture)
    model_image = pipeline.prepare(model, image).model_image
    cols = st.columns(2)
    with cols[0]:
        ui.show_figure(
            token_map_figure(image=model_image, values=row_map,
                             patch_size=layout.patch_size, query=query, grid=layout.grid,
                             clickable=True, marks=marks,
                             title=f"Block {block}, head {head}: where patch {query} looks"),
            key="p3_head_map", on_select="rerun", selection_mode="points")
        st.caption(f"This query's attention-weighted distance: "
                   f"**{result.per_query[position, head].ravel()[query]:.1f} px**. "
                   f"Attention it gives to prefix tokens (not drawn, they have no pixels): "
                   f"{names or 'none in this block'}."
                   + (" ✕ marks high-norm outlier tokens (the rule is on page 4)."
                      if marks else ""))
    with cols[1]:
        ui.show_figure(
            token_map_figure(image=model_image,
                             values=result.per_query[position, head],
                             patch_size=layout.patch_size, query=query, grid=layout.grid,
                             marks=marks, title=f"Every query's distance (px); head mean "
                                   f"{result.mad[position, head]:.1f} px",
                             scale_title="distance (px)"),
            key="p3_head_dist")


def gallery_view(model, result, prefix, renormalise) -> None:
    """The same measurement on every gallery image (each capture cached)."""
    st.subheader("Is it the image or the weights?")
    st.markdown(
        "Run the same measurement on every gallery image (and your upload, if you added one) "
        "and compare: if a head's distance barely moves between images, the distance is a "
        "property of the trained weights, not of what is in the picture.")
    gallery = {SAMPLES[s].title: load_sample(s) for s in SAMPLES}
    gallery[state.image_title(COLLAGE_ID)] = load_sample(COLLAGE_ID)
    upload = st.session_state.get("upload_image")
    if upload is not None:
        gallery["Your upload"] = upload
    with st.spinner(f"Measuring {len(gallery)} images (each capture is cached)..."):
        names, per_image = distance.gallery_distances(model, gallery, prefix, renormalise)
    mean, spread = per_image.mean(0), per_image.std(0)
    left, right = st.columns([1.35, 1])
    with left:
        ui.show_figure(distance_scatter(mean, result.blocks, result.reference,
                                        f"Mean over {len(names)} images (bars: ±1 std "
                                        "between images)", spread=spread),
                       key="p3_gallery_scatter")
    with right:
        ui.show_figure(distance_variation(per_image, result.blocks,
                                          "How much each head varies between images (px)"),
                       key="p3_gallery_std")
    between_images = float(np.median(spread))
    between_heads = float(np.median(mean.std(1)))
    verdict = ("much smaller than" if between_images < between_heads / 2 else
               "comparable to" if between_images < between_heads * 2 else "larger than")
    st.markdown(
        f"Measured over {len(names)} images: the typical (median) spread of one head's "
        f"distance **between images is {between_images:.1f} px**, while the typical spread "
        f"**between the heads of one block is {between_heads:.1f} px**. The image-to-image "
        f"variation is {verdict} the head-to-head variation"
        + (": the distance profile is mostly fixed by the weights." if
           verdict == "much smaller than" else "."))
    st.caption("Images: " + ", ".join(names) + ". Each image's capture is the same cached "
               "forward pass the other pages use.")


VIEWS = {"all": "Every head", "head": "One head", "gallery": "Image or weights?"}

with ui.friendly_errors():
    controls = st.columns([1, 1.4])
    prefix = controls[0].radio("Prefix tokens ([CLS], [DIST], registers)", list(PREFIX_LABELS),
                               format_func=PREFIX_LABELS.get, key="p3_prefix",
                               persist_state="session")
    renormalise = controls[1].checkbox(
        "Renormalise each row after dropping the prefix columns", key="p3_renorm",
        disabled=prefix == "centre", persist_state="session",
        help="Without it, attention a patch gives to [CLS] adds no distance. With it, the "
             "distance is measured only over the attention that lands on image patches.")
    renormalise = renormalise and prefix == "exclude"

    capture = pipeline.vit_capture(model, image)
    result = METHODS["distance"](model, image, prefix=prefix,
                                 renormalise="yes" if renormalise else "no").detail
    layout = capture.layout
    height, width = layout.input_size
    st.caption(f"Convention: {result.convention}. Distances are between patch centres, "
               f"{layout.patch_size[0]} px per grid step, on the {height}x{width} px model input. "
               f"Uniform attention over all {layout.num_patches} patches would give "
               f"{result.reference:.1f} px; the farthest two patches are "
               f"{result.max_distance:.1f} px apart.")
    if len(result.blocks) < len(capture.blocks):
        st.info(f"Only the {len(result.blocks)} self-attention blocks are measured: the "
                f"{len(capture.blocks) - len(result.blocks)} class-attention blocks at the end "
                "have a single [CLS] query, which has no position in the image.")
    sink_heads = [s for s in METHODS["sinks"](model, image).detail.sink_heads()
                  if s.block in result.blocks]

    # a click on a point of the scatter opens that head (before the widgets it sets are drawn)
    apply_chart_click("p3_scatter", lambda d: {"p3_block": int(d[0]), "p3_head": int(d[1]),
                                               "p3_view": "head"})
    view = ui.view_picker(VIEWS, key="p3_view", opened_by={"head": ("p3_block", "p3_head")})
    if view == "all":
        every_head_view(model, image, result, sink_heads)
    elif view == "head":
        one_head_view(model, image, capture, result)
    else:
        gallery_view(model, result, prefix, renormalise)
