"""One page visit over Streamlit's own WebSocket protocol, without a browser: what a
browser sends on arrival and what it receives until the script's first run finishes.

The socket is `<prefix>/_stcore/stream` (subprotocol `streamlit`); the one `BackMsg` a
browser sends on arrival is a `rerun_script` with the page's name, query string and context
(as captured from Chromium), then `ForwardMsg`s come until `script_finished`.
`tests/e2e/test_load_client.py` checks that it gets the elements a Chromium tab gets for the
same address. Used to warm a replica that just started (`dashboard.warm_replica`) and by the
load benchmark's simulated students (`bench/load_client.py`). Only loopback addresses are
accepted, and every wait is bounded.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

FINISHED = ForwardMsg.ScriptFinishedStatus
RUN_DONE = {FINISHED.FINISHED_SUCCESSFULLY, FINISHED.FINISHED_WITH_COMPILE_ERROR}
LOOPBACK = ("127.0.0.1", "localhost")


def loopback(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    if parts.hostname not in LOOPBACK:
        raise ValueError(f"only loopback addresses are visited, not {parts.hostname}")
    return parts.hostname, parts.port or 80


@dataclass
class PageRun:
    seconds: float = float("nan")  # connect -> script_finished
    elements: list[str] = field(default_factory=list)  # element (or block) types, in order
    exceptions: int = 0  # st.exception elements: an error shown on the page
    megabytes: float = 0.0  # ForwardMsg payload received
    error: str = ""  # no finished run (refused, closed, timed out)


def rerun_request(page: str, query: str, url: str) -> bytes:
    """The BackMsg a browser sends when it opens `url` (the page's name, query string
    without '?', a browser's context), as Chromium's first frame holds it."""
    message = BackMsg()
    state = message.rerun_script
    state.query_string = query
    state.page_name = page
    state.widget_states.SetInParent()
    context = state.context_info
    context.timezone, context.timezone_offset, context.locale = "UTC", 0, "en-US"
    context.url, context.is_embedded, context.color_scheme = url, False, "light"
    return message.SerializeToString()


def element_kinds(payloads) -> tuple[list[str], int, bool]:
    """(element and block types in order, exceptions among them, whether a run finished)
    of ForwardMsg payloads up to the first finished run."""
    kinds, exceptions = [], 0
    for payload in payloads:
        message = ForwardMsg.FromString(payload)
        kind = message.WhichOneof("type")
        if kind == "script_finished" and message.script_finished in RUN_DONE:
            return kinds, exceptions, True
        if kind != "delta":
            continue
        delta = message.delta.WhichOneof("type")
        if delta == "new_element":
            element = message.delta.new_element.WhichOneof("type")
            kinds.append(element)
            exceptions += element == "exception"
        elif delta == "add_block":
            kinds.append("block")
    return kinds, exceptions, False


def with_view(page: str, query: str) -> tuple[str, str]:
    """('interventions', 'image_choice=...&iv_view=claims') from a page written with its
    view's deep link ('interventions?iv_view=claims') and the visit's own query string."""
    page, _, view = page.partition("?")
    return page, "&".join(part for part in (query, view) if part)


async def open_page(base: str, page: str = "", query: str = "", cookies: dict | None = None,
                    timeout: float = 240) -> PageRun:
    """Open the page `base + page` (`base` ends with the app's prefix and '/') and wait for
    its first finished run."""
    from websockets.asyncio.client import connect
    from websockets.typing import Subprotocol

    host, port = loopback(base)
    http_base = base.rstrip("/")
    cookie = "; ".join(f"{k}={v}" for k, v in (cookies or {}).items())
    run = PageRun()
    payloads: list[bytes] = []
    started = time.perf_counter()
    try:
        async with asyncio.timeout(timeout):
            async with connect("ws" + http_base[4:] + "/_stcore/stream", proxy=None,
                               origin=f"http://{host}:{port}", max_size=None,
                               subprotocols=[Subprotocol("streamlit")],
                               additional_headers={"Cookie": cookie} if cookie else None,
                               open_timeout=timeout, ping_interval=None) as socket:
                await socket.send(rerun_request(page, query, base + page))
                async for payload in socket:
                    payloads.append(payload)
                    if element_kinds([payload])[2]:
                        run.seconds = time.perf_counter() - started
                        break
    except (OSError, TimeoutError, asyncio.TimeoutError) as error:
        run.error = f"{type(error).__name__}: {error}"
    except Exception as error:  # noqa: BLE001  a refused handshake or a closed socket
        run.error = f"{type(error).__name__}: {error}"
    run.elements, run.exceptions, finished = element_kinds(payloads)
    run.megabytes = sum(len(p) for p in payloads) / 1e6
    if not finished and not run.error:
        run.error = "the socket closed before the run finished"
    return run




def run_in_thread(coroutine):
    """Run a coroutine to its end on an event loop of its own thread (callers such as
    Playwright's sync API hold the main thread's loop)."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()
