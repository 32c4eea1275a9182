"""Page 1: how an image becomes a sequence of tokens, and what the model then predicts."""

import streamlit as st

from dashboard import literal, state, ui
from dashboard.widgets import keep_valid
from xai_core import pipeline
from xai_core.analysis import tokens
from xai_core.capture import centre_patch, token_layout
from xai_core.figures.click_targets import clicked_index
from xai_core.figures.curves import prediction_bars
from xai_core.figures.matrices import (embedding_pca_figure, position_map_figure,
                                       position_mosaic_figure)
from xai_core.figures.tokenization import token_strip_figure, tokenization_figure
from xai_core.images import COLLAGE_ID
from xai_core.lessons.views.p1_tokenization import TOKENS

st.title("From pixels to tokens")
st.markdown(
    "A Transformer reads a list of vectors, not a picture. A Vision Transformer therefore "
    "cuts the image into square patches, turns every patch into one vector (a *token*), puts "
    "a few extra tokens in front, and adds a learned position code to each. This page walks "
    "through those steps with the real model chosen in the sidebar.")

image, model = ui.vit_page_inputs()

prepared = pipeline.prepare(model, image)
layout = token_layout(model.module, prepared.pixels)
names = tokens.prefix_token_names(model.module)
rows, cols = layout.grid
ph, pw = layout.patch_size
height, width = layout.input_size



@st.fragment
def calculator():
    st.subheader("Token calculator")
    st.caption(f"Preset with {model.spec.display_name}'s own sizes. Try a size that is not a "
               "multiple of the patch size.")
    c1, c2, c3, c4 = st.columns(4)
    suffix = model.spec.id
    h = c1.slider("Image height H (px)", 1, 1024, height, key=f"tok_calc_h_{suffix}")
    w = c2.slider("Image width W (px)", 1, 1024, width, key=f"tok_calc_w_{suffix}")
    p = c3.slider("Patch size P (px)", 1, 64, ph, key=f"tok_calc_p_{suffix}")
    k = c4.number_input("Prefix tokens", 0, 16, layout.num_prefix_tokens,
                        key=f"tok_calc_prefix_{suffix}")
    try:
        count = tokens.token_count(h, w, p, k)
    except tokens.TokenError as error:
        st.error(str(error))
        return
    m1, m2, m3 = st.columns(3)
    m1.metric("Patch grid", f"{count.rows} x {count.cols}")
    m2.metric("Patches", count.num_patches)
    m3.metric("Tokens N", count.num_tokens)
    if count.divisible:
        st.success(f"{h} and {w} are multiples of {p}: every pixel belongs to exactly one patch.")
    else:
        st.warning(
            f"{h} x {w} is not a multiple of {p} (remainders: {count.leftover_rows} rows, "
            f"{count.leftover_cols} columns of pixels). A patch embedding implemented as a "
            f"convolution with stride P keeps {count.rows} x {count.cols} patches and never "
            f"looks at the last {count.dropped_pixels} pixels. Padding the image up to the next "
            f"multiple of P keeps them instead: {count.padded_rows} x {count.padded_cols} "
            f"patches, {count.padded_tokens} tokens. Many models accept only the size they were "
            "trained for, which is why the dashboard resizes every image to the model's input "
            "size first.")


def patches_view():
    """Steps 1 and 2, and the token calculator: the first lesson."""
    st.header("1 · Cut the image into patches")
    left, right = st.columns([1.2, 1])
    with left:
        ui.show_figure(tokenization_figure(prepared.model_image, layout.grid, layout.patch_size,
                                           layout.num_prefix_tokens,
                                           f"What the model sees: {width}x{height} px"),
                       key="tok_grid")
    with right:
        st.markdown(
            f"The image is first resized and centre-cropped to the model's input size, "
            f"**{height}x{width} pixels**. The model's patches are **{ph}x{pw} pixels**, so "
            f"the grid has {height} / {ph} = **{rows} rows** and {width} / {pw} = **{cols} "
            f"columns**: **{layout.num_patches} patches**.\n\n"
            "Hover over a patch to see its number, its row and column, and the pixels it "
            "covers. Patches are numbered in reading order (raster order): left to right, then "
            "top to bottom.")
        st.markdown(
            f"In front of the patches the model places "
            f"**{ui.count(layout.num_prefix_tokens, 'prefix token')}**: "
            f"{', '.join(names) if names else 'none'}. "
            "[CLS] is a learned vector "
            "with no pixels of its own; it collects a summary of the image that the classifier "
            "(or the k-NN) reads at the end. A distillation token [DIST] plays the same role for "
            "a teacher network, and register tokens [REG] give the model scratch space.")
        if tokens.cls_joins_late(model.module):
            st.info("In this model the patches first attend only to each other; the [CLS] "
                    "token is appended for the last few *class-attention* blocks.")

    st.header("2 · Flatten into a sequence")
    ui.show_figure(token_strip_figure(prepared.model_image, layout.grid, layout.patch_size,
                                      names, shown=min(cols, 12)), key="tok_strip")
    st.latex(rf"N = \frac{{H \cdot W}}{{P^2}} + \text{{prefix}} = "
             rf"\frac{{{height} \cdot {width}}}{{{ph} \cdot {pw}}} + "
             rf"{layout.num_prefix_tokens} = "
             rf"{layout.num_patches} + {layout.num_prefix_tokens} = {layout.num_tokens}")
    st.caption("The first patches of the top row, in order, after the prefix tokens. "
               "Self-attention compares every token with every other one, so its cost grows "
               "with N².")
    calculator()


def embedding_view():
    st.header("3 · Turn each patch into a vector: the patch embedding E")
    with ui.friendly_errors():
        pca = tokens.cached_embedding_pca(model)
        rows_e, dim = pca.e_shape
        left, right = st.columns([1, 1.2])
        with left:
            st.markdown(
                f"Each patch has {ph} x {pw} pixels x {pca.channels} colour channels = "
                f"**{rows_e} numbers**. Flattened into a row vector x_p, it is multiplied by one "
                f"learned matrix **E of shape {rows_e} x {dim}**, giving a token of width **D = "
                f"{dim}**. (In code E is a convolution with {dim} filters of size {ph}x{pw} and "
                "the same stride: the same thing.)\n\n"
                f"Each column of E is a filter, a {ph}x{pw} colour picture that the patch is "
                f"compared with. The tiles on the right are the first {len(pca.explained)} "
                f"principal components of those {dim} filters, shown as colour images (grey = 0). "
                f"Together they explain {pca.explained.sum():.0%} of the filters' variance. In "
                "the original ViT "
                "paper (Dosovitskiy et al. 2021, Fig. 7) they look like smooth colour blobs and "
                "stripes of rising frequency, much like the first layer of a CNN. Compare with "
                "what this model learned: untrained random weights give pure noise, and when each "
                "component explains only a small share, the filters are spread over many "
                "directions rather than built from a few smooth patterns.")
        with right:
            ui.show_figure(embedding_pca_figure(pca.tiles(), pca.explained), key="tok_pca")


def _pick_position():
    patch = clicked_index(st.session_state.get("tok_pos_chart"))
    if patch is not None:
        st.session_state["tok_pos_patch"] = patch


@st.fragment
def position_view():
    """A click on the mosaic or a new patch number reruns only this part."""
    st.header("4 · Add where each patch was: position embeddings")
    st.markdown(
        "Self-attention treats its input as a set: shuffle the patches and, without extra help, "
        "nothing changes. So the model adds a learned vector to each token that depends only on "
        "its position. Below, each small square belongs to one patch and shows the **cosine "
        "similarity** of that patch's position embedding with the position embedding of every "
        "patch. If training has taught the model the 2-D layout from a 1-D list, nearby patches "
        "get similar codes, and rows and columns often show up as stripes.")
    with ui.friendly_errors():
        similarity = tokens.cached_position_similarity(model)
        near, far = similarity.near_and_far()
        st.markdown(f"Measured on this model: side-by-side patches have codes with cosine "
                    f"**{near:.2f}** on average, patches more than half the grid apart "
                    f"**{far:.2f}**.")
        pos_rows, pos_cols = similarity.grid
        left, right = st.columns([1.4, 1])
        with left:
            ui.show_figure(position_mosaic_figure(similarity.similarity), key="tok_pos_chart",
                           on_select=_pick_position, selection_mode="points")
            st.caption(f"Position table read from the model: {pos_rows}x{pos_cols} patch "
                       "positions"
                       + (f" after {ui.count(similarity.prefix_in_table, 'prefix row')}"
                          if similarity.prefix_in_table else "")
                       + ". A model trained at another resolution has its table resampled to the "
                         "grid it runs at (DINOv2 was trained on a 37x37 grid at 518 px). Click a "
                         "small square to enlarge it.")
        with right:
            keep_valid("tok_pos_patch", range(pos_rows * pos_cols),
                       centre_patch((pos_rows, pos_cols)))
            patch = st.number_input("Patch (raster index)", 0, pos_rows * pos_cols - 1,
                                    key="tok_pos_patch")
            r, c = divmod(int(patch), pos_cols)
            ui.show_figure(position_map_figure(similarity.similarity, r, c), key="tok_pos_one")
            st.caption("Similarity is 1 on the patch itself (outlined). Blue means the codes "
                       "point in different directions.")


def prediction_view():
    st.header("5 · What does the model predict?")
    st.markdown(
        "After the last block, only the [CLS] token's vector is used. A supervised ViT feeds it "
        "to a linear layer with one output per ImageNet class; the self-supervised DINOv2 has "
        "no such "
        "layer, so we compare its [CLS] vector with those of labelled examples (a k-nearest-"
        "neighbour vote over a small memory bank built from the sample gallery). The CNN, for "
        "comparison, classifies into the 1000 ImageNet classes.")

    vit_column, cnn_column = st.columns(2)
    tops = {}
    with vit_column, ui.friendly_errors():
        st.subheader(model.label)
        head = state.session_head(model)
        top = pipeline.predict(model, image, topk=5, head=head)
        tops[model.label] = top
        ui.show_figure(prediction_bars([p.label for p in top], [p.probability for p in top],
                                       f"Top-5 ({head.prediction_description})"),
                       key="tok_pred_vit")
        ui.unknown_picture_note(model, image, head)
        if head.kind == "knn":
            st.markdown("**Nearest neighbours in the memory bank** (cosine similarity of [CLS] "
                        "vectors; crops are augmented views of the same photo)")
            near = tokens.describe_neighbours(head.neighbours(pipeline.model_output(model, image)))
            for column, n in zip(st.columns(5), near[:5]):
                with column:
                    if n.sample_id is not None:
                        st.image(tokens.sample_thumbnail(n.sample_id))
                    crop = "original" if n.view == 0 else f"augmented crop {n.view}"
                    st.caption(f"**{literal.text(n.label)}** · {crop}  \nsimilarity "
                               f"{n.similarity:.3f}")
    with cnn_column:
        cnn = state.current_cnn()
        if cnn is not None:
            with ui.friendly_errors():
                st.subheader(cnn.label)
                top = pipeline.predict(cnn, image, topk=5)
                tops[cnn.label] = top
                ui.show_figure(prediction_bars([p.label for p in top],
                                               [p.probability for p in top],
                                               "Top-5 (ImageNet-1k)"),
                               key="tok_pred_cnn")
                ui.unknown_picture_note(cnn, image)

    if state.selection().image_choice == COLLAGE_ID and tops:
        lines = [f"- **{label}**: "
                 + ", ".join(f"{literal.text(p.label)} {p.probability:.0%}" for p in top[:3])
                 for label, top in tops.items()]
        st.info("**One summary, two objects.** This collage holds a cat (left) and a coffee cup "
                "(right), but the model must squeeze the whole image into one [CLS] vector and "
                "one probability distribution. Look at how the confidence is shared out:\n\n"
                + "\n".join(lines)
                + "\n\nNeither answer is wrong; a single label simply cannot describe two "
                  "objects. Explanation maps (later pages) show *where* each class's evidence "
                  "comes from.")


view = ui.view_picker(**TOKENS.picker_args("tok_view"))
{"patches": patches_view, "embedding": embedding_view, "position": position_view,
 "prediction": prediction_view}[view]()
