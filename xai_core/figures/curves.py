"""Curves, bars and scatter plots: numbers against depth, temperature, fraction perturbed
or each other."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from .reuse import reused
from .style import LINE_COLOURS, plain_text

HEAD_COLOURS = qualitative.Dark24


@reused
def prediction_bars(labels: list[str], probabilities: list[float], title: str,
                    height: int = 300) -> go.Figure:
    figure = go.Figure(go.Bar(x=probabilities[::-1], y=[plain_text(l[:40]) for l in labels[::-1]],
                              orientation="h", text=[f"{p:.1%}" for p in probabilities[::-1]],
                              textposition="auto"))
    figure.update_layout(title=title, height=height, margin=dict(l=10, r=10, t=40, b=10),
                         xaxis=dict(range=[0, 1], tickformat=".0%", title="probability"))
    return figure


def _head_colour(head: int) -> str:
    return HEAD_COLOURS[head % len(HEAD_COLOURS)]


@reused
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


@reused
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
    # the stages named in the hover: on the line their names ran into each other and into
    # the axis at a projector's type size
    figure.add_trace(go.Scatter(
        x=stage_positions, y=[s.rf for s in stages], mode="lines+markers", name=cnn_name,
        customdata=[[s.stage, s.name, s.kernel, s.stride, s.jump] for s in stages],
        hovertemplate="%{customdata[0]} (ends at %{customdata[1]})<br>receptive field %{y} "
                      "px<br>last kernel %{customdata[2]}, stride %{customdata[3]}; "
                      "jump %{customdata[4]} px<extra></extra>"))
    # a trace, not add_hline: shapes on a log axis take log10 coordinates
    depth = max(len(textbook), max(stage_positions, default=1))
    figure.add_trace(go.Scatter(
        x=[1, depth], y=[image_size, image_size], mode="lines", name=f"input size {image_size} px",
        line=dict(dash="dot", color="black"), hoverinfo="skip"))
    # powers of ten only: plotly's 2 and 5 between them come at 70 % of the type size
    top = max([*textbook, *(s.rf for s in stages), image_size])
    decades = [10 ** p for p in range(0, int(np.ceil(np.log10(top))) + 1)]
    figure.update_layout(title=title, height=height, xaxis_title="spatial layers so far",
                         yaxis=dict(title="receptive field (pixels)", type="log",
                                    tickvals=decades, ticktext=[str(d) for d in decades]),
                         margin=dict(l=10, r=10, t=50, b=10),
                         legend=dict(orientation="h", y=-0.2))
    return figure


@reused
def curves_figure(curves: dict, title: str, better: dict[str, str]) -> go.Figure:
    """Recorded faithfulness curves, one subplot per metric of `better` (metric -> which
    AUC is better, "lower" or "higher", as the metric declares it), one line per method.
    `curves` = {(method, metric): Curve}."""
    methods = list(dict.fromkeys(method for method, _ in curves))
    shown = [m for m in better if any(metric == m for _, metric in curves)]
    figure = make_subplots(rows=1, cols=max(1, len(shown)), subplot_titles=[
        f"{m} ({better[m]} AUC is better)" for m in shown])
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
    figure.update_yaxes(title=score_kind.split(" (")[0])  # every panel: one may stand alone
    figure.update_layout(title=title, height=380, margin=dict(l=10, r=10, t=70, b=10),
                         legend=dict(orientation="h", y=-0.25))
    return figure


@reused
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


@reused
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
                         yaxis=dict(tickformat=".0%", rangemode="tozero",
                                    title="share of D_B"))
    return figure


@reused
def weights_figure(weights: np.ndarray, height: int = 220) -> go.Figure:
    """The eq. 13 weight of every output dimension (what the backward starts from)."""
    figure = go.Figure(go.Bar(y=np.asarray(weights, dtype=float),
                              hovertemplate="dimension %{x}<br>w = %{y:.3f}<extra></extra>"))
    figure.update_layout(height=height, margin=dict(l=10, r=10, t=40, b=10), bargap=0,
                         title="Dimension-wise importance weights w (eq. 13)",
                         xaxis_title="output dimension d", yaxis_title="weight w")
    return figure


@reused
def alpha_bars(alpha: np.ndarray, layer: str, height: int = 300) -> go.Figure:
    """The channel weights alpha_k in channel order, coloured by sign."""
    alpha = np.asarray(alpha, dtype=float)
    colours = np.where(alpha >= 0, "#d62728", "#1f77b4")
    figure = go.Figure(go.Bar(x=np.arange(alpha.size), y=alpha, marker_color=colours,
                              hovertemplate="channel %{x}<br>α = %{y:.3g}<extra></extra>"))
    positive = int((alpha > 0).sum())
    figure.update_layout(
        title=f"α<sub>k</sub> for the {alpha.size} channels of {layer} ({positive} positive)",
        height=height, margin=dict(l=10, r=10, t=40, b=10), bargap=0,
        xaxis_title="channel k", yaxis_title="α<sub>k</sub>")
    return figure


@reused
def distribution_figure(labels, probabilities: np.ndarray, title: str,
                        height: int = 280) -> go.Figure:
    figure = go.Figure(go.Bar(x=list(labels), y=probabilities,
                              text=[f"{p:.2f}" for p in probabilities], textposition="auto"))
    figure.update_layout(title=title, height=height, margin=dict(l=10, r=10, t=40, b=10),
                         yaxis=dict(range=[0, 1], title="attention weight"))
    return figure


@reused
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


# --- a benchmark over a data set (page 7) ------------------------------------------------

FLOOR_COLOUR = "#7f7f7f"


@reused
def ranking_figure(table: dict, floor: str = "random") -> go.Figure:
    """One model x metric table of the summary: each method's mean with its 95 % interval
    (the summary's: Student's t), best mean rank on top, the random floor grey with a dashed line at its mean."""
    entries = [e for e in table["methods"] if e["mean"] is not None]
    names = [e["method"] for e in entries]
    means = np.array([e["mean"] for e in entries], dtype=float)
    low = np.array([e["interval"][0] for e in entries], dtype=float)
    high = np.array([e["interval"][1] for e in entries], dtype=float)
    colours = [FLOOR_COLOUR if n == floor else LINE_COLOURS[0] for n in names]
    verdicts = [e.get("vs_random", {}).get("verdict", "the floor" if e["method"] == floor
                                           else "") for e in entries]
    figure = go.Figure(go.Scatter(
        x=means, y=[plain_text(n) for n in names], mode="markers",
        marker=dict(size=10, color=colours),
        error_x=dict(type="data", symmetric=False, array=high - means, arrayminus=means - low,
                     thickness=2),
        customdata=np.stack([low, high, [e["mean_rank"] or np.nan for e in entries],
                             *np.array([e.get("rank_interval") or [None, None] for e in entries],
                                       dtype=float).T], axis=1),
        text=verdicts,
        hovertemplate="%{y}: mean %{x:.4f}<br>95 % interval [%{customdata[0]:.4f}, "
                      "%{customdata[1]:.4f}]<br>mean rank %{customdata[2]:.2f} "
                      "[%{customdata[3]:.2f}, %{customdata[4]:.2f}]<br>%{text}"
                      "<extra></extra>"))
    floor_entry = next((e for e in entries if e["method"] == floor), None)
    if floor_entry is not None:
        figure.add_vline(x=floor_entry["mean"], line=dict(color=FLOOR_COLOUR, dash="dash"))
    figure.update_yaxes(autorange="reversed", title=None)
    figure.update_layout(
        title=f"{plain_text(table['model'])} · {table['metric']} ({table['better']} is better)",
        xaxis_title="mean over images (t 95 % interval)", showlegend=False,
        height=120 + 34 * len(names), margin=dict(l=10, r=10, t=50, b=10))
    return figure


@reused
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
            shown = plain_text(method)  # read from a results.json
            colour = FLOOR_COLOUR if method == "random" else LINE_COLOURS[i % len(LINE_COLOURS)]
            figure.add_trace(go.Scatter(
                x=fractions, y=scores, mode="lines", name=shown, legendgroup=method,
                showlegend=c == 1, line=dict(color=colour, dash="dash" if method == "random"
                                             else "solid"),
                hovertemplate=f"{shown} ({count} images)<br>%{{x:.0%}} perturbed<br>mean score "
                              "%{y:.4f}<extra></extra>"), row=1, col=c)
        figure.update_xaxes(title="fraction perturbed", tickformat=".0%", row=1, col=c)
    figure.update_yaxes(title="class score, mean over images")
    figure.update_layout(title=f"{plain_text(model_id)}: curves averaged over images", height=380,
                         margin=dict(l=10, r=10, t=70, b=10), legend=dict(orientation="h", y=-0.3))
    return figure
