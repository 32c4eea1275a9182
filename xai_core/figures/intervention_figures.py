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
from .layers import panel_side
from .overlays import add_image, add_overlay, overlay_figure, patch_grid_lines
from .reuse import reused
from .style import DIVERGING, LINE_COLOURS, plain_text, symmetric_bound

RANDOM_GREY = "#7f7f7f"
# the methods' colours: every line colour but the random floor's grey and the olive that reads
# as the learner's yellow
METHOD_COLOURS = tuple(colour for colour in LINE_COLOURS if colour not in (RANDOM_GREY, "#bcbd22"))
YOURS = "#ffd400"  # the learner's patches, on every picture

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
def readout_figure(margins: np.ndarray, ranks: np.ndarray, scores: np.ndarray,
                   alike: np.ndarray, score_kind: str, first_block: int,
                   height: int = 340) -> go.Figure:
    """The answer's margin over the runner-up read out after each block (what compares across
    blocks), its rank printed at each point; blocks where every class scores alike hollow
    and grey. The score itself is in the hover only."""
    blocks = np.arange(len(margins))
    unit = short_score(score_kind)
    figure = go.Figure()
    for flagged, name, style in (
            (True, "every class scores alike: this block tells none apart",
             dict(color="white", line=dict(color=RANDOM_GREY, width=2))),
            (False, "classes told apart", dict(color=LINE_COLOURS[0]))):
        chosen = blocks[np.asarray(alike) == flagged]
        if not len(chosen):
            continue
        figure.add_trace(go.Scatter(
            x=chosen, y=np.asarray(margins)[chosen], mode="markers+text", name=name,
            text=[f"#{ranks[b]}" for b in chosen], textposition="top center",
            cliponaxis=False,  # the top point's rank above the plot's edge
            marker=dict(size=11, **style), customdata=np.stack(
                [np.asarray(ranks)[chosen], np.asarray(scores)[chosen]], axis=1),
            hovertemplate=("block %{x}: rank %{customdata[0]}, margin %{y:+.4f}<br>"
                           f"{unit} %{{customdata[1]:.4f}}<extra></extra>")))
    figure.add_trace(go.Scatter(x=blocks, y=margins, mode="lines", showlegend=False,
                                hoverinfo="skip", line=dict(color=LINE_COLOURS[0], width=1)))
    figure.add_hline(y=0, line=dict(color=RANDOM_GREY, width=1))
    figure.add_vline(x=first_block, line=dict(dash="dot", color="grey"))
    figure.update_xaxes(title="block (0-based): the read-out after it", tickmode="array",
                        tickvals=blocks)
    figure.update_yaxes(title=f"margin over the runner-up ({unit})")
    figure.update_layout(height=height, margin=dict(l=10, r=10, t=30, b=10),
                         legend=dict(orientation="h", x=0, xanchor="left", y=1.02,
                                     yanchor="bottom"))
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
def claims_figure(found, removal: str, shown: dict[str, str], height: int = 560) -> go.Figure:
    """Score drop against k for the methods in `shown` (id -> name, in its order): each
    method's top-k, the random draws' 95 % t interval as a grey band with their mean dashed,
    and the learner's choice as a star. A method keeps its colour whichever are shown."""
    ks, part = list(found.ks), found.removals[removal]
    interval = part.random_interval()
    figure = go.Figure()
    figure.add_trace(go.Scatter(
        x=ks + ks[::-1], y=list(interval[:, 1]) + list(interval[::-1, 0]), fill="toself",
        mode="lines",  # a band: no points at its corners
        fillcolor="rgba(127,127,127,0.3)", line=dict(width=0, color=RANDOM_GREY),
        hoverinfo="skip", name=f"random k patches: 95 % interval ({found.draws} draws)"))
    figure.add_trace(go.Scatter(x=ks, y=part.random_mean(), mode="lines", name="random: mean",
                                line=dict(color=RANDOM_GREY, dash="dash")))
    colours = {name: METHOD_COLOURS[i % len(METHOD_COLOURS)]
               for i, name in enumerate(part.methods)}
    for name, title in shown.items():
        if name not in part.methods:
            continue
        figure.add_trace(go.Scatter(
            x=ks, y=part.methods[name], mode="lines+markers", name=plain_text(title),
            line=dict(color=colours[name], width=3), marker=dict(size=8),
            hovertemplate=f"{plain_text(title)}<br>k = %{{x}}<br>drop %{{y:+.4f}}"
                          "<extra></extra>"))
    if part.learner is not None:
        figure.add_trace(go.Scatter(x=[len(found.learner)], y=[part.learner], mode="markers",
                                    name="your patches", marker=dict(symbol="star", size=18,
                                                                     color="black")))
    figure.update_xaxes(title="k: patches removed", type="log", tickvals=ks)
    figure.update_yaxes(title=f"drop ({short_score(found.score_kind)})", nticks=6)
    # the legend under the plot, one entry a line: a few methods by default
    figure.update_layout(height=height, margin=dict(l=10, r=10, t=30, b=10),
                         legend=dict(orientation="v", x=0, xanchor="left", y=-0.2,
                                     yanchor="top"))
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
def reveal_figure(rows: list[dict], removal: str, score_kind: str) -> go.Figure:
    """The drops at the learner's k, one bar a line: you on top, each method, and random
    with its interval (the only bar with one); the names on the left, so none runs into
    another on a phone."""
    shown = [row for row in rows if row["removal"] == removal]
    chosen = [row for row in shown if "low" not in row][::-1]  # you on top
    random = [row for row in shown if "low" in row]
    figure = go.Figure(go.Bar(
        y=[plain_text(row["chooser"]) for row in chosen], x=[row["drop"] for row in chosen],
        orientation="h", showlegend=False,
        marker_color=["black" if row["chooser"] == "you" else LINE_COLOURS[0]
                      for row in chosen],
        hovertemplate="%{y}<br>drop %{x:+.4f}<extra></extra>"))
    figure.add_trace(go.Bar(
        y=[row["chooser"] for row in random], x=[row["drop"] for row in random],
        orientation="h", showlegend=False, marker_color=RANDOM_GREY,
        error_x=dict(type="data", color="black",
                     array=[row["high"] - row["drop"] for row in random],
                     arrayminus=[row["drop"] - row["low"] for row in random]),
        hovertemplate="%{y}<br>drop %{x:+.4f} (95 % interval of the mean)<extra></extra>"))
    figure.add_vline(x=0, line=dict(color="black", width=1))
    figure.update_xaxes(title=f"drop ({short_score(score_kind)})")
    figure.update_yaxes(categoryorder="array", categoryarray=[
        plain_text(row["chooser"]) for row in random + chosen])  # bottom to top
    figure.update_layout(height=90 + 32 * len(shown), barmode="overlay",
                         margin=dict(l=10, r=10, t=20, b=10))
    return figure


@reused
def choices_figure(image: Image.Image, grid: tuple[int, int], patch_size: tuple[float, float],
                   learner, tops: dict[str, list[int]], columns: int = 3,
                   panel_height: int = 200) -> go.Figure:
    """The picture once with your patches (yellow), then once per method (`tops`: its title
    -> its top-k patches, outlined in its colour) with your patches in yellow on top: where
    the two meet, the method agreed with you."""
    names = ["your patches", *tops]
    rows = -(-len(names) // columns)
    figure = make_subplots(rows=rows, cols=columns, subplot_titles=[plain_text(n) for n in names],
                           horizontal_spacing=0.02, vertical_spacing=0.3 / rows)
    side = panel_side(image, columns, panel_height)
    ph, pw = patch_size

    def boxes(patches, row, col, colour, width):
        for patch in patches:
            r, c = divmod(int(patch), grid[1])
            figure.add_shape(type="rect", x0=c * pw, x1=(c + 1) * pw, y0=r * ph,
                             y1=(r + 1) * ph, line=dict(color=colour, width=width),
                             row=row, col=col)

    for index, name in enumerate(names):
        row, col = divmod(index, columns)
        add_image(figure, image, row + 1, col + 1, max_side=side)
        if index:
            boxes(tops[name], row + 1, col + 1,
                  METHOD_COLOURS[(index - 1) % len(METHOD_COLOURS)], 3)
        boxes(learner, row + 1, col + 1, YOURS, 2)
    figure.update_layout(height=rows * (panel_height + 40), margin=dict(l=0, r=0, t=30, b=0))
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
