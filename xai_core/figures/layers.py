"""Pictures inside figures as compressed image layers: a photo as a JPEG, a map coloured here
(or a diagram) as a lossless WebP. The browser decodes either natively and draws it as one `<image>`; a pixel array
(`go.Image(z=...)`) is 13x larger on the wire and walked pixel by pixel in JavaScript
(bench/FINDINGS.md). Each picture is encoded once per content and size (bounded cache).

A layer spans its picture's own pixel coordinates: pixel (row i, col j) covers
[left + j, left + j + 1] x [top + i, top + i + 1] whatever resolution was sent, so a
heatmap cell of `grid_heatmap` (x0 = pw / 2, dx = pw) covers exactly its patch's pixels.
"""

from __future__ import annotations

import base64
import io
import math

import numpy as np
import plotly.graph_objects as go
from PIL import Image

from ..infra.cache import BoundedCache, cache_key
from ..images import image_sha256, shrink_to
from .style import colour_table

# Every figure shows a picture at most ~600 screen pixels a side (a third of a wide page,
# or a 420-px-high chart): sending more only costs bytes and decoding.
DISPLAY_MAX_SIDE = 640
# The main column of a wide page on a 1920-px lecture screen: a figure of n panels side by
# side gives each at most PAGE_WIDTH / n screen pixels, so a photo repeated in every panel
# is sent at that size (Plotly's JSON cannot share one picture between panels).
PAGE_WIDTH = 1400
JPEG_QUALITY = 85
LAYER_CACHE = BoundedCache(max_entries=256, max_bytes=32 * 2**20, shared=True)  # as figures


def encoded_image(image: Image.Image, max_side: int = DISPLAY_MAX_SIDE,
                  lossless: bool = False) -> tuple[str, tuple[int, int]]:
    """(data URI, (width, height) sent): the image shrunk to at most `max_side` pixels a side,
    as a JPEG (RGB), or a lossless WebP (`lossless`; keeps transparency; a third of the PNG
    of a smooth map). Cached by content."""
    key = cache_key("figure-layer", None, max_side, lossless, image=image_sha256(image))
    return LAYER_CACHE.get_or_compute(key, lambda: _encode(image, max_side, lossless))


def _encode(image: Image.Image, max_side: int, lossless: bool) -> tuple[str, tuple[int, int]]:
    small = shrink_to(image, max_side)
    buffer = io.BytesIO()
    if lossless:
        small.save(buffer, format="WEBP", lossless=True)
    else:
        small.convert("RGB").save(buffer, format="JPEG", quality=JPEG_QUALITY)
    kind = "webp" if lossless else "jpeg"
    return f"data:image/{kind};base64," + base64.b64encode(buffer.getvalue()).decode(), small.size


def panel_side(image: Image.Image, columns: int, height: float) -> int:
    """The longer side, in screen pixels, that `image` takes at most when fitted (aspect kept)
    into one of `columns` panels side by side, `height` pixels high: the size to send it at."""
    scale = min(PAGE_WIDTH / columns / image.width, height / image.height)
    return min(DISPLAY_MAX_SIDE, max(1, math.ceil(scale * max(image.size))))


def image_data_uri(image: Image.Image) -> str:
    """The image as a JPEG data URI at display size (for clients that draw it themselves)."""
    return encoded_image(image)[0]


def image_trace(image: Image.Image, max_side: int = DISPLAY_MAX_SIDE, lossless: bool = False,
                left: float = 0.0, top: float = 0.0) -> go.Image:
    """The image as one compressed layer whose pixel (i, j) covers [left + j, left + j + 1] x
    [top + i, top + i + 1] in data coordinates, at any resolution sent."""
    source, (width, height) = encoded_image(image, max_side, lossless)
    dx, dy = image.width / width, image.height / height
    # x0, y0: the centre of the first pixel sent (plotly.js places it at x0 - dx / 2)
    return go.Image(source=source, x0=left + dx / 2, y0=top + dy / 2, dx=dx, dy=dy,
                    hoverinfo="skip")


def colour_image(values: np.ndarray, colorscale: str | list, zmin: float,
                 zmax: float) -> Image.Image:
    """A 2-D map coloured as a Plotly heatmap colours it (linear from zmin to zmax, clipped,
    256 steps); NaN cells transparent. RGBA, one pixel per cell."""
    values = np.asarray(values, dtype=np.float64)
    missing = np.isnan(values)
    scaled = np.clip((np.where(missing, zmin, values) - zmin) / (zmax - zmin), 0.0, 1.0)
    rgba = np.empty(values.shape + (4,), dtype=np.uint8)
    rgba[..., :3] = colour_table(colorscale)[np.round(scaled * 255).astype(np.intp)]
    rgba[..., 3] = np.where(missing, 0, 255)
    return Image.fromarray(rgba, "RGBA")


def colour_layer(values: np.ndarray, colorscale: str | list, zmin: float, zmax: float,
                 left: float = 0.0, top: float = 0.0) -> go.Image:
    """A large 2-D map (a mosaic of small maps) as one lossless image layer instead of a
    heatmap: the cells' colours only, at one pixel per cell, for charts that read nothing
    from a hover over the map."""
    return image_trace(colour_image(values, colorscale, zmin, zmax),
                       max_side=max(np.shape(values)), lossless=True, left=left, top=top)


def colour_bar(colorscale: str | list, zmin: float, zmax: float, title: str) -> go.Scatter:
    """A colour bar with no data on the plot (for a map sent as a `colour_layer`)."""
    return go.Scatter(x=[None], y=[None], mode="markers", hoverinfo="skip", showlegend=False,
                      marker=dict(color=[zmin], cmin=zmin, cmax=zmax, colorscale=colorscale,
                                  showscale=True, colorbar=dict(thickness=12, title=title)))
