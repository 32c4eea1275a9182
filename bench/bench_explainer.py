"""The ViT Explainer in Chromium (`streamlit run` + Playwright, as in tests/e2e), DINOv2:

- bytes sent to the browser for one Explainer page view (target <= 2 MB): the WebSocket
  messages of the view (the page, its payload, the component's CSS and loader, and - the
  query · key panel being in view on this 1500x1800 screen - the shown block's q and k),
  and separately the HTTP files of a first visit (Streamlit's own JavaScript and the
  component's code, cached by the browser after);
- bytes of opening another block (one fragment rerun: that block's detail and q and k, not
  the overview again) and of a tour step on a block the browser keeps (no array at all;
  what remains is the component's CSS and loader, which Streamlit re-sends on every rerun);
- on a 1280x800 laptop, where the query · key panel starts below the fold: the first
  screen's bytes, and the wait from scrolling the panel into view until its q and k are
  drawn (one fragment rerun);
- hover-to-redraw, timed in the page with performance.now() from the mouse event to the
  end of the redraw, and to the next painted frame (target <= 50 ms);
- frames drawn per second while the blocks play (target >= 15 fps);
- page open to interactive with a warm server cache (fresh browser tab: navigation start
  until the component has drawn and the script is idle);
- a head switched off from its chip: click until the answer bars show the model's new
  answer (one fragment rerun with one forward pass; target <= 1 s).

Smoke: one page view after the cold one, one laptop view, 5 hovers, one head switched.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
E2E = ROOT / "tests" / "e2e"


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _new_tab(browser, width: int = 1500, height: int = 1800):
    context = browser.new_context(viewport={"width": width, "height": height})
    return context, context.new_page()


def _page_view(browser, app_url: str, driver) -> dict:
    """One page view in a fresh browser context (nothing cached in the browser)."""
    context, tab = _new_tab(browser)
    traffic = driver.Traffic(tab)
    started = time.perf_counter()
    driver.open_explainer(tab, app_url)
    seconds = time.perf_counter() - started
    tab.wait_for_timeout(500)
    view = {"ws": sum(traffic.received), "http": traffic.http_bytes, "seconds": seconds,
            "foreign": traffic.foreign_hosts(app_url)}
    # open another block: the only interaction that talks to Python
    before = sum(traffic.received)
    last = driver.state(tab)["block"]
    block = "3" if last != "3" else "4"
    opened = time.perf_counter()
    tab.locator(f"{driver.ROOT} .vx-block[data-block='{block}']").click()
    driver.wait_for_state(tab, "detail", lambda loaded: block in loaded.split(","))
    view["block_seconds"] = time.perf_counter() - opened
    tab.wait_for_timeout(300)
    view["block_ws"] = sum(traffic.received) - before
    # a tour step whose block the browser keeps (steps 1 and 2 show the last block)
    tab.locator(f"{driver.ROOT} .vx-block[data-block='{last}']").click()
    tab.locator(f"{driver.ROOT} [data-act='start']").click()
    tab.wait_for_function("() => new URL(location.href).searchParams.get('tour') === '1'")
    driver.wait_app_idle(tab)
    before = sum(traffic.received)
    tab.keyboard.press("ArrowRight")
    tab.wait_for_function("() => new URL(location.href).searchParams.get('tour') === '2'")
    driver.wait_app_idle(tab)
    tab.wait_for_timeout(300)
    view["step_ws"] = sum(traffic.received) - before
    context.close()
    return view


def _laptop_queries_and_keys(browser, app_url: str, driver) -> dict:
    """A laptop screen: the first screen's WebSocket bytes (no q and k), then the seconds
    from scrolling to the query · key panel until it shows them."""
    context, tab = _new_tab(browser, 1280, 800)
    traffic = driver.Traffic(tab)
    driver.open_explainer(tab, app_url)
    first_screen = sum(traffic.received)
    block = driver.state(tab)["block"]
    started = time.perf_counter()
    tab.locator(f"{driver.ROOT} [data-part='qk']").scroll_into_view_if_needed()
    driver.wait_for_state(tab, "qk", lambda held: block in (held or "").split(","))
    seconds = time.perf_counter() - started
    context.close()
    return {"first_screen": first_screen, "qk_seconds": seconds}


def _hover_and_play(browser, app_url: str, driver, hovers: int = 80) -> dict:
    context, tab = _new_tab(browser)
    driver.open_explainer(tab, app_url)
    rows, cols = (int(n) for n in driver.state(tab)["grid"].split("x"))
    tab.evaluate("() => { window.__vitExplainer.hover = []; window.__vitExplainer.hoverFrame = []; }")
    for i in range(hovers):  # a walk over many different patches
        patch = (i * 37) % (rows * cols)
        driver.hover_patch(tab, patch)
        tab.wait_for_timeout(25)
    tab.wait_for_timeout(200)
    hover = driver.metrics(tab)
    tab.mouse.move(1, 1)
    tab.locator(f"{driver.ROOT} .vx-play").click()
    tab.wait_for_timeout(4000)
    frames = driver.metrics(tab)["frames"]
    tab.locator(f"{driver.ROOT} .vx-play").click()
    context.close()
    span = (frames[-1] - frames[0]) / 1000 if len(frames) > 1 else float("inf")
    return {"hover": hover["hover"], "frame": hover["hoverFrame"],
            "fps": (len(frames) - 1) / span if span > 0 else 0.0}


def _head_switches(browser, app_url: str, driver, most: int | None = None) -> list[float]:
    """Seconds from a click on a chip's power switch to the answer drawn for it, for each
    head of block 6 (each a new question for the server: one forward pass)."""
    context, tab = _new_tab(browser)
    driver.open_explainer(tab, app_url)
    tab.locator(f"{driver.ROOT} .vx-block").nth(6).click()
    driver.wait_for_state(tab, "detail", lambda held: "6" in (held or "").split(","))
    answer, seconds = f"{driver.ROOT} [data-part='answer']", []
    heads = int(tab.locator(f"{driver.ROOT} .vx-headoff").count())
    heads = min(heads, most or heads)
    for head in range(heads):
        switch = tab.locator(f"{driver.ROOT} .vx-headchip[data-head='{head}'] + .vx-headoff")
        started = time.perf_counter()
        switch.click()
        tab.locator(f"{answer}[data-shown='switched'][data-off='6.{head}']").wait_for()
        seconds.append(time.perf_counter() - started)
        switch.click()  # back on before the next head
        tab.locator(f"{answer}[data-shown='trained']").wait_for()
    context.close()
    return seconds


def run(smoke: bool = False) -> list[dict]:
    from playwright.sync_api import sync_playwright

    sys.path.insert(0, str(E2E))
    import explainer_driver as driver
    from e2e_helpers import CHROMIUM_FLAGS, chromium_path, running_apps

    with running_apps(1, log_name="bench-explainer") as apps, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), headless=True,
                                             args=CHROMIUM_FLAGS)
        app_url = apps[0].url
        repeats = 1 if smoke else 3
        cold = _page_view(browser, app_url, driver)  # fills the server's caches
        views = [_page_view(browser, app_url, driver) for _ in range(repeats)]
        laptops = [_laptop_queries_and_keys(browser, app_url, driver) for _ in range(repeats)]
        interaction = _hover_and_play(browser, app_url, driver, 5 if smoke else 80)
        switches = _head_switches(browser, app_url, driver, 1 if smoke else None)
        browser.close()

    if any(view["foreign"] for view in [cold, *views]):
        raise RuntimeError(f"requests to other hosts: {cold['foreign']}")
    median = lambda key: statistics.median(view[key] for view in views)  # noqa: E731
    hover, frame = interaction["hover"], interaction["frame"]
    return [
        {"name": "Explainer page view: WebSocket bytes to the browser", "value": median("ws") / 1e6,
         "unit": "MB", "note": "target <= 2 MB (page, payload, q and k of the shown block: "
                 "their panel is in view at 1500x1800)"},
        {"name": "Explainer first visit: HTTP bytes (Streamlit's static files)",
         "value": median("http") / 1e6, "unit": "MB",
         "note": "as sent (compressed): Streamlit's and the component's code; "
                 "browser-cached after the first visit"},
        {"name": "open another block: WebSocket bytes", "value": median("block_ws") / 1e6,
         "unit": "MB", "note": "one fragment rerun: that block's detail, q and k"},
        {"name": "tour step on a block the browser keeps: WebSocket bytes",
         "value": median("step_ws") / 1e6, "unit": "MB",
         "note": "no array; Streamlit re-sends the component's CSS and loader"},
        {"name": "open another block: click to detail drawn", "value": median("block_seconds"),
         "unit": "s"},
        {"name": "laptop 1280x800: first screen, WebSocket bytes",
         "value": statistics.median(view["first_screen"] for view in laptops) / 1e6,
         "unit": "MB", "note": "the query · key panel is below the fold: no q and k yet"},
        {"name": "laptop: scroll to the q·k panel until q and k are drawn",
         "value": statistics.median(view["qk_seconds"] for view in laptops), "unit": "s",
         "note": "one fragment rerun (0.39 MB on DINOv2), median of 3"},
        {"name": "hover-to-redraw, median (event -> redraw done)",
         "value": statistics.median(hover), "unit": "ms", "note": "target <= 50 ms"},
        {"name": "hover-to-redraw, 95th percentile", "value": _percentile(hover, 0.95),
         "unit": "ms", "note": f"{len(hover)} hovers over different patches"},
        {"name": "hover to next painted frame, median", "value": statistics.median(frame),
         "unit": "ms"},
        {"name": "frames drawn per second while playing", "value": interaction["fps"],
         "unit": "fps", "note": "target >= 15 fps (headless Chromium)"},
        {"name": "page open to interactive, cold server cache", "value": cold["seconds"],
         "unit": "s", "note": "new server process: model load, capture, DAAM, payload"},
        {"name": "page open to interactive, warm cache", "value": median("seconds"),
         "unit": "s", "note": "fresh tab, median of 3"},
        {"name": "head switched off: click to answer redrawn, median",
         "value": statistics.median(switches), "unit": "s",
         "note": f"target <= 1 s; each head of block 6 once (max {max(switches):.2f} s)"},
    ]
