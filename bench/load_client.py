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
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from urllib.parse import quote, urlsplit

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


# --- an upload ---------------------------------------------------------------------------------

@dataclass
class Upload:
    seconds: float = float("nan")  # the upload asked for -> the page's run finished
    error: str = ""
    exceptions: int = 0


async def _get(base: str, path: str, cookies: dict[str, str], timeout: float) -> None:
    """GET `path` under `base` (a browser's health check), keeping the cookies it sets."""
    host, port = loopback(base)
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    try:
        cookie = "; ".join(f"{k}={v}" for k, v in cookies.items())
        writer.write((f"GET {urlsplit(base).path}{path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
                      "Connection: close\r\n" + (f"Cookie: {cookie}\r\n" if cookie else "")
                      + "\r\n").encode())
        await writer.drain()
        status, headers, _ = await asyncio.wait_for(_read_response(reader), timeout)
        if status != 200:
            raise OSError(f"{path}: HTTP {status}")
        for line in headers.get("set-cookie", []):
            name, value = line.split(";", 1)[0].split("=", 1)
            cookies[name] = value
    finally:
        writer.close()


def server_path(base: str, url: str) -> str:
    """The path a browser asks for an address the server gave: Streamlit's upload and media
    addresses ("/_stcore/upload_file/...", "/media/...") are under the app's base path (the
    browser puts it in front, as nginx's locations expect)."""
    path = urlsplit(url).path if "://" in url else url
    prefix = urlsplit(base).path.rstrip("/")
    return path if prefix and path.startswith(prefix + "/") else f"{prefix}/{path.lstrip('/')}"


async def _put(base: str, url: str, name: str, content: bytes, cookies: dict[str, str],
               timeout: float) -> None:
    """The multipart PUT a browser sends to Streamlit's upload address, with its XSRF token."""
    host, port = loopback(base)
    path = server_path(base, url)
    boundary = "vitlensboundary7e3f"
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\""
            f"\r\nContent-Type: image/png\r\n\r\n").encode() + content + \
        f"\r\n--{boundary}--\r\n".encode()
    cookie = "; ".join(f"{k}={v}" for k, v in cookies.items())
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    try:
        writer.write((f"PUT {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n"
                      f"Content-Type: multipart/form-data; boundary={boundary}\r\n"
                      f"Content-Length: {len(body)}\r\nCookie: {cookie}\r\n"
                      f"X-Xsrftoken: {cookies.get('_streamlit_xsrf', '')}\r\n\r\n").encode()
                     + body)
        await writer.drain()
        status, _, answer = await asyncio.wait_for(_read_response(reader), timeout)
        if status not in (200, 204):
            raise OSError(f"upload: HTTP {status} {answer[:80]!r}")
    finally:
        writer.close()


@asynccontextmanager
async def app_socket(base: str, cookies: dict, timeout: float):
    """The app's WebSocket as a browser opens it: the health check first (its cookies, kept in
    `cookies` for later requests), then the stream with those cookies and the site's Origin."""
    from websockets.asyncio.client import connect
    from websockets.typing import Subprotocol

    host, port = loopback(base)
    await _get(base, "_stcore/health", cookies, timeout)
    cookie = "; ".join(f"{k}={v}" for k, v in cookies.items())
    async with connect("ws" + base.rstrip("/")[4:] + "/_stcore/stream", proxy=None,
                       origin=f"http://{host}:{port}", max_size=None,
                       subprotocols=[Subprotocol("streamlit")],
                       additional_headers={"Cookie": cookie}, ping_interval=None) as socket:
        yield socket


async def upload_and_open(base: str, photo: bytes, page: str = "vit_explainer",
                          timeout: float = 300) -> Upload:
    """A student with their own photo, as a browser does it: the health check (cookies),
    Home with the image picker on "Your upload", the photo asked an address for and PUT
    there, then the page `page` run with the uploader's state. Seconds from asking to upload
    until that page's run finished."""
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    from dashboard.page_visit import element_kinds, rerun_request
    from dashboard.state import UPLOAD_CHOICE, image_title

    result, cookies = Upload(), {}
    query = "image_choice=" + quote(image_title(UPLOAD_CHOICE))
    try:
        async with asyncio.timeout(timeout):
            async with app_socket(base, cookies, timeout) as socket:
                await socket.send(rerun_request("", query, base))
                session = uploader = None
                async for payload in socket:
                    message = ForwardMsg.FromString(payload)
                    kind = message.WhichOneof("type")
                    if kind == "new_session":
                        session = message.new_session.initialize.session_id
                    elif kind == "delta" and message.delta.WhichOneof("type") == "new_element" \
                            and message.delta.new_element.WhichOneof("type") == "file_uploader":
                        uploader = message.delta.new_element.file_uploader.id
                    if element_kinds([payload])[2]:
                        break
                if not (session and uploader):
                    raise OSError("no upload field on the page")
                started = time.perf_counter()
                ask = BackMsg()
                ask.file_urls_request.request_id = "vitlens-1"
                ask.file_urls_request.file_names.append("photo.png")
                ask.file_urls_request.session_id = session
                await socket.send(ask.SerializeToString())
                async for payload in socket:
                    message = ForwardMsg.FromString(payload)
                    if message.WhichOneof("type") == "file_urls_response":
                        urls = message.file_urls_response.file_urls[0]
                        break
                await _put(base, urls.upload_url, "photo.png", photo, cookies, timeout)
                run = BackMsg.FromString(rerun_request(page, query, base + page))
                state = run.rerun_script.widget_states.widgets.add()
                state.id = uploader
                info = state.file_uploader_state_value.uploaded_file_info.add()
                info.name, info.size, info.file_id = "photo.png", len(photo), urls.file_id
                info.file_urls.CopyFrom(urls)
                await socket.send(run.SerializeToString())
                payloads = []
                async for payload in socket:
                    payloads.append(payload)
                    if element_kinds([payload])[2]:
                        break
                result.seconds = time.perf_counter() - started
                _, result.exceptions, _ = element_kinds(payloads)
    except Exception as error:  # noqa: BLE001  a refused or timed-out student is a result
        result.error = f"{type(error).__name__}: {str(error)[:160]}"
    return result
