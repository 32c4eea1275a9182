"""Requests a replica answers before Streamlit's own handling sees them: a health check from
nginx that asks whether the replica is warm (`dashboard/readiness.py`), and a WebSocket
from a foreign Origin.

A warm replica's answer to that health check also names itself in the replica cookie
(`dashboard/replica.py`) when the browser has none yet: the browser's WebSocket, a separate
request that nginx routes by that cookie, then follows its health check. Without it nginx
hashed the WebSocket again, and a browser whose health check was sent past a warming replica
reached that replica with its WebSocket once nginx's fail_timeout had run out in between
(a class arriving over more than 10 s).

Streamlit refuses a WebSocket whose Origin is not the page's own host, but on the way it
asks for the machine's external address (an HTTP request to a public service, 1 s timeout,
twice, and a DNS look-up before either) on the server's event loop, and remembers only a
success: on an offline lab server every foreign-Origin WebSocket stalled every other request
of that replica. Measured: 20 at once held a health check 5.3 s. This guard answers those
WebSockets itself, at once, with the same refusal (HTTP 403), from the headers alone: it
lets through a WebSocket without an Origin, one whose Origin is the Host it asked (Streamlit's
same-origin rule), one from a loopback name or the configured `browser.serverAddress`
(Streamlit allows those before any look-up), and one from `server.corsAllowedOrigins`
(Streamlit's to judge).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from dashboard import readiness, replica

LOOPBACK = ("localhost", "127.0.0.1", "0.0.0.0", "::1")  # noqa: S104  names, not a bind


def _header(scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def _configured_hosts() -> set[str]:
    from streamlit import config

    hosts = set()
    if config.is_manually_set("browser.serverAddress"):
        hosts.add(str(config.get_option("browser.serverAddress")).lower())
    for origin in config.get_option("server.corsAllowedOrigins") or []:
        hosts.add((urlsplit(origin).hostname or origin).lower())
    return hosts


def origin_allowed(origin: str | None, host: str | None, configured=_configured_hosts) -> bool:
    """Whether a WebSocket with these headers goes on to Streamlit."""
    if origin is None:
        return True
    parts = urlsplit(origin)
    if host is not None and parts.netloc == host:
        return True
    name = (parts.hostname or "").lower()
    return name in LOOPBACK or name in configured()


class RequestGuard:
    """ASGI middleware in front of Streamlit (dashboard/replica_app.py)."""

    def __init__(self, app, health_path: str | None = None):
        self.app = app
        if health_path is None:
            from streamlit import config

            base = (config.get_option("server.baseUrlPath") or "").strip("/")
            health_path = f"/{base}/_stcore/health" if base else "/_stcore/health"
        self.health_path = health_path
        self.ready_header = readiness.HEADER.lower().encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "websocket" and not origin_allowed(_header(scope, b"origin"),
                                                               _header(scope, b"host")):
            await receive()  # the client's connect
            await send({"type": "websocket.close", "code": 1008})  # before accept: HTTP 403
            return
        if (scope["type"] == "http" and scope.get("path") == self.health_path
                and _header(scope, self.ready_header) is not None):
            ready, words = readiness.state()
            if not ready:
                await _plain(send, 503, words)
                return
            pin = replica.cookie_header()
            if pin and not _has_cookie(_header(scope, b"cookie"), replica.COOKIE):
                send = _with_header(send, b"set-cookie", pin.encode())
        await self.app(scope, receive, send)


def _has_cookie(cookies: str | None, name: str) -> bool:
    return any(part.strip().split("=", 1)[0] == name for part in (cookies or "").split(";"))


def _with_header(send, name: bytes, value: bytes):
    async def sending(message):
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), (name, value)]}
        await send(message)
    return sending


async def _plain(send, status: int, text: str) -> None:
    body = text.encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(body)).encode()),
                            (b"cache-control", b"no-cache")]})
    await send({"type": "http.response.body", "body": body})
