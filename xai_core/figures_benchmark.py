"""Plotly figures for a benchmark over a data set (page 7's data-set view; no streamlit)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .figures_compare import LINE_COLOURS

FLOOR_COLOUR = "#7f7f7f"


def ranking_figure(table: dict, floor: str = "random") -> go.Figure:
    """One model x metric table of the summary: each method's mean with its bootstrap 95 %
    interval, best mean rank on top, the random floor grey with a dashed line at its mean."""
    entries = [e for e in table["methods"] if e["mean"] is not None]
    names = [e["method"] for e in entries]
    means = np.array([e["mean"] for e in entries], dtype=float)
    low = np.array([e["interval"][0] for e in entries], dtype=float)
    high = np.array([e["interval"][1] for e in entries], dtype=float)
    colours = [FLOOR_COLOUR if n == floor else LINE_COLOURS[0] for n in names]
    verdicts = [e.get("vs_random", {}).get("verdict", "the floor" if e["method"] == floor
                                           else "") for e in entries]
    figure = go.Figure(go.Scatter(
        x=means, y=names, mode="markers", marker=dict(size=10, color=colours),
        error_x=dict(type="data", symmetric=False, array=high - means, arrayminus=means - low,
                     thickness=2),
        customdata=np.stack([low, high, [e["mean_rank"] or np.nan for e in entries]], axis=1),
        text=verdicts,
        hovertemplate="%{y}: mean %{x:.4f}<br>95 % interval [%{customdata[0]:.4f}, "
                      "%{customdata[1]:.4f}]<br>mean rank %{customdata[2]:.2f}<br>%{text}"
                      "<extra></extra>"))
    floor_entry = next((e for e in entries if e["method"] == floor), None)
    if floor_entry is not None:
        figure.add_vline(x=floor_entry["mean"], line=dict(color=FLOOR_COLOUR, dash="dash"))
    figure.update_yaxes(autorange="reversed", title=None)
    figure.update_layout(
        title=f"{table['model']} · {table['metric']} ({table['better']} is better)",
        xaxis_title="mean over images (bootstrap 95 % interval)", showlegend=False,
        height=120 + 34 * len(names), margin=dict(l=10, r=10, t=50, b=10))
    return figure


def mean_curves_figure(curves: dict, model_id: str) -> go.Figure:
    """The recorded curves of one model averaged over images, one subplot per metric.
    `curves` = summary.mean_curves(...)."""
    metrics = [metric for (model, metric) in curves if model == model_id]
    figure = make_subplots(rows=1, cols=max(1, len(metrics)), subplot_titles=metrics)
    methods = sorted({m for metric in metrics for m in curves[(model_id, metric)]})
    for c, metric in enumerate(metrics, start=1):
        for i, method in enumerate(methods):
            if method not in curves[(model_id, metric)]:
                continue
            fractions, scores, count = curves[(model_id, metric)][method]
            colour = FLOOR_COLOUR if method == "random" else LINE_COLOURS[i % len(LINE_COLOURS)]
            figure.add_trace(go.Scatter(
                x=fractions, y=scores, mode="lines", name=method, legendgroup=method,
                showlegend=c == 1, line=dict(color=colour, dash="dash" if method == "random"
                                             else "solid"),
                hovertemplate=f"{method} ({count} images)<br>%{{x:.0%}} perturbed<br>mean score "
                              "%{y:.4f}<extra></extra>"), row=1, col=c)
        figure.update_xaxes(title="fraction perturbed", tickformat=".0%", row=1, col=c)
    figure.update_yaxes(title="class score, mean over images", row=1, col=1)
    figure.update_layout(title=f"{model_id}: curves averaged over images", height=380,
                         margin=dict(l=10, r=10, t=70, b=10), legend=dict(orientation="h", y=-0.3))
    return figure
