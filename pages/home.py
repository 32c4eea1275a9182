"""Home: the chosen image, the model's card and what it predicts."""

import streamlit as st

from dashboard import literal, state, ui
from dashboard.page_list import PAGES
from xai_core import pipeline
from xai_core.figures.curves import prediction_bars
from xai_core.figures.overlays import image_figure
from xai_core.models.card import model_card

st.title("ViT Lens")
st.markdown(
    "Look inside a Vision Transformer: how an image becomes tokens, where each attention head "
    "looks, and how the explanation methods people cite turn those numbers into maps. "
    "Every map here is computed from a real forward (and, when needed, backward) pass of the "
    "model shown below. Pick a model and an image in the sidebar, then walk through the pages.")
# the picture beside the way in, then one column per model: three columns side by side left
# a model's card and its top-5 a third of a projector's width, too narrow for their words
picture, way_in = st.columns([1, 1.3])
with way_in:
    st.markdown("**New here? Start with the guided tour** of the ViT Explainer (page 0): a "
                "Vision Transformer step by step, from pixels to its answer.")
    st.page_link(PAGES / "0_vit_explainer.py", label="Start the guided tour",
                 icon=":material/school:", query_params={"tour": "1"})

image = state.current_image()
if image is not None:
    with picture:
        title = state.image_title(state.selection().image_choice)
        ui.show_figure(image_figure(image, f"{title} ({image.width}x{image.height})",
                                    height=320), key="home_image")
    middle, right = st.columns(2)
    for column, model in ((middle, state.current_vit()), (right, state.current_cnn())):
        if model is None:
            continue
        with column, ui.friendly_errors():
            st.subheader(model.label)
            ui.text_table(model_card(model, image))
            if model.head is not None:
                head = state.session_head(model)
                top = pipeline.predict(model, image, topk=5, head=head)
                ui.show_figure(prediction_bars([p.label for p in top],
                                               [p.probability for p in top],
                                               f"Top-5 ({head.prediction_description})"),
                               key=f"home_pred_{model.spec.id}")
                ui.unknown_picture_note(model, image, head)
            if model.head is not None and model.head.kind == "knn":
                with st.expander("Teach the k-NN a new class with this image"):
                    st.caption("Adds this image's [CLS] feature to YOUR session's memory bank "
                               "only; other users never see it.")
                    label = st.text_input("Class label", key="knn_new_label", max_chars=40)
                    added = st.session_state.pop("knn_added", None)
                    if added is not None:  # said after the rerun below, so it stays on screen
                        st.success(f"Added one example of “{literal.text(added)}”.")
                    if st.button("Add to my memory bank", key="knn_add"):
                        state.add_knn_example(model, image, label)
                        st.session_state["knn_added"] = label.strip()
                        st.rerun()
