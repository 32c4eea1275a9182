"""Home: the chosen image, the model's card and what it predicts."""

import streamlit as st

from dashboard import state, ui
from xai_core import pipeline
from xai_core.figures.curves import prediction_bars
from xai_core.figures.overlays import image_figure
from xai_core.model_card import model_card

st.title("ViT Lens")
st.markdown(
    "Look inside a Vision Transformer: how an image becomes tokens, where each attention head "
    "looks, and how the explanation methods people cite turn those numbers into maps. "
    "Every map here is computed from a real forward (and, when needed, backward) pass of the "
    "model shown below. Pick a model and an image in the sidebar, then walk through the pages.")

image = state.current_image()
if image is not None:
    left, middle, right = st.columns([1.1, 1, 1])
    with left:
        title = state.image_title(state.selection().image_choice)
        ui.show_figure(image_figure(image, f"{title} ({image.width}x{image.height})"),
                       key="home_image")
    for column, model in ((middle, state.current_vit()), (right, state.current_cnn())):
        if model is None:
            continue
        with column, ui.friendly_errors():
            st.subheader(model.label)
            st.table(model_card(model, image))
            if model.head is not None:
                head = state.session_head(model)
                top = pipeline.predict(model, image, topk=5, head=head)
                kind = ("k-NN over the sample-gallery memory bank" if head.kind == "knn"
                        else "ImageNet-1k classifier")
                ui.show_figure(prediction_bars([p.label for p in top],
                                               [p.probability for p in top],
                                               f"Top-5 ({kind})"),
                               key=f"home_pred_{model.spec.id}")
            if model.head is not None and model.head.kind == "knn":
                with st.expander("Teach the k-NN a new class with this image"):
                    st.caption("Adds this image's [CLS] feature to YOUR session's memory bank "
                               "only; other users never see it.")
                    label = st.text_input("Class label", key="knn_new_label", max_chars=40)
                    if st.button("Add to my memory bank", key="knn_add"):
                        state.add_knn_example(model, image, label)
                        st.success(f"Added one example of '{label.strip()}'.")
                        st.rerun()
