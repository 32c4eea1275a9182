"""Clickable figures: invisible markers that carry an index in customdata (a click on a
heatmap returns nothing in Streamlit), and reading the click back from the chart state.
Turning a click into widget values on the next run is Streamlit's side: `dashboard/clicks.py`."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go


def patch_click_targets(grid: tuple[int, int], patch_size: tuple[int, int],
                        name: str = "patch") -> go.Scatter:
    """Invisible markers at patch centres: clicking a heatmap returns nothing in
    Streamlit (#8760), clicking these returns the patch index in customdata."""
    rows, cols = grid
    ph, pw = patch_size
    r, c = np.divmod(np.arange(rows * cols), cols)
    return go.Scatter(
        x=c * pw + pw / 2, y=r * ph + ph / 2, mode="markers", name=name,
        marker=dict(size=max(4, min(ph, pw)), opacity=0.01, symbol="square"),
        # a list, not an array: Plotly sends arrays as typed arrays, and the browser then
        # returns each point's customdata as {"0": .., "1": ..} instead of a list
        customdata=np.stack([np.arange(rows * cols), r, c], axis=1).tolist(),
        hovertemplate="patch %{customdata[0]} (row %{customdata[1]}, col %{customdata[2]})"
                      "<extra></extra>", showlegend=False)


def click_customdata(chart_state) -> tuple | None:
    """The customdata of a chart's first selected point (the chart state of
    dashboard/charts.py, shaped like st.plotly_chart's with on_select) as a tuple, or None. The browser sends numpy-backed customdata as
    {"0": .., "1": ..} objects and plain lists as lists: accept both."""
    points = ((chart_state or {}).get("selection") or {}).get("points") or []
    data = points[0].get("customdata") if points else None
    if data is None:
        return None
    if isinstance(data, dict):
        return tuple(data[key] for key in sorted(data, key=int))
    return tuple(data) if isinstance(data, (list, tuple)) else (data,)


def clicked_index(chart_state) -> int | None:
    """The first customdata value of a chart's selected point, or None."""
    data = click_customdata(chart_state)
    return None if not data else int(data[0])
