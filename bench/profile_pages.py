"""Where each page's server time goes: cProfile inside Streamlit's script thread (AppTest),
summed by library, for the cached re-render of every page (the repeat visit of
bench_browser.py) and for its first render on a new image. A diagnosis tool for
bench/FINDINGS.md, not part of `make bench`:

    .venv/bin/python -m bench.profile_pages [page file ...]
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import xai_core  # noqa: E402,F401  (before torch: the threads' wait policy)

# file path fragment -> bucket (first match wins)
BUCKETS = (("xai_core/figures", "figures (xai_core)"), ("/pages/", "page scripts"),
           ("/dashboard/", "dashboard"), ("xai_core/", "compute (xai_core)"),
           ("plotly/io", "plotly to JSON"), ("_plotly_utils", "plotly validation"),
           ("plotly/", "plotly figures"), ("streamlit/", "streamlit"), ("torch", "torch"),
           ("numpy", "numpy"), ("PIL", "PIL"), ("pandas", "pandas"), ("pyarrow", "pyarrow"),
           ("json", "json"), ("<built-in method builtins.exec>", "imports"),
           ("<frozen importlib", "imports"), ("acquire", "waiting on a lock"))


def _bucket(filename: str) -> str:
    return next((name for part, name in BUCKETS if part in filename), "other")


class ScriptProfiler:
    """Profiles every script run of AppTest in its own thread."""

    def __init__(self):
        self.profile: cProfile.Profile | None = None

    def __enter__(self):
        from streamlit.runtime.scriptrunner import script_runner

        self._module, self._original = script_runner, script_runner.exec_func_with_error_handling

        def profiled(func, ctx):
            if self.profile is None:
                return self._original(func, ctx)
            self.profile.enable()
            try:
                return self._original(func, ctx)
            finally:
                self.profile.disable()
        script_runner.exec_func_with_error_handling = profiled
        return self

    def __exit__(self, *exc):
        self._module.exec_func_with_error_handling = self._original

    def run(self, app) -> tuple[float, pstats.Stats]:
        self.profile = cProfile.Profile()
        started = time.perf_counter()
        app.run()
        seconds = time.perf_counter() - started
        profile, self.profile = self.profile, None
        return seconds, pstats.Stats(profile)


def by_bucket(stats: pstats.Stats) -> dict[str, float]:
    """Exclusive (own) seconds per library."""
    totals: dict[str, float] = {}
    for (filename, _, name), (_, _, own, _, _) in stats.stats.items():
        key = _bucket(filename if filename != "~" else name)
        totals[key] = totals.get(key, 0.0) + own
    return dict(sorted(totals.items(), key=lambda kv: -kv[1]))


def top_project_calls(stats: pstats.Stats, count: int = 6) -> list[tuple[str, float]]:
    """The project's functions with the largest cumulative time."""
    rows = [(f"{Path(filename).parent.name}/{Path(filename).name}:{name}", cumulative)
            for (filename, _, name), (_, _, _, cumulative, _) in stats.stats.items()
            if any(part in filename for part in ("/xai_core/", "/pages/", "/dashboard/"))]
    return sorted(rows, key=lambda r: -r[1])[:count]


def profile_page(page: str, seed: int, profiler: ScriptProfiler) -> dict:
    from streamlit.testing.v1 import AppTest

    from bench.bench_pages import ENTRY, _fresh_image

    app = AppTest.from_file(ENTRY, default_timeout=900)
    app.session_state["image_choice"] = "upload"
    app.session_state["upload_image"] = _fresh_image(1000 + seed)
    if page != "home.py":
        app.run()
        app.switch_page(f"../pages/{page}")
    first, first_stats = profiler.run(app)
    cached, cached_stats = profiler.run(app)
    return {"page": page, "first": first, "cached": cached,
            "first_buckets": by_bucket(first_stats), "cached_buckets": by_bucket(cached_stats),
            "first_top": top_project_calls(first_stats),
            "cached_top": top_project_calls(cached_stats)}


def main(pages: list[str]) -> None:
    from dashboard.page_list import existing_pages
    from xai_core.cli.warmup import warm_up

    warm_up()  # as `make run` does before the first page
    names = [name for name, _, _ in existing_pages() if not pages or name in pages]
    with ScriptProfiler() as profiler:
        for seed, page in enumerate(names):
            result = profile_page(page, seed, profiler)
            print(f"\n== {page}: first render {result['first']:.2f} s, cached re-render "
                  f"{result['cached']:.2f} s (script thread, profiled)")
            for phase in ("first", "cached"):
                buckets = ", ".join(f"{k} {v:.2f}" for k, v in
                                    list(result[f"{phase}_buckets"].items())[:7])
                print(f"  {phase} by library (own s): {buckets}")
                calls = "; ".join(f"{n} {s:.2f}" for n, s in result[f"{phase}_top"])
                print(f"  {phase} project calls (cumulative s): {calls}")


if __name__ == "__main__":
    main(sys.argv[1:])
