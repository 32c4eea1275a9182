"""Caching glue between Streamlit sessions and `xai_core`.

Models and captures live in `xai_core`'s process-wide, lock-guarded, bounded
caches (shared by every session: they are keyed by content, so sharing leaks
nothing). What belongs to one person - their upload, their k-NN examples,
their choices - lives in `st.session_state` only.
"""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st
from PIL import Image

from dashboard import literal
from xai_core import pipeline
from xai_core.capture import CaptureError
from xai_core.infra.faults import Cancelled, ModelOutOfMemory
from xai_core.images import (COLLAGE_ID, COLLAGE_TITLE, DEFAULT_SAMPLE, SAMPLES, ImageError,
                             load_sample, shared_image)
from xai_core.models import (DEFAULT_CNN, DEFAULT_VIT, ModelUnavailableError, availability,
                             get_model, get_spec, loaded_model)

UPLOAD_CHOICE = "upload"
DEFAULT_IMAGE = DEFAULT_SAMPLE
# Everything a page can fail on because of user input, an unavailable model, or a fault of
# the machine (out of memory) or a run that was stopped - each with a sentence to show.
USER_ERRORS = (ImageError, ModelUnavailableError, pipeline.TargetError, CaptureError, ValueError,
               ModelOutOfMemory, Cancelled)


@dataclass(frozen=True)
class Selection:
    """What the sidebar chose, read by every page."""

    vit_id: str
    vit_random: bool
    cnn_id: str
    cnn_random: bool
    image_choice: str
    presentation: bool


def image_title(choice: str) -> str:
    if choice == COLLAGE_ID:
        return COLLAGE_TITLE
    if choice == UPLOAD_CHOICE:
        return "Your upload"
    return SAMPLES[choice].title


def selection() -> Selection:
    state = st.session_state
    return Selection(
        vit_id=state.get("vit_model", DEFAULT_VIT), vit_random=state.get("vit_random", False),
        cnn_id=state.get("cnn_model", DEFAULT_CNN), cnn_random=state.get("cnn_random", False),
        image_choice=state.get("image_choice", DEFAULT_IMAGE),
        presentation=state.get("presentation", False))


@st.cache_resource(max_entries=16, show_spinner=False)
def _cached_sample(sample_id: str) -> Image.Image:
    return shared_image(load_sample(sample_id))  # one object for every session: read-only


UPLOAD_ERROR = "upload_error"  # why the last upload could not be used (the sidebar sets it)


def current_image() -> Image.Image | None:
    """The chosen image; None (with a message shown) when an upload is missing or bad. A
    bad upload is said here, in the page's main area: in the sidebar, under the uploader,
    it was below the fold while the page asked for an upload."""
    choice = selection().image_choice
    if choice != UPLOAD_CHOICE:
        return _cached_sample(choice)
    upload = st.session_state.get("upload_image")
    problem = st.session_state.get(UPLOAD_ERROR)
    if upload is None and problem:
        st.error(f"Your file could not be used: {literal.text(problem)} Pick another file in "
                 "the sidebar (Image → Your upload), or a picture from the gallery.")
    elif upload is None:
        st.info("Upload an image in the sidebar, or pick one from the gallery. (A link "
                "cannot carry an uploaded picture: one made from an upload opens here.)")
    return upload


def load_model_or_explain(model_id: str, random_weights: bool = False):
    """The loaded model, or None after telling the user in words why it cannot load."""
    # loaded already (every run but the process's first): no check, no spinner (a spinner
    # starts a timer thread: two per run of every page, 100 at once when a class follows)
    if loaded_model(model_id, random_weights) is None and not _load_or_explain(
            model_id, random_weights):
        return None
    model = get_model(model_id, random_weights=random_weights)  # loaded: a look-up
    if model.random_weights:
        st.error(f"{model.label}: this model has untrained random weights (seed {model.seed}, "
                 "derived from the model id, so every server and every run builds the same "
                 "one). Its maps show the token layout and the code path only - they explain "
                 "nothing.")
    return model


def _load_or_explain(model_id: str, random_weights: bool) -> bool:
    """Load the model under a spinner; False after saying in words why it cannot load."""
    spec = get_spec(model_id)
    if not random_weights:
        status = availability(model_id)
        if not status.available:
            hint = (" Tick *random weights* in the sidebar to explore its token layout with "
                    "untrained weights." if spec.family != "text" else "")
            st.warning(f"**{spec.display_name} is unavailable.** {status.reason}{hint}")
            return False
    try:
        with st.spinner(f"Loading {spec.display_name}..."):
            get_model(model_id, random_weights=random_weights)
    except (ModelUnavailableError, ModelOutOfMemory) as error:
        st.warning(f"**{spec.display_name} is unavailable.** {error}")
        return False
    return True


def current_vit():
    chosen = selection()
    return load_model_or_explain(chosen.vit_id, chosen.vit_random)


def current_cnn():
    chosen = selection()
    return load_model_or_explain(chosen.cnn_id, chosen.cnn_random)


def session_head(model):
    """The head for this session: the shared one, or this session's own k-NN bank
    with the examples the user added (never visible to other sessions)."""
    banks = st.session_state.setdefault("knn_banks", {})
    return banks.get((model.spec.id, model.random_weights), model.head)


def add_knn_example(model, image: Image.Image, label: str) -> None:
    from xai_core.models.heads import KnnHead
    from xai_core.images import image_sha256
    from xai_core.models.knn import embed_images

    features = embed_images(model, [pipeline.prepare(model, image).model_image])
    bank = session_head(model).bank.with_examples(features, label, f"upload:{image_sha256(image)[:8]}")
    st.session_state["knn_banks"][(model.spec.id, model.random_weights)] = KnnHead(bank)
