"""Page 0: the ViT Explainer - one forward pass, linked, animated, with a guided tour."""

import streamlit as st

from dashboard import state, ui
from dashboard.explainer_component import explainer_component
from dashboard.explainer_tour import TOUR, resolve_steps, step_from_query
from dashboard.page_list import PAGES, PAGE_LIST
from xai_core import explainer, pipeline

KEY = "vit_explainer"

st.title("ViT Explainer")
st.markdown(
    "Follow your image through a Vision Transformer: pixels, patches, tokens, the blocks, "
    "the feature and the answer, all in one picture. **Hover** a patch to see where it "
    "looks, a block to see what [CLS] gathers there, a head to see its own map; **click** "
    "a stage or a block to open it; press **▶** to play the blocks. New here? Start the "
    f"guided tour: {len(TOUR)} steps, with ← → keys for a presenter's clicker.")

image, model = ui.vit_page_inputs()
head = state.session_head(model)
if head is None:
    st.warning(f"{model.label} has neither a classifier nor a k-NN memory bank, so there is "
               "no prediction to follow.")
    st.stop()


def _view() -> dict:
    return dict((st.session_state.get(KEY) or {}).get("view") or {})


def _sync_tour_link() -> None:
    """Keep `?tour=N` equal to the step on screen, so the address is a deep link."""
    step = _view().get("tour")
    if step:
        st.query_params["tour"] = str(step)
    elif "tour" in st.query_params:
        del st.query_params["tour"]


def _navigate() -> None:
    target = (st.session_state.get(KEY) or {}).get("navigate")
    if target in {name for name, _, _ in PAGE_LIST}:
        st.session_state["explainer_goto"] = target


@st.fragment
def explainer_view(model, image, head) -> None:
    overview = explainer.overview_payload(model, image, head)
    steps = resolve_steps(overview)
    step, problem = step_from_query(st.query_params.get("tour"))
    if problem:
        st.warning(problem)
    view = _view()
    last = len(overview["blocks"]) - 1
    block = view.get("block")
    if not isinstance(block, int) or not 0 <= block <= last:
        block = steps[step - 1]["block"] if step else last
    data = {
        "signature": "|".join([model.spec.id, str(model.random_weights),
                               pipeline.prepare(model, image).sha256[:16],
                               head.fingerprint()]),
        "presentation": state.selection().presentation,
        "overview": explainer.jsonable(overview),
        "detail": explainer.jsonable(explainer.block_payload(model, image, block)),
        "tour": {"steps": steps, "active": step},
        "initial": {"block": block, "stage": "blocks"},
    }
    explainer_component(data, key=KEY, on_view_change=_sync_tour_link,
                        on_navigate_change=_navigate)
    goto = st.session_state.pop("explainer_goto", None)
    if goto:
        st.switch_page(PAGES / goto)


with ui.friendly_errors():
    explainer_view(model, image, head)

st.caption(
    "How to read it: colours on the image are scaled to each map's largest patch value "
    "(Inferno: dark = low, yellow = high). Attention and maps travel to your browser as "
    "8-bit numbers (each within 1/510 of its row's largest value); queries and keys as "
    "signed 8-bit. Rollout follows Chefer's row-normalised convention; DAAM explains the "
    "top prediction.")
