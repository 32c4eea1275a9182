"""PNG export of a list of figures (kaleido driving the server's Chromium)."""

from __future__ import annotations

import hashlib
import io
import os
import shutil

import plotly.graph_objects as go
from PIL import Image

from ..infra.cache import BoundedCache, cache_key

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")


class ExportUnavailable(RuntimeError):
    """PNG export cannot run here (no browser for kaleido); the message says what to do."""


def find_browser() -> str | None:
    """The Chromium kaleido will drive: $BROWSER_PATH, else the first one on PATH."""
    configured = os.environ.get("BROWSER_PATH")
    if configured:
        return configured if os.path.exists(configured) else None
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


# Each figure's PNG by the figure's content (its JSON and the width): a render asked again,
# or one that adds figures (the curves of a faithfulness run), draws only what is new.
PNG_CACHE = BoundedCache(max_entries=64, max_bytes=48 * 2**20)


def comparison_png(figures: list[go.Figure], width: int = 1400) -> bytes:
    """Render every figure not rendered before with kaleido (one browser session for all of
    them) and stack the images top to bottom into one PNG."""
    if find_browser() is None:
        raise ExportUnavailable(
            "PNG export needs a Chromium browser on the server for kaleido, and none was found "
            "(install the Debian package `chromium`, or set BROWSER_PATH). The NPZ and JSON "
            "downloads work without it.")
    copies = [go.Figure(f).update_layout(template="plotly_white") for f in figures]
    keys = [cache_key("figure-png", None, width, hashlib.sha256(c.to_json().encode()).hexdigest())
            for c in copies]
    rendered = {key: PNG_CACHE.peek(key) for key in keys}
    missing = {key: copy for key, copy in zip(keys, copies) if rendered[key] is None}
    for key, png in zip(missing, _render(list(missing.values()), width)):
        PNG_CACHE.put(key, png)
        rendered[key] = png
    return _stack([Image.open(io.BytesIO(rendered[key])).convert("RGB") for key in keys])


def _render(figures: list[go.Figure], width: int) -> list[bytes]:
    """Each figure as PNG bytes, in one kaleido call (its browser start is most of the time)."""
    import tempfile

    import plotly.io as pio

    if not figures:
        return []
    with tempfile.TemporaryDirectory() as folder:
        files = [os.path.join(folder, f"part{i}.png") for i in range(len(figures))]
        try:
            pio.write_images(figures, files, format="png", width=width)
        except Exception as error:  # kaleido/choreographer report browser failures many ways
            raise ExportUnavailable(f"The browser could not render the PNG ({error}). "
                                    "The NPZ and JSON downloads still work.") from None
        return [open(f, "rb").read() for f in files]


def _stack(parts: list[Image.Image]) -> bytes:
    canvas = Image.new("RGB", (max(p.width for p in parts), sum(p.height for p in parts)),
                       "white")
    top = 0
    for part in parts:
        canvas.paste(part, (0, top))
        top += part.height
    buffer = io.BytesIO()
    canvas.save(buffer, format="PNG", compress_level=STACK_COMPRESSION)
    return buffer.getvalue()


# zlib level of the stacked PNG: `optimize=True` (level 9 and a filter search) took 1.1 s for
# six figures on this machine for a file 10-20 % smaller; a download does not need that.
STACK_COMPRESSION = 6
