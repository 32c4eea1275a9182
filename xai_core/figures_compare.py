"""Plotly figures for the comparison page (no streamlit here), and PNG export.

Maps are min-max normalised per map and share ONE colour axis (0 = the map's
lowest value, 1 = its highest): raw scales differ by orders of magnitude between
methods, so ranks and shapes are what can be compared side by side.
"""

from __future__ import annotations

import io
import os
import shutil

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots
from PIL import Image

from .figures import HEATMAP_SCALE, grid_heatmap, image_data_uri, normalise
from .figures_gradcam import coarse

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
LINE_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                "#7f7f7f", "#bcbd22", "#17becf")


def _cell_size(image: Image.Image, grid: tuple[int, int]) -> tuple[float, float]:
    return image.height / grid[0], image.width / grid[1]


def practical_matrix(rows: list[tuple[str, Image.Image, list[tuple[str, np.ndarray]]]],
                     opacity: float = 0.6, height_per_row: int = 260) -> go.Figure:
    """One row per model: its input image, then every method's map over it, on one scale.
    `rows` = [(row label, model image, [(method name, grid map), ...]), ...]."""
    columns = max(1, max(len(maps) for _, _, maps in rows)) + 1
    titles = []
    for label, _, maps in rows:
        titles += [label] + [name for name, _ in maps] + [""] * (columns - 1 - len(maps))
    figure = make_subplots(rows=len(rows), cols=columns, subplot_titles=titles,
                           horizontal_spacing=0.01, vertical_spacing=0.08)
    for r, (_, image, maps) in enumerate(rows, start=1):
        source = image_data_uri(image)
        for c in range(1, len(maps) + 2):
            figure.add_trace(go.Image(source=source, hoverinfo="skip"), row=r, col=c)
            if c > 1:
                name, values = maps[c - 2]
                values = coarse(values)[0]  # pixel-level maps: area-averaged for sending only
                heat = grid_heatmap(normalise(values), _cell_size(image, values.shape), opacity,
                                    name=name, hovertemplate=f"{name}<br>row %{{y}}, col %{{x}}"
                                                             "<br>normalised %{z:.2f}<extra></extra>")
                heat.update(coloraxis="coloraxis")
                figure.add_trace(heat, row=r, col=c)
            figure.update_xaxes(visible=False, range=[0, image.width], row=r, col=c)
            figure.update_yaxes(visible=False, range=[image.height, 0], row=r, col=c,
                                scaleanchor=f"x{(r - 1) * columns + c if (r, c) != (1, 1) else ''}")
    figure.update_layout(coloraxis=dict(colorscale=HEATMAP_SCALE, cmin=0, cmax=1,
                                        colorbar=dict(title="min-max", thickness=12)),
                         height=height_per_row * len(rows) + 40, margin=dict(l=0, r=0, t=40, b=0))
    return figure


def curves_figure(curves: dict, title: str, metrics=("deletion", "insertion")) -> go.Figure:
    """Recorded faithfulness curves, one subplot per metric, one line per method.
    `curves` = {(method, metric): Curve}."""
    methods = list(dict.fromkeys(method for method, _ in curves))
    shown = [m for m in metrics if any(metric == m for _, metric in curves)]
    figure = make_subplots(rows=1, cols=max(1, len(shown)), subplot_titles=[
        f"{m} ({'lower' if m in ('deletion', 'pos-perturb') else 'higher'} AUC is better)"
        for m in shown])
    score_kind = ""
    for c, metric in enumerate(shown, start=1):
        for i, method in enumerate(methods):
            curve = curves.get((method, metric))
            if curve is None:
                continue
            score_kind = curve.score_kind
            figure.add_trace(go.Scatter(
                x=curve.fractions, y=curve.scores, mode="lines+markers", legendgroup=method,
                name=method, showlegend=c == 1, marker=dict(size=4),
                line=dict(color=LINE_COLOURS[i % len(LINE_COLOURS)]),
                hovertemplate=f"{method} (AUC {curve.auc:.3f})<br>%{{x:.0%}} perturbed"
                              "<br>score %{y:.4f}<extra></extra>"),
                row=1, col=c)
        figure.update_xaxes(title="fraction perturbed", tickformat=".0%", row=1, col=c)
    figure.update_yaxes(title=score_kind.split(" (")[0], row=1, col=1)
    figure.update_layout(title=title, height=380, margin=dict(l=10, r=10, t=70, b=10),
                         legend=dict(orientation="h", y=-0.25))
    return figure


def agreement_heatmap(names: list[str], values: np.ndarray, title: str, zmin: float = -1,
                      zmax: float = 1, colorscale: str = "RdBu") -> go.Figure:
    text = [["" if np.isnan(v) else f"{v:.2f}" for v in row] for row in values]
    figure = go.Figure(go.Heatmap(
        z=values, x=names, y=names, zmin=zmin, zmax=zmax, colorscale=colorscale, text=text,
        texttemplate="%{text}", hovertemplate="%{y} vs %{x}: %{z:.3f}<extra></extra>",
        colorbar=dict(thickness=12)))
    figure.update_layout(title=title, height=120 + 45 * len(names),
                         margin=dict(l=10, r=10, t=50, b=10))
    figure.update_yaxes(autorange="reversed")
    return figure


def attention_gradient_scatter(attention: np.ndarray, gradient: np.ndarray, rho: float,
                               title: str) -> go.Figure:
    """One point per patch: how much [CLS] attends to it vs how sensitive the score is to it."""
    rows, cols = attention.shape
    r, c = np.divmod(np.arange(rows * cols), cols)
    figure = go.Figure(go.Scatter(
        x=attention.ravel(), y=gradient.ravel(), mode="markers", marker=dict(size=6, opacity=0.7),
        customdata=np.stack([r, c], axis=1),
        hovertemplate="patch row %{customdata[0]}, col %{customdata[1]}<br>attention %{x:.4f}"
                      "<br>gradient %{y:.3g}<extra></extra>"))
    figure.update_layout(title=f"{title} (Spearman ρ = {rho:.3f})", height=380,
                         xaxis_title="[CLS] attention (last block, head mean)",
                         yaxis_title="|∂score/∂pixel| per patch",
                         margin=dict(l=10, r=10, t=50, b=10))
    return figure


def localisation_figure(image: Image.Image, user_box, boxes: dict, peaks: dict,
                        title: str) -> go.Figure:
    """The image with the given box (white, dashed) and every method's estimated box and peak."""
    figure = go.Figure(go.Image(source=image_data_uri(image), hoverinfo="skip"))
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
    figure.update_xaxes(visible=False, range=[0, image.width])
    figure.update_yaxes(visible=False, range=[image.height, 0], scaleanchor="x")
    figure.update_layout(title=title, height=420, margin=dict(l=0, r=0, t=40, b=0))
    return figure


class ExportUnavailable(RuntimeError):
    """PNG export cannot run here (no browser for kaleido); the message says what to do."""


def find_browser() -> str | None:
    """The Chromium kaleido will drive: $BROWSER_PATH, else the first one on PATH."""
    configured = os.environ.get("BROWSER_PATH")
    if configured:
        return configured if os.path.exists(configured) else None
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


def comparison_png(figures: list[go.Figure], width: int = 1400) -> bytes:
    """Render every figure with kaleido (one browser session for all of them) and stack
    the images top to bottom into one PNG."""
    import tempfile

    import plotly.io as pio

    if find_browser() is None:
        raise ExportUnavailable(
            "PNG export needs a Chromium browser on the server for kaleido, and none was found "
            "(install the Debian package `chromium`, or set BROWSER_PATH). The NPZ and JSON "
            "downloads work without it.")
    with tempfile.TemporaryDirectory() as folder:
        files = [os.path.join(folder, f"part{i}.png") for i in range(len(figures))]
        copies = [go.Figure(f).update_layout(template="plotly_white") for f in figures]
        try:
            pio.write_images(copies, files, format="png", width=width)
        except Exception as error:  # kaleido/choreographer report browser failures many ways
            raise ExportUnavailable(f"The browser could not render the PNG ({error}). "
                                    "The NPZ and JSON downloads still work.") from None
        parts = [Image.open(f).convert("RGB") for f in files]
    canvas = Image.new("RGB", (max(p.width for p in parts), sum(p.height for p in parts)),
                       "white")
    top = 0
    for part in parts:
        canvas.paste(part, (0, top))
        top += part.height
    buffer = io.BytesIO()
    canvas.save(buffer, format="PNG", optimize=True)
    return buffer.getvalue()
