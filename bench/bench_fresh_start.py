"""Page 9 after a fresh `make run` (issue 40's "done when"): the server started as `make run`
starts it (`python -m dashboard.serve`) with an empty cache folder, so nothing was computed
before; once the port answers, its background warm-up computes the default picture's Explainer
and page 9 first (`dashboard.background_warmup`). Then a new browser opens page 9 on the default
picture and waits until it is interactive (bench_browser's definition, its `Tab`).

Rows: seconds from the start to the health answer (models converted and loaded), from the health
answer to the warm-up's page 9 step logged done, and page 9's first view in Chromium after that
(target <= 3 s). Smoke: the same on this machine's model cache, skipping the conversion.
"""

from __future__ import annotations

import re
import tempfile
import time

from bench.bench_browser import CHROMIUM_FLAGS, VIEWPORT, Tab, _server, chromium_path

PAGE = "9_interventions.py"
WARM_TIMEOUT_S = 900


def _page_warmed_at(log: str) -> bool:
    """The warm-up's log line for page 9's step (its number, then the page's words)."""
    return re.search(r"warm-up \d+/\d+: [^\n]*9 interventions", log) is not None


def _wait_warmed(server) -> float:
    started = time.perf_counter()
    while not _page_warmed_at(server.log()):
        if "warm-up stopped" in server.log() or server.process.poll() is not None:
            raise RuntimeError(f"the warm-up stopped: {server.log()[-1500:]}")
        if time.perf_counter() - started > WARM_TIMEOUT_S:
            raise TimeoutError(f"page 9 not warmed within {WARM_TIMEOUT_S} s")
        time.sleep(0.5)
    return time.perf_counter() - started


def run(smoke: bool = False) -> list[dict]:
    from playwright.sync_api import sync_playwright

    from dashboard.page_list import url_path

    with tempfile.TemporaryDirectory(prefix="vit-lens-fresh-") as cache_dir, \
            sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), headless=True,
                                             args=CHROMIUM_FLAGS)
        started = time.perf_counter()
        server = _server(None if smoke else cache_dir)
        try:
            server.wait_healthy(timeout=WARM_TIMEOUT_S)
            healthy = time.perf_counter() - started
            warmed = _wait_warmed(server)
            context = browser.new_context(viewport=VIEWPORT)
            visit = Tab(context, server.process.pid).visit(server.url + url_path(PAGE))
            context.close()
        finally:
            server.stop()
            browser.close()
    cache = "this machine's model cache" if smoke else "an empty cache folder"
    return [
        {"name": f"fresh make run ({cache}): start -> health answers", "value": healthy,
         "unit": "s"},
        {"name": "health -> background warm-up has page 9's default views", "value": warmed,
         "unit": "s"},
        {"name": "page 9's first view on the default picture, after that (Chromium)",
         "value": visit.seconds, "unit": "s", "note": "target <= 3 s"},
    ]


if __name__ == "__main__":
    for row in run():
        print(row)
