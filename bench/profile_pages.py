"""Where each page's server time goes: cProfile inside Streamlit's script thread (AppTest),
summed by library, for the cached re-render of every page (the repeat visit of
bench_browser.py) and for its first render on a new image. A diagnosis tool for
bench/FINDINGS.md, not part of `make bench`:

    .venv/bin/python -m bench.profile_pages [page file ...]

`--warm` measures what a class costs a replica instead (issue 29): one page run of a NEW
session (a student arriving) on a gallery image whose results and figures this process
already holds, as on a server after `warmup --gallery` and `dashboard.warm_pages`. It prints
per page the median CPU seconds of the script thread over RUNS such runs (the figure to
compare; the process's CPU also counts AppTest reading the messages, and for Home a scan of
the installed packages that AppTest's runtime makes on its first run), the values the runs
computed or read from the disk store, the garbage collector's time, then a profile of one
more run. The whole visit as a server sees it: bench/bench_visit_cpu.py.

    .venv/bin/python -m bench.profile_pages --warm [--replica-first] [--no-freeze] [--no-digest-memo]
        [--images all|a,b] [--runs 5] [page file ...]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
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
        self.script_cpu = 0.0  # CPU seconds of the script thread in the latest run

    def __enter__(self):
        from streamlit.runtime.scriptrunner import script_runner

        self._module, self._original = script_runner, script_runner.exec_func_with_error_handling

        def profiled(func, ctx):
            started = time.thread_time()
            try:
                if self.profile is None:
                    return self._original(func, ctx)
                self.profile.enable()
                try:
                    return self._original(func, ctx)
                finally:
                    self.profile.disable()
            finally:
                self.script_cpu = time.thread_time() - started
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


def top_own_calls(stats: pstats.Stats, count: int = 12) -> list[tuple[str, float, int]]:
    """The functions with the largest own time, with their call counts."""
    rows = [(f"{Path(filename).parent.name}/{Path(filename).name}:{name}" if filename != "~"
             else name, own, calls)
            for (filename, _, name), (_, calls, own, _, _) in stats.stats.items()]
    return sorted(rows, key=lambda r: -r[1])[:count]


def new_session_run(page: str, image: str, profiler: ScriptProfiler,
                    profile: bool = False) -> tuple[float, float, float, pstats.Stats | None]:
    """One visit of a new session to `page` on gallery `image`: CPU seconds of the script
    thread, CPU seconds of the whole process (AppTest's reading of the messages included),
    wall seconds, and the profile when asked. For a page other than Home the run follows
    the session's Home run (a student's link skips it; AppTest needs it to switch page)."""
    from streamlit.testing.v1 import AppTest

    from bench.bench_pages import ENTRY

    app = AppTest.from_file(ENTRY, default_timeout=900)
    app.session_state["image_choice"] = image
    if page != "home.py":
        app.run()
        app.switch_page(f"../pages/{page}")
    cpu, wall = time.process_time(), time.perf_counter()
    stats = profiler.run(app)[1] if profile else app.run() and None
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    if app.exception:
        raise RuntimeError(f"{page} failed: {app.exception[0].message}")
    return profiler.script_cpu, cpu, wall, stats


def shared_caches() -> dict:
    """The process-wide caches a warm page run reads, by name (those this code has)."""
    from xai_core.lessons import explainer
    from xai_core import pipeline
    from xai_core.figures import layers, reuse
    from xai_core.methods import base

    caches = {"input": getattr(pipeline, "INPUT_CACHE", None), "capture": pipeline.CAPTURE_CACHE,
              "result": base.RESULT_CACHE, "figure": reuse.FIGURE_CACHE,
              "layer": layers.LAYER_CACHE, "explainer": explainer.EXPLAINER_CACHE}
    return {name: cache for name, cache in caches.items() if cache is not None}


def cache_counts() -> dict[str, tuple[int, int]]:
    """(values computed, values read from the disk store) so far, per cache."""
    return {name: (cache.misses, cache.disk_hits) for name, cache in shared_caches().items()}


def memory_caches() -> list:
    """Every bounded cache the app's modules hold (results, figures, captures; not the
    models, which live elsewhere)."""
    from xai_core.infra.cache import BoundedCache

    found = {id(value): value for module in list(sys.modules.values())
             if getattr(module, "__name__", "").startswith(("xai_core", "dashboard"))
             for value in vars(module).values() if isinstance(value, BoundedCache)}
    return list(found.values())


class CollectorClock:
    """Seconds the garbage collector ran, and its full (generation 2) collections."""

    def __init__(self):
        import gc

        self.seconds, self.full, self._started = 0.0, 0, 0.0
        gc.callbacks.append(self._note)

    def _note(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.thread_time()
        else:
            self.seconds += time.thread_time() - self._started
            self.full += info["generation"] == 2


def warm_main(pages: list[str], images: list[str], runs: int, replica_first: bool,
              freeze: bool = True) -> None:
    """Every page opened once on every image first (a replica of a class on the gallery holds
    them all at once), then RUNS new sessions per page in the load benchmark's order (student
    i opens page i mod len(pages) on image (i // len(pages)) mod len(images)), then one
    profiled run per page. The models are prepared as `make run` prepares them
    (`serve.prepare_models`: its gc.freeze included, so a full collection costs what it
    costs on the server). `replica_first`: every memory cache is emptied before each run, as
    on a replica that has not shown this image yet: what it draws comes from the disk
    store."""
    from dashboard.serve import import_app_modules, prepare_models
    from xai_core.lessons.warmup import warm_up

    if freeze:
        prepare_models()
    else:  # as `streamlit run` (the systemd unit, bench_load) serves: nothing frozen
        warm_up()
        import_app_modules()
    collector = CollectorClock()
    print(f"load average at start: {os.getloadavg()[0]:.2f}; images {','.join(images)}; "
          f"median of {runs} new-session runs per page, after one run per image and page")
    times: dict[str, list[tuple[float, float, float]]] = {page: [] for page in pages}
    work: dict[str, dict[str, list[int]]] = {page: {} for page in pages}
    with ScriptProfiler() as profiler:
        for image in images:
            for page in pages:
                new_session_run(page, image, profiler)  # fills the caches (store, figures)
        caches = memory_caches()
        for student in range(runs * len(pages)):
            page = pages[student % len(pages)]
            for cache in caches if replica_first else ():
                cache.clear()
            before, collected = cache_counts(), (collector.seconds, collector.full)
            times[page].append(new_session_run(
                page, images[student // len(pages) % len(images)], profiler)[:3])
            for name, (computed, read) in cache_counts().items():
                total = work[page].setdefault(name, [0, 0])
                total[0] += computed - before[name][0]
                total[1] += read - before[name][1]
            total = work[page].setdefault("garbage collector s, full collections", [0, 0])
            total[0] += collector.seconds - collected[0]
            total[1] += collector.full - collected[1]
        for page in pages:
            for cache in caches if replica_first else ():
                cache.clear()
            stats = new_session_run(page, images[runs % len(images)], profiler, True)[3]
            script, process, wall = (statistics.median(t[i] for t in times[page])
                                     for i in range(3))
            print(f"\n== {page}: {'first run on this replica' if replica_first else 'warm'} "
                  f"new-session run, script thread {script:.3f} CPU s "
                  f"(runs {', '.join(f'{t[0]:.3f}' for t in times[page])}); process "
                  f"{process:.3f} CPU s; {wall:.3f} s wall; load {os.getloadavg()[0]:.2f}")
            print("  over the runs, values computed / read from the disk store: " + ", ".join(
                f"{name} {c:.3g}/{r}" for name, (c, r) in work[page].items() if c or r))
            buckets = ", ".join(f"{k} {v:.3f}" for k, v in list(by_bucket(stats).items())[:8])
            print(f"  profiled run by library (own s): {buckets}")
            print("  project calls (cumulative s): " + "; ".join(
                f"{n} {s:.3f}" for n, s in top_project_calls(stats, 10)))
            print("  own time: " + "; ".join(f"{n} {s:.3f} ({c})"
                                              for n, s, c in top_own_calls(stats)))


def main(pages: list[str]) -> None:
    from dashboard.page_list import existing_pages
    from xai_core.lessons.warmup import warm_up

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
    if "--warm" in sys.argv[1:]:
        parser = argparse.ArgumentParser(prog="python -m bench.profile_pages --warm")
        parser.add_argument("--warm", action="store_true")
        parser.add_argument("--images", default="all",
                            help="gallery ids, comma-separated, or 'all' (the 8 photos)")
        parser.add_argument("--runs", type=int, default=5)
        parser.add_argument("--replica-first", action="store_true",
                            help="empty the memory caches before each run (disk store only)")
        parser.add_argument("--no-digest-memo", action="store_true",
                            help="hash every image on every call, as before issue 29's "
                                 "`images.shared_image` (a back-to-back comparison)")
        parser.add_argument("--no-freeze", action="store_true",
                            help="load the models without serve.py's gc.freeze, as "
                                 "`streamlit run` does")
        parser.add_argument("pages", nargs="*",
                            default=["0_vit_explainer.py", "7_comparison.py", "home.py"])
        args = parser.parse_args()
        import xai_core.images as images_module
        from xai_core.images import SAMPLES
        images = list(SAMPLES) if args.images == "all" else args.images.split(",")
        if args.no_digest_memo and hasattr(images_module, "_SHARED_DIGESTS"):
            class Forgetful(dict):
                def get(self, key, default=None):
                    return None
            images_module._SHARED_DIGESTS = Forgetful()
        warm_main(args.pages, images, args.runs, args.replica_first, not args.no_freeze)
    else:
        main(sys.argv[1:])
