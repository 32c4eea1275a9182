"""The ViT Explainer's browser component (Streamlit components v2) and its Python glue.

HTML, CSS and JavaScript are plain files in dashboard/explainer/, passed inline to
`st.components.v2.component` (no build step, no library, no network request). The
component draws the overview, hover linking and animation in the browser; it talks to
Python only through its `view` state (the opened block and tour step: one rerun of the
fragment below) and its `navigate` trigger (the tour's "go deeper" button).
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from dashboard import state, ui
from dashboard.explainer_tour import TOUR, resolve_steps, step_from_query
from dashboard.page_list import PAGE_LIST, PAGES
from xai_core import explainer, pipeline

ASSETS = Path(__file__).resolve().parent / "explainer"
KEY = "vit_explainer"

_mount = st.components.v2.component(
    "vit_lens.explainer",
    html="",
    css=(ASSETS / "explainer.css").read_text(encoding="utf-8"),
    js=(ASSETS / "explainer.js").read_text(encoding="utf-8"),
)


def _component_value(name: str):
    return (st.session_state.get(KEY) or {}).get(name)


def _view() -> dict:
    """What the browser asked for: {"block": int, "tour": int} (anything else ignored)."""
    view = _component_value("view")
    if not isinstance(view, dict):
        return {}
    return {key: value for key, value in view.items()
            if key in ("block", "tour") and isinstance(value, int)}


def _sync_tour_link() -> None:
    """Keep `?tour=N` equal to the step on screen, so the address is a deep link."""
    step = _view().get("tour")
    if step and 1 <= step <= len(TOUR):
        st.query_params["tour"] = str(step)
    elif "tour" in st.query_params:
        del st.query_params["tour"]


def _navigate() -> None:
    target = _component_value("navigate")
    if target in {name for name, _, _ in PAGE_LIST}:
        st.session_state["explainer_goto"] = target


def component_data(model, image, head) -> dict:
    """Everything the component draws: the overview, the requested block's detail, the
    tour with the step of a `?tour=N` link, and the presentation flag."""
    overview = explainer.overview_payload(model, image, head)
    steps = resolve_steps(overview)
    step, problem = step_from_query(st.query_params.get("tour"))
    if problem:
        st.warning(problem)
    last = len(overview["blocks"]) - 1
    block = _view().get("block")
    if block is None or not 0 <= block <= last:
        block = steps[step - 1]["block"] if step else last
    return {
        "signature": "|".join([model.spec.id, str(model.random_weights),
                               pipeline.prepare(model, image).sha256[:16],
                               head.fingerprint()]),
        "presentation": state.selection().presentation,
        "overview": explainer.jsonable(overview),
        "detail": explainer.jsonable(explainer.block_payload(model, image, block)),
        "tour": {"steps": steps, "active": step},
        "initial": {"block": block, "stage": "blocks"},
    }


@st.fragment
def explainer_view(model, image, head) -> None:
    """The component in a fragment: opening a block or moving through the tour reruns
    only this, not the page."""
    with ui.friendly_errors():
        _mount(key=KEY, data=component_data(model, image, head),
               on_view_change=_sync_tour_link, on_navigate_change=_navigate)
    goto = st.session_state.pop("explainer_goto", None)
    if goto:
        st.switch_page(PAGES / goto)
