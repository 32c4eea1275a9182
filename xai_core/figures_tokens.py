"""Plotly figures for the tokenization and self-attention pages (no streamlit here)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots
from PIL import Image

from .figures import (click_customdata, image_figure, overlay_figure, patch_click_targets,
                      patch_grid_lines)

PREFIX_COLOURS = {"[CLS]": (230, 159, 0), "[DIST]": (86, 180, 233)}
OTHER_PREFIX_COLOUR = (0, 158, 115)
DIVERGING = "RdBu_r"


# --- page 1: tokenization ---------------------------------------------------------------------

def tokenization_figure(model_image: Image.Image, grid: tuple[int, int],
                        patch_size: tuple[int, int], prefix: int, title: str | None = None,
                        height: int = 460) -> go.Figure:
    """The model's input with its patch grid; hovering a patch gives its index, its
    position in the token sequence, row/column and pixel box (end exclusive)."""
    figure = patch_grid_lines(image_figure(model_image, title, height), grid, patch_size)
    targets = patch_click_targets(grid, patch_size)
    ph, pw = patch_size
    index, row, col = np.asarray(targets.customdata).T
    boxes = np.stack([index, row, col, col * pw, (col + 1) * pw, row * ph, (row + 1) * ph,
                      index + prefix], 1)
    targets.update(customdata=boxes.tolist(), hovertemplate=(
        "patch %{customdata[0]} = token %{customdata[7]}<br>row %{customdata[1]}, "
        "col %{customdata[2]}<br>pixels x %{customdata[3]}-%{customdata[4]}, "
        "y %{customdata[5]}-%{customdata[6]}<extra></extra>"))
    figure.add_trace(targets)
    return figure


def token_strip_figure(model_image: Image.Image, grid: tuple[int, int],
                       patch_size: tuple[int, int], prefix_names: list[str],
                       shown: int = 10, height: int = 170) -> go.Figure:
    """The sequence the encoder reads: prefix tokens first, then patches in raster
    order (the first `shown` of them), then the count of the rest."""
    rows, cols = grid
    ph, pw = patch_size
    total = rows * cols
    shown = max(1, min(shown, total))
    pixels = np.asarray(model_image.convert("RGB"))
    gap = max(2, pw // 4)
    slots = len(prefix_names) + shown + (1 if shown < total else 0)
    strip = np.full((ph, slots * (pw + gap), 3), 255, dtype=np.uint8)
    labels = []
    for slot, name in enumerate(prefix_names):
        strip[:, slot * (pw + gap):slot * (pw + gap) + pw] = PREFIX_COLOURS.get(
            name, OTHER_PREFIX_COLOUR)
        labels.append((slot, name, f"token {slot}"))
    for i in range(shown):
        r, c = divmod(i, cols)
        slot = len(prefix_names) + i
        strip[:, slot * (pw + gap):slot * (pw + gap) + pw] = pixels[r * ph:(r + 1) * ph,
                                                                     c * pw:(c + 1) * pw]
        labels.append((slot, f"p{i}", f"token {slot}"))
    notes = []  # one layout update: add_annotation per label is slow
    for slot, top, bottom in labels:
        x = slot * (pw + gap) + pw / 2
        notes += [dict(x=x, y=-0.3 * ph, text=top, showarrow=False, font=dict(size=11)),
                  dict(x=x, y=1.3 * ph, text=bottom, showarrow=False,
                       font=dict(size=9, color="grey"))]
    if shown < total:
        notes.append(dict(x=(slots - 1) * (pw + gap) + pw / 2, y=ph / 2, showarrow=False,
                          font=dict(size=11), text=f"… {total - shown} more<br>(last: token "
                                                   f"{total + len(prefix_names) - 1})"))
    figure = go.Figure(go.Image(z=strip, hoverinfo="skip"))
    figure.update_layout(height=height, margin=dict(l=0, r=0, t=0, b=0), annotations=notes)
    figure.update_xaxes(visible=False)
    figure.update_yaxes(visible=False, scaleanchor="x", range=[1.6 * ph, -0.6 * ph])
    return figure


def _mosaic(tiles: np.ndarray, columns: int, gap: int, fill: float) -> np.ndarray:
    """(n, h, w, ...) tiles side by side in rows of `columns`, `gap` apart."""
    count, h, w = tiles.shape[:3]
    rows = -(-count // columns)
    out = np.full((rows * (h + gap) - gap, columns * (w + gap) - gap, *tiles.shape[3:]), fill,
                  dtype=float)
    for i in range(count):
        r, c = divmod(i, columns)
        out[r * (h + gap):r * (h + gap) + h, c * (w + gap):c * (w + gap) + w] = tiles[i]
    return out


def embedding_pca_figure(tiles: np.ndarray, explained: np.ndarray, columns: int = 7,
                         height: int = 420) -> go.Figure:
    """The classic figure: the first principal components of the embedding filters as RGB."""
    count, h, w = tiles.shape[:3]
    gap = max(1, w // 5)
    mosaic = _mosaic(tiles, columns, gap, 1.0)
    notes = [dict(x=(i % columns) * (w + gap) + w / 2, y=(i // columns) * (h + gap) + h,
                  yanchor="top", text=f"PC{i + 1} {explained[i]:.1%}", showarrow=False,
                  font=dict(size=9)) for i in range(count)]
    figure = go.Figure(go.Image(z=np.round(mosaic * 255).astype(np.uint8), hoverinfo="skip"))
    figure.update_layout(height=height, margin=dict(l=0, r=0, t=10, b=20), annotations=notes)
    figure.update_xaxes(visible=False)
    figure.update_yaxes(visible=False, scaleanchor="x")
    return figure


def position_mosaic_figure(similarity: np.ndarray, height: int = 560) -> go.Figure:
    """One small map per patch: its position embedding's cosine similarity with every
    other patch's, laid out where the patch is. Click targets sit on each small map."""
    rows, cols = similarity.shape[:2]
    tiles = similarity.reshape(rows * cols, rows, cols)
    mosaic = _mosaic(tiles, cols, 1, np.nan).astype(np.float32)
    figure = go.Figure(go.Heatmap(
        z=mosaic, x0=1, dx=1, y0=1, dy=1, zmin=-1, zmax=1, colorscale=DIVERGING,
        colorbar=dict(thickness=12, title="cos"), hoverinfo="skip"))
    targets = patch_click_targets((rows, cols), (rows + 1, cols + 1), name="position")
    targets.update(marker=dict(size=max(6, min(22, 600 // max(rows, cols))), opacity=0.01,
                               symbol="square"))
    figure.add_trace(targets)
    figure.update_layout(height=height, margin=dict(l=0, r=0, t=10, b=0))
    # constrain="domain": the plot area shrinks to the square instead of the y range growing
    figure.update_xaxes(visible=False, range=[0.5, cols * (cols + 1) + 0.5], constrain="domain")
    figure.update_yaxes(visible=False, range=[rows * (rows + 1) + 0.5, 0.5], scaleanchor="x",
                        constrain="domain")
    return figure


def position_map_figure(similarity: np.ndarray, row: int, col: int,
                        height: int = 360) -> go.Figure:
    """One patch's similarity map, large, with that patch outlined."""
    rows, cols = similarity.shape[:2]
    figure = go.Figure(go.Heatmap(
        z=similarity[row, col].astype(np.float32), zmin=-1, zmax=1, colorscale=DIVERGING,
        colorbar=dict(thickness=12, title="cos"),
        hovertemplate="row %{y}, col %{x}<br>cos %{z:.3f}<extra></extra>"))
    figure.add_shape(type="rect", x0=col - 0.5, x1=col + 0.5, y0=row - 0.5, y1=row + 0.5,
                     line=dict(color="black", width=2))
    figure.update_layout(height=height, margin=dict(l=0, r=0, t=40, b=0),
                         title=f"Patch (row {row}, col {col}) vs every patch")
    figure.update_xaxes(visible=False, range=[-0.5, cols - 0.5])
    figure.update_yaxes(visible=False, range=[rows - 0.5, -0.5], scaleanchor="x")
    return figure


# --- page 2: self-attention -------------------------------------------------------------------

def matrix_figure(matrix: np.ndarray, row_labels, column_labels, title: str,
                  decimals: int = 2, colorscale: str = "Blues", zmin: float | None = None,
                  zmax: float | None = None, height: int = 260) -> go.Figure:
    """A small labelled matrix with its numbers written in the cells."""
    matrix = np.asarray(matrix, dtype=float)
    figure = go.Figure(go.Heatmap(
        z=matrix, x=list(column_labels), y=list(row_labels), colorscale=colorscale, zmin=zmin,
        zmax=zmax, text=np.vectorize(lambda v: f"{v:.{decimals}f}")(matrix),
        texttemplate="%{text}", showscale=False,
        hovertemplate="row %{y}, column %{x}: %{text}<extra></extra>"))
    figure.update_layout(title=title, height=height, margin=dict(l=10, r=10, t=40, b=10))
    figure.update_yaxes(autorange="reversed", type="category")
    figure.update_xaxes(type="category", side="top")
    return figure


def distribution_figure(labels, probabilities: np.ndarray, title: str,
                        height: int = 280) -> go.Figure:
    figure = go.Figure(go.Bar(x=list(labels), y=probabilities,
                              text=[f"{p:.2f}" for p in probabilities], textposition="auto"))
    figure.update_layout(title=title, height=height, margin=dict(l=10, r=10, t=40, b=10),
                         yaxis=dict(range=[0, 1], title="attention weight"))
    return figure


def entropy_curve_figure(temperatures: np.ndarray, entropies: np.ndarray, labels,
                         current: float, reference: float, maximum: float,
                         height: int = 300) -> go.Figure:
    """Entropy of each query's attention row against the temperature (log axis)."""
    figure = go.Figure()
    for i, label in enumerate(labels):
        figure.add_trace(go.Scatter(x=temperatures, y=entropies[:, i], mode="lines",
                                    name=f"query {label}"))
    # On a log axis, annotations take log10 of the data value; shapes take the value.
    at_current, at_reference = float(np.log10(current)), float(np.log10(reference))
    shapes = [dict(type="line", xref="x", yref="paper", x0=current, x1=current, y0=0,
                   y1=1, line=dict(color="black", dash="dot")),
              dict(type="line", xref="x", yref="paper", x0=reference, x1=reference,
                   y0=0, y1=1, line=dict(color="grey", dash="dash")),
              dict(type="line", xref="paper", yref="y", x0=0, x1=1, y0=maximum, y1=maximum,
                   line=dict(color="grey", width=1))]
    notes = [dict(x=at_current, y=1, xref="x", yref="paper", text=f"T = {current:g}",
                  showarrow=False, xanchor="left", yanchor="top"),
             dict(x=at_reference, y=0, xref="x", yref="paper", text="√d_k", showarrow=False,
                  xanchor="left", yanchor="bottom"),
             dict(x=0, y=maximum, xref="paper", yref="y", text="uniform", showarrow=False,
                  xanchor="left", yanchor="bottom")]
    figure.update_layout(shapes=shapes, annotations=notes)
    figure.update_layout(height=height, margin=dict(l=10, r=10, t=30, b=10),
                         xaxis=dict(type="log", title="temperature T"),
                         yaxis=dict(title="entropy (bits)", range=[0, maximum * 1.08]))
    return figure


def multihead_figure(weights: list[np.ndarray], labels, height: int = 300) -> go.Figure:
    """Each head's attention matrix side by side (rows = queries)."""
    heads = len(weights)
    figure = make_subplots(rows=1, cols=heads, subplot_titles=[f"head {h + 1}"
                                                               for h in range(heads)],
                           horizontal_spacing=0.06)
    for h, matrix in enumerate(weights):
        figure.add_trace(go.Heatmap(
            z=matrix, x=list(labels), y=list(labels), zmin=0, zmax=1, colorscale="Blues",
            text=np.vectorize(lambda v: f"{v:.2f}")(matrix), texttemplate="%{text}",
            showscale=False, hovertemplate="query %{y} → key %{x}: %{text}<extra></extra>"),
            row=1, col=h + 1)
        figure.update_yaxes(autorange="reversed", type="category", row=1, col=h + 1)
        figure.update_xaxes(type="category", row=1, col=h + 1)
    figure.update_layout(height=height, margin=dict(l=10, r=10, t=40, b=10))
    return figure


def query_attention_figure(model_image: Image.Image, values: np.ndarray,
                           patch_size: tuple[int, int], query: tuple[int, int] | None,
                           title: str, height: int = 460) -> go.Figure:
    """One query's attention over the patch grid on the image, the query patch
    outlined, with click targets on every patch."""
    grid = values.shape
    figure = overlay_figure(model_image, values, patch_size, title, opacity=0.6, height=height,
                            zmin=0)
    figure.data[1].update(hoverinfo="skip")
    if query is not None:
        ph, pw = patch_size
        r, c = query
        figure.add_shape(type="rect", x0=c * pw, x1=(c + 1) * pw, y0=r * ph, y1=(r + 1) * ph,
                         line=dict(color="cyan", width=3))
    targets = patch_click_targets(grid, patch_size, name="query")
    targets.update(customdata=np.column_stack([targets.customdata, np.ravel(values)]).tolist(),
                   hovertemplate="patch %{customdata[0]} (row %{customdata[1]}, col "
                                 "%{customdata[2]})<br>attention %{customdata[3]:.4f}"
                                 "<extra></extra>")
    figure.add_trace(targets)
    return figure


def clicked_index(chart_state) -> int | None:
    """The first customdata value of a chart's selected point, or None."""
    data = click_customdata(chart_state)
    return None if not data else int(data[0])


__all__ = ["clicked_index", "tokenization_figure", "token_strip_figure", "embedding_pca_figure",
           "position_mosaic_figure", "position_map_figure", "matrix_figure",
           "distribution_figure", "entropy_curve_figure", "multihead_figure",
           "query_attention_figure"]
