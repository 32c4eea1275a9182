"""Every page in a real browser: Debian's Chromium driven by Playwright exactly as the e2e
tests drive it (tests/e2e/e2e_helpers.py), against an app server this module starts the way
`make run` does (`python -m dashboard.serve`, models prepared before it listens) on a free
loopback port, with an empty cache directory, and stops at the end.

Definitions (one place; bench/FINDINGS.md uses the same words):
- interactive: after the action, (1) a `script_finished` message from the server reached
  the browser, (2) the app shows script state `notRunning`, (3) no element is stale (greyed,
  waiting for a rerun) or a placeholder (`stSkeleton`, shown while a chart's code loads),
  (4) every Plotly chart on the page has drawn its latest figure (each `.vl-chart` of
  dashboard/charts.py says `data-state="drawn"` and holds a `.main-svg`); another custom
  component's own drawing is not waited for
  (bench_explainer times the Explainer's). Checked on every animation frame;
  if another run starts within SETTLE_S after that, the wait starts again.
- first visit: a new browser context (new session, empty browser cache) opens the page's URL
  with a gallery image the server has not processed yet (`?image_choice=<id>`), timed from
  navigation. The server restarts when the unseen images run out.
- repeat visit: the same context opens the same URL again in a new tab (a new session,
  warm server and browser caches; the app's JavaScript boots again).
- third visit: once more in another new tab. Chromium keeps the compiled code of a script
  only from its second run on, so this is what a returning student's browser does; the
  target is judged on the repeat visit.
- page switch: in that tab, a click on the page's menu entry coming from another page (the
  same session: what a student does in a lecture).
- interaction: a slider moved one step with the keyboard, or a patch clicked, timed from
  the input until interactive again (the chart redrawn). INTERACTIONS names it per page;
  any other page gets its first slider, else its first clickable patch chart.
- websocket MB: payload of the messages the server sent during the visit (uncompressed).
- charts: Plotly charts on the page.
- first start: the server launched with an empty cache (a fresh machine after install):
  seconds until /_stcore/health answers (models converted, bank built, all loaded), then
  the first visit of the home page after that.
Where the time goes (robust on a busy machine, where wall times stretch): CPU seconds of
the server process during the visit (/proc), of the page's renderer process and its main
thread (Chromium's Performance.getMetrics: ProcessTime, ThreadTime), and the main thread's
JavaScript, layout and style-recalculation time; websocket MB per kind of element.

Smoke: the home page alone, on a server using this machine's model cache (no conversion).
"""

from __future__ import annotations

import base64
import gc
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from e2e_helpers import (CHROMIUM_FLAGS, MAKE_RUN, AppProcess, app_env,  # noqa: E402
                         chromium_path)

CHART = "vit_lens.chart"  # dashboard/charts.py's component
SETTLE_S = 0.4
TIMEOUT_S = 300
INTERACTION_TIMEOUT_S = 120
VIEWPORT = {"width": 1500, "height": 1000}
# page file -> (extra URL query for the interaction, "slider" | "click" | "none", widget or
# chart key, or for "none" why)
# (a page's later views are opened by their deep link, e.g. `tok_view=position`)
INTERACTIONS = {
    "0_vit_explainer.py": ("", "none", "its interactions run in the browser (bench_explainer)"),
    "1_tokenization.py": ("tok_view=position", "click", "tok_pos_chart"),
    "2_self_attention.py": ("sa_view=model", "click", "sa_chart"),
    "3_attention_distance.py": ("p3_view=head", "click", "p3_head_map"),
    "4_rollout_heads.py": ("", "slider", "p4_discard"),
    "5_gradcam.py": ("gc_part=vit", "slider", "gc_block"),
    "6_daam_flow.py": ("daam_view=channels", "slider", "daam_channel_block"),
    "7_comparison.py": ("cmp_view=agree", "slider", "cmp_topk"),
    "8_text_attention.py": ("", "slider", "text_layer"),
    "9_interventions.py": ("iv_view=readout", "slider", "iv_readout_block"),
}
INTERACTIVE_JS = """() => {
    const app = document.querySelector("[data-testid='stApp']");
    if (!app || app.getAttribute("data-test-script-state") !== "notRunning") return false;
    if (document.querySelector("[data-stale='true'], [data-testid='stSkeleton']")) return false;
    return [...document.querySelectorAll(".vl-chart")]
        .every(chart => chart.dataset.state === "drawn" && chart.querySelector(".main-svg"));
}"""
CHART_COUNT_JS = "() => document.querySelectorAll('.vl-chart').length"
# the centre of a clickable chart's patch marker (an invisible scatter point with customdata)
PATCH_POINT_JS = """(gd) => {
    const trace = gd._fullData.find(t => t.type === "scatter" && t.customdata
                                         && t.customdata.length > 1);
    if (!trace) return null;
    const i = Math.floor(trace.x.length / 4) + 1;
    const xa = gd._fullLayout[trace.xaxis.replace("x", "xaxis")];
    const ya = gd._fullLayout[trace.yaxis.replace("y", "yaxis")];
    const box = gd.getBoundingClientRect();
    return {x: box.left + xa._offset + xa.l2p(trace.x[i]),
            y: box.top + ya._offset + ya.l2p(trace.y[i])};
}"""


@dataclass
class Visit:
    seconds: float  # wall clock, action -> interactive
    megabytes: float  # websocket payload the server sent
    charts: int
    server_cpu: float  # CPU seconds of the app server process (all its threads)
    browser_cpu: float  # CPU seconds of the page's renderer process
    main_thread: dict[str, float] = field(default_factory=dict)  # renderer main thread, s
    messages: dict[str, float] = field(default_factory=dict)  # MB per kind of element


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process, all threads (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _message_kinds(payload: bytes) -> tuple[str, str]:
    """(ForwardMsg type, element type for a new element) of one websocket message."""
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    try:
        message = ForwardMsg.FromString(payload)
    except Exception:  # noqa: BLE001  not a ForwardMsg (should not happen): count it anyway
        return "unknown", ""
    kind = message.WhichOneof("type") or "unknown"
    element = ""
    if kind == "delta" and message.delta.WhichOneof("type") == "new_element":
        new = message.delta.new_element
        element = new.WhichOneof("type") or ""
        if element == "bidi_component" and new.bidi_component.component_name == CHART:
            element = "chart:" + new.bidi_component.id.split("-", 2)[-1]  # "...-<key>"
    return kind, element


class Tab:
    """One browser page with a CDP session recording websocket messages and metrics."""

    def __init__(self, context, server_pid: int):
        self.server_pid = server_pid
        self.page = context.new_page()
        self.page.set_default_timeout(TIMEOUT_S * 1000)
        self.errors: list[str] = []
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.cdp = context.new_cdp_session(self.page)
        self.cdp.send("Network.enable")
        self.cdp.send("Performance.enable")
        self.frames: list[tuple[float, int, str, str]] = []  # (time, bytes, kind, element)
        self.cdp.on("Network.webSocketFrameReceived", self._on_frame)

    def _on_frame(self, params: dict) -> None:
        response = params["response"]
        payload = (base64.b64decode(response["payloadData"]) if response.get("opcode") == 2
                   else response["payloadData"].encode())
        self.frames.append((params["timestamp"], len(payload), *_message_kinds(payload)))

    def metrics(self) -> dict[str, float]:
        return {m["name"]: m["value"] for m in self.cdp.send("Performance.getMetrics")["metrics"]}

    def _finished_after(self, since: float) -> float | None:
        times = [t for t, _, kind, _ in self.frames if kind == "script_finished" and t > since]
        return max(times) if times else None

    def _wait_finished(self, since: float, deadline: float) -> None:
        while self._finished_after(since) is None:
            if time.perf_counter() > deadline:
                raise TimeoutError("no script_finished message from the server")
            self.page.wait_for_timeout(20)

    def measure(self, action, timeout: float = TIMEOUT_S, navigates: bool = False) -> Visit:
        """Run `action` and wait until interactive. Navigations run in a fresh tab, whose
        counters (a new document, perhaps a new renderer) count from zero."""
        before = self.metrics()
        since = before["Timestamp"]
        if navigates:
            before = {name: 0.0 for name in before}
        # this process's own full garbage collections (it keeps every websocket frame) took
        # 0.1-0.4 s each: never inside a measurement, on the cores the app needs
        gc.collect()
        gc.disable()
        try:
            return self._measure(action, timeout, since, before)
        finally:
            gc.enable()

    def _measure(self, action, timeout: float, since: float, before: dict) -> Visit:
        server_before = process_cpu_seconds(self.server_pid)
        started = time.perf_counter()
        deadline = started + timeout
        action()
        marker = since
        while True:
            self._wait_finished(marker, deadline)
            self.page.wait_for_function(INTERACTIVE_JS, polling="raf",
                                        timeout=max(1.0, deadline - time.perf_counter()) * 1000)
            seconds = time.perf_counter() - started
            after = self.metrics()
            server_cpu = process_cpu_seconds(self.server_pid) - server_before
            count = len(self.frames)
            self.page.wait_for_timeout(SETTLE_S * 1000)
            rerun = [t for t, _, kind, _ in self.frames[count:] if kind in ("new_session", "delta")]
            if not rerun:
                break
            marker = min(rerun)  # another run started: wait for it too
        return self._visit(since, after, before, seconds, server_cpu)

    def _visit(self, since: float, after: dict, before: dict, seconds: float,
               server_cpu: float) -> Visit:
        frames = [f for f in self.frames if since < f[0] <= after["Timestamp"]]
        per_element: dict[str, float] = {}
        for _, size, kind, element in frames:
            name = element or kind
            per_element[name] = per_element.get(name, 0.0) + size / 1e6
        delta = {name: after[name] - before[name] for name in after}
        thread = {"cpu": delta["ThreadTime"], "script": delta["ScriptDuration"],
                  "layout": delta["LayoutDuration"], "style": delta["RecalcStyleDuration"]}
        return Visit(seconds=seconds, megabytes=sum(size for _, size, _, _ in frames) / 1e6,
                     charts=int(self.page.evaluate(CHART_COUNT_JS)), server_cpu=server_cpu,
                     browser_cpu=delta["ProcessTime"], main_thread=thread,
                     messages=dict(sorted(per_element.items(), key=lambda kv: -kv[1])))

    def visit(self, url: str) -> Visit:
        return self.measure(lambda: self.page.goto(url, wait_until="commit"), navigates=True)


# --- interactions ------------------------------------------------------------------------------

def _slider_action(tab: Tab, key: str | None):
    scope = f".st-key-{key}" if key else "[data-testid='stMain'] [data-testid='stSlider']"
    handle = tab.page.locator(f"{scope} input[type='range']").first
    if handle.count() == 0:
        return None
    handle.scroll_into_view_if_needed()
    handle.focus()
    at_max = handle.evaluate("el => Number(el.value) >= Number(el.max)")
    return lambda: tab.page.keyboard.press("ArrowLeft" if at_max else "ArrowRight")


def _click_action(tab: Tab, key: str | None):
    scope = f".st-key-{key} .js-plotly-plot" if key else "[data-testid='stMain'] .js-plotly-plot"
    for chart in tab.page.locator(scope).all():
        chart.scroll_into_view_if_needed()
        point = chart.evaluate(PATCH_POINT_JS)
        if point is not None:
            return lambda: tab.page.mouse.click(point["x"], point["y"])
    return None


def page_switch(tab: Tab, titles: dict[str, str], page_file: str) -> Visit:
    """Leave for another page through the menu (untimed), then come back (timed)."""
    def click(title: str):
        return lambda: tab.page.locator("[data-testid='stSidebarNav'] a",
                                        has_text=title).first.click()
    other = next(t for f, t in titles.items() if f != page_file) if len(titles) > 1 else None
    if other is None:
        from dashboard.page_list import existing_pages

        other = next(t for f, t, _ in existing_pages() if f != page_file)
    tab.measure(click(other))
    return tab.measure(click(titles[page_file]))


def interaction(tab: Tab, url: str, page_file: str) -> tuple[str, Visit | None]:
    """Time the page's typical interaction; returns (what was done, the visit or None)."""
    extra, kind, key = INTERACTIONS.get(page_file, ("", None, None))
    if kind == "none":
        return f"not timed here: {key}", None
    if extra:  # (a navigation in this tab: its counters are not used)
        tab.visit(url + ("&" if "?" in url else "?") + extra)
    attempts = [(kind, key)] if kind else []
    attempts += [("slider", None), ("click", None)]  # the generic fallbacks
    for how, where in attempts:
        action = (_slider_action if how == "slider" else _click_action)(tab, where)
        if action is None:
            continue
        label = f"{how} {where or '(first on the page)'}"
        try:
            return label, tab.measure(action, INTERACTION_TIMEOUT_S)
        except TimeoutError:
            return f"{label}: no redraw within {INTERACTION_TIMEOUT_S} s", None
    return "no slider or clickable patch chart", None


# --- the run -----------------------------------------------------------------------------------

def _server(cache_dir: str | None) -> AppProcess:
    """The app as `make run` starts it; `cache_dir` None: this machine's model cache."""
    env = {**app_env(), **({"VIT_LENS_CACHE_DIR": cache_dir} if cache_dir else {})}
    env.pop("OMP_NUM_THREADS", None)  # as `make run`: dashboard/serve.py picks the threads
    # as a default Python: compiled modules are kept between starts (a shell that sets this,
    # as the development machine's does, makes every start and first page compile the source)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if "OMP_NUM_THREADS" in os.environ:
        env["OMP_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"]
    return AppProcess(log_name="bench-browser", launcher=MAKE_RUN, env=env)


def _nav_paths(tab: Tab, titles: dict[str, str]) -> dict[str, str]:
    """Page file -> URL path, read from the app's own menu (new pages come with theirs)."""
    links = tab.page.locator("[data-testid='stSidebarNav'] a")
    hrefs = {links.nth(i).inner_text().strip(): links.nth(i).get_attribute("href") or ""
             for i in range(links.count())}
    paths = {}
    for page_file, title in titles.items():
        href = next((h for text, h in hrefs.items() if text.endswith(title)), "")
        paths[page_file] = "" if page_file == "home.py" else href.rstrip("/").rsplit("/", 1)[-1]
    return paths


def _fresh_images():
    from dashboard.state import DEFAULT_IMAGE
    from xai_core.images import COLLAGE_ID, SAMPLES

    return [i for i in SAMPLES if i != DEFAULT_IMAGE] + [COLLAGE_ID]


def _print_table(results: list[dict], first_start: dict) -> None:
    print(f"\n  browser (load average {os.getloadavg()[0]:.1f}): seconds to interactive, "
          "websocket MB, charts; CPU seconds of the server and the browser per repeat visit")
    print(f"  {'page':<28} {'first':>6} {'repeat':>6} {'third':>6} {'switch':>6} {'MB':>5} "
          f"{'charts':>6} {'act':>5}  {'srv cpu':>7} {'brw cpu':>7}  interaction")
    for r in results:
        first, repeat, act = r["first"], r["repeat"], r["interaction"]
        print(f"  {r['title']:<28} {first.seconds:6.2f} {repeat.seconds:6.2f} "
              f"{r['third'].seconds:6.2f} {r['switch'].seconds:6.2f} "
              f"{repeat.megabytes:5.2f} {repeat.charts:6d} "
              f"{act.seconds if act else float('nan'):5.2f}  {repeat.server_cpu:7.2f} "
              f"{repeat.browser_cpu:7.2f}  {r['how']}")
    print(f"  first start: ready after {first_start['ready']:.1f} s "
          f"({first_start['note']}), home page {first_start['page'].seconds:.2f} s after that")


def _rows(results: list[dict], first_start: dict) -> list[dict]:
    rows = [{"name": f"first start ({first_start['cache']}): launch until ready",
             "value": first_start["ready"], "unit": "s", "note": first_start["note"]},
            {"name": "first start: home page interactive after ready",
             "value": first_start["page"].seconds, "unit": "s", "note": "target <= 10 s"}]
    for r in results:
        title, first, repeat, act = r["title"], r["first"], r["repeat"], r["interaction"]
        rows += [
            {"name": f"{title}: first visit, new image", "value": first.seconds, "unit": "s",
             "note": f"image {r['image']}; {_cpu(first)}; {first.megabytes:.2f} MB; "
                     "target <= 3 s"},
            {"name": f"{title}: repeat visit", "value": repeat.seconds, "unit": "s",
             "note": f"{_cpu(repeat)}; target <= 1.5 s"},
            {"name": f"{title}: third visit (compiled code cached)", "value": r["third"].seconds,
             "unit": "s", "note": _cpu(r["third"])},
            {"name": f"{title}: page switch (menu, same session)", "value": r["switch"].seconds,
             "unit": "s", "note": f"{_cpu(r['switch'])}; {r['switch'].megabytes:.2f} MB"},
            {"name": f"{title}: websocket, repeat visit", "value": repeat.megabytes, "unit": "MB",
             "note": "target <= 0.8 MB; largest: " + ", ".join(
                 f"{k} {v:.2f}" for k, v in list(repeat.messages.items())[:3])},
            {"name": f"{title}: Plotly charts", "value": float(repeat.charts), "unit": ""},
            {"name": f"{title}: interaction to redrawn chart",
             "value": act.seconds if act else float("nan"), "unit": "s",
             "note": r["how"] + (f"; {_cpu(act)}; {act.megabytes:.2f} MB; target <= 1 s"
                                 if act else "")},
        ]
    return rows


def _cpu(visit: Visit) -> str:
    thread = visit.main_thread
    return (f"CPU s: server {visit.server_cpu:.2f}, browser {visit.browser_cpu:.2f} (main "
            f"thread {thread['cpu']:.2f}: JS {thread['script']:.2f}, layout "
            f"{thread['layout']:.2f}, style {thread['style']:.2f})")


def measure_all(only: list[str] | None = None,
                own_cache: bool = False) -> tuple[list[dict], dict]:
    """(per-page results with their Visit records, first-start figures); `only`: page files;
    `own_cache`: the server uses this machine's model cache instead of an empty one."""
    from playwright.sync_api import sync_playwright

    from dashboard.page_list import existing_pages

    titles = {name: title for name, title, _ in existing_pages() if not only or name in only}
    results = []
    with tempfile.TemporaryDirectory(prefix="vit-lens-bench-") as cache_dir, \
            sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), headless=True,
                                             args=CHROMIUM_FLAGS)
        cache_dir = None if own_cache else cache_dir
        started = time.perf_counter()
        server = _server(cache_dir)
        try:
            server.wait_healthy(timeout=900)
            ready = time.perf_counter() - started
            prepared = re.search(r"models ready in ([\d.]+) s", server.log())
            context = browser.new_context(viewport=VIEWPORT)
            tab = Tab(context, server.process.pid)
            first_start = {"ready": ready, "page": tab.visit(server.url),
                           "cache": "this machine's cache" if own_cache else "empty cache",
                           "note": f"models prepared in {prepared.group(1)} s of it"
                           if prepared else "log had no 'models ready' line"}
            paths = _nav_paths(tab, titles)
            context.close()
            unseen = _fresh_images()
            for page_file, title in titles.items():
                if not unseen:  # every gallery image has been processed: a fresh server
                    server.stop()
                    server = _server(cache_dir)
                    server.wait_healthy(timeout=900)
                    unseen = _fresh_images()
                image = unseen.pop(0)
                url = f"{server.url}{paths[page_file]}?image_choice={image}"
                context = browser.new_context(viewport=VIEWPORT)
                first = Tab(context, server.process.pid).visit(url)
                repeat = Tab(context, server.process.pid).visit(url)  # same context: warm caches
                tab = Tab(context, server.process.pid)
                third = tab.visit(url)  # the scripts' compiled code is cached by now
                switch = page_switch(tab, titles, page_file)
                how, act = interaction(tab, url, page_file)
                results.append({"page": page_file, "title": title, "image": image,
                                "first": first, "repeat": repeat, "third": third, "switch": switch,
                                "interaction": act, "how": how, "errors": tab.errors})
                context.close()
        finally:
            server.stop()
            browser.close()
    return results, first_start


def run(smoke: bool = False) -> list[dict]:
    results, first_start = (measure_all(["home.py"], own_cache=True) if smoke
                            else measure_all())
    _print_table(results, first_start)
    return _rows(results, first_start)


if __name__ == "__main__":
    for row in run():
        print(row)
