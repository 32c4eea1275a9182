"""Plotly figures for the attention-distance and rollout pages (no streamlit here)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.colors import qualitative

from .figures import HEATMAP_SCALE, normalise, overlay_figure, patch_click_targets

HEAD_COLOURS = qualitative.Dark24


def _head_colour(head: int) -> str:
    return HEAD_COLOURS[head % len(HEAD_COLOURS)]


def distance_scatter(mad: np.ndarray, blocks: list[int], reference: float, title: str,
                     spread: np.ndarray | None = None, height: int = 460,
                     rings=()) -> go.Figure:
    """One point per head per block (x = block, y = pixels), coloured by head.

    Each point's customdata is (block index, head) so a click can open that head.
    `spread` (same shape) draws per-head error bars (e.g. the std over images);
    `rings` ((row of `mad`, head, hover text) triples) circles some heads, e.g. sink heads."""
    num_blocks, num_heads = mad.shape
    figure = go.Figure()
    offsets = (np.arange(num_heads) - (num_heads - 1) / 2) * min(0.6 / max(num_heads, 1), 0.08)
    for head in range(num_heads):
        extra = ("<br>spread over images ±%{error_y.array:.1f} px" if spread is not None else "")
        figure.add_trace(go.Scatter(
            x=np.array(blocks) + offsets[head], y=mad[:, head], mode="markers",
            name=f"head {head}", marker=dict(size=9, color=_head_colour(head)),
            error_y=None if spread is None else dict(type="data", array=spread[:, head],
                                                      thickness=1, width=2),
            customdata=np.stack([blocks, np.full(num_blocks, head)], axis=1).tolist(),
            hovertemplate="block %{customdata[0]}, head %{customdata[1]}<br>"
                          "mean distance %{y:.1f} px" + extra + "<extra></extra>"))
    if rings:
        figure.add_trace(go.Scatter(
            x=[blocks[p] + offsets[h] for p, h, _ in rings], y=[mad[p, h] for p, h, _ in rings],
            mode="markers", name="sink head", text=[text for _, _, text in rings],
            marker=dict(symbol="circle-open", size=20, color="magenta", line=dict(width=2)),
            hovertemplate="%{text}<extra></extra>"))
    figure.add_hline(y=reference, line=dict(dash="dash", color="grey"),
                     annotation_text=f"uniform attention: {reference:.1f} px",
                     annotation_position="top left")
    figure.update_layout(title=title, height=height, xaxis_title="block",
                         yaxis_title="mean attention distance (pixels)",
                         margin=dict(l=10, r=10, t=50, b=10), clickmode="event+select",
                         legend=dict(title="head"))
    figure.update_xaxes(tickmode="array", tickvals=list(blocks))
    figure.update_yaxes(rangemode="tozero")
    return figure


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


def receptive_field_figure(textbook: list[int], stages: list, stage_positions: list[int],
                           image_size: int, title: str, cnn_name: str,
                           height: int = 460) -> go.Figure:
    """Receptive field (pixels) against depth: the textbook 3x3 stride-1 stack and the
    real CNN's stages (x = number of spatial layers up to the end of the stage)."""
    figure = go.Figure()
    figure.add_trace(go.Scatter(
        x=np.arange(1, len(textbook) + 1), y=textbook, mode="lines",
        name="3x3, stride 1: RF = 1 + 2l", line=dict(color="grey"),
        hovertemplate="layer %{x}: %{y} px<extra></extra>"))
    figure.add_trace(go.Scatter(
        x=stage_positions, y=[s.rf for s in stages], mode="lines+markers+text",
        name=cnn_name, text=[s.stage for s in stages], textposition="top left",
        textfont=dict(size=10),
        customdata=[[s.name, s.kernel, s.stride, s.jump] for s in stages],
        hovertemplate="%{text} (ends at %{customdata[0]})<br>receptive field %{y} px<br>"
                      "last kernel %{customdata[1]}, stride %{customdata[2]}; "
                      "jump %{customdata[3]} px<extra></extra>"))
    # a trace, not add_hline: shapes on a log axis take log10 coordinates
    depth = max(len(textbook), max(stage_positions, default=1))
    figure.add_trace(go.Scatter(
        x=[1, depth], y=[image_size, image_size], mode="lines", name=f"input size {image_size} px",
        line=dict(dash="dot", color="black"), hoverinfo="skip"))
    figure.update_layout(title=title, height=height, xaxis_title="spatial layers so far",
                         yaxis_title="receptive field (pixels)", yaxis_type="log",
                         margin=dict(l=10, r=10, t=50, b=10),
                         legend=dict(orientation="h", y=-0.2))
    return figure


def token_map_figure(image, values: np.ndarray, patch_size: tuple[int, int], title: str,
                     marks=(), query: int | None = None, grid: tuple[int, int] | None = None,
                     clickable: bool = False, height: int = 380, zmin=None,
                     zmax=None, sink_keys=()) -> go.Figure:
    """A patch-level map over the image, with high-norm tokens marked (x), attention-sink
    keys ringed (`sink_keys`: (patch index, hover text) pairs; needs `grid`) and the query
    patch (star); `clickable` adds invisible patch markers for clicks."""
    figure = overlay_figure(image, values, patch_size, title, height=height, zmin=zmin,
                            zmax=zmax)
    ph, pw = patch_size
    if sink_keys and grid is not None:
        rows_cols = [divmod(patch, grid[1]) for patch, _ in sink_keys]
        figure.add_trace(go.Scatter(
            x=[c * pw + pw / 2 for _, c in rows_cols], y=[r * ph + ph / 2 for r, _ in rows_cols],
            mode="markers", name="sink key",
            marker=dict(symbol="circle-open", size=max(14, 2 * min(ph, pw)), color="magenta",
                        line=dict(width=3)),
            text=[text for _, text in sink_keys], hovertemplate="%{text}<extra></extra>",
            showlegend=False))
    if marks:
        figure.add_trace(go.Scatter(
            x=[t.col * pw + pw / 2 for t in marks], y=[t.row * ph + ph / 2 for t in marks],
            mode="markers", name="high-norm token",
            marker=dict(symbol="x-thin-open", size=max(8, min(ph, pw)), color="cyan",
                        line=dict(width=3)),
            customdata=[[t.patch, t.ratio, t.block, t.gap] for t in marks],
            hovertemplate="high-norm token: patch %{customdata[0]}<br>norm "
                          "%{customdata[1]:.1f}x the median patch norm in block "
                          "%{customdata[2]}<br>%{customdata[3]:.1f}x the largest unflagged "
                          "patch<extra></extra>",
            showlegend=False))
    if query is not None and grid is not None:
        row, col = divmod(query, grid[1])
        figure.add_trace(go.Scatter(
            x=[col * pw + pw / 2], y=[row * ph + ph / 2], mode="markers", name="query",
            marker=dict(symbol="star", size=max(10, min(ph, pw)), color="lime",
                        line=dict(color="black", width=1)),
            hovertemplate=f"query patch {query}<extra></extra>", showlegend=False))
    if clickable and grid is not None:
        figure.add_trace(patch_click_targets(grid, patch_size))
    figure.update_layout(margin=dict(l=0, r=0, t=40, b=0))
    return figure


def head_mosaic(maps: np.ndarray, blocks: list[int], title: str, gap: int = 1,
                height: int | None = None) -> go.Figure:
    """Small multiples as ONE heatmap: rows = blocks, columns = heads, every tile
    min-max normalised on its own. Invisible markers at tile centres carry
    (block, head) in customdata so a click can enlarge one."""
    num_blocks, num_heads, rows, cols = maps.shape
    tile_h, tile_w = rows + gap, cols + gap
    mosaic = np.full((num_blocks * tile_h - gap, num_heads * tile_w - gap), np.nan)
    for b in range(num_blocks):
        for h in range(num_heads):
            mosaic[b * tile_h:b * tile_h + rows, h * tile_w:h * tile_w + cols] = \
                normalise(maps[b, h])
    figure = go.Figure(go.Heatmap(z=mosaic, colorscale=HEATMAP_SCALE, showscale=False,
                                  hoverinfo="skip"))
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


def difference_figure(image, difference: np.ndarray, patch_size: tuple[int, int],
                      title: str, height: int = 380) -> go.Figure:
    """A signed patch map (e.g. convention A minus convention B), symmetric colours."""
    bound = float(np.abs(difference).max()) or 1.0
    figure = overlay_figure(image, difference, patch_size, title, height=height,
                            zmin=-bound, zmax=bound)
    figure.data[-1].update(colorscale="RdBu", reversescale=True, opacity=0.75)
    return figure


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
