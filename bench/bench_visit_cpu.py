"""What one student's page visit costs a replica: its CPU seconds, read from /proc before and
after the visit, one visit at a time (no queue, so the figure is the cost, not the wait).

One `streamlit run` replica (one torch thread, as bench_load starts them) on a free loopback
port; bench/load_client.py opens each page over Streamlit's WebSocket as a new browser
session does (the rerun message with the page and the gallery image in the query string)
and waits until its run finishes. Every page is first opened once on every gallery image
(the replica then holds what a class on the gallery asks for, read from the result store
after `warmup --gallery` and `dashboard.warm_pages`), then RUNS visits per page in the load
benchmark's order (student i: page i mod len(pages), image (i // len(pages)) mod 8).
Printed per page: the median replica CPU seconds per visit (script, session set-up, messages
and WebSocket included) and the median seconds until the run finished.

A diagnosis tool for bench/FINDINGS.md (issue 29), not part of `make bench`:

    .venv/bin/python -m bench.bench_visit_cpu [--runs 8] [--pages ,vit_explainer,comparison]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from bench.bench_load import gallery_queries  # noqa: E402
from bench.load_client import open_page, run_in_thread  # noqa: E402

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def visit(url: str, pid: int, page: str, query: str) -> tuple[float, float]:
    """(replica CPU seconds, seconds to the finished run) of one new session's visit."""
    before = cpu_seconds(pid)
    run = run_in_thread(open_page(url, page, query))
    if run.error or run.exceptions:
        raise RuntimeError(f"{page or 'Home'}?{query}: {run.error or 'an exception shown'}")
    return cpu_seconds(pid) - before, run.seconds


def run(pages: list[str], runs: int) -> None:
    from e2e_helpers import running_apps

    queries = gallery_queries()
    with running_apps(1, log_name="bench-visit-cpu") as (app,):
        pid = app.process.pid
        for query in queries:  # the class's pages and images, once each
            for page in pages:
                visit(app.url, pid, page, query)
        print(f"load average {os.getloadavg()[0]:.2f}; replica pid {pid}; {runs} visits per "
              "page after one per page and image")
        measured: dict[str, list[tuple[float, float]]] = {page: [] for page in pages}
        for student in range(runs * len(pages)):
            page = pages[student % len(pages)]
            query = queries[student // len(pages) % len(queries)]
            measured[page].append(visit(app.url, pid, page, query))
        for page, rows in measured.items():
            cpu = statistics.median(r[0] for r in rows)
            seconds = statistics.median(r[1] for r in rows)
            print(f"{page or 'Home':<14} replica CPU per visit {cpu:.3f} s (visits "
                  f"{', '.join(f'{r[0]:.2f}' for r in rows)}); finished after {seconds:.3f} s")
        print(f"load average {os.getloadavg()[0]:.2f}")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_visit_cpu",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--pages", default=",vit_explainer,comparison",
                        help="URL paths, comma-separated ('' is Home)")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    run(args.pages.split(","), args.runs)


if __name__ == "__main__":
    main(sys.argv[1:])
