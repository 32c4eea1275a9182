"""Page 5: Grad-CAM on a CNN step by step, the CAM family, and the ViT Grad-CAM taxonomy."""

import streamlit as st

from dashboard import links, literal, state, ui
from xai_core import pipeline
from xai_core.capture import shared_forwards
from xai_core.figures.curves import alpha_bars
from xai_core.figures.matrices import per_head_maps, taxonomy_mosaic
from xai_core.figures.overlays import MIN_MAX, cell_overlay, coarse, map_row, overlay
from xai_core.lessons.views.p5_gradcam import GRADCAM
from xai_core.methods import METHODS, gradcam
from xai_core.methods.saliency import saliency_for_display
from xai_core.methods.vit_gradcam import (HEAD_MODES, HEAD_NAMES, LOCATION_NAMES, LOCATIONS,
                                          MULTI_HEAD, WEIGHT_NAMES, WEIGHTS, ZERO_GRADIENT)

st.title("Grad-CAM, and why a ViT has more than a hundred of them")
part = ui.view_picker(**GRADCAM.picker_args("gc_part"))


def cnn_part(image, model) -> None:
    st.markdown(
        "Grad-CAM (Selvaraju et al., 2017) asks a trained CNN which places in one of its feature "
        "maps raised the score of a class. It needs one forward and one backward pass, and it "
        "never changes the model. The recipe, with $A^k$ the $k$-th channel of the chosen layer "
        "and $y^c$ the class logit before the softmax:")
    st.latex(r"\alpha_k^c = \frac{1}{Z}\sum_{i,j}\frac{\partial y^c}{\partial A^k_{ij}}"
             r"\qquad L^c = \mathrm{ReLU}\Big(\sum_k \alpha_k^c A^k\Big)")
    c1, c2 = st.columns([1.4, 1])
    with c1:
        target = ui.target_picker(model, image, key="gc_cnn_target")
    with c2:
        layers = gradcam.layer_choices(model)
        layer = st.selectbox("Layer (conv stage)", layers, key=f"gc_layer_{model.spec.id}",
                             index=layers.index(model.spec.cnn_target_layer),
                             help="The default is the model's last conv stage, where Grad-CAM "
                                  "is usually taken. Earlier stages have finer maps with less "
                                  "class meaning.")
    view = ui.view_picker(**GRADCAM.picker_args("gc_cnn_view"))
    if view == "steps":
        steps_view(model, image, target, layer)
    elif view == "classes":
        classes_view(model, image, layer)
    else:
        family_view(model, image, target, layer)


def steps_view(model, image, target: int, layer: str) -> None:
    """The first lesson: Grad-CAM's recipe, one step per figure."""
    names = model.head.class_names
    steps = METHODS["gradcam"](model, image, target=target, layer=layer).detail
    model_image = pipeline.prepare(model, image).model_image
    rows, cols = steps.cam.shape
    st.subheader(f"Step by step for '{names[target]}' at {layer}")
    st.markdown(
        f"**1 · Gradients and channel weights.** The backward pass gives $\\partial y^c/"
        f"\\partial A^k$ for all {steps.alpha.size} channels of the {rows}×{cols} map. "
        "Averaging each channel's gradient over the map gives one weight per channel: how much "
        "that channel, as a whole, pushes this class up (red) or down (blue).")
    ui.show_figure(alpha_bars(steps.alpha, layer), key="gc_alpha")
    a, b, c = st.columns(3)
    with a:
        ui.show_figure(overlay(model_image, steps.weighted_sum, steps.cell_size,
                               "2 · Weighted sum Σ<sub>k</sub> α<sub>k</sub>A<sup>k</sup>",
                               diverging=True), key="gc_sum")
    with b:
        ui.show_figure(overlay(model_image, steps.cam, steps.cell_size, "3 · After the ReLU"),
                       key="gc_relu")
    with c:
        small, cell = coarse(steps.upsampled)
        ui.show_figure(overlay(model_image, small, cell, "4 · Bilinear upsampling, min-max",
                               zmin=0, zmax=1, scale_title=MIN_MAX), key="gc_up")
    library = gradcam.cam_family(model, image, target, layer, ("Grad-CAM",))[0]
    difference = float(abs(library.map - steps.upsampled).max())
    st.caption(
        f"Steps 2-3 live on the {rows}×{cols} grid: each cell covers "
        f"{steps.cell_size[0]:.0f}×{steps.cell_size[1]:.0f} input pixels. The ReLU keeps only "
        "the evidence for the class. Step 4 follows pytorch-grad-cam exactly (min-max, bilinear "
        "to the input size, min-max again). Check against the library's own GradCAM on the same "
        f"layer and class: largest difference {difference:.1e}.")


@st.fragment
def classes_view(model, image, layer: str) -> None:
    """Two classes' maps; the class pickers rerun only this part."""
    names = model.head.class_names
    model_image = pipeline.prepare(model, image).model_image
    st.subheader("One image, two classes")
    st.markdown(
        "Grad-CAM is class-discriminative: the same image gives a different map for each class. "
        "Plain gradient saliency (Simonyan et al.: the largest |∂y^c/∂pixel| over the colour "
        "channels, read from the same backward pass as Grad-CAM) mostly traces the same edges "
        "whatever the class. Try the cat + coffee cup collage.")
    d1, d2 = st.columns(2)
    with d1:
        first = ui.target_picker(model, image, key="gc_class_a", label="Class A")
    with d2:
        second = ui.target_picker(model, image, key="gc_class_b", label="Class B",
                                  default_rank=GRADCAM.option("gc_class_b").rank)
    pair = [METHODS["gradcam"](model, image, target=t, layer=layer) for t in (first, second)]
    saliency = [METHODS["saliency"](model, image, target=t).map for t in (first, second)]
    ui.show_figure(map_row(model_image, [
        (f"Grad-CAM: {names[first][:24]}", pair[0].detail.upsampled),
        (f"Grad-CAM: {names[second][:24]}", pair[1].detail.upsampled),
        (f"Saliency: {names[first][:24]}", saliency_for_display(saliency[0])),
        (f"Saliency: {names[second][:24]}", saliency_for_display(saliency[1]))]),
        key="gc_pair")
    st.caption(
        "How alike are the two classes' maps (Pearson correlation over pixels)? Grad-CAM: "
        f"{gradcam.map_correlation(pair[0].detail.upsampled, pair[1].detail.upsampled):+.2f}; "
        "saliency: "
        f"{gradcam.map_correlation(*saliency):+.2f}. Each map is min-max scaled to [0, 1]; the "
        "saliency maps are clipped at their 99th percentile for display (a few pixels would "
        "otherwise swamp the rest) and drawn at 1/4 resolution.")


@st.fragment
def family_view(model, image, target: int, layer: str) -> None:
    """The CAM family; choosing methods reruns only this part."""
    channels = METHODS["gradcam"](model, image, target=target, layer=layer).detail.alpha.size
    model_image = pipeline.prepare(model, image).model_image
    st.subheader(f"The CAM family for '{model.head.class_names[target]}' at {layer}")
    st.markdown(
        "pytorch-grad-cam implements many relatives of Grad-CAM. They differ in how they weight "
        "the channels of the same layer. All maps below share one colour scale; the time is the "
        "wall-clock time of one library call on this server.")
    slow = ", ".join(gradcam.SLOW_CAMS)
    chosen = links.choices(
        st.multiselect, "Methods", list(gradcam.CAM_FAMILY), key="gc_family",
        default=list(GRADCAM.default("gc_family")),
        help=f"{slow} run one masked or ablated forward pass per channel "
             f"({channels} here), so they take much longer.")
    if chosen:
        with st.spinner("Running pytorch-grad-cam..."):
            family = gradcam.cam_family(model, image, target, layer, tuple(chosen),
                                        should_stop=ui.stop_check())
        ui.show_figure(map_row(model_image, [(f"{r.name} · {r.seconds:.2f} s", r.map)
                                             for r in family]), key="gc_family_maps")
        ui.text_table({"method": [r.name for r in family],
                       "seconds": [f"{r.seconds:.2f}" for r in family],
                       "how it weights the channels": [r.note for r in family]})


def vit_part(image, model) -> None:
    st.markdown(
        "A ViT has no convolutional feature map, so 'apply Grad-CAM to a ViT' leaves open "
        "*where* to read features and gradients, and *how* to weight them. Following the "
        "taxonomy of *Grad-CAM for Vision Transformers: A Systematic Taxonomy and Audit of "
        "Methodological Ambiguity in Explainable AI*, each block offers six places:")
    st.markdown("  \n".join(f"**{loc}** · {LOCATION_NAMES[loc]}" for loc in LOCATIONS))
    st.markdown(
        "and two weightings (the gradient averaged over the patch tokens, or the gradient at "
        "the [CLS] token); for F2 and F3, which have one map per head, the heads can be summed "
        "before the ReLU or passed through the ReLU one by one and then summed. F2 uses the "
        "[CLS] query's attention row, with one channel per head (Chefer's attention Grad-CAM). "
        "All of it comes from **one** forward and **one** backward pass.")
    head = ui.scoring_head(model)
    if head is None:
        return
    target = ui.target_picker(model, image, key="gc_vit_target", head=head)
    with st.spinner("One forward + one backward, then every variant..."):
        result = METHODS["vit-gradcam-all"](model, image, target=target, head=head).detail
    counts = result.counts()
    m1, m2, m3, m4 = st.columns(4)
    m1.metric("Grad-CAM variants for this model", counts.variants)
    m2.metric("Blank: zero gradient", counts.zero_gradient)
    m3.metric("Empty after the ReLU", counts.relu_empty)
    m4.metric("Time for all of them", f"{sum(result.seconds.values()):.2f} s",
              help="The backward pass and every cell, plus the forward pass unless the one "
                   "that made the prediction above was reused (on a new image it is).")
    st.caption(
        f"{result.num_blocks} blocks; target: {head.score_description} of "
        f"“{literal.text(head.class_names[target])}”. "
        + (f"{counts.undefined} (block, location, weighting) combinations do not exist in this "
           "model (no [CLS] token or no patch tokens there) and are not counted. "
           if counts.undefined else ""))

    taxonomy(result, pipeline.prepare(model, image).model_image)

    st.subheader("Why this matters for reproducibility")
    st.markdown(
        f"Counted this way, this one model gives **{counts.variants}** different maps that "
        "could all be called 'Grad-CAM'. They can disagree completely: some follow the object, "
        "some the background, some are blank. A paper or a report that says only 'we used "
        "Grad-CAM on a ViT' therefore leaves the reader unable to rebuild the figure, and leaves "
        "the author free to pick the prettiest map. To make a ViT Grad-CAM reproducible, state "
        "the block, the location (F1-F6), the weighting, how heads were combined, the target "
        "score, and how the map was upsampled and normalised. The CLI writes all of them into "
        "every file it saves (`python -m xai_core explain --method vit-gradcam-all`).")


@st.fragment
def taxonomy(result, model_image) -> None:
    """The mosaic of every variant and one cell in detail; the weighting and head pickers
    rerun only this part (and a cell's pickers only the cell)."""
    c1, c2 = st.columns(2)
    weights = links.choice(c1.radio, "Weights", WEIGHTS, key="gc_weights", horizontal=True,
                           format_func=WEIGHT_NAMES.get)
    heads = links.choice(c2.radio, "Heads (F2, F3)", HEAD_MODES, key="gc_heads",
                         horizontal=True, format_func=HEAD_NAMES.get)
    ui.show_figure(taxonomy_mosaic(result, weights, heads), key="gc_mosaic")
    st.caption("Every tile is one Grad-CAM of this image and class, min-max scaled on its own. "
               "'zero grad' tiles are blank on purpose: their weights come from a gradient that "
               "is exactly zero, so any colour there would be noise, not evidence.")
    cell_detail(result, model_image, weights, heads)


@st.fragment
def cell_detail(result, model_image, weights: str, heads: str) -> None:
    st.subheader("One cell in detail")
    c1, c2 = st.columns([2, 1])
    last = result.num_blocks - 1
    block = links.number(c1.slider, "Block", GRADCAM.option("gc_block").low, last,
                         key="gc_block", default=last)
    location = links.choice(c2.selectbox, "Location", LOCATIONS, key="gc_location",
                            format_func=lambda loc: f"{loc} · {LOCATION_NAMES[loc]}")
    with ui.friendly_errors():
        cell = result.cell(block, location, weights, heads)
        st.markdown(f"**{cell.variant.describe()}**")
        if cell.status == ZERO_GRADIENT:
            st.warning(f"Blank map. {cell.reason}")
            return
        if cell.reason:
            st.info(cell.reason)
        left, right = st.columns([1, 1.3])
        with left:
            ui.show_figure(cell_overlay(model_image, cell, result.patch_size), key="gc_cell")
        with right:
            if location in MULTI_HEAD:
                ui.show_figure(per_head_maps(cell), key="gc_heads_map")
                st.caption("Each head's weighted sum before any ReLU (red raises the score, "
                           "blue lowers it). 'Heads summed, then ReLU' adds these maps and "
                           "clips once; 'ReLU per head' clips each one first, so a head's "
                           "negative evidence can no longer cancel another's positive evidence.")
            st.caption(f"Raw values after the ReLU, on the {result.grid[0]}×{result.grid[1]} "
                       "patch grid; the prefix tokens ([CLS] and any others) are not drawn.")


image = state.current_image()
if image is not None:
    chosen_model = state.current_cnn() if part == "cnn" else state.current_vit()
    if chosen_model is not None:
        ui.model_caption(chosen_model)
        # the ViT's prediction is the forward pass its backward reuses
        with ui.friendly_errors(), shared_forwards():
            (cnn_part if part == "cnn" else vit_part)(image, chosen_model)
