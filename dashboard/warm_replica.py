"""`python -m dashboard.warm_replica URL`: open every page once on a replica that just started.

A replica's first run of each page imports that page's code, loads the models it needs and
fills the process's own caches; the shared result store (`warmup --gallery`,
`dashboard.warm_pages`) spares the computations but not those. Measured with 50 students
spread over the 11 pages (`bench/bench_load.py`, 2 replicas on 2 cores): page p95 about
10 s on replicas that had run Home only, 0.5-2 s once each had run every page. The
replica's systemd unit runs this after its health check (deploy/systemd/vit-lens@.service),
so the first class after a restart meets warm replicas. A page that fails is named and the
exit status is 1; a bad URL exits 2.
"""

from __future__ import annotations

import argparse
import sys
from time import monotonic

from dashboard.page_list import existing_pages, url_path
from dashboard.page_visit import PageRun, loopback, open_page, run_in_thread

# All pages together, at most: within the unit's TimeoutStartSec (900 s) after its 180 s
# health wait, so a slow first start is never killed for warming.
TOTAL_S = 600


def warm(base: str, total: float = TOTAL_S) -> list[tuple[str, PageRun]]:
    """Every page of the app opened once, in menu order, at `base` (the replica's address
    with its base path, ending in '/'): (page path, its run) each. Pages left when `total`
    seconds are spent are not opened (their run says so)."""
    base = base if base.endswith("/") else base + "/"
    deadline, runs = monotonic() + total, []
    for path in (url_path(name) for name, _, _ in existing_pages()):
        left = deadline - monotonic()
        runs.append((path, run_in_thread(open_page(base, path, timeout=left)) if left > 1
                     else PageRun(error=f"not opened: the warm-up's {total:.0f} s were spent")))
    return runs


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m dashboard.warm_replica",
                                     description="Open every page once on a replica.")
    parser.add_argument("url", help="the replica's address with its base path, e.g. "
                                    "http://127.0.0.1:8501/vit-lens/")
    args = parser.parse_args(argv)
    try:
        loopback(args.url)
    except ValueError as error:
        print(f"warm_replica: {error}", file=sys.stderr)
        return 2
    runs = warm(args.url)
    for path, run in runs:
        done = f"failed: {run.error}" if run.error else f"{run.seconds:.1f} s"
        print(f"{path or 'home':20} {done}")
    failed = [path or "home" for path, run in runs if run.error or run.exceptions]
    if failed:
        print(f"warm_replica: {len(failed)} page(s) did not run cleanly: {', '.join(failed)}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
