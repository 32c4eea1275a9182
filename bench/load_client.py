"""A simulated student: what a browser sends and receives on a first visit, without a browser.

- Files: index.html, then the static files a real first visit fetches (the list comes from
  a Chromium tab, `bench_load`), six at a time over keep-alive connections as a browser
  does, asking for gzip; the bytes counted are those on the wire.
- The page: Streamlit's WebSocket (`<prefix>/_stcore/stream`, subprotocol `streamlit`),
  the one `BackMsg` a browser sends on arrival (a `rerun_script` with the page's name,
  query string and context, as captured from Chromium), then `ForwardMsg`s until
  `script_finished`. `tests/e2e/test_load_client.py` checks it gets the elements a
  Chromium tab gets for the same address.

Only loopback addresses are accepted, and every wait is bounded.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

FILE_CONNECTIONS = 6  # a browser's connections per host over HTTP/1.1
FINISHED = ForwardMsg.ScriptFinishedStatus
RUN_DONE = {FINISHED.FINISHED_SUCCESSFULLY, FINISHED.FINISHED_WITH_COMPILE_ERROR}
LOOPBACK = ("127.0.0.1", "localhost")


def loopback(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    if parts.hostname not in LOOPBACK:
        raise ValueError(f"the load client targets loopback only, not {parts.hostname}")
    return parts.hostname, parts.port or 80


# --- files -------------------------------------------------------------------------------------

@dataclass
class Files:
    seconds: float = 0.0
    wire_bytes: int = 0  # as sent (gzip where the server compressed)
    requests: int = 0
    errors: list[str] = field(default_factory=list)
    cookies: dict[str, str] = field(default_factory=dict)  # what the responses set


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, list[str]], bytes]:
    """(status, headers (lower-case names), body as sent) of one HTTP/1.1 response."""
    status = int((await reader.readline()).split()[1])
    headers: dict[str, list[str]] = {}
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, value = line.decode("latin-1").split(":", 1)
        headers.setdefault(name.strip().lower(), []).append(value.strip())
    if "content-length" in headers:
        return status, headers, await reader.readexactly(int(headers["content-length"][0]))
    body = bytearray()
    if headers.get("transfer-encoding", [""])[0].lower() == "chunked":
        while size := int((await reader.readline()).split(b";")[0], 16):
            body += await reader.readexactly(size)
            await reader.readexactly(2)
        await reader.readline()
    return status, headers, bytes(body)


async def _fetch_all(base: str, paths: list[str], files: Files, timeout: float) -> None:
    """GET `paths` (relative to `base`) over one keep-alive connection, in turn."""
    host, port = loopback(base)
    prefix = urlsplit(base).path
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    try:
        while paths:
            path = paths.pop(0)
            cookie = "; ".join(f"{k}={v}" for k, v in files.cookies.items())
            writer.write((f"GET {prefix}{path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
                          "Accept-Encoding: gzip, deflate\r\nConnection: keep-alive\r\n"
                          + (f"Cookie: {cookie}\r\n" if cookie else "") + "\r\n").encode())
            await writer.drain()
            status, headers, body = await asyncio.wait_for(_read_response(reader), timeout)
            files.requests += 1
            files.wire_bytes += len(body)
            if status != 200:
                files.errors.append(f"{status} {path}")
            for line in headers.get("set-cookie", []):
                name, value = line.split(";", 1)[0].split("=", 1)
                files.cookies.setdefault(name, value)
    finally:
        writer.close()


async def first_visit_files(base: str, page: str, static_paths: list[str],
                            timeout: float = 120) -> Files:
    """index.html at `base + page`, then `static_paths` (relative to `base`) on
    FILE_CONNECTIONS connections."""
    files = Files()
    started = time.perf_counter()
    try:
        await _fetch_all(base, [page], files, timeout)  # index.html: sets the cookies
        queue = list(static_paths)
        await asyncio.gather(*(_fetch_all(base, queue, files, timeout)
                               for _ in range(min(FILE_CONNECTIONS, len(queue)))))
    except (OSError, asyncio.TimeoutError, ValueError, IndexError) as error:
        files.errors.append(f"{type(error).__name__}: {error}")
    files.seconds = time.perf_counter() - started
    return files


# --- the page over the WebSocket ---------------------------------------------------------------

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


def chromium_first_visit(browser, url: str, base: str,
                         timeout_ms: int = 240_000) -> tuple[list[bytes], list[str]]:
    """A Chromium tab's first visit of `url` (a new context: empty cache) until the app has
    run and drawn: (ForwardMsg payloads it received, static files it fetched, as paths
    relative to `base`: Streamlit's static/ and the app's app/static/)."""
    from e2e_helpers import wait_app_idle

    context = browser.new_context()
    page = context.new_page()
    payloads: list[bytes] = []
    page.on("websocket", lambda ws: ws.on("framereceived", lambda p: payloads.append(p)))
    static: list[str] = []

    def note_file(response) -> None:
        relative = response.url[len(base):] if response.url.startswith(base) else ""
        if relative.startswith(("static/", "app/static/")):
            static.append(relative)

    page.on("response", note_file)
    try:
        page.goto(url, timeout=60_000)
        wait_app_idle(page, timeout_ms)
        page.wait_for_selector(".js-plotly-plot, [data-testid='vit-explainer']",
                               timeout=timeout_ms)
    finally:
        context.close()
    return payloads, static


def run_in_thread(coroutine):
    """Run a coroutine to its end on an event loop of its own thread (callers such as
    Playwright's sync API hold the main thread's loop)."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()
