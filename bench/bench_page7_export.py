"""Page 7's Export view and PNG after a faithfulness run, against the same without one.

Issue 28: after "Run faithfulness metrics" (defaults) the Export view took 210 s more and the
PNG 185 s more, because the run's curves had been pushed out of the 24-entry capture cache
and were computed again. They now have a cache of their own. A later measurement still had
the PNG at 16.1 s after a run against 7.7 s without. Profiled (timers in the script thread):
nothing is computed again (no pass; the export's Python takes 0.2 s); the time is kaleido's.
Every render started Chromium (5-7 s), drew the figures one after another (warm: the
practical matrix 1.8 s, each other figure 0.5-0.7 s, so the run's two curve figures add about
1.2 s), and stacked them with `optimize` (1.8 s for six, 0.5 s at zlib level 6). Now the
browser stays warm between renders with three tabs (the curves are drawn beside the matrix),
each figure's PNG is kept by its content, the export's curve figures are the Faithfulness
view's own, and the stack is saved at level 6. A first render still starts the browser.

This prints, on fresh images (every default method, 5 steps, perturbation on): the Export
view and the PNG (every figure drawn, in a new browser and in the warm one) without a run
and after one, and the forward passes the Export view and the PNG made after the run (0:
everything is reused). Smoke: 2 steps, the PNG in a new browser only.
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


def _png(app, label: str, warm: bool) -> dict:
    """One render of the comparison, every figure drawn (the PNG cache cleared), in the warm
    browser or in a new one."""
    from xai_core.figures import export

    export.PNG_CACHE.clear()
    if not warm:
        export._close_browser()
    seconds = _timed(lambda: app.button(key="cmp_png_make").click().run())
    return {"name": f"PNG render, {label}, {'warm' if warm else 'new'} browser",
            "value": seconds, "unit": "s"}


def _export_and_png(app, label: str, smoke: bool = False) -> list[dict]:
    from xai_core.figures.export import find_browser

    export = _timed(lambda: app.segmented_control(key="cmp_view").set_value("export").run())
    rows = [{"name": f"Export view, {label}", "value": export, "unit": "s"}]
    if find_browser() is not None:
        rows += [_png(app, label, warm=False)] + ([] if smoke else [_png(app, label, warm=True)])
    return rows


def _faithfulness_run(app, steps: int) -> dict:
    app.segmented_control(key="cmp_view").set_value("faith").run()
    app.number_input(key="cmp_steps").set_value(steps)
    ran = _timed(lambda: app.button(key="cmp_run_metrics").click().run())
    return {"name": f"faithfulness run (defaults, {steps} steps)", "value": ran, "unit": "s"}


def run(smoke: bool = False) -> list[dict]:
    from xai_core.models import DEFAULT_CNN, DEFAULT_VIT, get_model

    modules = [get_model(DEFAULT_VIT).module, get_model(DEFAULT_CNN).module]
    rows = [] if smoke else _export_and_png(_page_7(0), "no faithfulness run")
    after = _page_7(1)
    rows.append(_faithfulness_run(after, 2 if smoke else STEPS))
    forwards = []
    handles = [m.register_forward_hook(lambda *_: forwards.append(1)) for m in modules]
    try:
        rows += _export_and_png(after, "after the run", smoke)
    finally:
        for handle in handles:
            handle.remove()
    for row in rows:
        if row["name"].startswith("PNG render, after the run"):
            row["note"] = "target: no longer than without a run"
    rows.append({"name": "forward passes of Export and PNG after the run",
                 "value": float(len(forwards)), "unit": "", "note": "target 0"})
    return rows
