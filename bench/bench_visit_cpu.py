"""What one student's page visit costs a replica: its CPU seconds, read from /proc before and
after the visit, one visit at a time (no queue, so the figure is the cost, not the wait).

One replica started as bench_load and the systemd unit start them (`streamlit run`, one torch
thread; `--serve`: as `make run` does) on a free loopback port; bench/load_client.py opens each page over Streamlit's WebSocket as a new browser
session does (the rerun message with the page and the gallery image in the query string)
and waits until its run finishes. Every page is first opened once on every gallery image
(the replica then holds what a class on the gallery asks for, read from the result store
after `warmup --gallery` and `dashboard.warm_pages`; those first visits are printed too),
then RUNS visits per page in the load
benchmark's order (student i: page i mod len(pages), image (i // len(pages)) mod 8).
Printed per page: the median replica CPU seconds per visit (script, session set-up, messages
and WebSocket included), the median seconds until the run finished and the client's own CPU
seconds per visit (bench_load runs one such client process for every student). `--burst N`
then lets N students arrive within 5 s on this one replica (half of bench_load's class of
2N on two replicas, pages only: no files, no nginx) and prints the replica's CPU and the
page times' p50/p95. `--uploads N` then uploads N photos new to every cache, one at a time,
each opened on the Explainer, and prints the replica's CPU and resident growth per photo.

A diagnosis tool for bench/FINDINGS.md (issue 29); `make bench` runs it with its defaults and
no burst, its smoke run one visit of Home on one image:

    .venv/bin/python -m bench.bench_visit_cpu [--runs 8] [--serve] [--burst 25]
        [--pages ,vit_explainer,comparison] [--uploads 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from bench.bench_load import gallery_queries  # noqa: E402
from dashboard.page_visit import open_page, run_in_thread, with_view  # noqa: E402

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
ARRIVAL_S = 5.0  # as bench_load
PAGES = ",vit_explainer,comparison"  # URL paths; '' is Home
RUNS = 8


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def visit(url: str, pid: int, page: str, query: str) -> tuple[float, float, float]:
    """(replica CPU seconds, seconds to the finished run, the client's CPU seconds: what
    bench_load's one client process spends per student on the page) of one new session's
    visit."""
    before, client = cpu_seconds(pid), time.process_time()
    run = run_in_thread(open_page(url, *with_view(page, query)))
    if run.error or run.exceptions:
        raise RuntimeError(f"{page or 'Home'}?{query}: {run.error or 'an exception shown'}")
    return cpu_seconds(pid) - before, run.seconds, time.process_time() - client


async def arrivals(url: str, pages: list[str], queries: list[str], count: int) -> list:
    """`count` new sessions arriving evenly within ARRIVAL_S, as bench_load's students (the
    page only, no files): their PageRuns."""
    import asyncio

    async def student(index: int):
        await asyncio.sleep(index * ARRIVAL_S / count)
        return await open_page(url, *with_view(pages[index % len(pages)],
                                               queries[index // len(pages) % len(queries)]))
    return await asyncio.gather(*(student(i) for i in range(count)))


def burst(url: str, pid: int, pages: list[str], queries: list[str], count: int) -> None:
    """Replica CPU and page times when `count` students arrive at once on this replica."""
    before, started = cpu_seconds(pid), time.perf_counter()
    runs = run_in_thread(arrivals(url, pages, queries, count))
    cpu, seconds = cpu_seconds(pid) - before, time.perf_counter() - started
    failed = [r.error or "an exception shown" for r in runs if r.error or r.exceptions]
    times = np.array([r.seconds for r in runs if not (r.error or r.exceptions)])
    print(f"{count} students within {ARRIVAL_S:.0f} s on this replica: replica CPU {cpu:.2f} s "
          f"({cpu / count:.3f} s per student), all done after {seconds:.1f} s; page time "
          f"p50 {np.percentile(times, 50):.2f} s, p95 {np.percentile(times, 95):.2f} s; "
          f"{len(failed)} failed {failed[:2]}; load average {os.getloadavg()[0]:.2f}")


def resident_gb(pid: int) -> float:
    pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**30


def uploads(url: str, pid: int, count: int) -> None:
    """`count` students' own photos (new to every cache), one at a time, each opened on the
    Explainer as bench_load's uploads mix does: the replica's CPU seconds and resident
    memory growth per photo (what it keeps in its bounded caches)."""
    from bench.load_client import upload_and_open
    from bench.load_mixes import photo

    first = time.time_ns() % 2**31
    for n in range(count):
        cpu, rss = cpu_seconds(pid), resident_gb(pid)
        done = run_in_thread(upload_and_open(url, photo(first + n), "vit_explainer"))
        if done.error or done.exceptions:
            raise RuntimeError(f"upload {n + 1}: {done.error or 'an exception shown'}")
        print(f"upload {n + 1} -> Explainer: replica CPU {cpu_seconds(pid) - cpu:.2f} s, "
              f"resident {resident_gb(pid) - rss:+.3f} GB (now {resident_gb(pid):.2f} GB), "
              f"finished after {done.seconds:.2f} s; load average {os.getloadavg()[0]:.2f}")


def run(smoke: bool = False) -> list[dict]:
    pages = [""] if smoke else PAGES.split(",")
    return measure(pages, 1 if smoke else RUNS, False, [], 1 if smoke else None)


def measure(pages: list[str], runs: int, serve: bool, bursts: list[int],
            images: int | None = None, photos: int = 0) -> list[dict]:
    """Prints what it measures as it goes; returns one row per page (the median replica
    CPU seconds per visit). `images`: the first that many gallery images (all by default)."""
    from e2e_helpers import MAKE_RUN, STREAMLIT_RUN, AppProcess

    queries = gallery_queries()[:images]
    app = AppProcess(log_name="bench-visit-cpu", launcher=MAKE_RUN if serve else STREAMLIT_RUN)
    try:
        app.wait_healthy(timeout=300)
        pid = app.process.pid
        first: dict[str, list[tuple[float, float, float]]] = {page: [] for page in pages}
        for query in queries:  # the class's pages and images, once each
            for page in pages:
                first[page].append(visit(app.url, pid, page, query))
        for page, rows in first.items():  # from the result store, or computed if it lacks them
            print(f"{page or 'Home':<14} first visit per image on this replica: replica CPU "
                  f"{', '.join(f'{r[0]:.2f}' for r in rows)} s")
        print(f"load average {os.getloadavg()[0]:.2f}; replica pid {pid}; {runs} visits per "
              "page after one per page and image")
        measured: dict[str, list[tuple[float, float, float]]] = {page: [] for page in pages}
        for student in range(runs * len(pages)):
            page = pages[student % len(pages)]
            query = queries[student // len(pages) % len(queries)]
            measured[page].append(visit(app.url, pid, page, query))
        found = []
        for page, rows in measured.items():
            cpu, seconds, client = (statistics.median(r[i] for r in rows) for i in range(3))
            print(f"{page or 'Home':<14} replica CPU per visit {cpu:.3f} s (visits "
                  f"{', '.join(f'{r[0]:.2f}' for r in rows)}); finished after {seconds:.3f} s; "
                  f"client CPU {client:.3f} s")
            found.append({"name": f"{page or 'Home'}: replica CPU per visit", "value": cpu,
                          "unit": "s", "note": f"median of {len(rows)}; finished after "
                                               f"{seconds:.2f} s, client CPU {client:.3f} s"})
        print(f"load average {os.getloadavg()[0]:.2f}")
        for count in bursts:
            burst(app.url, pid, pages, queries, count)
        uploads(app.url, pid, photos)
    finally:
        app.stop()
    return found


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_visit_cpu",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=RUNS)
    parser.add_argument("--serve", action="store_true",
                        help="start the replica as `make run` does (dashboard.serve: models "
                             "prepared and frozen out of the garbage collector's view first), "
                             "not as the systemd unit and bench_load do (`streamlit run`)")
    parser.add_argument("--burst", default="",
                        help="then N students arriving within 5 s on this one replica "
                             "(page only, no files), comma-separated steps, e.g. 25")
    parser.add_argument("--pages", default=PAGES,
                        help="URL paths, comma-separated ('' is Home)")
    parser.add_argument("--uploads", type=int, default=0,
                        help="then N photos new to every cache uploaded one at a time, each "
                             "opened on the Explainer")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    bursts = [int(n) for n in args.burst.split(",") if n]
    measure(args.pages.split(","), args.runs, args.serve, bursts, photos=args.uploads)


if __name__ == "__main__":
    main(sys.argv[1:])
