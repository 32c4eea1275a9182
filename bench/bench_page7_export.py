"""Page 7's Export view and PNG after a faithfulness run, against the same without one.

Issue 28: after "Run faithfulness metrics" (defaults) the Export view took 210 s more and the
PNG 185 s more, because the run's curves had been pushed out of the 24-entry capture cache
and were computed again. They now have a cache of their own; this prints the times with and
without a run (every default method, 5 steps, perturbation on) and the forward passes the
Export view and the PNG made after the run (0: everything is reused).
"""

from __future__ import annotations

import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENTRY = str(ROOT / "dashboard" / "app.py")
STEPS = 5


def _timed(action) -> float:
    started = time.perf_counter()
    app = action()
    if app.exception:
        raise RuntimeError(f"page 7 failed: {app.exception[0].message}")
    return time.perf_counter() - started


def _page_7(seed: int):
    from streamlit.testing.v1 import AppTest

    from bench.bench_pages import _fresh_image

    app = AppTest.from_file(ENTRY, default_timeout=1800)
    app.session_state["image_choice"] = "upload"
    app.session_state["upload_image"] = _fresh_image(1000 + seed)  # no cache has seen it
    app.run()
    return app.switch_page("../pages/7_comparison.py").run()


def _export_and_png(app) -> tuple[float, float | None]:
    from xai_core.figures.export import find_browser

    export = _timed(lambda: app.segmented_control(key="cmp_view").set_value("export").run())
    if find_browser() is None:
        return export, None
    return export, _timed(lambda: app.button(key="cmp_png_make").click().run())


def run() -> list[dict]:
    from xai_core.models import DEFAULT_CNN, DEFAULT_VIT, get_model

    modules = [get_model(DEFAULT_VIT).module, get_model(DEFAULT_CNN).module]
    rows = []
    without = _page_7(0)
    export, png = _export_and_png(without)
    rows.append({"name": "Export view, no faithfulness run", "value": export, "unit": "s"})
    if png is not None:
        rows.append({"name": "PNG render, no faithfulness run", "value": png, "unit": "s"})

    after = _page_7(1)
    after.segmented_control(key="cmp_view").set_value("faith").run()
    after.number_input(key="cmp_steps").set_value(STEPS)
    ran = _timed(lambda: after.button(key="cmp_run_metrics").click().run())
    rows.append({"name": f"faithfulness run (defaults, {STEPS} steps)", "value": ran, "unit": "s"})
    forwards = []
    handles = [m.register_forward_hook(lambda *_: forwards.append(1)) for m in modules]
    try:
        export, png = _export_and_png(after)
    finally:
        for handle in handles:
            handle.remove()
    rows.append({"name": "Export view after the run", "value": export, "unit": "s",
                 "note": "target: no longer than without a run"})
    if png is not None:
        rows.append({"name": "PNG render after the run", "value": png, "unit": "s"})
    rows.append({"name": "forward passes of Export and PNG after the run",
                 "value": float(len(forwards)), "unit": "", "note": "target 0"})
    return rows
