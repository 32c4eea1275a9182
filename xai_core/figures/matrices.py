"""Matrices drawn as heatmaps: blocks x heads tables, mosaics of small maps, labelled
attention matrices, position-embedding similarity. A mosaic no hover reads is sent as one
coloured image layer (`layers.colour_layer`), not as thousands of heatmap cells."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots
from PIL import Image

from ..maps import min_max
from ..methods.vit_gradcam import (LOCATIONS, MULTI_HEAD, RELU_EMPTY, ZERO_GRADIENT, Cell,
                                   Taxonomy, Variant)
from .click_targets import patch_click_targets
from .layers import colour_bar, colour_layer, image_trace
from .reuse import reused
from .style import DIVERGING, HEATMAP_SCALE, symmetric_bound


@reused
def distance_variation(per_image: np.ndarray, blocks: list[int], title: str,
                       height: int = 380) -> go.Figure:
    """Blocks x heads heatmap of the std over images of each head's distance."""
    std, mean = per_image.std(0), per_image.mean(0)
    heads = np.arange(per_image.shape[2])
    figure = go.Figure(go.Heatmap(
        z=std.T, x=list(blocks), y=heads, colorscale="Viridis", customdata=mean.T[..., None],
        text=np.round(std.T, 1), texttemplate="%{text}",
        hovertemplate="block %{x}, head %{y}<br>std over images %{z:.1f} px<br>"
                      "mean %{customdata[0]:.1f} px<extra></extra>",
        colorbar=dict(title="px", thickness=12)))
    figure.update_layout(title=title, height=height, xaxis_title="block", yaxis_title="head",
                         margin=dict(l=10, r=10, t=50, b=10))
    figure.update_xaxes(tickmode="array", tickvals=list(blocks))
    figure.update_yaxes(tickmode="array", tickvals=list(heads), autorange="reversed")
    return figure


@reused
def head_mosaic(maps: np.ndarray, blocks: list[int], title: str, gap: int = 1,
                height: int | None = None) -> go.Figure:
    """Small multiples as ONE picture: rows = blocks, columns = heads, every tile min-max
    normalised on its own and coloured here (one image layer: no hover reads the tiles).
    Invisible markers at tile centres carry (block, head) in customdata so a click can
    enlarge one."""
    num_blocks, num_heads, rows, cols = maps.shape
    tile_h, tile_w = rows + gap, cols + gap
    tiles = min_max(maps.reshape(-1, rows, cols), axis=(1, 2))  # (block, head) in raster order
    mosaic = _mosaic(tiles, num_heads, gap, np.nan)
    # cell (i, j) of the mosaic centred on (j, i), as a heatmap would place it
    figure = go.Figure(colour_layer(mosaic, HEATMAP_SCALE, 0.0, 1.0, left=-0.5, top=-0.5))
    b_idx, h_idx = np.meshgrid(np.arange(num_blocks), np.arange(num_heads), indexing="ij")
    figure.add_trace(go.Scatter(
        x=(h_idx.ravel() * tile_w + (cols - 1) / 2), y=(b_idx.ravel() * tile_h + (rows - 1) / 2),
        mode="markers", marker=dict(size=max(10, 2 * cols), symbol="square", opacity=0.01),
        customdata=np.stack([np.array(blocks)[b_idx.ravel()], h_idx.ravel()], axis=1).tolist(),
        hovertemplate="block %{customdata[0]}, head %{customdata[1]}<extra>click to enlarge"
                      "</extra>", showlegend=False))
    figure.update_xaxes(tickmode="array", tickvals=np.arange(num_heads) * tile_w + (cols - 1) / 2,
                        ticktext=[str(h) for h in range(num_heads)], title="head",
                        showgrid=False, zeroline=False, side="top")
    figure.update_yaxes(tickmode="array", tickvals=np.arange(num_blocks) * tile_h + (rows - 1) / 2,
                        ticktext=[str(b) for b in blocks], title="block", autorange="reversed",
                        showgrid=False, zeroline=False, scaleanchor="x")
    figure.update_layout(title=title, height=height or max(400, 42 * num_blocks + 80),
                         margin=dict(l=10, r=10, t=80, b=10), clickmode="event+select",
                         plot_bgcolor="white")
    return figure


@reused
def block_head_heatmap(values: np.ndarray, blocks: list[int], title: str, colorbar: str,
                       hover: list[list[str]], zmin: float | None = None,
                       zmax: float | None = None, outline=None,
                       colorscale: str = "Viridis") -> go.Figure:
    """A blocks x heads table of one number per head (rows = blocks, columns = heads), the
    value written in each cell, `hover` text per cell, cells where `outline` is True boxed.
    Invisible markers at the cell centres carry (block, head) so a click can pick one."""
    values = np.asarray(values, dtype=float)
    num_blocks, num_heads = values.shape
    heads = list(range(num_heads))
    figure = go.Figure(go.Heatmap(
        z=values, x=heads, y=list(range(num_blocks)), zmin=zmin, zmax=zmax,
        colorscale=colorscale, text=np.round(values, 2), texttemplate="%{text:.2f}",
        hoverinfo="skip",
        colorbar=dict(title=colorbar, thickness=12)))
    b_idx, h_idx = np.meshgrid(np.arange(num_blocks), heads, indexing="ij")
    figure.add_trace(go.Scatter(
        x=h_idx.ravel(), y=b_idx.ravel(), mode="markers",
        marker=dict(size=22, symbol="square", opacity=0.01),
        customdata=np.stack([np.array(blocks)[b_idx.ravel()], h_idx.ravel()], axis=1).tolist(),
        text=[hover[b][h] for b, h in zip(b_idx.ravel(), h_idx.ravel())],
        hovertemplate="%{text}<extra>click to open</extra>", showlegend=False))
    for b, h in zip(*np.nonzero(outline if outline is not None else np.zeros_like(values))):
        figure.add_shape(type="rect", x0=h - 0.5, x1=h + 0.5, y0=b - 0.5, y1=b + 0.5,
                         line=dict(color="magenta", width=3))
    figure.update_xaxes(tickmode="array", tickvals=heads, title="head", showgrid=False,
                        zeroline=False)
    figure.update_yaxes(tickmode="array", tickvals=list(range(num_blocks)),
                        ticktext=[str(b) for b in blocks], title="block", autorange="reversed",
                        showgrid=False, zeroline=False)
    figure.update_layout(title=title, height=max(360, 30 * num_blocks + 110),
                         margin=dict(l=10, r=10, t=50, b=10), clickmode="event+select",
                         plot_bgcolor="white")
    return figure


@reused
def agreement_heatmap(names: list[str], values: np.ndarray, title: str, zmin: float = -1,
                      zmax: float = 1, colorscale: str = "RdBu",
                      scale_title: str = "agreement") -> go.Figure:
    text = [["" if np.isnan(v) else f"{v:.2f}" for v in row] for row in values]
    figure = go.Figure(go.Heatmap(
        z=values, x=names, y=names, zmin=zmin, zmax=zmax, colorscale=colorscale, text=text,
        texttemplate="%{text}", hovertemplate="%{y} vs %{x}: %{z:.3f}<extra></extra>",
        colorbar=dict(thickness=12, title=scale_title)))
    figure.update_layout(title=title, height=120 + 45 * len(names),
                         margin=dict(l=10, r=10, t=50, b=10))
    figure.update_yaxes(autorange="reversed")
    return figure


@reused
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
                tile = min_max(cell.map)
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


@reused
def per_head_maps(cell: Cell, height: int = 240) -> go.Figure:
    """F2/F3: each head's weighted sum before any ReLU, on one diverging scale."""
    heads = cell.per_head.shape[0]
    figure = make_subplots(rows=1, cols=heads, subplot_titles=[f"head {h}" for h in range(heads)],
                           horizontal_spacing=0.01)
    bound = symmetric_bound(cell.per_head)
    for h in range(heads):
        figure.add_trace(go.Heatmap(z=np.asarray(cell.per_head[h], np.float32), zmin=-bound, zmax=bound,
                                    colorscale=DIVERGING, showscale=(h == heads - 1),
                                    colorbar=dict(thickness=10, title="weighted sum"),
                                    hovertemplate="row %{y}, col %{x}<br>%{z:.3g}<extra></extra>"),
                         row=1, col=h + 1)
        suffix = "" if h == 0 else str(h + 1)
        figure.update_layout({f"xaxis{suffix}": dict(visible=False),
                              f"yaxis{suffix}": dict(visible=False, autorange="reversed",
                                                     scaleanchor=f"x{suffix}")})
    figure.update_layout(height=height, margin=dict(l=0, r=0, t=40, b=0))
    return figure


@reused
def matrix_figure(matrix: np.ndarray, row_labels, column_labels, title: str,
                  decimals: int = 2, colorscale: str = "Blues", zmin: float | None = None,
                  zmax: float | None = None, height: int = 290) -> go.Figure:
    """A small labelled matrix with its numbers written in the cells; the column labels
    on top, under the title (the top margin holds both)."""
    matrix = np.asarray(matrix, dtype=float)
    figure = go.Figure(go.Heatmap(
        z=matrix, x=list(column_labels), y=list(row_labels), colorscale=colorscale, zmin=zmin,
        zmax=zmax, text=np.vectorize(lambda v: f"{v:.{decimals}f}")(matrix),
        texttemplate="%{text}", showscale=False,
        hovertemplate="row %{y}, column %{x}: %{text}<extra></extra>"))
    figure.update_layout(title=dict(text=title, y=1, yanchor="top", pad=dict(t=8)),
                         height=height, margin=dict(l=10, r=10, t=70, b=10))
    figure.update_yaxes(autorange="reversed", type="category")
    figure.update_xaxes(type="category", side="top")
    return figure


@reused
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


def _mosaic(tiles: np.ndarray, columns: int, gap: int, fill: float,
            row_gap: int | None = None) -> np.ndarray:
    """(n, h, w, ...) tiles side by side in rows of `columns`, `gap` apart (rows `row_gap`
    apart: room for a label under each tile)."""
    count, h, w = tiles.shape[:3]
    rows, row_gap = -(-count // columns), gap if row_gap is None else row_gap
    out = np.full((rows * (h + row_gap) - row_gap, columns * (w + gap) - gap,
                   *tiles.shape[3:]), fill, dtype=float)
    for i in range(count):
        r, c = divmod(i, columns)
        top, left = r * (h + row_gap), c * (w + gap)
        out[top:top + h, left:left + w] = tiles[i]
    return out


@reused
def embedding_pca_figure(tiles: np.ndarray, explained: np.ndarray, columns: int = 7,
                         height: int = 420) -> go.Figure:
    """The classic figure: the first principal components of the embedding filters as RGB."""
    count, h, w = tiles.shape[:3]
    # each label sits in the gap under its tile: half a tile high, so it stays clear of the
    # next row's tiles at any width (390 px phone: 50 px tiles, 25 px for a 9 px label)
    gap, row_gap = max(1, w // 5), max(2, h // 2)
    mosaic = _mosaic(tiles, columns, gap, 1.0, row_gap)
    notes = [dict(x=(i % columns) * (w + gap) + w / 2, y=(i // columns) * (h + row_gap) + h,
                  yanchor="top", text=f"PC{i + 1}: {explained[i]:.0%}", showarrow=False,
                  font=dict(size=9)) for i in range(count)]
    tiles_image = Image.fromarray(np.round(mosaic * 255).astype(np.uint8))
    figure = go.Figure(image_trace(tiles_image, max_side=max(tiles_image.size), lossless=True))
    figure.update_layout(height=height, margin=dict(l=0, r=0, t=10, b=20), annotations=notes)
    figure.update_xaxes(visible=False)
    figure.update_yaxes(visible=False, scaleanchor="x")
    return figure


@reused
def position_mosaic_figure(similarity: np.ndarray, height: int = 560) -> go.Figure:
    """One small map per patch: its position embedding's cosine similarity with every
    other patch's, laid out where the patch is, coloured here (one image layer: no hover reads
    the maps). Click targets sit on each small map."""
    rows, cols = similarity.shape[:2]
    tiles = similarity.reshape(rows * cols, rows, cols)
    mosaic = _mosaic(tiles, cols, 1, np.nan)
    # cell (i, j) of the mosaic centred on (j + 1, i + 1): the click targets' coordinates
    figure = go.Figure(colour_layer(mosaic, DIVERGING, -1.0, 1.0, left=0.5, top=0.5))
    targets = patch_click_targets((rows, cols), (rows + 1, cols + 1), name="position")
    targets.update(marker=dict(size=max(6, min(22, 600 // max(rows, cols))), opacity=0.01,
                               symbol="square"))
    figure.add_trace(targets)
    figure.add_trace(colour_bar(DIVERGING, -1.0, 1.0, "cos"))
    figure.update_layout(height=height, margin=dict(l=0, r=0, t=10, b=0))
    # constrain="domain": the plot area shrinks to the square instead of the y range growing
    figure.update_xaxes(visible=False, range=[0.5, cols * (cols + 1) + 0.5], constrain="domain")
    figure.update_yaxes(visible=False, range=[rows * (rows + 1) + 0.5, 0.5], scaleanchor="x",
                        constrain="domain")
    return figure


@reused
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
