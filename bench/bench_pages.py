"""Every page: first render on an image no cache has seen, then the cached re-render.

Runs the real app script through AppTest (the whole page, sidebar included). The new
image is a gallery photo with a few pixels changed, so its sha256 - and every cache
key - is new while the content stays natural. Smoke: the home page and the first page after.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
ENTRY = str(ROOT / "dashboard" / "app.py")


def _fresh_image(seed: int) -> Image.Image:
    from xai_core.images import load_sample

    pixels = np.array(load_sample("chelsea"))
    pixels[seed % pixels.shape[0], :8] = (seed * 37) % 256  # new content hash, same photo
    return Image.fromarray(pixels)


def _timed_run(app) -> float:
    started = time.perf_counter()
    app.run()
    if app.exception:
        raise RuntimeError(f"page failed: {app.exception[0].message}")
    return time.perf_counter() - started


def run(smoke: bool = False) -> list[dict]:
    from streamlit.testing.v1 import AppTest

    from dashboard.page_list import existing_pages

    rows = []
    for seed, (page, title, _icon) in enumerate(existing_pages()[:2 if smoke else None]):
        app = AppTest.from_file(ENTRY, default_timeout=900)
        app.session_state["image_choice"] = "upload"
        app.session_state["upload_image"] = _fresh_image(seed)
        if page == "home.py":  # the entry page: its first run is the first render
            first = _timed_run(app)
        else:
            app.run()  # a user arrives on the home page first
            app.switch_page(f"../pages/{page}")
            first = _timed_run(app)
        cached = _timed_run(app)
        rows += [{"name": f"{title}: first render, new image", "value": first, "unit": "s"},
                 {"name": f"{title}: cached re-render", "value": cached, "unit": "s",
                  "note": "target < 1 s" if page[0] in "12" else ""}]
    return rows
