"""A replica is warm (dashboard/readiness.py) only once every page has run in it, and its
request guard (dashboard/request_guard.py) says so to nginx's health check and refuses a
foreign-Origin WebSocket from its headers alone; the live proof through nginx is
tests/e2e/test_fair_server.py."""

from __future__ import annotations

import asyncio
import time

import pytest

from dashboard import readiness, replica, request_guard
from dashboard.page_list import existing_pages, url_path


@pytest.fixture(autouse=True)
def nothing_ran(monkeypatch):
    monkeypatch.setattr(readiness, "_finished", set())
    monkeypatch.setattr(readiness, "_STARTED", time.monotonic())  # a process started just now
    monkeypatch.delenv(readiness.READY_AFTER_ENV, raising=False)


def test_ready_once_every_page_has_run():
    paths = [url_path(name) for name, _, _ in existing_pages()]
    start = readiness._STARTED
    assert readiness.state(clock=lambda: start + 1) == (
        False, f"warming up: 0 of {len(paths)} pages have run")
    for path in paths[:-1]:
        readiness.page_finished(path)
    readiness.page_finished(paths[0])  # twice counts once
    assert readiness.pages_left() == paths[-1:]
    assert readiness.state(clock=lambda: start + 1)[0] is False
    readiness.page_finished(paths[-1])
    assert readiness.state(clock=lambda: start + 1) == (True, "ok")


def test_ready_after_its_time_whatever_ran(monkeypatch):
    start = readiness._STARTED
    assert readiness.state(clock=lambda: start + readiness.READY_AFTER_S - 1)[0] is False
    assert readiness.state(clock=lambda: start + readiness.READY_AFTER_S) == (True, "ok")
    monkeypatch.setenv(readiness.READY_AFTER_ENV, "30")
    assert readiness.state(clock=lambda: start + 31) == (True, "ok")


def test_the_guard_answers_nginxs_readiness_question_and_nothing_else():
    """A health check carrying the readiness header gets 503 and how far the warm-up got until
    every page has run, then Streamlit's own answer; one without it (the unit's liveness
    check) always gets Streamlit's."""
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route
    from starlette.testclient import TestClient

    async def streamlit_health(request):
        return PlainTextResponse("ok")

    app = Starlette(routes=[Route("/vit-lens/_stcore/health", streamlit_health)],
                    middleware=[Middleware(request_guard.RequestGuard,
                                           health_path="/vit-lens/_stcore/health")])
    client = TestClient(app)
    asked = {readiness.HEADER: "1"}
    response = client.get("/vit-lens/_stcore/health", headers=asked)
    assert response.status_code == 503 and response.text.startswith("warming up: 0 of")
    assert response.headers["cache-control"] == "no-cache"
    assert client.get("/vit-lens/_stcore/health").text == "ok"  # alive all along
    for name, _, _ in existing_pages():
        readiness.page_finished(url_path(name))
    response = client.get("/vit-lens/_stcore/health", headers=asked)
    assert (response.status_code, response.text) == (200, "ok")
    assert response.headers["set-cookie"] == replica.cookie_header()
    assert "set-cookie" not in client.get("/vit-lens/_stcore/health").headers  # not asked


def test_a_warm_answer_pins_a_new_browser_to_this_replica(monkeypatch):
    """The readiness answer names this replica in the replica cookie (its WebSocket, routed by
    that cookie, then follows), only for a browser that has none: one already pinned
    elsewhere keeps its replica (its session lives there)."""
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route
    from starlette.testclient import TestClient

    monkeypatch.setenv(replica.REPLICA_ENV, "8502")
    monkeypatch.setattr(readiness, "_STARTED", time.monotonic() - readiness.READY_AFTER_S)

    async def streamlit_health(request):
        return PlainTextResponse("ok")

    app = Starlette(routes=[Route("/_stcore/health", streamlit_health)],
                    middleware=[Middleware(request_guard.RequestGuard,
                                           health_path="/_stcore/health")])
    asked = {readiness.HEADER: "1"}
    fresh = TestClient(app).get("/_stcore/health", headers=asked)
    assert fresh.headers["set-cookie"].startswith(f"{replica.COOKIE}=8502; Path=/;")
    assert fresh.cookies.get(replica.COOKIE) == "8502"
    pinned = TestClient(app, cookies={"vit_lens_uid": "x", replica.COOKIE: "8501"})
    response = pinned.get("/_stcore/health", headers=asked)
    assert response.text == "ok" and "set-cookie" not in response.headers
    other = TestClient(app, cookies={f"{replica.COOKIE}_old": "8501"})  # a name that only begins
    assert other.get("/_stcore/health", headers=asked).cookies.get(replica.COOKIE) == "8502"


@pytest.mark.parametrize("origin, host, allowed", [
    (None, "lab.example.edu", True),  # not a browser
    ("https://lab.example.edu", "lab.example.edu", True),  # the site itself
    ("http://lab.example.edu:8080", "lab.example.edu:8080", True),
    ("http://lab.example.edu:8080", "lab.example.edu", False),  # another port: another origin
    ("http://evil.example", "lab.example.edu", False),
    ("http://localhost:3000", "lab.example.edu", True),  # Streamlit allows loopback names
    ("http://127.0.0.1:8501", "lab.example.edu", True),
    ("http://proxy.example", "lab.example.edu", True),  # configured (browser.serverAddress)
])
def test_which_origins_go_on_to_streamlit(origin, host, allowed):
    assert request_guard.origin_allowed(origin, host,
                                        configured=lambda: {"proxy.example"}) is allowed


def test_the_guard_refuses_a_foreign_websocket_before_streamlit_sees_it():
    """The refusal is a close before accept (HTTP 403 to the handshake); the app behind it
    is never called. Anything else goes through untouched."""
    reached, sent = [], []

    async def app(scope, receive, send):
        reached.append(scope["type"])

    async def receive():
        return {"type": "websocket.connect"}

    async def send(message):
        sent.append(message)

    guard = request_guard.RequestGuard(app, health_path="/_stcore/health")
    foreign = {"type": "websocket", "headers": [(b"host", b"lab.example.edu"),
                                                (b"origin", b"http://evil.example")]}
    asyncio.run(guard(foreign, receive, send))
    assert reached == [] and sent == [{"type": "websocket.close", "code": 1008}]
    own = {"type": "websocket", "headers": [(b"host", b"lab.example.edu"),
                                            (b"origin", b"https://lab.example.edu")]}
    asyncio.run(guard(own, receive, send))
    asyncio.run(guard({"type": "http", "headers": []}, receive, send))
    assert reached == ["websocket", "http"] and len(sent) == 1
