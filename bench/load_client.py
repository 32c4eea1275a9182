"""A simulated student: what a browser sends and receives on a first visit, without a browser.

- Files: index.html, then the static files a real first visit fetches (the list comes from
  a Chromium tab, `bench_load`), six at a time over keep-alive connections as a browser
  does, asking for gzip; the bytes counted are those on the wire.
- The page: one visit over Streamlit's WebSocket (`dashboard/page_visit.py`, which the
  replicas' warm-up uses too).

Only loopback addresses are accepted, and every wait is bounded.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from dashboard.page_visit import loopback

FILE_CONNECTIONS = 6  # a browser's connections per host over HTTP/1.1


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
