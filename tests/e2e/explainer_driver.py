"""Driving the ViT Explainer's component in a real browser: shared by the e2e test and
bench/bench_explainer.py. The component exposes its state as data-* attributes on its
root ([data-testid=vit-explainer]) and its timings in `window.__vitExplainer`."""

from __future__ import annotations

import time
from urllib.parse import urlparse

from e2e_helpers import wait_app_idle

ROOT = "[data-testid='vit-explainer']"
PAGE_PATH = "vit_explainer"  # st.Page's URL path for pages/0_vit_explainer.py


class Traffic:
    """Every request URL, and the WebSocket frames in each direction, of one page."""

    def __init__(self, page):
        self.urls: list[str] = []
        self.sent: list[int] = []  # payload sizes, browser -> server
        self.received: list[int] = []  # payload sizes, server -> browser
        self.http_bytes = 0
        page.on("request", lambda request: self.urls.append(request.url))
        page.on("response", self._count_body)
        page.on("websocket", self._watch)

    def _watch(self, socket) -> None:
        socket.on("framesent", lambda payload: self.sent.append(len(payload)))
        socket.on("framereceived", lambda payload: self.received.append(len(payload)))

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
