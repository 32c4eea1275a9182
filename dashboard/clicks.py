"""Clicks on Plotly charts as widget input.

A chart drawn with `on_select="rerun"` and a key keeps its last selection in
`st.session_state[key]`. Reading it at the top of the next run, before the
widgets it drives are drawn, lets a click set those widgets (a widget's state
cannot change after it is drawn in the same run). Each click is applied once,
so the widgets stay free to change afterwards while the selection lingers; once the
selection is gone (the chart was left out of a run), the same point counts again.
"""

from __future__ import annotations

from typing import Callable

import streamlit as st

from xai_core.figures.click_targets import click_customdata


def apply_chart_click(chart_key: str, updates: Callable[[tuple], dict]) -> None:
    """If the chart's selected point is new, write `updates(point customdata)` into
    `st.session_state`. Points without customdata are ignored."""
    data = click_customdata(st.session_state.get(chart_key))
    if data is None:  # no selection (or the chart was not drawn): the same point may count again
        st.session_state.pop(chart_key + "_applied", None)
        return
    if st.session_state.get(chart_key + "_applied") != data:
        st.session_state[chart_key + "_applied"] = data
        st.session_state.update(updates(data))
