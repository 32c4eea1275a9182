"""ViT Lens: the Streamlit entry script (sidebar shared by every page, navigation)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `streamlit run dashboard/app.py` from anywhere
    sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402
import torch  # noqa: E402

from dashboard import replica, state, ui  # noqa: E402
from dashboard.page_list import PAGES, existing_pages  # noqa: E402
from xai_core.faults import Cancelled, ModelOutOfMemory  # noqa: E402
from xai_core.images import COLLAGE_ID, SAMPLES, ImageError, load_upload  # noqa: E402
from xai_core.models import MODEL_SPECS, availability, specs_of_family  # noqa: E402



def _model_label(model_id: str) -> str:
    spec = MODEL_SPECS[model_id]
    mark = "" if availability(model_id).available else "  (unavailable offline)"
    return f"{spec.display_name}{mark}"


def _model_picker(family: str, key: str, label: str) -> None:
    ids = [spec.id for spec in specs_of_family(family)]
    chosen = st.selectbox(label, ids, key=key, format_func=_model_label, bind="query-params")
    if not MODEL_SPECS[chosen].is_bundled:
        st.checkbox("Random weights (shapes only)", key=f"{key.split('_')[0]}_random",
                    help="Explore the token layout and code path of a model whose weights "
                         "cannot be downloaded here. Every result is labelled as untrained.")
    else:
        st.session_state[f"{key.split('_')[0]}_random"] = False


def _image_picker() -> None:
    choices = list(SAMPLES) + [COLLAGE_ID, state.UPLOAD_CHOICE]
    st.selectbox("Image", choices, key="image_choice", format_func=state.image_title,
                 bind="query-params")
    if st.session_state.get("image_choice") == state.UPLOAD_CHOICE:
        uploaded = st.file_uploader("Your image (PNG, JPEG, WEBP, GIF, BMP, TIFF)",
                                    type=["png", "jpg", "jpeg", "webp", "gif", "bmp", "tif",
                                          "tiff"], key="uploader")
        if uploaded is not None:
            try:
                st.session_state["upload_image"] = load_upload(uploaded.getvalue())
            except ImageError as error:
                st.session_state["upload_image"] = None
                st.error(str(error))


def _device_info() -> str:
    if torch.cuda.is_available():
        return f"GPU: {torch.cuda.get_device_name(0)}"
    return f"CPU ({torch.get_num_threads()} threads)"


def sidebar():
    with st.sidebar:
        st.markdown("### ViT Lens")
        _model_picker("vit", "vit_model", "Vision Transformer")
        _model_picker("cnn", "cnn_model", "CNN (for Grad-CAM)")
        _image_picker()
        st.toggle("Presentation mode", key="presentation", bind="query-params",
                  help="Larger text and figure fonts for projecting in a lecture hall.")
        st.caption(_device_info())
        replica.track_session()
        return st.empty()  # for the disk-cache notice, filled once the page has run


def main() -> None:
    # a local icon: a ":material/...:" favicon is fetched from fonts.gstatic.com
    st.set_page_config(page_title="ViT Lens", page_icon=str(ROOT / "dashboard" / "favicon.png"),
                       layout="wide")
    pages = [st.Page(PAGES / name, title=title, icon=icon, default=(name == "home.py"))
             for name, title, icon in existing_pages()]
    navigation = st.navigation(pages)
    cache_spot = sidebar()
    ui.cache_notice(cache_spot)
    ui.apply_presentation_css()
    replica.restart_notice()
    try:
        navigation.run()
    except (ModelOutOfMemory, Cancelled) as fault:  # a part of a page without friendly_errors
        st.error(str(fault))
    ui.cache_notice(cache_spot)  # a write that failed during this run


main()
