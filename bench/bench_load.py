"""A class arriving at once: simulated students through the nginx recipe and two replicas.

The stack is the one the e2e tests prove (tests/e2e/proxy_helpers.py): Debian's nginx with
deploy/nginx/vit-lens.conf (ports, paths and log moved to loopback and a temporary folder,
4096 worker_connections, Streamlit's bundle a copy precompressed as `make nginx-gzip` does)
in front of two `streamlit run` replicas with one torch thread each (2 cores, 2 replicas),
both warm as the systemd unit leaves them (`dashboard.warm_replica`: every page run once,
so each replica has loaded its models and imported every page's code).

Each step: N students arrive evenly spread within ARRIVAL_S. A student is
bench/load_client.py: first the files a browser's first visit fetches (index.html and
the static files a Chromium tab fetched, gzip, six connections), then one page over
Streamlit's WebSocket until its run finishes; student i opens page i mod len(pages) on
gallery image (i // len(pages)) mod 8. Once all have arrived, one real Chromium tab opens
Home (new context: empty cache) and is timed until interactive (bench_browser's
definition). The client is first checked against Chromium (same elements for Home).

Reported per step: errors (failed file requests, runs that did not finish or showed an
exception, nginx alerts and errors), first-visit files p50/p95 and bytes on the wire, each
page's p50/p95 (WebSocket open -> script_finished), the real tab's Home, and each replica's
peak resident memory. Results computed in one step are cached for later steps (as on a
server in use). Before the replicas start, `python -m xai_core warmup --gallery` fills the
result store, as the replica unit's background warm-up does after a start (on a fresh clone
the store is empty: the class then computed every picture, 50 students' pages p95 15-19 s);
its time is a row. The smoke skips it.

Then the mixes beside a class (bench/load_mixes.py): a greedy visitor beside 50 students (the
students' pages p95 with it within 1.5x of without), 10 uploads at once (upload -> Explainer
p95 <= 10 s, replica peak <= 2.5 GB), 20 lesson exports at once (memory back within 100 MB a
minute later), and a replica killed while 50 students arrive (the survivor's pages p95 <= 3 s).

Alone: `python -m bench.bench_load --students 10,25 [--pages vit_explainer,comparison]
[--mixes greedy,uploads,exports,kill] [--smoke]` (`--smoke`: one student per page, small
mixes).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import quote

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from bench.load_client import chromium_first_visit, first_visit_files  # noqa: E402
from dashboard.page_visit import element_kinds, open_page, run_in_thread, with_view  # noqa: E402
from dashboard.warm_replica import warm  # noqa: E402
from bench.run import print_rows  # noqa: E402

STEPS = (10, 25, 50, 100)
ARRIVAL_S = 5.0
PAGES = {"vit_explainer": "ViT Explainer", "comparison": "Comparison"}  # URL path -> name
SMOKE_STUDENTS = len(PAGES)  # one student per page
STUDENT_TIMEOUT_S = 300  # per student: files, then the page
RSS_EVERY_S = 0.5
PREFIX = "vit-lens"


def gallery_queries() -> list[str]:
    from dashboard.state import image_title
    from xai_core.images import SAMPLES

    return ["image_choice=" + quote(image_title(sample)) for sample in SAMPLES]


def rss_gb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024**2
    return float("nan")


async def student(index: int, count: int, base: str, pages: list[str], queries: list[str],
                  static: list[str]) -> dict:
    await asyncio.sleep(index * ARRIVAL_S / count)
    chosen = pages[index % len(pages)]
    page, query = with_view(chosen, queries[(index // len(pages)) % len(queries)])
    async with asyncio.timeout(STUDENT_TIMEOUT_S):
        files = await first_visit_files(base, f"{page}?{query}", static)
        run = await open_page(base, page, query, cookies=files.cookies,
                              timeout=STUDENT_TIMEOUT_S - files.seconds)
    return {"page": chosen, "files": files, "run": run}


async def class_arrives(count: int, base: str, pages: list[str], static: list[str],
                        pids: list[int]) -> tuple[list, dict[int, float]]:
    """Every student's result (or the exception that ended it) and each replica's peak RSS."""
    peaks = {pid: rss_gb(pid) for pid in pids}
    queries = gallery_queries()
    students = asyncio.gather(*(student(i, count, base, pages, queries, static)
                                for i in range(count)), return_exceptions=True)
    while not students.done():
        for pid in pids:
            peaks[pid] = max(peaks[pid], rss_gb(pid))
        await asyncio.wait([students], timeout=RSS_EVERY_S)
    return students.result(), peaks


def real_tab_home(browser, url: str, server_pid: int) -> tuple[float, str]:
    """A Chromium tab's first visit of Home, seconds to interactive (bench_browser.Tab)."""
    from bench.bench_browser import VIEWPORT, Tab

    context = browser.new_context(viewport=VIEWPORT)
    try:
        return Tab(context, server_pid).visit(url).seconds, ""
    except Exception as error:  # noqa: BLE001  a timeout under load is a result, not a crash
        return float("nan"), f"{type(error).__name__}: {str(error)[:120]}"
    finally:
        context.close()


def nginx_problems(error_log: Path, skip: int) -> tuple[list[str], int]:
    lines = error_log.read_text(errors="replace").splitlines()
    return [line for line in lines[skip:] if "[alert]" in line or "[error]" in line
            or "[crit]" in line or "[emerg]" in line], len(lines)


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def step_rows(count: int, results: list, peaks: dict[int, float], tab: tuple[float, str],
              nginx: list[str], pages: list[str], sessions: list[int]) -> list[dict]:
    errors: list[str] = [f"{type(r).__name__}: {r}" for r in results
                         if isinstance(r, BaseException)]
    done = [r for r in results if isinstance(r, dict)]
    for result in done:
        errors += [f"file {e}" for e in result["files"].errors]
        run = result["run"]
        if run.error:
            errors.append(f"page {result['page']}: {run.error}")
        elif run.exceptions:
            errors.append(f"page {result['page']}: {run.exceptions} exception(s) shown")
    errors += [f"nginx: {line.split('] ', 1)[-1][:100]}" for line in nginx]
    files = [r["files"] for r in done if not r["files"].errors]
    kinds = sorted({error[:80] for error in errors})
    label = f"{count} students"
    rows = [{"name": f"{label}: errors", "value": float(len(errors)), "unit": "",
             "note": "; ".join(kinds[:4]) + ("; target 0" if count == 100 else "")},
            {"name": f"{label}: first-visit files p50", "unit": "s",
             "value": percentile([f.seconds for f in files], 50)},
            {"name": f"{label}: first-visit files p95", "unit": "s",
             "value": percentile([f.seconds for f in files], 95),
             "note": (f"{np.mean([f.wire_bytes for f in files]) / 1e6:.2f} MB on the wire, "
                      f"{files[0].requests} requests per visit" if files else "")
             + ("; target <= 3 s" if count == 50 else "")}]
    for page in pages:
        seconds = [r["run"].seconds for r in done if r["page"] == page and not r["run"].error]
        name = PAGES.get(page, page or "Home")
        rows += [{"name": f"{label}: {name} p50", "value": percentile(seconds, 50), "unit": "s",
                  "note": f"{len(seconds)} finished runs"},
                 {"name": f"{label}: {name} p95", "value": percentile(seconds, 95), "unit": "s",
                  "note": "target <= 5 s" if count == 50 else ""}]
    rows.append({"name": f"{label}: a real Chromium tab, Home", "value": tab[0], "unit": "s",
                 "note": tab[1] or ("target <= 3 s" if count == 50 else "")})
    for number, (peak, opened) in enumerate(zip(peaks.values(), sessions), 1):
        rows.append({"name": f"{label}: replica {number} peak RSS", "value": peak, "unit": "GB",
                     "note": f"{opened} of the step's {sum(sessions)} WebSocket sessions "
                             "(the real tab's included)"})
    return rows


def validate_client(browser, base: str, static_out: list[str]) -> dict:
    """Home through nginx in Chromium and in the protocol client: the same elements.
    Fills `static_out` with the files the tab fetched (what each student fetches)."""
    payloads, static = chromium_first_visit(browser, base, base)
    static_out.extend(dict.fromkeys(static))  # once each, in the tab's order
    browser_kinds, _, finished = element_kinds(payloads)
    run = run_in_thread(open_page(base))
    same = finished and not run.error and run.elements == browser_kinds
    return {"name": "protocol client vs Chromium, Home: elements", "unit": "",
            "value": float(len(run.elements)),
            "note": (f"same as the Chromium tab's {len(browser_kinds)}" if same else
                     f"DIFFERS: Chromium {len(browser_kinds)} ({'finished' if finished else 'no run'}), "
                     f"client {run.error or run.elements[:5]}")}


MIXES = ("greedy", "uploads", "exports", "kill")
MIX_SIZES = {"greedy": 50, "uploads": 10, "exports": 20, "kill": 50}
SMOKE_SIZES = {"greedy": 4, "uploads": 2, "exports": 3, "kill": 4}


def warm_pages(url: str, pages: list[str], smoke: bool) -> list[tuple[str, object]]:
    """A replica warmed as the replica unit does (every page run once), or in the smoke only
    Home and the pages its students open (the smoke shows the bench runs, in minutes)."""
    if not smoke:
        return warm(url)
    return [(path, run_in_thread(open_page(url, *with_view(path, ""))))
            for path in dict.fromkeys(["", *pages])]


def warm_gallery() -> dict:
    """The result store filled as a started server fills it (dashboard/serve.py warms the
    gallery in the background): every page's default views for each gallery picture."""
    from e2e_helpers import app_env

    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "xai_core", "warmup", "--gallery"], cwd=ROOT,
                   env=app_env(), check=True, stdout=subprocess.DEVNULL)
    return {"name": "gallery warm-up before the class (warmup --gallery)",
            "value": time.perf_counter() - started, "unit": "s",
            "note": "as a started replica's background warm-up"}


def replica_env(smoke: bool) -> dict[str, str]:
    """The smoke's replicas, warmed on a few pages only, count as ready at once (readiness,
    which nginx asks, says ready when every page has run: tests/e2e/test_fair_server.py)."""
    from dashboard.readiness import READY_AFTER_ENV

    return {READY_AFTER_ENV: "0"} if smoke else {}


def in_thread(coroutine):
    """Run a coroutine on an event loop of its own thread (Playwright holds the main one)."""
    outcome: dict = {}
    worker = threading.Thread(target=lambda: outcome.update(result=asyncio.run(coroutine)))
    worker.start()
    worker.join()
    return outcome["result"]


def students_seconds(results: list) -> list[float]:
    return [r["run"].seconds for r in results
            if isinstance(r, dict) and not r["run"].error and not r["files"].errors]


def greedy_mix(count: int, proxy, pages, static, pids, smoke: bool = False) -> list[dict]:
    from bench.load_mixes import (GREEDY_SAMPLES, SMOKE_GREEDY_SAMPLES, greedy_rows,
                                  greedy_visitor)

    samples = SMOKE_GREEDY_SAMPLES if smoke else GREEDY_SAMPLES

    # the same class twice alone, the first unmeasured: what it computes (the store, each
    # replica's caches) is then computed, as it is for the class beside the greedy visitor
    in_thread(class_arrives(count, proxy.url, pages, static, pids))
    alone, _ = in_thread(class_arrives(count, proxy.url, pages, static, pids))
    stop: dict = {}
    runs: list = []
    started = time.perf_counter()

    async def beside():
        stop["event"] = asyncio.Event()
        greedy = asyncio.create_task(greedy_visitor(proxy.url, quote("Chelsea the cat"),
                                                    stop["event"], samples))
        await asyncio.sleep(2 if smoke else 10)  # its first heavy link under way
        result = await class_arrives(count, proxy.url, pages, static, pids)
        stop["event"].set()
        runs.extend(await greedy)
        return result
    beside_results, _ = in_thread(beside())
    return greedy_rows(f"{count} students and a greedy visitor", students_seconds(alone),
                       students_seconds(beside_results), runs, time.perf_counter() - started,
                       samples)


def uploads_mix(count: int, proxy, pids) -> list[dict]:
    from bench.load_mixes import Sampler, upload_rows, uploads_at_once

    with Sampler(pids, rss_gb) as sampler:
        uploads = in_thread(uploads_at_once(proxy.url, count))
    return upload_rows(f"{count} uploads at once", uploads, sampler.peaks)


def exports_mix(count: int, proxy, pids, smoke: bool = False) -> list[dict]:
    from bench.load_mixes import SETTLE_S, SMOKE_SETTLE_S, Sampler, export_rows, exports_at_once

    settle_s = SMOKE_SETTLE_S if smoke else SETTLE_S
    time.sleep(5)
    start = {pid: rss_gb(pid) for pid in pids}
    query = "image_choice=" + quote("Chelsea the cat")
    with Sampler(pids, rss_gb) as sampler:
        results = in_thread(exports_at_once(proxy.url, count, query))
    time.sleep(settle_s)  # every socket closed a minute ago (the smoke: seconds)
    settled = {pid: rss_gb(pid) for pid in pids}
    return export_rows(f"{count} lesson exports at once", results, start, sampler.peaks,
                       settled, settle_s)


def kill_mix(count: int, apps, proxy, pages, static, smoke: bool = False) -> list[dict]:
    """A class arrives; a second in, one replica is killed (SIGKILL). The survivor's pages,
    then the killed replica restarted as systemd would, warmed, and back in service (the
    smoke warms only the pages its students open)."""
    from e2e_helpers import AppProcess, app_env

    victim = apps[0]
    killer = threading.Timer(1.0, victim.kill)
    killer.start()
    results, _ = in_thread(class_arrives(count, proxy.url, pages, static,
                                         [app.process.pid for app in apps[1:]]))
    killer.join()
    finished = students_seconds(results)
    label = f"{count} students, a replica killed"
    rows = [{"name": f"{label}: pages finished", "value": float(len(finished)), "unit": "",
             "note": f"of {count}: the killed replica's students' sockets closed with it "
                     "(a browser reconnects; this client does not)"},
            {"name": f"{label}: survivor's pages p95", "value": percentile(finished, 95),
             "unit": "s", "note": "target <= 3 s"}]
    restarted = AppProcess(base_path=PREFIX, log_name="bench-load", port=victim.port,
                           env={**app_env(), **replica_env(smoke)})
    apps[0] = restarted  # stopped with the others at the end
    started = time.perf_counter()
    restarted.wait_healthy(300)
    failed = [page for page, run in warm_pages(restarted.url, pages, smoke) if run.error]
    rows.append({"name": f"{label}: restarted replica warm after", "unit": "s",
                 "value": time.perf_counter() - started,
                 "note": f"{len(failed)} pages failed" if failed else
                 ("Home and the students' pages run (smoke)" if smoke else "every page run")})
    return rows


def run(steps=STEPS, pages=tuple(PAGES), mixes=MIXES, smoke: bool = False) -> list[dict]:
    from e2e_helpers import CHROMIUM_FLAGS, chromium_path, running_apps
    from playwright.sync_api import sync_playwright
    from proxy_helpers import nginx_in_front, precompressed_bundle

    sizes = SMOKE_SIZES if smoke else MIX_SIZES
    steps = (SMOKE_STUDENTS,) if smoke else steps
    pages = list(pages)
    rows: list[dict] = [] if smoke else [warm_gallery()]  # printed with the client's check
    with running_apps(2, base_path=PREFIX, log_name="bench-load", env=replica_env(smoke)) as apps, \
            precompressed_bundle() as bundle, \
            nginx_in_front(apps, log_name="bench-load-nginx", bundle=bundle) as proxy, \
            sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), headless=True,
                                             args=CHROMIUM_FLAGS)
        for app in apps:  # warmed as the replica unit does: every page run once
            failed = [f"{page}: {run.error}" for page, run in warm_pages(app.url, pages, smoke)
                      if run.error]
            assert not failed, failed
        static: list[str] = []
        rows.append(validate_client(browser, proxy.url, static))
        print_rows(rows)
        pids = [app.process.pid for app in apps]
        error_log = proxy.tmp / "error.log"
        for count in steps:
            _, skip = nginx_problems(error_log, 0)
            logged = len(proxy.access_log.read_text().splitlines())
            outcome: dict = {}
            load = threading.Thread(target=lambda: outcome.update(result=asyncio.run(
                class_arrives(count, proxy.url, pages, static, pids))))
            load.start()
            time.sleep(ARRIVAL_S)  # the class has arrived
            tab = real_tab_home(browser, proxy.url, pids[0])
            load.join(STUDENT_TIMEOUT_S + 2 * ARRIVAL_S)
            if "result" not in outcome:
                raise RuntimeError(f"{count} students: the load did not end in time")
            results, peaks = outcome["result"]
            nginx, _ = nginx_problems(error_log, skip)
            time.sleep(0.5)  # a WebSocket is logged when it closes
            streams = [upstream for _, path, upstream in proxy.upstreams_in_log(logged)
                       if path.endswith("/_stcore/stream")]
            sessions = [streams.count(f"127.0.0.1:{app.port}") for app in apps]
            step = step_rows(count, results, peaks, tab, nginx, pages, sessions)
            print_rows(step)  # as it comes: a step of 100 takes minutes
            rows += step
        browser.close()
        for mix in [m for m in MIXES if m in mixes]:  # the kill last: it restarts a replica
            if mix == "greedy":
                found = greedy_mix(sizes[mix], proxy, pages, static, pids, smoke)
            elif mix == "uploads":
                found = uploads_mix(sizes[mix], proxy, pids)
            elif mix == "exports":
                found = exports_mix(sizes[mix], proxy, pids, smoke)
            else:
                found = kill_mix(sizes[mix], apps, proxy, pages, static, smoke)
            print_rows(found)
            rows += found
    return rows


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_load",
                                     description="Simulated students through nginx and 2 replicas.")
    parser.add_argument("--students", default=",".join(map(str, STEPS)),
                        help="students per step, comma-separated (default 10,25,50,100)")
    parser.add_argument("--pages", default=",".join(PAGES),
                        help="URL paths of the pages students open ('' is Home; "
                             "'interventions?iv_view=claims' opens a view by its deep link)")
    parser.add_argument("--mixes", default=",".join(MIXES),
                        help="mixes after the class steps, comma-separated ('' for none): "
                             + ", ".join(MIXES))
    parser.add_argument("--smoke", action="store_true", help="4 students and small mixes")
    args = parser.parse_args(argv)
    try:
        steps = [int(n) for n in args.students.split(",")]
        if not all(0 < n <= 200 for n in steps):
            raise ValueError
    except ValueError:
        parser.exit(2, "--students takes whole numbers from 1 to 200, comma-separated\n")
    mixes = [m.strip() for m in args.mixes.split(",") if m.strip()]
    if set(mixes) - set(MIXES):
        parser.exit(2, f"--mixes takes {', '.join(MIXES)}, comma-separated\n")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    run(steps, [p.strip() for p in args.pages.split(",")], mixes, args.smoke)


if __name__ == "__main__":
    main(sys.argv[1:])
