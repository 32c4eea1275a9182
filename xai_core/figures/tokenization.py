"""How an image becomes tokens: the patch grid on the model input, and the token sequence
as a strip (prefix tokens first, then patches in raster order). The numbers behind them
(token counts, prefix names, the patch embedding) are in `xai_core/analysis/tokens.py`."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from PIL import Image

from .click_targets import patch_click_targets
from .layers import image_trace
from .overlays import image_figure, patch_grid_lines
from .reuse import reused

PREFIX_COLOURS = {"[CLS]": (230, 159, 0), "[DIST]": (86, 180, 233)}
OTHER_PREFIX_COLOUR = (0, 158, 115)


@reused
def tokenization_figure(model_image: Image.Image, grid: tuple[int, int],
                        patch_size: tuple[int, int], prefix: int, title: str | None = None,
                        height: int = 460) -> go.Figure:
    """The model's input with its patch grid; hovering a patch gives its index, its
    position in the token sequence, row/column and pixel box (end exclusive)."""
    figure = patch_grid_lines(image_figure(model_image, title, height), grid, patch_size)
    targets = patch_click_targets(grid, patch_size)
    ph, pw = patch_size
    index, row, col = np.asarray(targets.customdata).T
    boxes = np.stack([index, row, col, col * pw, (col + 1) * pw, row * ph, (row + 1) * ph,
                      index + prefix], 1)
    targets.update(customdata=boxes.tolist(), hovertemplate=(
        "patch %{customdata[0]} = token %{customdata[7]}<br>row %{customdata[1]}, "
        "col %{customdata[2]}<br>pixels x %{customdata[3]}-%{customdata[4]}, "
        "y %{customdata[5]}-%{customdata[6]}<extra></extra>"))
    figure.add_trace(targets)
    return figure


@reused
def token_strip_figure(model_image: Image.Image, grid: tuple[int, int],
                       patch_size: tuple[int, int], prefix_names: list[str],
                       shown: int = 10, height: int = 170) -> go.Figure:
    """The sequence the encoder reads: prefix tokens first, then patches in raster
    order (the first `shown` of them), then the count of the rest."""
    rows, cols = grid
    ph, pw = patch_size
    total = rows * cols
    shown = max(1, min(shown, total))
    pixels = np.asarray(model_image.convert("RGB"))
    gap = max(2, pw // 4)
    slots = len(prefix_names) + shown + (1 if shown < total else 0)
    strip = np.full((ph, slots * (pw + gap), 3), 255, dtype=np.uint8)
    labels = []
    for slot, name in enumerate(prefix_names):
        strip[:, slot * (pw + gap):slot * (pw + gap) + pw] = PREFIX_COLOURS.get(
            name, OTHER_PREFIX_COLOUR)
        labels.append((slot, name, f"token {slot}"))
    for i in range(shown):
        r, c = divmod(i, cols)
        slot = len(prefix_names) + i
        strip[:, slot * (pw + gap):slot * (pw + gap) + pw] = pixels[r * ph:(r + 1) * ph,
                                                                     c * pw:(c + 1) * pw]
        labels.append((slot, f"p{i}", f"token {slot}"))
    notes = []  # one layout update: add_annotation per label is slow
    for slot, top, bottom in labels:
        x = slot * (pw + gap) + pw / 2
        notes += [dict(x=x, y=-0.3 * ph, text=top, showarrow=False, font=dict(size=11)),
                  dict(x=x, y=1.3 * ph, text=bottom, showarrow=False,
                       font=dict(size=9, color="grey"))]
    if shown < total:
        notes.append(dict(x=(slots - 1) * (pw + gap) + pw / 2, y=ph / 2, showarrow=False,
                          font=dict(size=11), text=f"… {total - shown} more<br>(last: token "
                                                   f"{total + len(prefix_names) - 1})"))
    strip_image = Image.fromarray(strip)  # lossless: sharp patch edges and prefix colours
    figure = go.Figure(image_trace(strip_image, max_side=max(strip_image.size), lossless=True))
    figure.update_layout(height=height, margin=dict(l=0, r=0, t=0, b=0), annotations=notes)
    figure.update_xaxes(visible=False)
    figure.update_yaxes(visible=False, scaleanchor="x", range=[1.6 * ph, -0.6 * ph])
    return figure
