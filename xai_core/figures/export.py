"""PNG export of a list of figures (kaleido driving the server's Chromium)."""

from __future__ import annotations

import io
import os
import shutil

import plotly.graph_objects as go
from PIL import Image

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


def comparison_png(figures: list[go.Figure], width: int = 1400) -> bytes:
    """Render every figure with kaleido (one browser session for all of them) and stack
    the images top to bottom into one PNG."""
    import tempfile

    import plotly.io as pio

    if find_browser() is None:
        raise ExportUnavailable(
            "PNG export needs a Chromium browser on the server for kaleido, and none was found "
            "(install the Debian package `chromium`, or set BROWSER_PATH). The NPZ and JSON "
            "downloads work without it.")
    with tempfile.TemporaryDirectory() as folder:
        files = [os.path.join(folder, f"part{i}.png") for i in range(len(figures))]
        copies = [go.Figure(f).update_layout(template="plotly_white") for f in figures]
        try:
            pio.write_images(copies, files, format="png", width=width)
        except Exception as error:  # kaleido/choreographer report browser failures many ways
            raise ExportUnavailable(f"The browser could not render the PNG ({error}). "
                                    "The NPZ and JSON downloads still work.") from None
        parts = [Image.open(f).convert("RGB") for f in files]
    canvas = Image.new("RGB", (max(p.width for p in parts), sum(p.height for p in parts)),
                       "white")
    top = 0
    for part in parts:
        canvas.paste(part, (0, top))
        top += part.height
    buffer = io.BytesIO()
    canvas.save(buffer, format="PNG", optimize=True)
    return buffer.getvalue()
