"""Figures of the intervention lab (page 9): predictions before and after, maps before and
after, the read-out per block, head importance beside the attention stories, cause vs
claim curves, the patch picker of predict-then-reveal and its reveal. Plotly only; every
colour bar and axis names its unit. Every builder is `@reused`: a class opening page 9 asks
for the same figures at once (building the maps before and after took 0.33 s a visit)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots
from PIL import Image

from ..maps import min_max
from .click_targets import patch_click_targets
from .overlays import add_image, add_overlay, overlay_figure, patch_grid_lines
from .reuse import reused
from .style import DIVERGING, LINE_COLOURS, plain_text, symmetric_bound

MAP_NAMES = {"attention": "attention (last block)", "rollout": "rollout", "gae": "GAE",
             "vit-gradcam": "ViT Grad-CAM"}
SCALED = "min-max scaled per map (0-1)"
# short: three panels share a phone's width (the page's text says what each story measures)
STORY_AXES = {"sink score": "sink score (share)", "entropy (nats)": "entropy (nats)",
              "rollout weight": "rollout weight (share)"}


def short_score(score_kind: str) -> str:
    """'softmax probability of the class' -> 'softmax probability' (axis titles)."""
    return score_kind.split(" (")[0].replace(" of the class", "")


@reused
def before_after_bars(before: list, after: list, unit: str, height: int = 300) -> go.Figure:
    """Top-5 before and after, side by side; the bars are the head's probabilities."""
    figure = make_subplots(rows=1, cols=2, subplot_titles=("before", "after"),
                           horizontal_spacing=0.25)
    for col, top in enumerate((before, after), start=1):
        figure.add_trace(go.Bar(
            x=[p.probability for p in top][::-1],
            y=[plain_text(p.label[:30]) for p in top][::-1], orientation="h",
            text=[f"{p.probability:.1%}" for p in top][::-1], textposition="auto",
            showlegend=False), row=1, col=col)
        figure.update_xaxes(title=unit, tickformat=".0%", range=[0, 1], row=1, col=col)
    figure.update_layout(height=height, margin=dict(l=10, r=10, t=40, b=10))
    return figure


@reused
def maps_before_after(image: Image.Image, before: dict, after: dict,
                      patch_size: tuple[float, float], height: int = 420) -> go.Figure:
    """Row 1 the plain forward's maps, row 2 the same maps under the intervention, each
    min-max scaled on its own."""
    names = [name for name in MAP_NAMES if name in before and name in after]
    titles = [f"{MAP_NAMES[n]}: before" for n in names] + ["after"] * len(names)
    figure = make_subplots(rows=2, cols=len(names), subplot_titles=titles,
                           vertical_spacing=0.08, horizontal_spacing=0.01)
    for row, maps in enumerate((before, after), start=1):
        for col, name in enumerate(names, start=1):
            trace = add_overlay(figure, image, min_max(maps[name]), patch_size, row=row,
                                col=col, max_side=160, zmin=0.0, zmax=1.0, opacity=0.6)
            trace.update(showscale=(row == 1 and col == len(names)),
                         colorbar=dict(thickness=12, title=dict(text=SCALED, side="right",
                                                                font=dict(size=11))))
    figure.update_layout(height=height, margin=dict(l=0, r=0, t=40, b=0))
    figure.update_annotations(font_size=11)
    return figure


@reused
def readout_figure(scores: np.ndarray, score_kind: str, first_block: int,
                   height: int = 300) -> go.Figure:
    """The target's score read out after each block."""
    blocks = list(range(len(scores)))
    figure = go.Figure(go.Scatter(x=blocks, y=scores, mode="lines+markers", name="target",
                                  hovertemplate="block %{x}<br>%{y:.4f}<extra></extra>"))
    figure.add_vline(x=first_block, line=dict(dash="dot", color="grey"))
    figure.update_xaxes(title="block (0-based): the read-out after it", tickmode="array",
                        tickvals=blocks)
    figure.update_yaxes(title=f"target's {short_score(score_kind)}")
    figure.update_layout(height=height, margin=dict(l=10, r=10, t=30, b=10))
    return figure


@reused
def readout_patch_figure(image: Image.Image, scores: np.ndarray,
                         patch_size: tuple[float, float], block: int,
                         score_kind: str) -> go.Figure:
    """Each patch token of one block read out alone: the target's score per patch."""
    return overlay_figure(image, scores, patch_size, height=400,
                          title=f"Block {block}: each patch read out alone",
                          scale_title=short_score(score_kind))


@reused
def stories_figure(drops: np.ndarray, stories: dict[str, np.ndarray], rho: dict[str, float],
                   score_kind: str, height: int = 330) -> go.Figure:
    """One dot per head: its importance (score drop when switched off) against each story."""
    names = list(stories)
    figure = make_subplots(rows=1, cols=len(names), shared_yaxes=True,
                           subplot_titles=[f"{n}: ρ = {rho[n]:+.2f}" for n in names])
    blocks, heads = np.meshgrid(*map(np.arange, drops.shape), indexing="ij")
    for col, name in enumerate(names, start=1):
        figure.add_trace(go.Scatter(
            x=stories[name].ravel(), y=drops.ravel(), mode="markers", showlegend=False,
            customdata=np.stack([blocks.ravel(), heads.ravel()], axis=1).tolist(),
            hovertemplate="block %{customdata[0]}, head %{customdata[1]}<br>"
                          f"{name} %{{x:.3f}}<br>drop %{{y:+.4f}}<extra></extra>"),
            row=1, col=col)
        figure.update_xaxes(title=STORY_AXES.get(name, name), row=1, col=col)
    figure.update_yaxes(title=f"drop ({short_score(score_kind)})", row=1, col=1)
    figure.update_layout(height=height, margin=dict(l=10, r=10, t=40, b=10))
    return figure


@reused
def claims_figure(found, removal: str, height: int = 680) -> go.Figure:
    """Score drop against k: each method's top-k, the random draws' mean with its t interval
    as a band, and the learner's choice as a star."""
    ks, part = list(found.ks), found.removals[removal]
    interval = part.random_interval()
    figure = go.Figure()
    figure.add_trace(go.Scatter(
        x=ks + ks[::-1], y=list(interval[:, 1]) + list(interval[::-1, 0]), fill="toself",
        fillcolor="rgba(120,120,120,0.25)", line=dict(width=0), hoverinfo="skip",
        # two lines: in half a phone's width one line ran into the next column's entry
        name=f"random: 95% t<br>interval, {found.draws} draws"))
    figure.add_trace(go.Scatter(x=ks, y=part.random_mean(), mode="lines", name="random (mean)",
                                line=dict(color="grey", dash="dash")))
    for i, (name, drops) in enumerate(part.methods.items()):
        figure.add_trace(go.Scatter(
            x=ks, y=drops, mode="lines+markers", name=name,
            line=dict(color=LINE_COLOURS[i % len(LINE_COLOURS)]),
            hovertemplate=f"{name}<br>k = %{{x}}<br>drop %{{y:+.4f}}<extra></extra>"))
    if part.learner is not None:
        figure.add_trace(go.Scatter(x=[len(found.learner)], y=[part.learner], mode="markers",
                                    name="your patches", marker=dict(symbol="star", size=16,
                                                                     color="black")))
    figure.update_xaxes(title="k: patches removed", type="log", tickvals=ks)
    figure.update_yaxes(title=f"drop of the target's {short_score(found.score_kind)}", nticks=6)
    # the legend in two columns under the plot: one row of ten methods ran past the chart's
    # edge on a projector, one column left the plot a third of a 1280x720 screen
    figure.update_layout(height=height, margin=dict(l=10, r=10, t=30, b=10),
                         legend=dict(orientation="h", entrywidth=0.5, entrywidthmode="fraction",
                                     x=0, xanchor="left", y=-0.18, yanchor="top"))
    return figure


@reused
def pick_figure(image: Image.Image, grid: tuple[int, int], patch_size: tuple[float, float],
                chosen, height: int = 420) -> go.Figure:
    """The image with its patch grid, no map: the learner's patches boxed, every patch a
    click target."""
    figure = go.Figure()
    add_image(figure, image)
    patch_grid_lines(figure, grid, patch_size)
    ph, pw = patch_size
    for patch in chosen:
        row, col = divmod(int(patch), grid[1])
        figure.add_shape(type="rect", x0=col * pw, x1=(col + 1) * pw, y0=row * ph,
                         y1=(row + 1) * ph, line=dict(color="yellow", width=3))
    figure.add_trace(patch_click_targets(grid, patch_size))
    figure.update_layout(height=height, margin=dict(l=0, r=0, t=10, b=0),
                         clickmode="event+select")
    return figure


@reused
def reveal_figure(rows: list[dict], removal: str, score_kind: str,
                  height: int = 340) -> go.Figure:
    """The drops at the learner's k: you, each method, and random with its interval."""
    shown = [row for row in rows if row["removal"] == removal]
    errors = [[row.get("high", row["drop"]) - row["drop"] for row in shown],
              [row["drop"] - row.get("low", row["drop"]) for row in shown]]
    colours = ["black" if row["chooser"] == "you" else "grey"
               if row["chooser"].startswith("random") else LINE_COLOURS[0] for row in shown]
    figure = go.Figure(go.Bar(
        x=[row["chooser"] for row in shown], y=[row["drop"] for row in shown],
        marker_color=colours, error_y=dict(type="data", array=errors[0],
                                           arrayminus=errors[1]),
        hovertemplate="%{x}<br>drop %{y:+.4f}<extra></extra>"))
    figure.update_yaxes(title=f"drop of the target's {short_score(score_kind)}")
    figure.update_layout(height=height, margin=dict(l=10, r=10, t=30, b=10))
    return figure


@reused
def importance_grid(drops: np.ndarray, score_kind: str) -> go.Figure:
    """The blocks x heads grid of drops (`matrices.block_head_heatmap`), diverging colours
    centred on 0; hovering names the cell (this grid opens nothing on a click)."""
    from .matrices import block_head_heatmap

    bound = symmetric_bound(drops)
    hover = [[f"block {b}, head {h}: drop {drops[b, h]:+.4f}" for h in range(drops.shape[1])]
             for b in range(drops.shape[0])]
    figure = block_head_heatmap(drops, list(range(drops.shape[0])),
                                "Score drop with each head off",
                                f"drop ({short_score(score_kind)})", hover, zmin=-bound,
                                zmax=bound, colorscale=DIVERGING)
    figure.update_traces(hovertemplate="%{text}<extra></extra>", selector=dict(type="scatter"))
    return figure
