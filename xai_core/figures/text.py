"""Plotly figures for the text-attention page (no streamlit here).

Tokens are placed at integer positions with their text as tick labels, so a word that
occurs twice ("the ... the") keeps two separate rows and columns.
"""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .reuse import reused

SCALE = "Blues"
LINE_RGB = (31, 119, 180)
HIGHLIGHT_RGB = (214, 39, 40)
HOVER_TOKEN_LIMIT = 96  # above this many tokens, heatmap hovers show positions only


def _axis(tokens, show: bool = True) -> dict:
    return dict(tickmode="array", tickvals=list(range(len(tokens))), ticktext=list(tokens),
                showticklabels=show)


@reused
def attention_heatmap(matrix: np.ndarray, tokens, title: str, highlight: int | None = None,
                      zmax: float | None = None, height: int = 520) -> go.Figure:
    """One head's (or a head mean's) attention: rows = queries, columns = keys."""
    matrix = np.asarray(matrix, dtype=float)
    n = len(tokens)
    hover = "query %{y}<br>key %{x}<br>weight %{z:.3f}<extra></extra>"
    customdata = None
    if n <= HOVER_TOKEN_LIMIT:
        labels = np.asarray(tokens, dtype=object)
        customdata = np.stack(np.broadcast_arrays(labels[:, None], labels[None, :]), axis=-1)
        hover = ("query %{y} '%{customdata[0]}'<br>key %{x} '%{customdata[1]}'"
                 "<br>weight %{z:.3f}<extra></extra>")
    figure = go.Figure(go.Heatmap(z=matrix, x=list(range(n)), y=list(range(n)), zmin=0,
                                  zmax=zmax if zmax is not None else max(float(matrix.max()), 1e-9),
                                  colorscale=SCALE, customdata=customdata, hovertemplate=hover,
                                  # over the plot, not beside it: the keys' columns keep the
                                  # width (16 tokens' names need it in half a projector's page)
                                  colorbar=dict(orientation="h", thickness=10, len=1, x=0.5,
                                                xanchor="center", y=1.02, yanchor="bottom",
                                                nticks=4, title=dict(text="weight",
                                                                     side="top"))))
    if highlight is not None:
        figure.add_shape(type="rect", x0=-0.5, x1=n - 0.5, y0=highlight - 0.5,
                         y1=highlight + 0.5, line=dict(color=_rgba(HIGHLIGHT_RGB, 1), width=3))
    figure.update_layout(title=title, height=height, margin=dict(l=10, r=10, t=50, b=10))
    figure.update_xaxes(title="key (attended to)", tickangle=-60, **_axis(tokens))
    figure.update_yaxes(title="query (attending)", autorange="reversed", **_axis(tokens))
    return figure


def _rgba(rgb, alpha: float) -> str:
    return f"rgba({rgb[0]},{rgb[1]},{rgb[2]},{alpha:.2f})"


def _bucketed_lines(matrix: np.ndarray, pairs, rgb, max_width: float, buckets: int,
                    name: str) -> list[go.Scatter]:
    """Lines from query i (x=0) to key j (x=1) grouped into `buckets` weight levels: a
    Plotly trace has one width, so each level is one trace (width and opacity ~ weight)."""
    traces = []
    levels = np.minimum((np.array([matrix[i, j] for i, j in pairs]) * buckets).astype(int),
                        buckets - 1) if pairs else np.array([], dtype=int)
    for level in range(buckets):
        chosen = [pair for pair, lvl in zip(pairs, levels) if lvl == level]
        if not chosen:
            continue
        weight = (level + 0.5) / buckets
        xs, ys = [], []
        for i, j in chosen:
            xs += [0, 1, None]
            ys += [i, j, None]
        traces.append(go.Scatter(
            x=xs, y=ys, mode="lines", hoverinfo="skip", showlegend=False, name=name,
            line=dict(width=max(0.5, max_width * weight), color=_rgba(rgb, 0.2 + 0.8 * weight))))
    return traces


@reused
def attention_lines(matrix: np.ndarray, tokens, title: str, highlight: int | None = None,
                    min_weight: float = 0.01, top_k: int | None = None,
                    max_width: float = 10.0, buckets: int = 10) -> go.Figure:
    """The bertviz head-view idea: queries on the left, keys on the right, one line per
    weight with width and opacity proportional to it. Weights below `min_weight` (and,
    with `top_k`, all but each query's k largest) are not drawn.

    With `highlight`, that query's lines are drawn in red on top and the others fade.
    The token markers carry their index in customdata, for click-to-highlight.
    """
    matrix = np.asarray(matrix, dtype=float)
    n = len(tokens)
    keep = matrix >= min_weight
    if top_k is not None and top_k < n:
        kth = -np.sort(-matrix, axis=1)[:, top_k - 1:top_k]
        keep &= matrix >= kth
    pairs = [(int(i), int(j)) for i, j in zip(*np.nonzero(keep))]
    background = [p for p in pairs if p[0] != highlight]
    figure = go.Figure()
    faded = highlight is not None
    for trace in _bucketed_lines(matrix, background, LINE_RGB, max_width * (0.5 if faded else 1),
                                 buckets, "attention"):
        if faded:
            trace.line.color = "rgba(160,160,160,0.18)"
        figure.add_trace(trace)
    if highlight is not None:
        mine = [p for p in pairs if p[0] == highlight]
        for trace in _bucketed_lines(matrix, mine, HIGHLIGHT_RGB, max_width, buckets, "row"):
            figure.add_trace(trace)
    summaries = [_top_keys(matrix[i], tokens, i) for i in range(n)]
    received = matrix.sum(0)
    figure.add_trace(go.Scatter(
        x=[0] * n, y=list(range(n)), mode="markers+text", text=list(tokens),
        textposition="middle left", customdata=np.arange(n), showlegend=False, name="queries",
        marker=dict(size=9, color=_rgba(LINE_RGB, 0.9)), hovertext=summaries,
        hovertemplate="%{hovertext}<extra>click to highlight</extra>"))
    figure.add_trace(go.Scatter(
        x=[1] * n, y=list(range(n)), mode="markers+text", text=list(tokens),
        textposition="middle right", customdata=np.arange(n), showlegend=False, name="keys",
        marker=dict(size=9, color=_rgba(LINE_RGB, 0.9)),
        hovertext=[f"'{t}' receives {r:.2f} in total (sum of its column)"
                   for t, r in zip(tokens, received)],
        hovertemplate="%{hovertext}<extra></extra>"))
    figure.update_layout(title=title, height=max(320, 22 * n + 80),
                         margin=dict(l=10, r=10, t=50, b=10), clickmode="event+select",
                         dragmode=False)
    figure.update_xaxes(visible=False, range=[-0.9, 1.9])
    figure.update_yaxes(visible=False, autorange="reversed")
    return figure


def _top_keys(row: np.ndarray, tokens, query: int, count: int = 3) -> str:
    best = np.argsort(-row)[:count]
    parts = ", ".join(f"'{tokens[j]}' {row[j]:.2f}" for j in best)
    return f"'{tokens[query]}' attends most to {parts}"


@reused
def all_heads_grid(layer_attention: np.ndarray, tokens, title: str, columns: int = 4,
                   label_limit: int = 24) -> go.Figure:
    """Every head of one layer as small heatmaps on one shared colour scale (rows = queries)."""
    layer_attention = np.asarray(layer_attention, dtype=float)
    heads, n = layer_attention.shape[0], len(tokens)
    rows = math.ceil(heads / columns)
    figure = make_subplots(rows=rows, cols=columns,
                           subplot_titles=[f"head {h}" for h in range(heads)],
                           horizontal_spacing=0.02, vertical_spacing=0.06)
    for h in range(heads):
        figure.add_trace(go.Heatmap(
            z=layer_attention[h], x=list(range(n)), y=list(range(n)), coloraxis="coloraxis",
            hovertemplate=f"head {h}<br>query %{{y}} -> key %{{x}}<br>weight %{{z:.3f}}"
                          "<extra></extra>"), row=h // columns + 1, col=h % columns + 1)
    labels = n <= label_limit
    for h in range(heads):
        r, c = h // columns + 1, h % columns + 1
        figure.update_xaxes(**_axis(tokens, labels and r == rows), tickangle=-60, row=r, col=c)
        figure.update_yaxes(**_axis(tokens, labels and c == 1), autorange="reversed", row=r, col=c)
    figure.update_layout(title=title, height=260 * rows + 80, margin=dict(l=10, r=10, t=70, b=10),
                         coloraxis=dict(colorscale=SCALE, cmin=0,
                                        cmax=max(float(layer_attention.max()), 1e-9),
                                        colorbar=dict(thickness=12, title="weight")))
    return figure


@reused
def head_metric_heatmap(values: np.ndarray, title: str, colorbar_title: str,
                        height: int = 330) -> go.Figure:
    """A (layers, heads) table of one specialisation metric as a heatmap."""
    values = np.asarray(values, dtype=float)
    layers, heads = values.shape
    figure = go.Figure(go.Heatmap(
        z=values, x=list(range(heads)), y=list(range(layers)), colorscale="Viridis",
        text=np.round(values, 2), texttemplate="%{text}",
        hovertemplate="layer %{y}, head %{x}<br>%{z:.3f}<extra></extra>",
        colorbar=dict(thickness=12, title=colorbar_title)))
    figure.update_layout(title=title, height=height, margin=dict(l=10, r=10, t=50, b=10))
    figure.update_xaxes(title="head", dtick=1)
    figure.update_yaxes(title="layer", dtick=1, autorange="reversed")
    return figure


PROGRESSION_LINES = {  # key in layer_progression -> legend label
    "entropy_fraction": "entropy / log N (1 = uniform)",
    "self": "self-attention share",
    "cls": "attention on [CLS]",
    "sep": "attention on [SEP]",
    "previous": "previous-token share",
}


@reused
def layer_progression_figure(progression: dict[str, np.ndarray], title: str,
                             height: int = 360) -> go.Figure:
    """Per-layer averages (over heads and queries) as lines, all on a 0-1 scale."""
    figure = go.Figure()
    layers = len(next(iter(progression.values())))
    for key, label in PROGRESSION_LINES.items():
        custom = progression["entropy"] if key == "entropy_fraction" else progression[key]
        unit = " nats" if key == "entropy_fraction" else ""
        figure.add_trace(go.Scatter(
            x=list(range(layers)), y=progression[key], mode="lines+markers", name=label,
            customdata=custom,
            hovertemplate=f"layer %{{x}}<br>{label}: %{{y:.3f}} (%{{customdata:.3f}}{unit})"
                          "<extra></extra>"))
    figure.update_layout(title=title, height=height, margin=dict(l=10, r=10, t=50, b=10),
                         legend=dict(orientation="h", y=-0.25))
    figure.update_xaxes(title="layer", dtick=1)
    figure.update_yaxes(title="share / fraction", range=[0, 1.02])
    return figure


@reused
def token_bars(tokens, series: dict[str, np.ndarray], title: str, yaxis_title: str,
               height: int = 340) -> go.Figure:
    """Grouped bars, one group per token, one colour per named series."""
    figure = go.Figure()
    for name, values in series.items():
        figure.add_trace(go.Bar(x=list(range(len(tokens))), y=np.asarray(values, dtype=float),
                                name=name, customdata=list(tokens),
                                hovertemplate="'%{customdata}': %{y:.3f}<extra>" + name
                                              + "</extra>"))
    figure.update_layout(title=title, height=height, barmode="group",
                         margin=dict(l=10, r=10, t=50, b=10), legend=dict(orientation="h", y=1.12))
    figure.update_xaxes(tickangle=-60, **_axis(tokens))
    figure.update_yaxes(title=yaxis_title)
    return figure


@reused
def attention_vs_gradient_figure(tokens, attention: np.ndarray, importance: np.ndarray,
                                 attention_label: str, rho: float, height: int = 380) -> go.Figure:
    """Left: both per-token signals scaled to their own maximum; right: one against the
    other, each point a token."""
    attention = np.asarray(attention, dtype=float)
    importance = np.asarray(importance, dtype=float)
    rho_text = "undefined" if not np.isfinite(rho) else f"{rho:+.2f}"
    figure = make_subplots(rows=1, cols=2, column_widths=[0.64, 0.36], horizontal_spacing=0.08,
                           subplot_titles=["each scaled to its maximum",
                                           f"tokens: Spearman rho = {rho_text}"])
    positions = list(range(len(tokens)))
    for values, name in ((attention, attention_label), (importance, "gradient x input")):
        top = values.max() if values.max() > 0 else 1.0
        figure.add_trace(go.Bar(x=positions, y=values / top, name=name, customdata=values,
                                hovertemplate="%{customdata:.4f}<extra>" + name + "</extra>"),
                         row=1, col=1)
    figure.add_trace(go.Scatter(x=attention, y=importance, mode="markers+text", text=list(tokens),
                                textposition="top center", showlegend=False,
                                hovertemplate="'%{text}'<br>attention %{x:.3f}<br>"
                                              "importance %{y:.4f}<extra></extra>"),
                     row=1, col=2)
    figure.update_layout(title=None, height=height, barmode="group",
                         margin=dict(l=10, r=10, t=40, b=10), legend=dict(orientation="h", y=-0.3))
    figure.update_xaxes(tickangle=-60, **_axis(tokens), row=1, col=1)
    figure.update_yaxes(title="share of its maximum", row=1, col=1)
    figure.update_xaxes(title="attention", row=1, col=2)
    figure.update_yaxes(title="gradient x input", row=1, col=2)
    return figure
