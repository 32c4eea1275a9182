"""Driving the ViT Explainer's component in a real browser: shared by the e2e test and
bench/bench_explainer.py. The component exposes its state as data-* attributes on its
root ([data-testid=vit-explainer]) and its timings in `window.__vitExplainer`."""

from __future__ import annotations

import json
import struct
import time
from urllib.parse import urlparse

from e2e_helpers import wait_app_idle

ROOT = "[data-testid='vit-explainer']"
PAGE_PATH = "vit_explainer"  # st.Page's URL path for pages/0_vit_explainer.py


class Traffic:
    """Every request URL, and the WebSocket frames in each direction, of one page; the
    Explainer's own messages (xai_core/lessons/explainer.py, encode_message) are read too."""

    def __init__(self, page):
        self.urls: list[str] = []
        self.sent: list[int] = []  # payload sizes, browser -> server
        self.received: list[int] = []  # payload sizes, server -> browser
        self.messages: list[dict] = []  # {"frame": bytes of its frame, "header": JSON header}
        self.http_bytes = 0
        page.on("request", lambda request: self.urls.append(request.url))
        page.on("response", self._count_body)
        page.on("websocket", self._watch)

    def _watch(self, socket) -> None:
        socket.on("framesent", lambda payload: self.sent.append(len(payload)))
        socket.on("framereceived", self._received)

    def _received(self, payload) -> None:
        self.received.append(len(payload))
        if not isinstance(payload, bytes):
            return
        at = payload.find(b"VXB1")
        while at >= 0:  # the component's code names the magic too: find the message itself
            (length,) = struct.unpack_from("<I", payload, at + 4)
            try:
                header = json.loads(payload[at + 8:at + 8 + length])
            except ValueError:
                at = payload.find(b"VXB1", at + 1)
                continue
            self.messages.append({"frame": len(payload), "header": header})
            return

    def _count_body(self, response) -> None:
        try:
            self.http_bytes += int(response.headers.get("content-length") or 0)
        except ValueError:
            pass

    def foreign_hosts(self, app_url: str) -> set[str]:
        own = urlparse(app_url).netloc
        return {urlparse(url).netloc for url in self.urls
                if urlparse(url).scheme in ("http", "https", "ws", "wss")
                and urlparse(url).netloc != own}


def open_explainer(page, app_url: str, query: str = "", timeout_ms: int = 240_000):
    """Load the Explainer page and wait until its component has drawn."""
    page.goto(app_url + PAGE_PATH + query)
    wait_app_idle(page, timeout_ms)
    page.wait_for_selector(ROOT, timeout=timeout_ms)
    page.wait_for_function("() => window.__vitExplainer && window.__vitExplainer.readyAt !== null",
                           timeout=timeout_ms)
    wait_vectors_settled(page, timeout_ms / 1000)


HIT_AREA = """(target) => {
  const box = target.getBoundingClientRect(), cx = box.x + box.width / 2, cy = box.y + box.height / 2;
  const hits = (x, y) => {  // the component may sit in a shadow root: ask that root
    const found = target.getRootNode().elementFromPoint(x, y);
    return !!found && (found === target || target.contains(found));
  };
  const reach = (step) => { let n = 0; while (n < 40 && hits(...step(n + 1))) n++; return n; };
  return [box.width + reach(n => [box.left - n, cy]) + reach(n => [box.right + n - 1, cy]),
          box.height + reach(n => [cx, box.top - n]) + reach(n => [cx, box.bottom + n - 1])];
}"""


def hit_area(page, selector: str) -> tuple[float, float]:
    """(width, height) in CSS px of the region where a tap lands on the element, probed with
    elementFromPoint one pixel at a time outside its box (a pseudo-element can enlarge it)."""
    target = page.locator(selector).first
    target.scroll_into_view_if_needed()
    return tuple(target.evaluate(HIT_AREA))


def wait_vectors_settled(page, timeout_s: float = 240) -> None:
    """Until the shown block's queries and keys are here if their panel is in view (the
    browser asks for them then), and the rerun that brought them has finished."""
    shown = state(page)
    if shown["stage"] != "blocks":
        return  # no query · key panel on screen
    # the panel's observer reports its first visibility a frame after it is built
    wait_for_state(page, "qkInView", lambda seen: seen in ("true", "false"), timeout_s)
    if state(page)["qkInView"] == "true":
        wait_for_state(page, "qk", lambda held: shown["block"] in (held or "").split(","),
                       timeout_s)
        wait_app_idle(page, int(timeout_s * 1000))


def state(page) -> dict:
    """The component's data-* attributes (block, stage, hover, tour, playing, mapSum...)."""
    return page.locator(ROOT).evaluate("element => ({...element.dataset})")


def patch_point(page, patch: int) -> tuple[float, float]:
    """The page coordinates of a patch's centre on the image canvas."""
    rows, cols = (int(n) for n in state(page)["grid"].split("x"))
    canvas = page.locator(f"{ROOT} canvas.vx-image")
    canvas.scroll_into_view_if_needed()
    box = canvas.bounding_box()
    row, col = divmod(patch, cols)
    return (box["x"] + (col + 0.5) / cols * box["width"],
            box["y"] + (row + 0.5) / rows * box["height"])


def hover_patch(page, patch: int) -> None:
    page.mouse.move(*patch_point(page, patch))


def image_pixels_digest(page) -> str:
    """A digest of the image canvas's pixels (what the learner sees)."""
    return page.locator(f"{ROOT} canvas.vx-image").evaluate("""canvas => {
        const data = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
        let a = 0, b = 0;
        for (let i = 0; i < data.length; i += 4) { a = (a + data[i] * (i % 251 + 1)) % 1e9;
                                                   b = (b + data[i + 2]) % 1e9; }
        return `${a}:${b}`;
    }""")


def metrics(page) -> dict:
    return page.evaluate("() => JSON.parse(JSON.stringify(window.__vitExplainer))")


def wait_for_state(page, key: str, wanted, timeout_s: float = 240) -> None:
    """Until data-<key> equals `wanted` (a string) or satisfies it (a function)."""
    test = wanted if callable(wanted) else (lambda value: value == wanted)
    deadline = time.monotonic() + timeout_s
    while not test(state(page).get(key)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{key} never became {wanted!r}: {state(page)}")
        page.wait_for_timeout(50)


def sidebar_select(page, index: int, option: str) -> None:
    """Pick `option` (the start of its label) in the sidebar's `index`-th select box."""
    page.locator("[data-testid='stSidebar'] [data-testid='stSelectbox']").nth(index).click()
    page.get_by_role("option", name=option).first.click()
    wait_app_idle(page)


def choose_random_vit(page, name: str) -> None:
    """Switch the sidebar's ViT to `name` with random weights; wait for the component."""
    sidebar_select(page, 0, name)
    page.get_by_text("Random weights (shapes only)").first.click()
    wait_app_idle(page)
    page.locator(f"{ROOT} .vx-random").wait_for()


def upload_photo(page, path) -> None:
    """Upload a photo through the sidebar, as a learner does; wait for the component."""
    sidebar_select(page, 2, "Your upload")
    page.locator("[data-testid='stSidebar'] input[type=file]").set_input_files(str(path))
    wait_app_idle(page)
    page.locator(ROOT).wait_for()


def in_view(page, selector: str) -> dict:
    """The element's box and the viewport height (to check what a learner sees)."""
    box = page.locator(selector).first.bounding_box()
    return {**box, "viewport": page.viewport_size["height"]}


def check_tour_above(page, part: str) -> None:
    """What a learner sees at a tour step: the tour box on screen, above the component's
    `part`, and that part (its first 200 px at least) in view under it."""
    tour, spot = in_view(page, f"{ROOT} .vx-tour"), in_view(page, f"{ROOT} {part}")
    assert tour["y"] >= 0 and tour["y"] + tour["height"] <= spot["y"] + 2, (part, tour, spot)
    assert spot["y"] + min(spot["height"], 200) <= spot["viewport"], (part, spot)
