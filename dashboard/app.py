"""ViT Lens: the Streamlit entry script (sidebar shared by every page, navigation)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `streamlit run dashboard/app.py` from anywhere
    sys.path.insert(0, str(ROOT))

import xai_core  # noqa: E402,F401,I001  (before torch: it sets the threads' wait policy)
import streamlit as st  # noqa: E402
import torch  # noqa: E402

from dashboard import charts, classroom, links, readiness, replica, state, ui, visitor_share  # noqa: E402
from dashboard.page_list import PAGES, existing_pages  # noqa: E402
from xai_core.infra.faults import Cancelled, ModelOutOfMemory  # noqa: E402
from xai_core.images import (COLLAGE_ID, IMAGE_SUFFIXES, SAMPLES, ImageError,  # noqa: E402
                             describe_fit, load_upload, shared_image)
from xai_core.models import (DEFAULT_CNN, DEFAULT_VIT, MODEL_SPECS, availability,  # noqa: E402
                             specs_of_family)



def _model_label(model_id: str) -> str:
    spec = MODEL_SPECS[model_id]
    mark = "" if availability(model_id).available else "  (unavailable offline)"
    return f"{spec.display_name}{mark}"


def _model_picker(family: str, key: str, label: str, default: str) -> None:
    ids = [spec.id for spec in specs_of_family(family)]
    chosen = links.choice(st.selectbox, label, ids, key=key, default=default,
                          format_func=_model_label, what=f"{family.upper()} model")
    random_key = f"{key.split('_')[0]}_random"
    if not MODEL_SPECS[chosen].is_bundled:
        links.flag(st.checkbox, "Random weights (shapes only)", key=random_key,
                   help="Explore the token layout and code path of a model whose weights "
                        "cannot be downloaded here. Every result is labelled as untrained.")
    else:
        st.session_state[random_key] = False


def _image_picker() -> None:
    choices = list(SAMPLES) + [COLLAGE_ID, state.UPLOAD_CHOICE]
    links.choice(st.selectbox, "Image", choices, key="image_choice", default=state.DEFAULT_IMAGE,
                 format_func=state.image_title)
    if st.session_state.get("image_choice") == state.UPLOAD_CHOICE:
        uploaded = st.file_uploader("Your image (PNG, JPEG, WEBP, GIF, BMP, TIFF)",
                                    type=[suffix[1:] for suffix in IMAGE_SUFFIXES],
                                    key="uploader")
        if uploaded is not None:
            try:
                st.session_state["upload_image"] = shared_image(load_upload(uploaded.getvalue()))
                st.session_state.pop(state.UPLOAD_ERROR, None)
            except ImageError as error:  # said in the main area, where the learner looks
                st.session_state["upload_image"] = None
                st.session_state[state.UPLOAD_ERROR] = str(error)
        else:
            st.session_state.pop(state.UPLOAD_ERROR, None)
        upload = st.session_state.get("upload_image")
        if upload is not None:
            spec = MODEL_SPECS[state.selection().vit_id]
            st.caption(f"{spec.display_name}: "
                       + describe_fit(upload.size, spec.input_size, spec.crop_pct))


def _device_info() -> str:
    if torch.cuda.is_available():
        return f"GPU: {torch.cuda.get_device_name(0)}"
    threads = torch.get_num_threads()
    return f"CPU ({threads} thread{'' if threads == 1 else 's'} per op)"


def sidebar(charts_follow: bool):
    with st.sidebar:
        st.markdown("### ViT Lens")
        _model_picker("vit", "vit_model", "Vision Transformer", DEFAULT_VIT)
        _model_picker("cnn", "cnn_model", "CNN (for Grad-CAM)", DEFAULT_CNN)
        _image_picker()
        links.flag(st.toggle, "Presentation mode", key="presentation",
                   help="Larger text and figure fonts for projecting in a lecture hall.")
        st.caption(_device_info())
        ui.apply_page_css()
        replica.track_session()
        if charts_follow:
            charts.preload()
        return st.empty()  # for the disk-cache notice, filled once the page has run


def _sidebar_start(page: str) -> None:
    """A lecture link to the ViT Explainer in presentation mode (`?presentation=true`, as
    the tour's projector links are) starts with the sidebar collapsed: on a 1280x720
    projector it took a quarter of the width, and the parts the tour points at had to
    stack taller than the screen. Decided on the session's first run only: what the
    learner does with the sidebar afterwards stays theirs."""
    if st.session_state.get(SIDEBAR_STARTED):
        return
    st.session_state[SIDEBAR_STARTED] = True
    if page == EXPLAINER_PATH and links.is_true(st.query_params.get("presentation")):
        st.set_page_config(initial_sidebar_state="collapsed")


SIDEBAR_STARTED = "sidebar_started"
EXPLAINER_PATH = "vit_explainer"  # st.Page's URL path for pages/0_vit_explainer.py


def main() -> None:
    # a local icon: a ":material/...:" favicon is fetched from fonts.gstatic.com
    st.set_page_config(page_title="ViT Lens", page_icon=str(ROOT / "dashboard" / "favicon.png"),
                       layout="wide")
    pages = [st.Page(PAGES / name, title=title, icon=icon, default=(name == "home.py"))
             for name, title, icon in existing_pages()]
    navigation = st.navigation(pages)
    _sidebar_start(navigation.url_path)
    links.start_run()
    classroom.start_run()
    cache_spot = sidebar(charts_follow=navigation.url_path != EXPLAINER_PATH)
    classroom.sidebar()
    ui.cache_notice(cache_spot)
    replica.restart_notice()
    classroom.top(navigation.url_path)
    try:
        navigation.run()
    except (ModelOutOfMemory, Cancelled) as fault:  # a part of a page without friendly_errors
        st.error(str(fault))
    finally:  # also after st.stop(): the URL must not keep another page's choices
        links.prune()
        classroom.after_run(navigation.url_path)
        visitor_share.settle_run()  # this run's CPU time, against the visitor's allowance
        readiness.page_finished(navigation.url_path)  # warm once every page has run here
    ui.cache_notice(cache_spot)  # a write that failed during this run


main()
