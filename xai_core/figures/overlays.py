"""A heatmap over an image: single maps, rows of maps, the DAAM flow animation and the
comparison matrix.

Maps are sent at patch (or feature-map) resolution, as float32, and drawn over the image with
`x0/dx`, so a figure stays small (see STREAMLIT_NOTES.md) and every cell is one token; the
image is a compressed layer (`layers.image_trace`) spanning the same pixel coordinates.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots
from PIL import Image

from ..maps import min_max
from ..methods.vit_gradcam import Cell
from .click_targets import patch_click_targets
from .layers import DISPLAY_MAX_SIDE, image_trace, panel_side
from .reuse import reused
from .style import DIVERGING, HEATMAP_SCALE, LINE_COLOURS, symmetric_bound

FRAME_MS = 700
DISPLAY_SIDE = 56
MIN_MAX = "min-max (0-1)"  # the colour bar of maps each scaled to their own range


def _panel(row: int | None, col: int | None) -> dict:
    """Plotly's arguments for one subplot, or none for a figure of one panel."""
    return {} if row is None else dict(row=row, col=col)


def add_image(figure: go.Figure, image: Image.Image, row: int | None = None,
              col: int | None = None, max_side: int = DISPLAY_MAX_SIDE) -> None:
    """The image in pixel coordinates (y down) in one panel of `figure` (the subplot at
    row, col when given), its axes hidden and locked to the image's aspect ratio; sent at
    most `max_side` pixels a side (a small panel: `layers.panel_side`)."""
    panel = _panel(row, col)
    figure.add_trace(image_trace(image, max_side), **panel)
    x_axis = "x" if row is None else figure.get_subplot(row, col).xaxis.plotly_name
    figure.update_xaxes(visible=False, range=[0, image.width], **panel)
    figure.update_yaxes(visible=False, range=[image.height, 0],
                        scaleanchor=x_axis.replace("axis", ""), **panel)


def add_overlay(figure: go.Figure, image: Image.Image, values: np.ndarray,
                cell_size: tuple[float, float], row: int | None = None, col: int | None = None,
                max_side: int = DISPLAY_MAX_SIDE, **heatmap) -> go.Heatmap:
    """THE heatmap over an image: the image (`add_image`, at most `max_side` pixels a side),
    then the (rows, cols) map `values` on top, each cell `cell_size` pixels (`grid_heatmap`,
    which takes `heatmap`). Every figure that draws a map over an image draws each panel with
    this. Returns the heatmap trace as stored in the figure, for per-panel tweaks."""
    add_image(figure, image, row, col, max_side)
    figure.add_trace(grid_heatmap(values, cell_size, **heatmap), **_panel(row, col))
    return figure.data[-1]


def _titled(figure: go.Figure, title: str | None, height: int) -> go.Figure:
    figure.update_layout(title=title, height=height, margin=dict(l=0, r=0, t=40 if title else 0,
                                                                  b=0))
    return figure


@reused  # Home and most pages draw the picture on every run: built once, 3 ms a time saved
def image_figure(image: Image.Image, title: str | None = None, height: int = 420) -> go.Figure:
    """An RGB image in pixel coordinates (y down), ready for overlays."""
    figure = go.Figure()
    add_image(figure, image)
    return _titled(figure, title, height)


def grid_heatmap(values: np.ndarray, patch_size: tuple[int, int], opacity: float = 0.55,
                 zmin: float | None = None, zmax: float | None = None,
                 colorscale: str | list = HEATMAP_SCALE, name: str = "map",
                 hovertemplate: str | None = None, scale_title: str = "map value") -> go.Heatmap:
    """A (rows, cols) patch-level map placed over the image's pixel coordinates; its colour
    bar is titled with the quantity drawn (`scale_title`)."""
    ph, pw = patch_size
    return go.Heatmap(
        z=np.asarray(values, dtype=np.float32), x0=pw / 2, dx=pw, y0=ph / 2, dy=ph,
        opacity=opacity, colorscale=colorscale, zmin=zmin, zmax=zmax, name=name,
        hovertemplate=hovertemplate or "row %{y}, col %{x}<br>value %{z:.4g}<extra></extra>",
        # plain decimals: an SI suffix ("250µ") reads as a unit the map does not have; the
        # title along the bar in small type (presentation type made it taller than a narrow
        # column's plot), not over it, where it ran into the figure's title
        colorbar=dict(thickness=12, exponentformat="none",
                      title=dict(text=scale_title, side="right", font=dict(size=11))))


def overlay_figure(image: Image.Image, values: np.ndarray, patch_size: tuple[float, float],
                   title: str | None = None, opacity: float = 0.55, height: int = 420,
                   zmin: float | None = None, zmax: float | None = None,
                   colorscale: str | list = HEATMAP_SCALE,
                   scale_title: str = "map value") -> go.Figure:
    """One map over the image, in a figure of its own."""
    figure = go.Figure()
    add_overlay(figure, image, values, patch_size, opacity=opacity, zmin=zmin,
                zmax=zmax, colorscale=colorscale, scale_title=scale_title)
    return _titled(figure, title, height)


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


@reused
def token_map_figure(image, values: np.ndarray, patch_size: tuple[int, int], title: str,
                     marks=(), query: int | None = None, grid: tuple[int, int] | None = None,
                     clickable: bool = False, height: int = 380, zmin=None,
                     zmax=None, sink_keys=(), scale_title: str = "attention weight") -> go.Figure:
    """A patch-level map over the image, with high-norm tokens marked (x), attention-sink
    keys ringed (`sink_keys`: (patch index, hover text) pairs; needs `grid`) and the query
    patch (star); `clickable` adds invisible patch markers for clicks. `scale_title`: the
    quantity drawn (attention by default: rows of attention or rollout)."""
    figure = overlay_figure(image, values, patch_size, title, height=height, zmin=zmin,
                            zmax=zmax, scale_title=scale_title)
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


@reused
def difference_figure(image, difference: np.ndarray, patch_size: tuple[int, int],
                      title: str, height: int = 380) -> go.Figure:
    """A signed patch map (e.g. convention A minus convention B), symmetric colours."""
    bound = symmetric_bound(difference)
    figure = overlay_figure(image, difference, patch_size, title, height=height,
                            zmin=-bound, zmax=bound, scale_title="difference")
    figure.data[-1].update(colorscale="RdBu", reversescale=True, opacity=0.75)
    return figure


@reused
def query_attention_figure(model_image: Image.Image, values: np.ndarray,
                           patch_size: tuple[int, int], query: tuple[int, int] | None,
                           title: str, height: int = 460) -> go.Figure:
    """One query's attention over the patch grid on the image, the query patch
    outlined, with click targets on every patch."""
    grid = values.shape
    figure = overlay_figure(model_image, values, patch_size, title, opacity=0.6, height=height,
                            zmin=0, scale_title="attention weight")
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


def coarse(values: np.ndarray, side: int = DISPLAY_SIDE) -> tuple[np.ndarray, tuple[float, float]]:
    """Area-average an (H, W) map down to at most `side` cells a side (for sending only).
    Returns the small map and its cell size in pixels."""
    values = np.asarray(values, dtype=np.float32)
    height, width = values.shape
    fy, fx = max(1, int(np.ceil(height / side))), max(1, int(np.ceil(width / side)))
    rows, cols = height // fy, width // fx
    small = values[:rows * fy, :cols * fx].reshape(rows, fy, cols, fx).mean(axis=(1, 3))
    return small, (float(fy), float(fx))


@reused
def overlay(image: Image.Image, values: np.ndarray, cell_size: tuple[float, float], title: str,
            diverging: bool = False, zmin: float | None = None, zmax: float | None = None,
            height: int = 340, opacity: float = 0.55,
            scale_title: str = "Grad-CAM value") -> go.Figure:
    """Page 5's map over the model input at feature-map (or patch) resolution; `diverging`
    centres a blue-red scale on 0."""
    if diverging:
        bound = symmetric_bound(values)
        zmin, zmax = -bound, bound
    return overlay_figure(image, values, cell_size, title, opacity, height, zmin, zmax,
                          colorscale=DIVERGING if diverging else HEATMAP_SCALE,
                          scale_title=scale_title)


def cell_overlay(image: Image.Image, cell: Cell, patch_size: tuple[int, int],
                 height: int = 420) -> go.Figure:
    """One taxonomy cell's raw map on the patch grid over the model input."""
    title = f"{cell.variant.location} · block {cell.variant.block} (raw, after ReLU)"
    return overlay(image, cell.map, patch_size, title, height=height)


@reused
def map_row(image: Image.Image, maps: list[tuple[str, np.ndarray]], height: int = 330,
            shared_scale: bool = True) -> go.Figure:
    """Several full-resolution maps (H, W) over the same image, side by side, on one
    colour scale [0, 1] (each map is min-max normalised first when not already)."""
    count = len(maps)
    figure = make_subplots(rows=1, cols=count, subplot_titles=[t for t, _ in maps],
                           horizontal_spacing=0.01)
    side = panel_side(image, count, height)
    for i, (_, values) in enumerate(maps, start=1):
        small, cell = coarse(min_max(values) if shared_scale else values)
        add_overlay(figure, image, small, cell, row=1, col=i, max_side=side, zmin=0, zmax=1,
                    hovertemplate="%{z:.2f}<extra></extra>",
                    scale_title=MIN_MAX if shared_scale else "map value",
                    ).update(showscale=(i == count))
    figure.update_layout(height=height, margin=dict(l=0, r=0, t=50, b=0))
    return figure


@reused
def flow_figure(image: Image.Image, L: np.ndarray, D: np.ndarray, patch_size: tuple[int, int],
                labels: list[str], short_labels: list[str], opacity: float = 0.6,
                height: int = 480, start: int | None = None) -> go.Figure:
    """Animated DAAM flow: per-block map L_b (left) and accumulated D_b (right).

    `L` and `D` are (B, rows, cols) already scaled to [0, 1] for display. One
    frame per block (titled `labels[i]`, named `short_labels[i]` on the slider) updates
    only the two heatmap traces (indices 1 and 3); a play button and a slider scrub the
    frames in the browser, no rerun.
    """
    count = len(L)
    start = count - 1 if start is None else start
    figure = make_subplots(rows=1, cols=2, horizontal_spacing=0.04,
                           subplot_titles=("L_b: what block b adds",
                                           "D_b: accumulated up to block b"))
    hover = "row %{y}, col %{x}<br>display value %{z:.3f}<extra></extra>"
    side = panel_side(image, 2, height)
    add_overlay(figure, image, L[start], patch_size, row=1, col=1, max_side=side,
                opacity=opacity, zmin=0.0,
                zmax=1.0, name="L_b", hovertemplate=hover).update(showscale=False)
    add_overlay(figure, image, D[start], patch_size, row=1, col=2, max_side=side,
                opacity=opacity, zmin=0.0,
                zmax=1.0, name="D_b", hovertemplate=hover, scale_title="display value (0-1)")
    names = list(short_labels)
    figure.frames = [go.Frame(name=name, traces=[1, 3], data=[
        go.Heatmap(z=np.asarray(L[i], dtype=np.float32)),
        go.Heatmap(z=np.asarray(D[i], dtype=np.float32))],
        layout=dict(title_text=labels[i]))
        for i, name in enumerate(names)]
    still = dict(frame=dict(duration=0, redraw=True), mode="immediate",
                 transition=dict(duration=0))
    figure.update_layout(
        height=height, title=dict(text=labels[start], x=0.5),
        margin=dict(l=0, r=0, t=70, b=10),
        # the buttons on a row of their own, the slider under them: side by side, the
        # buttons covered the slider's first labels on a narrow screen
        updatemenus=[dict(type="buttons", direction="left", x=0.0, y=-0.02, xanchor="left",
                          yanchor="top", showactive=False, buttons=[
                              dict(label="▶ Play", method="animate",
                                   args=[names, dict(frame=dict(duration=FRAME_MS, redraw=True),
                                                     mode="immediate", fromcurrent=False,
                                                     transition=dict(duration=0))]),
                              dict(label="❚❚ Pause", method="animate",
                                   args=[[None], dict(frame=dict(duration=0, redraw=False),
                                                      mode="immediate")])])],
        sliders=[dict(active=start, x=0.0, len=1.0, y=-0.02, yanchor="top",
                      pad=dict(t=48, b=12, l=28, r=28),  # the end labels stay inside
                      currentvalue=dict(prefix="", xanchor="right"),
                      steps=[dict(label=name, method="animate", args=[[name], still])
                             for name in names])])
    return figure


@reused
def map_row_figure(image: Image.Image, maps: list[np.ndarray], titles: list[str],
                   patch_size: tuple[int, int], opacity: float = 0.6, height: int = 260,
                   signed: bool = False) -> go.Figure:
    """A row of maps over the same image, each min-max scaled for display; `signed`:
    each divided by its largest |value| on a blue-white-red scale centred on 0."""
    figure = make_subplots(rows=1, cols=len(maps), subplot_titles=titles,
                           horizontal_spacing=0.01)
    side = panel_side(image, len(maps), height)
    for i, values in enumerate(maps, start=1):
        if signed:
            shown, scale = np.asarray(values) / symmetric_bound(values), dict(
                zmin=-1.0, zmax=1.0, colorscale=DIVERGING,
                scale_title="share of max |value|",
                hovertemplate="row %{y}, col %{x}<br>%{z:.3f} of the largest |value|"
                              "<extra></extra>")
        else:
            shown, scale = min_max(values), dict(
                zmin=0.0, zmax=1.0, scale_title=MIN_MAX,
                hovertemplate="row %{y}, col %{x}<br>%{z:.3f}<extra></extra>")
        add_overlay(figure, image, shown, patch_size, row=1, col=i, opacity=opacity,
                    max_side=side, **scale).update(showscale=(i == len(maps)))
    figure.update_layout(height=height, margin=dict(l=0, r=0, t=50, b=0))
    figure.update_annotations(font_size=11)
    return figure


def _cell_size(image: Image.Image, grid: tuple[int, int]) -> tuple[float, float]:
    return image.height / grid[0], image.width / grid[1]


GREYED_SCALE = [[0.0, "rgb(40, 40, 40)"], [1.0, "rgb(200, 200, 200)"]]


# Maps beside the input on one line of the practical matrix: a model with more methods takes
# more lines. Fourteen side by side left 25 px thumbnails and 9 px labels on a phone and ran
# the method names together at 1280 px.
MAPS_PER_LINE = 5


def _matrix_lines(rows: list, per_line: int) -> list[tuple[int, str | None, list]]:
    """(model row, its label on the line's first panel or None, the maps on the line)."""
    lines = []
    for r, (label, _, maps) in enumerate(rows):
        for start in range(0, max(1, len(maps)), per_line):
            lines.append((r, label if start == 0 else None, maps[start:start + per_line]))
    return lines


def _hide_panel(figure: go.Figure, row: int, col: int) -> None:
    figure.update_xaxes(visible=False, row=row, col=col)
    figure.update_yaxes(visible=False, row=row, col=col)


@reused
def practical_matrix(rows: list[tuple[str, Image.Image, list[tuple[str, np.ndarray]]]],
                     opacity: float = 0.6, height_per_row: int = 260,
                     greyed: dict[tuple[int, str], float] | None = None) -> go.Figure:
    """One model per block of lines: its input image, then every method's map over it
    (at most MAPS_PER_LINE a line), on one scale. `rows` = [(row label, model image,
    [(method name, grid map), ...]), ...]; a label "family: class" goes on two lines. A map
    in `greyed` ((row index, method name) -> its seed stability) is drawn in greys, faint,
    its title saying why."""
    greyed = greyed or {}
    per_line = max(1, min(MAPS_PER_LINE, max(len(maps) for _, _, maps in rows)))
    columns = per_line + 1
    lines = _matrix_lines(rows, per_line)
    titles = []
    for r, label, maps in lines:
        titles += ["<br>".join(label.split(": ", 1)) if label else ""]
        titles += [f"{name} (unstable, rho {greyed[(r, name)]:.2f})" if (r, name) in greyed
                   else name for name, _ in maps]
        titles += [""] * (per_line - len(maps))
    figure = make_subplots(rows=len(lines), cols=columns, subplot_titles=titles,
                           horizontal_spacing=0.01, vertical_spacing=0.3 / len(lines))
    for line, (r, label, maps) in enumerate(lines, start=1):
        image = rows[r][1]
        side = panel_side(image, columns, height_per_row)
        if label is None:
            _hide_panel(figure, line, 1)
        else:
            add_image(figure, image, line, 1, side)
        for c, (name, values) in enumerate(maps, start=2):
            values = coarse(values)[0]  # pixel-level maps: area-averaged for sending only
            add_overlay(figure, image, min_max(values), _cell_size(image, values.shape), line, c,
                        max_side=side, opacity=opacity / 2 if (r, name) in greyed
                        else opacity, name=name,
                        hovertemplate=f"{name}<br>row %{{y}}, col %{{x}}"
                                      "<br>normalised %{z:.2f}<extra></extra>",
                        ).update(coloraxis="coloraxis2" if (r, name) in greyed
                                 else "coloraxis")
        for c in range(len(maps) + 2, columns + 1):
            _hide_panel(figure, line, c)
    figure.update_layout(coloraxis=dict(colorscale=HEATMAP_SCALE, cmin=0, cmax=1,
                                        colorbar=dict(title=dict(text=MIN_MAX, side="right"),
                                                      thickness=12)),
                         height=height_per_row * len(lines) + 40,
                         margin=dict(l=0, r=0, t=40, b=0))
    if greyed:
        figure.update_layout(coloraxis2=dict(colorscale=GREYED_SCALE, cmin=0, cmax=1,
                                             showscale=False))
    return figure


@reused
def localisation_figure(image: Image.Image, user_box, boxes: dict, peaks: dict,
                        title: str) -> go.Figure:
    """The image with the given box (white, dashed) and every method's estimated box and peak."""
    figure = image_figure(image, title, 420)
    x0, y0, x1, y1 = user_box
    figure.add_shape(type="rect", x0=x0, y0=y0, x1=x1, y1=y1,
                     line=dict(color="white", width=3, dash="dash"))
    for i, (name, box) in enumerate(boxes.items()):
        colour = LINE_COLOURS[i % len(LINE_COLOURS)]
        if box is not None:
            figure.add_shape(type="rect", x0=box[0], y0=box[1], x1=box[2], y1=box[3],
                             line=dict(color=colour, width=2))
        px, py = peaks[name]
        figure.add_trace(go.Scatter(x=[px], y=[py], mode="markers", name=name,
                                    marker=dict(color=colour, size=11, symbol="x")))
    return figure
