"""Plotly figures for the Grad-CAM page (no streamlit here).

Maps go to the browser at feature-map or patch resolution, or area-averaged to
at most `DISPLAY_SIDE` cells a side for the full-resolution CAM-family maps, and
the photo goes as a small JPEG, so the page stays light (STREAMLIT_NOTES.md:
send small grids, not 224x224 arrays).
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots
from PIL import Image

from .figures import HEATMAP_SCALE, grid_heatmap, image_data_uri, normalise
from .methods.vit_gradcam import (LOCATIONS, MULTI_HEAD, RELU_EMPTY, ZERO_GRADIENT,
                                  Cell, Taxonomy, Variant)

DISPLAY_SIDE = 56
DIVERGING = "RdBu_r"


def coarse(values: np.ndarray, side: int = DISPLAY_SIDE) -> tuple[np.ndarray, tuple[float, float]]:
    """Area-average an (H, W) map down to at most `side` cells a side (for sending only).
    Returns the small map and its cell size in pixels."""
    values = np.asarray(values, dtype=np.float32)
    height, width = values.shape
    fy, fx = max(1, int(np.ceil(height / side))), max(1, int(np.ceil(width / side)))
    rows, cols = height // fy, width // fx
    small = values[:rows * fy, :cols * fx].reshape(rows, fy, cols, fx).mean(axis=(1, 3))
    return small, (float(fy), float(fx))


def _symmetric(values: np.ndarray) -> float:
    bound = float(np.abs(values).max())
    return bound if bound > 0 else 1.0


def overlay(image: Image.Image, values: np.ndarray, cell_size: tuple[float, float], title: str,
            diverging: bool = False, zmin: float | None = None, zmax: float | None = None,
            height: int = 340, opacity: float = 0.55) -> go.Figure:
    """A feature-map (or patch) resolution map over the model input."""
    figure = go.Figure(go.Image(source=image_data_uri(image), hoverinfo="skip"))
    figure.update_layout(title=title, height=height, margin=dict(l=0, r=0, t=40, b=0))
    figure.update_xaxes(visible=False, range=[0, image.width])
    figure.update_yaxes(visible=False, range=[image.height, 0], scaleanchor="x")
    if diverging:
        bound = _symmetric(values)
        zmin, zmax = -bound, bound
    figure.add_trace(grid_heatmap(values, cell_size, opacity, zmin, zmax,
                                  colorscale=DIVERGING if diverging else HEATMAP_SCALE))
    return figure


def alpha_bars(alpha: np.ndarray, layer: str, height: int = 300) -> go.Figure:
    """The channel weights alpha_k in channel order, coloured by sign."""
    alpha = np.asarray(alpha, dtype=float)
    colours = np.where(alpha >= 0, "#d62728", "#1f77b4")
    figure = go.Figure(go.Bar(x=np.arange(alpha.size), y=alpha, marker_color=colours,
                              hovertemplate="channel %{x}<br>α = %{y:.3g}<extra></extra>"))
    positive = int((alpha > 0).sum())
    figure.update_layout(
        title=f"α_k for the {alpha.size} channels of {layer} ({positive} positive)",
        height=height, margin=dict(l=10, r=10, t=40, b=10), bargap=0,
        xaxis_title="channel k", yaxis_title="α_k")
    return figure


def map_row(image: Image.Image, maps: list[tuple[str, np.ndarray]], height: int = 330,
            shared_scale: bool = True) -> go.Figure:
    """Several full-resolution maps (H, W) over the same image, side by side, on one
    colour scale [0, 1] (each map is min-max normalised first when not already)."""
    count = len(maps)
    figure = make_subplots(rows=1, cols=count, subplot_titles=[t for t, _ in maps],
                           horizontal_spacing=0.01)
    source = image_data_uri(image)
    for i, (_, values) in enumerate(maps, start=1):
        small, (fy, fx) = coarse(normalise(values) if shared_scale else values)
        figure.add_trace(go.Image(source=source, hoverinfo="skip"), row=1, col=i)
        figure.add_trace(go.Heatmap(
            z=small, x0=fx / 2, dx=fx, y0=fy / 2, dy=fy, zmin=0, zmax=1, opacity=0.55,
            colorscale=HEATMAP_SCALE, showscale=(i == count), colorbar=dict(thickness=12),
            hovertemplate="%{z:.2f}<extra></extra>"), row=1, col=i)
        suffix = "" if i == 1 else str(i)
        figure.update_layout({f"xaxis{suffix}": dict(visible=False, range=[0, image.width]),
                              f"yaxis{suffix}": dict(visible=False, range=[image.height, 0],
                                                     scaleanchor=f"x{suffix}")})
    figure.update_layout(height=height, margin=dict(l=0, r=0, t=50, b=0))
    return figure


# --- the ViT taxonomy --------------------------------------------------------------------------

def taxonomy_mosaic(result: Taxonomy, weights: str, heads: str) -> go.Figure:
    """Blocks (rows) x locations F1..F6 (columns), one tile per cell, each tile min-max
    normalised (seed eq. 18). Blank and undefined cells are labelled, not drawn."""
    rows, cols = result.grid
    gap = 1
    height = result.num_blocks * (rows + gap) - gap
    width = len(LOCATIONS) * (cols + gap) - gap
    z = np.full((height, width), np.nan, dtype=np.float32)
    centres, hover, notes = [], [], []
    for b in range(result.num_blocks):
        for j, location in enumerate(LOCATIONS):
            variant = Variant(b, location, weights, heads if location in MULTI_HEAD else None)
            top, left = b * (rows + gap), j * (cols + gap)
            cell = result.cells.get(variant)
            if cell is None:
                label = "n/a"
                why = result.undefined.get((b, location, weights), "")
            elif cell.status == ZERO_GRADIENT:
                label, why = "zero grad", cell.reason
            else:
                tile = normalise(cell.map)
                z[top:top + rows, left:left + cols] = tile
                label = "ReLU: empty" if cell.status == RELU_EMPTY else ""
                why = cell.reason or variant.describe()
            centres.append((left + cols / 2 - 0.5, top + rows / 2 - 0.5))
            hover.append(f"block {b} · {location}<br>{_wrap(why)}")
            if label:
                notes.append(dict(x=left + cols / 2 - 0.5, y=top + rows / 2 - 0.5, text=label,
                                  showarrow=False, font=dict(size=10, color="#888")))
    figure = go.Figure(go.Heatmap(z=z, colorscale=HEATMAP_SCALE, zmin=0, zmax=1,
                                  hoverinfo="skip", colorbar=dict(thickness=12, title="min-max")))
    x, y = zip(*centres)
    figure.add_trace(go.Scatter(  # one invisible hover target per tile: light to send
        x=x, y=y, text=hover, mode="markers", hovertemplate="%{text}<extra></extra>",
        marker=dict(size=max(rows, cols) * 2, opacity=0.01, symbol="square"),
        showlegend=False))
    figure.update_layout(
        annotations=notes, height=62 * result.num_blocks + 110,
        margin=dict(l=10, r=10, t=40, b=10), plot_bgcolor="rgba(0,0,0,0)",
        xaxis=dict(tickvals=[j * (cols + gap) + cols / 2 - 0.5 for j in range(len(LOCATIONS))],
                   ticktext=list(LOCATIONS), side="top", tickangle=0, showgrid=False,
                   zeroline=False),
        yaxis=dict(tickvals=[b * (rows + gap) + rows / 2 - 0.5 for b in range(result.num_blocks)],
                   ticktext=[f"block {b}" for b in range(result.num_blocks)], autorange="reversed",
                   showgrid=False, zeroline=False, scaleanchor="x"))
    return figure


def _wrap(text: str, width: int = 60) -> str:
    words, lines, line = text.split(), [], ""
    for word in words:
        if len(line) + len(word) > width:
            lines.append(line)
            line = ""
        line = f"{line} {word}".strip()
    return "<br>".join(lines + [line])


def cell_overlay(image: Image.Image, cell: Cell, patch_size: tuple[int, int],
                 height: int = 420) -> go.Figure:
    """One taxonomy cell's raw map on the patch grid over the model input."""
    title = f"{cell.variant.location} · block {cell.variant.block} (raw, after ReLU)"
    return overlay(image, cell.map, patch_size, title, height=height)


def per_head_maps(cell: Cell, height: int = 240) -> go.Figure:
    """F2/F3: each head's weighted sum before any ReLU, on one diverging scale."""
    heads = cell.per_head.shape[0]
    figure = make_subplots(rows=1, cols=heads, subplot_titles=[f"head {h}" for h in range(heads)],
                           horizontal_spacing=0.01)
    bound = _symmetric(cell.per_head)
    for h in range(heads):
        figure.add_trace(go.Heatmap(z=cell.per_head[h], zmin=-bound, zmax=bound,
                                    colorscale=DIVERGING, showscale=(h == heads - 1),
                                    colorbar=dict(thickness=10),
                                    hovertemplate="row %{y}, col %{x}<br>%{z:.3g}<extra></extra>"),
                         row=1, col=h + 1)
        suffix = "" if h == 0 else str(h + 1)
        figure.update_layout({f"xaxis{suffix}": dict(visible=False),
                              f"yaxis{suffix}": dict(visible=False, autorange="reversed",
                                                     scaleanchor=f"x{suffix}")})
    figure.update_layout(height=height, margin=dict(l=0, r=0, t=40, b=0))
    return figure
