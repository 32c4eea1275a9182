"""PNG export of a list of figures (kaleido driving the server's Chromium)."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import threading
import warnings

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
    """Render every figure not rendered before with kaleido (one call for all of them, in a
    browser kept warm between renders) and stack the images top to bottom into one PNG."""
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
    """Each figure as PNG bytes, in one kaleido call through the warm browser."""
    import tempfile

    import plotly.io as pio

    if not figures:
        return []
    with _BROWSER_LOCK, tempfile.TemporaryDirectory() as folder:
        files = [os.path.join(folder, f"part{i}.png") for i in range(len(figures))]
        _keep_browser_warm()
        try:
            with warnings.catch_warnings():  # plotly's kaleido options: the browser has its own
                warnings.simplefilter("ignore", UserWarning)
                pio.write_images(figures, files, format="png", width=width)
        except Exception as error:  # kaleido/choreographer report browser failures many ways
            _close_browser()  # a browser in a bad state: the next render starts a new one
            raise ExportUnavailable(f"The browser could not render the PNG ({error}). "
                                    "The NPZ and JSON downloads still work.") from None
        return [open(f, "rb").read() for f in files]


# Starting kaleido's Chromium was most of a render (7.6 s cold against 2.2 s warm for six
# small figures on this machine), so the browser stays open for WARM_SECONDS after the last
# render (kaleido's one sync server per process), then closes, so an idle server does not
# keep it. Warm, each figure costs its own drawing: page 7's practical matrix 1.8 s, a curve
# or agreement figure 0.5-0.7 s, so a faithfulness run's two curve figures added about 1.2 s
# drawn one after another; in TABS tabs they are drawn beside the matrix (six figures in 7.4
# and 9.5 s against 9.8 and 15.5 s in one tab, on this machine under a load of 14: noisy;
# bench/bench_page7_export.py). One render at a time: kaleido's server answers one caller.
WARM_SECONDS = 300
TABS = 3
_BROWSER_LOCK = threading.RLock()
_closer: list[threading.Timer] = []


def _keep_browser_warm() -> None:
    import kaleido

    kaleido.start_sync_server(n=TABS, silence_warnings=True)  # nothing to do when it runs
    for timer in _closer:
        timer.cancel()
    _closer[:] = [threading.Timer(WARM_SECONDS, _close_browser)]
    _closer[0].daemon = True
    _closer[0].start()


def _close_browser() -> None:
    import kaleido

    with _BROWSER_LOCK:
        kaleido.stop_sync_server(silence_warnings=True)


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


# zlib level of the stacked PNG: `optimize=True` took 1.8 s for the six figures of a comparison
# after a faithfulness run on this (busy) machine, level 6 0.5 s, for a file 1 % larger.
STACK_COMPRESSION = 6
