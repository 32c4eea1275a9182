"""The ViT Explainer's browser component (Streamlit components v2).

HTML, CSS and JavaScript are plain files in dashboard/explainer/, passed inline to
`st.components.v2.component` (no build step, no library, no network request). The
component draws the overview, hover linking and animation in the browser; it talks to
Python only through its `view` state (the opened block and tour step: one rerun of the
page's fragment) and its `navigate` trigger (the tour's "go deeper" button).
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

ASSETS = Path(__file__).resolve().parent / "explainer"

_mount = st.components.v2.component(
    "vit_lens.explainer",
    html="",
    css=(ASSETS / "explainer.css").read_text(encoding="utf-8"),
    js=(ASSETS / "explainer.js").read_text(encoding="utf-8"),
)


def explainer_component(data: dict, key: str, on_view_change, on_navigate_change):
    """Mount the component; returns its result (`.view`, `.navigate`)."""
    return _mount(key=key, data=data, on_view_change=on_view_change,
                  on_navigate_change=on_navigate_change)
