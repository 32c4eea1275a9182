"""Colours and colour ranges every figure shares."""

from __future__ import annotations

import html
from functools import lru_cache

import numpy as np
from plotly.colors import get_colorscale, hex_to_rgb, sample_colorscale, unlabel_rgb

# Inferno with rgb() stops: the plotly.js inside Streamlit misreads Inferno's first stop
# "#000004" (the lowest values showed pink instead of black), so spell the colours out.
HEATMAP_SCALE = [[stop, "rgb({}, {}, {})".format(*hex_to_rgb(colour))]
                 for stop, colour in get_colorscale("Inferno")]
DIVERGING = "RdBu_r"
LINE_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                "#7f7f7f", "#bcbd22", "#17becf")


def plain_text(value) -> str:
    """Text from outside the code (a class label someone typed, a name read from a file) for
    a title, label, legend or hover text: Plotly follows the tags `<a href>`, `<b>`, `<br>`
    ... it finds in text, so `<`, `>` and `&` become entities it shows as those characters;
    runs of whitespace become one space."""
    return html.escape(" ".join(str(value).split()), quote=False)


def symmetric_bound(values: np.ndarray) -> float:
    """The largest |value|, for a colour range centred on 0 (1 for an all-zero map)."""
    bound = float(np.abs(values).max())
    return bound if bound > 0 else 1.0


def colour_table(colorscale: str | list, steps: int = 256) -> np.ndarray:
    """(steps, 3) uint8 RGB, read-only: the colour scale sampled evenly from its low to its
    high end, interpolated between stops as Plotly does; for maps coloured here instead of
    in the browser."""
    hashable = colorscale if isinstance(colorscale, str) else tuple(map(tuple, colorscale))
    return _colour_table(hashable, steps)


@lru_cache(maxsize=16)
def _colour_table(colorscale: str | tuple, steps: int) -> np.ndarray:
    scale = get_colorscale(colorscale) if isinstance(colorscale, str) else [list(stop) for stop in colorscale]
    colours = sample_colorscale(scale, list(np.linspace(0, 1, steps)))
    table = np.array([unlabel_rgb(c) for c in colours]).round().clip(0, 255).astype(np.uint8)
    table.setflags(write=False)
    return table
