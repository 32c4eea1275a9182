"""Plotly figures for the DAAM flow page (no streamlit here).

Maps are patch-resolution heatmaps over the image (`figures.grid_heatmap`), so an
animation over 12 blocks stays small. The flow animation swaps only the heatmap
traces (`go.Frame(traces=[...])`): the image traces are sent once and stay.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots
from PIL import Image

from .figures import grid_heatmap, normalise

FRAME_MS = 700


def _image_trace(image: Image.Image) -> go.Image:
    return go.Image(z=np.asarray(image.convert("RGB")), hoverinfo="skip")


def _image_axes(figure: go.Figure, image: Image.Image, count: int) -> None:
    for i in range(1, count + 1):
        suffix = "" if i == 1 else str(i)
        figure.update_layout({
            f"xaxis{suffix}": dict(visible=False, range=[0, image.width]),
            f"yaxis{suffix}": dict(visible=False, range=[image.height, 0],
                                   scaleanchor=f"x{suffix}")})


def flow_figure(image: Image.Image, L: np.ndarray, D: np.ndarray, patch_size: tuple[int, int],
                labels: list[str], opacity: float = 0.6, height: int = 480,
                start: int | None = None) -> go.Figure:
    """Animated DAAM flow: per-block map L_b (left) and accumulated D_b (right).

    `L` and `D` are (B, rows, cols) already scaled to [0, 1] for display. One
    frame per block updates only the two heatmap traces (indices 1 and 3); a play
    button and a slider scrub the frames in the browser, no rerun.
    """
    count = len(L)
    start = count - 1 if start is None else start
    figure = make_subplots(rows=1, cols=2, horizontal_spacing=0.04,
                           subplot_titles=("L_b: what block b adds",
                                           "D_b: accumulated up to block b"))
    hover = "row %{y}, col %{x}<br>display value %{z:.3f}<extra></extra>"
    figure.add_trace(_image_trace(image), row=1, col=1)
    figure.add_trace(grid_heatmap(L[start], patch_size, opacity, 0.0, 1.0, name="L_b",
                                  hovertemplate=hover), row=1, col=1)
    figure.add_trace(_image_trace(image), row=1, col=2)
    figure.add_trace(grid_heatmap(D[start], patch_size, opacity, 0.0, 1.0, name="D_b",
                                  hovertemplate=hover), row=1, col=2)
    figure.data[1].showscale = False
    names = [f"{i + 1}" for i in range(count)]
    figure.frames = [go.Frame(name=name, traces=[1, 3], data=[
        go.Heatmap(z=np.asarray(L[i], dtype=float)), go.Heatmap(z=np.asarray(D[i], dtype=float))],
        layout=dict(title_text=labels[i]))
        for i, name in enumerate(names)]
    still = dict(frame=dict(duration=0, redraw=True), mode="immediate",
                 transition=dict(duration=0))
    figure.update_layout(
        height=height, title=dict(text=labels[start], x=0.5),
        margin=dict(l=0, r=0, t=70, b=10),
        updatemenus=[dict(type="buttons", direction="left", x=0.0, y=-0.02, xanchor="left",
                          yanchor="top", showactive=False, buttons=[
                              dict(label="▶ Play", method="animate",
                                   args=[names, dict(frame=dict(duration=FRAME_MS, redraw=True),
                                                     mode="immediate", fromcurrent=False,
                                                     transition=dict(duration=0))]),
                              dict(label="❚❚ Pause", method="animate",
                                   args=[[None], dict(frame=dict(duration=0, redraw=False),
                                                      mode="immediate")])])],
        sliders=[dict(active=start, x=0.16, len=0.84, y=-0.02, yanchor="top",
                      currentvalue=dict(prefix="block "),
                      steps=[dict(label=name, method="animate", args=[[name], still])
                             for name in names])])
    _image_axes(figure, image, 2)
    return figure


def contributions_figure(L: np.ndarray, labels: list[str], height: int = 260) -> go.Figure:
    """How much each block adds: the sum of raw L_b over the grid (share of D_B)."""
    totals = np.asarray(L, dtype=float).reshape(len(L), -1).sum(1)
    share = totals / totals.sum() if totals.sum() > 0 else np.zeros_like(totals)
    short = [label.split(" (")[0] for label in labels]
    figure = go.Figure(go.Bar(x=short, y=share, text=[f"{s:.0%}" for s in share],
                              textposition="outside",
                              hovertemplate="%{x}<br>adds %{y:.1%} of the final map's total"
                                            "<extra></extra>"))
    figure.update_layout(height=height, margin=dict(l=10, r=10, t=40, b=10),
                         title="Share of the final map D_B added by each block (raw sums)",
                         yaxis=dict(tickformat=".0%", rangemode="tozero"))
    return figure


def map_row_figure(image: Image.Image, maps: list[np.ndarray], titles: list[str],
                   patch_size: tuple[int, int], opacity: float = 0.6, height: int = 260,
                   signed: bool = False) -> go.Figure:
    """A row of maps over the same image, each min-max scaled for display; `signed`:
    each divided by its largest |value| on a blue-white-red scale centred on 0."""
    figure = make_subplots(rows=1, cols=len(maps), subplot_titles=titles,
                           horizontal_spacing=0.01)
    for i, values in enumerate(maps, start=1):
        figure.add_trace(_image_trace(image), row=1, col=i)
        if signed:
            top = float(np.abs(values).max()) or 1.0
            heatmap = grid_heatmap(np.asarray(values) / top, patch_size, opacity, -1.0, 1.0,
                                   colorscale="RdBu_r", hovertemplate=(
                                       "row %{y}, col %{x}<br>%{z:.3f} of the largest |value|"
                                       "<extra></extra>"))
        else:
            heatmap = grid_heatmap(normalise(values), patch_size, opacity, 0.0, 1.0,
                                   hovertemplate="row %{y}, col %{x}<br>%{z:.3f}<extra></extra>")
        heatmap.showscale = i == len(maps)
        figure.add_trace(heatmap, row=1, col=i)
    figure.update_layout(height=height, margin=dict(l=0, r=0, t=50, b=0))
    figure.update_annotations(font_size=11)
    _image_axes(figure, image, len(maps))
    return figure


def weights_figure(weights: np.ndarray, height: int = 220) -> go.Figure:
    """The eq. 13 weight of every output dimension (what the backward starts from)."""
    figure = go.Figure(go.Bar(y=np.asarray(weights, dtype=float),
                              hovertemplate="dimension %{x}<br>w = %{y:.3f}<extra></extra>"))
    figure.update_layout(height=height, margin=dict(l=10, r=10, t=40, b=10), bargap=0,
                         title="Dimension-wise importance weights w (eq. 13)",
                         xaxis_title="output dimension d")
    return figure
