"""Pages 3-4 speed: first render on a new image, cached re-render, the gallery average,
and the method computations on their own (on whatever device the models use)."""

from __future__ import annotations

import time
from pathlib import Path

ENTRY = str(Path(__file__).resolve().parent.parent / "dashboard" / "app.py")


def _timed(function):
    started = time.perf_counter()
    value = function()
    return time.perf_counter() - started, value


def _page(page: str, image_choice: str):
    from streamlit.testing.v1 import AppTest

    app = AppTest.from_file(ENTRY, default_timeout=600)
    app.session_state["image_choice"] = image_choice
    app.run()
    app.switch_page(f"../pages/{page}")
    return app


def _render(app):
    seconds, _ = _timed(app.run)
    if app.exception:
        raise RuntimeError(f"page failed: {app.exception}")
    return seconds


def run() -> list[dict]:
    from xai_core import pipeline
    from xai_core.images import COLLAGE_ID, SAMPLES, load_sample
    from xai_core.methods import distance, gae, rollout
    from xai_core.models import get_model
    from xai_core.analysis.attention_sinks import analyse_sinks

    model = get_model("dinov2-s14")  # warm: model loading is not page time
    get_model("efficientnet-lite0")
    rows = []

    def row(name, value, unit="s", note=""):
        rows.append({"name": name, "value": value, "unit": unit, "note": note})

    # --- pages, rendered as a browser session would (AppTest, same process caches) --------------
    app = _page("3_attention_distance.py", "rocket")
    row("page 3 first render, new image (DINOv2, rocket)", _render(app),
        note="includes the capture")
    row("page 3 cached re-render", _render(app))
    captures_before = pipeline.CAPTURE_CACHE.misses
    app.segmented_control(key="p3_view").set_value("gallery")  # the gallery view
    row("page 3 gallery average, first time (9 images)", _render(app),
        note=f"{pipeline.CAPTURE_CACHE.misses - captures_before} new captures; the rest reused")
    captures_before = pipeline.CAPTURE_CACHE.misses
    row("page 3 gallery average, cached", _render(app),
        note=f"{pipeline.CAPTURE_CACHE.misses - captures_before} new captures")

    app = _page("4_rollout_heads.py", "flower")
    row("page 4 first render, new image (DINOv2, flower)", _render(app),
        note="one forward pass (kept for GAE) + GAE's backward")
    row("page 4 cached re-render", _render(app), note="rollouts and GAE memoised per image and settings")

    # --- the computations alone -------------------------------------------------------------
    image = load_sample(COLLAGE_ID)
    pipeline.CAPTURE_CACHE.clear()  # page 3's gallery view captured the collage already
    capture_s, capture = _timed(lambda: pipeline.vit_capture(model, image))
    row("DINOv2 capture, forward only (collage)", capture_s)
    target = pipeline.resolve_target(model, None, image)
    graded_s, graded = _timed(lambda: pipeline.vit_capture(model, image, target=target))
    row("DINOv2 capture, forward + backward (k-NN target)", graded_s)
    row("rollout, 12 blocks, mean fusion", _timed(lambda: rollout.attention_rollout(capture))[0])
    row("rollout, 12 blocks, max fusion, discard 0.9",
        _timed(lambda: rollout.attention_rollout(capture, fusion="max", discard=0.9))[0])
    row("GAE, 12 blocks", _timed(lambda: gae.gae_map(graded))[0])
    row("sink analysis, 12 blocks x 6 heads (score, key, entropy)",
        _timed(lambda: analyse_sinks(capture, ["[CLS]"]))[0], note="start=auto reads it")
    row("mean attention distance, 12 blocks x 6 heads",
        _timed(lambda: distance.capture_distances(capture))[0])
    gallery = {s: load_sample(s) for s in SAMPLES}
    row("gallery average from cached captures (8 samples)",
        _timed(lambda: distance.gallery_distances(model, gallery, "exclude", True))[0],
        note="new convention: distances recomputed, no forward pass")
    return rows
