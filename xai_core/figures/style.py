"""Colours and colour ranges every figure shares."""

from __future__ import annotations

import numpy as np
from plotly.colors import get_colorscale, hex_to_rgb

# Inferno with rgb() stops: the plotly.js inside Streamlit misreads Inferno's first stop
# "#000004" (the lowest values showed pink instead of black), so spell the colours out.
HEATMAP_SCALE = [[stop, "rgb({}, {}, {})".format(*hex_to_rgb(colour))]
                 for stop, colour in get_colorscale("Inferno")]
DIVERGING = "RdBu_r"
LINE_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                "#7f7f7f", "#bcbd22", "#17becf")


def symmetric_bound(values: np.ndarray) -> float:
    """The largest |value|, for a colour range centred on 0 (1 for an all-zero map)."""
    bound = float(np.abs(values).max())
    return bound if bound > 0 else 1.0
