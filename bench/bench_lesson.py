"""The offline lesson (dashboard/explainer/lesson_export.py) on DINOv2-S/14 with every block:

- export time for one picture (the capture, overview, DAAM and every block's detail and
  queries and keys computed, the on-disk result store left out, then packed), and for a
  second run of the same (the in-memory payload caches warm: packing alone);
- file size for one picture (target <= 8 MB) and for four (target <= 25 MB), and what one
  block's detail and its queries and keys take in it (deflated, mean over the blocks);
- opening each file from disk (file://) in Chromium to interactive (navigation start until
  the component has drawn; every request but the file aborted; target <= 2 s for one
  picture), median of 3 fresh tabs.

`python bench/bench_lesson.py` prints the rows; `make bench` (bench/run.py) runs it too.
Smoke: one picture exported once and opened in one tab.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
E2E = ROOT / "tests" / "e2e"
ONE = ["chelsea"]
FOUR = ["chelsea", "coffee", "astronaut", "motorcycle"]


def _export(model, samples: list[str]) -> tuple[bytes, float]:
    from dashboard.explainer.lesson_export import LessonImage, build_lesson, sample_title
    from xai_core.images import load_sample

    pictures = [LessonImage(sample_title(s), load_sample(s)) for s in samples]
    started = time.perf_counter()
    page = build_lesson(model, pictures)
    return page, time.perf_counter() - started


def _part_sizes(page: bytes) -> dict[str, float]:
    """Mean deflated MB of one block's detail and of its queries and keys, from the manifest."""
    from dashboard.explainer.lesson_export import read_manifest

    entry = read_manifest(page)["images"][0]
    return {kind: statistics.mean(length for _, length, _ in entry[kind].values()) / 1e6
            for kind in ("detail", "vectors")}


def _open_seconds(browser, path: Path) -> tuple[float, list[str]]:
    """Navigation start to the component's first drawing, in the page's own clock."""
    context = browser.new_context(viewport={"width": 1500, "height": 1800})
    tab = context.new_page()
    url, requests = path.resolve().as_uri(), []
    tab.on("request", lambda request: requests.append(request.url))
    tab.route("**/*", lambda route: route.continue_() if route.request.url == url
              else route.abort())
    tab.goto(url)
    tab.wait_for_function("() => window.__vitExplainer && window.__vitExplainer.readyAt !== null",
                          timeout=120_000)
    ready = tab.evaluate("() => window.__vitExplainer.readyAt") / 1000
    context.close()
    return ready, [u for u in requests if u != url]


def _opened(pages: dict[str, bytes], tabs: int) -> dict[str, list]:
    """Each lesson file written to disk and opened in `tabs` fresh tabs: {name: [(seconds,
    stray requests)]}; a request for anything but the file fails the benchmark."""
    from e2e_helpers import CHROMIUM_FLAGS, chromium_path
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as folder, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), headless=True,
                                             args=CHROMIUM_FLAGS)
        opened = {}
        for name, page in pages.items():
            path = Path(folder) / f"{name}.html"
            path.write_bytes(page)
            opened[name] = [_open_seconds(browser, path) for _ in range(tabs)]
        browser.close()
    stray = [u for runs in opened.values() for _, urls in runs for u in urls]
    if stray:
        raise RuntimeError(f"the lesson requested {stray}")
    return opened


def _smoke_rows(one: bytes, seconds: float, opened: list) -> list[dict]:
    return [{"name": "lesson export, 1 picture, 12 blocks", "value": seconds, "unit": "s"},
            {"name": "lesson file, 1 picture, 12 blocks", "value": len(one) / 1e6, "unit": "MB"},
            {"name": "lesson open from file:// to interactive, 1 picture",
             "value": opened[0][0], "unit": "s", "note": "one tab"}]


def run(smoke: bool = False) -> list[dict]:
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(E2E))
    from xai_core.infra import cache
    from xai_core.models import get_model

    model = get_model("dinov2-s14")
    tabs = 1 if smoke else 3
    with cache.memory_only():  # computed here, not read from the disk store
        one, first_seconds = _export(model, ONE)
        if smoke:
            return _smoke_rows(one, first_seconds, _opened({"one": one}, tabs)["one"])
        _, warm_seconds = _export(model, ONE)
        four, four_seconds = _export(model, FOUR)
    opened = _opened({"one": one, "four": four}, tabs)
    median = {name: statistics.median(s for s, _ in runs) for name, runs in opened.items()}
    part_mb = _part_sizes(one)
    return [
        {"name": "lesson export, 1 picture, 12 blocks: first (computes all)",
         "value": first_seconds, "unit": "s", "note": "DINOv2-S/14, chelsea"},
        {"name": "lesson export, same again (payload caches warm: packing)",
         "value": warm_seconds, "unit": "s"},
        {"name": "lesson export, 4 pictures, 12 blocks", "value": four_seconds, "unit": "s",
         "note": "chelsea's payloads in memory from the rows above"},
        {"name": "lesson file, 1 picture, 12 blocks", "value": len(one) / 1e6, "unit": "MB",
         "note": "target <= 8 MB"},
        {"name": "lesson file, 4 pictures, 12 blocks", "value": len(four) / 1e6, "unit": "MB",
         "note": "target <= 25 MB"},
        {"name": "  of which one block's detail (deflated)", "value": part_mb["detail"],
         "unit": "MB", "note": "mean over the blocks, chelsea"},
        {"name": "  of which one block's queries and keys (deflated)", "value": part_mb["vectors"],
         "unit": "MB", "note": "8-bit codes, one scale per (head, token)"},
        {"name": "lesson open from file:// to interactive, 1 picture", "value": median["one"],
         "unit": "s", "note": "target <= 2 s; median of 3 fresh tabs, no request"},
        {"name": "lesson open from file:// to interactive, 4 pictures", "value": median["four"],
         "unit": "s", "note": "median of 3 fresh tabs"},
    ]


if __name__ == "__main__":
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.path.insert(0, str(ROOT))
    import xai_core  # noqa: F401  (before torch: the threads' wait policy)

    for row in run():
        note = f"  {row['note']}" if row.get("note") else ""
        print(f"  {row['name']:<58} {row['value']:>10.3f} {row['unit']:<4}{note}")
