"""Page 0: the ViT Explainer - one forward pass, linked, animated, with a guided tour."""

import streamlit as st

from dashboard import ui
from dashboard.explainer.component import explainer_view, lesson_export
from dashboard.explainer.tour import TOUR
from xai_core.lessons.explainer import QUANTISATION

st.title("ViT Explainer")
st.markdown(
    "Follow a picture through a Vision Transformer: pixels, patches, tokens, the blocks, "
    "the summary and the answer, all in one view. **Hover** a patch of the picture to see "
    "where it looks; **click** a stage or a block to open it; press **▶** to play the "
    f"blocks one after another. New here? Start the guided tour: {len(TOUR)} steps, with "
    "← → keys for a presenter's clicker. Pick your own photo in the sidebar (Image → Your "
    "upload).")

image, model = ui.vit_page_inputs()
head = ui.scoring_head(model, "no prediction to follow")
if head is None:
    st.stop()

ui.unknown_picture_note(model, image, head)
explainer_view(model, image, head)
lesson_export(model, image, head)  # the same view as one offline HTML file

st.caption(
    "How to read it: colours on the image are scaled to each map's largest patch value "
    "(Inferno: dark = low, yellow = high). Rollout follows Chefer's row-normalised "
    "convention; DAAM explains the top prediction.")
with st.expander("How was this computed?"):
    # storage detail a beginner does not need to read the picture: asked for, not shown
    st.markdown("The model runs once on the server. Before its numbers travel to your "
                "browser they are stored in fewer bits, with the largest error each format "
                "allows: " + "; ".join(QUANTISATION.values()) + ".")
