"""Class mode's figures: where the class clicked, how the class answered, the class's patches
beside the model's measured answer, and the learning check before and after."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from PIL import Image

from .overlays import overlay_figure
from .style import LINE_COLOURS, plain_text

CLASS_COLOUR = "black"
RANDOM_COLOUR = "grey"


def clicks_figure(image: Image.Image, counts: np.ndarray, patch_size: tuple[float, float],
                  height: int = 420) -> go.Figure:
    """How many students clicked each patch, over the picture (no colour where nobody did)."""
    shown = np.where(counts > 0, counts, np.nan)
    return overlay_figure(image, shown, patch_size, opacity=0.6, height=height, zmin=0,
                          zmax=max(1.0, float(np.nanmax(counts)) if counts.size else 1.0),
                          colorscale="Reds", scale_title="students")


def answer_bars(labels: list[str], counts: list, marked: int | None = None,
                title: str = "", axis: str = "students", height: int = 300) -> go.Figure:
    """One bar per choice: how many students chose it, or the model's measure of it
    (`axis`); `marked`: the model's answer, darker."""
    colours = [CLASS_COLOUR if index == marked else LINE_COLOURS[0]
               for index in range(len(labels))]
    figure = go.Figure(go.Bar(x=[plain_text(label) for label in labels], y=counts,
                              marker_color=colours,
                              hovertemplate="%{x}: %{y}<extra></extra>"))
    figure.update_yaxes(title=plain_text(axis))
    figure.update_layout(title=plain_text(title) or None, height=height,
                         margin=dict(l=10, r=10, t=40 if title else 10, b=10))
    return figure


def class_reveal_figure(rows: list[dict], removal: str, score_kind: str,
                        height: int = 340) -> go.Figure:
    """The drops at k: the class's patches, each method's top k, random k with its interval
    (page 9's reveal rows)."""
    shown = [row for row in rows if row["removal"] == removal]
    upper = [row.get("high", row["drop"]) - row["drop"] for row in shown]
    lower = [row["drop"] - row.get("low", row["drop"]) for row in shown]
    colours = [CLASS_COLOUR if row["chooser"] == "the class" else RANDOM_COLOUR
               if row["chooser"].startswith("random") else LINE_COLOURS[0] for row in shown]
    figure = go.Figure(go.Bar(
        x=[row["chooser"] for row in shown], y=[row["drop"] for row in shown],
        marker_color=colours, error_y=dict(type="data", array=upper, arrayminus=lower),
        hovertemplate="%{x}<br>drop %{y:+.4f}<extra></extra>"))
    figure.update_yaxes(title=f"drop of the {plain_text(score_kind)}")
    figure.update_layout(height=height, margin=dict(l=10, r=10, t=30, b=10))
    return figure


def check_figure(checks: list[dict], height: int = 320) -> go.Figure:
    """Share of correct answers per check question, before and after the tour."""
    figure = go.Figure()
    for phase, colour in (("before", RANDOM_COLOUR), ("after", LINE_COLOURS[0])):
        shares = [item[phase]["share"] for item in checks]
        figure.add_trace(go.Bar(
            name=f"{phase} the tour", x=[f"Q{item['item']}" for item in checks],
            y=[np.nan if share is None else share for share in shares], marker_color=colour,
            customdata=[item[phase]["answers"] for item in checks],
            hovertemplate="%{x}: %{y:.0%} correct of %{customdata} answers<extra></extra>"))
    figure.update_yaxes(title="share correct", range=[0, 1], tickformat=".0%")
    figure.update_layout(barmode="group", height=height, margin=dict(l=10, r=10, t=10, b=10),
                         legend=dict(orientation="h", y=1.1))
    return figure
