"""Page 7's Export view and PNG after a faithfulness run, against the same without one.

Issue 28: after "Run faithfulness metrics" (defaults) the Export view took 210 s more and the
PNG 185 s more, because the run's curves had been pushed out of the 24-entry capture cache
and were computed again. They now have a cache of their own. A later measurement still had
the PNG at 16.1 s after a run against 7.7 s without: the render after a run adds the run's
curve figures, built then under another title than the Faithfulness view's (so built again),
and every render started kaleido's browser and redrew every figure. Now the export's curve
figures are the view's (one reused figure each), each figure's PNG is kept by its content
(`figures.export.PNG_CACHE`: a render after a run draws only the curves when the comparison
was rendered before), and the stacked PNG is no longer `optimize`d.

This prints, on fresh images (every default method, 5 steps, perturbation on): the Export
view and the PNG without a run; after a run with nothing rendered before; after a run in
the session that rendered without one; the figures kaleido drew for each PNG; and the
forward passes the Export view and the PNG made after the run (0: everything is reused).
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


class _DrawnFigures:
    """Counts the figures kaleido draws (the PNG cache's misses) while open."""

    def __enter__(self):
        from xai_core.figures import export

        self.module, self.original, self.count = export, export._render, 0

        def counted(figures, width):
            self.count += len(figures)
            return self.original(figures, width)

        export._render = counted
        return self

    def __exit__(self, *exc):
        self.module._render = self.original


def _export_and_png(app, label: str) -> list[dict]:
    from xai_core.figures.export import find_browser

    export = _timed(lambda: app.segmented_control(key="cmp_view").set_value("export").run())
    rows = [{"name": f"Export view, {label}", "value": export, "unit": "s"}]
    if find_browser() is None:
        return rows
    with _DrawnFigures() as drawn:
        png = _timed(lambda: app.button(key="cmp_png_make").click().run())
    return rows + [{"name": f"PNG render, {label}", "value": png, "unit": "s"},
                   {"name": f"figures kaleido drew, {label}", "value": float(drawn.count),
                    "unit": ""}]


def _faithfulness_run(app) -> dict:
    app.segmented_control(key="cmp_view").set_value("faith").run()
    app.number_input(key="cmp_steps").set_value(STEPS)
    ran = _timed(lambda: app.button(key="cmp_run_metrics").click().run())
    return {"name": f"faithfulness run (defaults, {STEPS} steps)", "value": ran, "unit": "s"}


def run() -> list[dict]:
    from xai_core.models import DEFAULT_CNN, DEFAULT_VIT, get_model

    modules = [get_model(DEFAULT_VIT).module, get_model(DEFAULT_CNN).module]
    without = _page_7(0)
    rows = _export_and_png(without, "no faithfulness run")

    after = _page_7(1)
    rows.append(_faithfulness_run(after))
    forwards = []
    handles = [m.register_forward_hook(lambda *_: forwards.append(1)) for m in modules]
    try:
        rows += _export_and_png(after, "after the run, nothing rendered before")
    finally:
        for handle in handles:
            handle.remove()
    for row in rows:
        if row["name"] == "PNG render, after the run, nothing rendered before":
            row["note"] = "target: no longer than without a run"
    rows.append({"name": "forward passes of Export and PNG after the run",
                 "value": float(len(forwards)), "unit": "", "note": "target 0"})

    rows.append(_faithfulness_run(without))  # the session that rendered before its run
    rows += _export_and_png(without, "after the run, rendered before it")
    return rows
