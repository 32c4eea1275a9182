"""Plotly figure builders shared by every page (no streamlit here).

Maps are sent at patch resolution and drawn over the image with `x0/dx`, so a
figure stays small (see STREAMLIT_NOTES.md) and every cell is one token.
"""

from __future__ import annotations

import base64
import io

import numpy as np
import plotly.graph_objects as go
from plotly.colors import get_colorscale, hex_to_rgb
from PIL import Image

# Inferno with rgb() stops: the plotly.js inside Streamlit misreads Inferno's first stop
# "#000004" (the lowest values showed pink instead of black), so spell the colours out.
HEATMAP_SCALE = [[stop, "rgb({}, {}, {})".format(*hex_to_rgb(colour))]
                 for stop, colour in get_colorscale("Inferno")]


def image_figure(image: Image.Image, title: str | None = None, height: int = 420) -> go.Figure:
    """An RGB image in pixel coordinates (y down), ready for overlays."""
    figure = go.Figure(go.Image(z=np.asarray(image.convert("RGB")), hoverinfo="skip"))
    figure.update_layout(title=title, height=height, margin=dict(l=0, r=0, t=40 if title else 0,
                                                                  b=0))
    figure.update_xaxes(visible=False, range=[0, image.width])
    figure.update_yaxes(visible=False, range=[image.height, 0], scaleanchor="x")
    return figure


def image_data_uri(image: Image.Image) -> str:
    """A small JPEG data URI: cheaper to send than a pixel array, for repeated images."""
    buffer = io.BytesIO()
    image.convert("RGB").save(buffer, format="JPEG", quality=85)
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode()


def grid_heatmap(values: np.ndarray, patch_size: tuple[int, int], opacity: float = 0.55,
                 zmin: float | None = None, zmax: float | None = None,
                 colorscale: str | list = HEATMAP_SCALE, name: str = "map",
                 hovertemplate: str | None = None) -> go.Heatmap:
    """A (rows, cols) patch-level map placed over the image's pixel coordinates."""
    ph, pw = patch_size
    return go.Heatmap(
        z=np.asarray(values, dtype=float), x0=pw / 2, dx=pw, y0=ph / 2, dy=ph,
        opacity=opacity, colorscale=colorscale, zmin=zmin, zmax=zmax, name=name,
        hovertemplate=hovertemplate or "row %{y}, col %{x}<br>value %{z:.4g}<extra></extra>",
        colorbar=dict(thickness=12))


def overlay_figure(image: Image.Image, values: np.ndarray, patch_size: tuple[int, int],
                   title: str | None = None, opacity: float = 0.55, height: int = 420,
                   zmin: float | None = None, zmax: float | None = None) -> go.Figure:
    figure = image_figure(image, title, height)
    figure.add_trace(grid_heatmap(values, patch_size, opacity, zmin, zmax))
    return figure


def patch_grid_lines(figure: go.Figure, grid: tuple[int, int], patch_size: tuple[int, int],
                     color: str = "rgba(255,255,255,0.6)") -> go.Figure:
    """Draw the patch grid on an image figure (one shape path, cheap to send)."""
    rows, cols = grid
    ph, pw = patch_size
    height, width = rows * ph, cols * pw
    path = "".join(f"M{c * pw},0 L{c * pw},{height} " for c in range(cols + 1))
    path += "".join(f"M0,{r * ph} L{width},{r * ph} " for r in range(rows + 1))
    figure.add_shape(type="path", path=path, line=dict(color=color, width=1))
    return figure


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
    """The customdata of a chart's first selected point (st.plotly_chart with
    on_select) as a tuple, or None. The browser sends numpy-backed customdata as
    {"0": .., "1": ..} objects and plain lists as lists: accept both."""
    points = ((chart_state or {}).get("selection") or {}).get("points") or []
    data = points[0].get("customdata") if points else None
    if data is None:
        return None
    if isinstance(data, dict):
        return tuple(data[key] for key in sorted(data, key=int))
    return tuple(data) if isinstance(data, (list, tuple)) else (data,)


def prediction_bars(labels: list[str], probabilities: list[float], title: str,
                    height: int = 300) -> go.Figure:
    figure = go.Figure(go.Bar(x=probabilities[::-1], y=[l[:40] for l in labels[::-1]],
                              orientation="h", text=[f"{p:.1%}" for p in probabilities[::-1]],
                              textposition="auto"))
    figure.update_layout(title=title, height=height, margin=dict(l=10, r=10, t=40, b=10),
                         xaxis=dict(range=[0, 1], tickformat=".0%"))
    return figure


def normalise(values: np.ndarray) -> np.ndarray:
    """Min-max to [0, 1] for display only; a constant map becomes zeros."""
    values = np.asarray(values, dtype=np.float64)
    span = values.max() - values.min()
    return np.zeros_like(values) if span <= 0 else (values - values.min()) / span
