"""The deploy recipe, proved: Debian's nginx on loopback, configured by
deploy/nginx/vit-lens.conf (only its ports changed), in front of two app
replicas started with --server.baseUrlPath, as deploy/systemd starts them."""

from __future__ import annotations

import base64
import hashlib
import os
import re
import socket
import time

import pytest

from e2e_helpers import ARTIFACTS, running_apps, wait_app_idle
from proxy_helpers import PREFIX, get, nginx_in_front

WEBSOCKET_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455, section 1.3


@pytest.fixture(scope="module")
def stack():
    with running_apps(2, base_path=PREFIX, log_name="replica") as apps, \
            nginx_in_front(apps) as proxy:
        yield {"port": proxy.port, "apps": apps, "proxy": proxy}


def test_health_and_page_through_the_prefix(stack):
    port = stack["port"]
    response, body = get(port, f"/{PREFIX}/_stcore/health")
    assert response.status == 200 and body == b"ok"

    response, _ = get(port, f"/{PREFIX}")
    assert response.status == 301 and response.getheader("Location").endswith(f"/{PREFIX}/")

    response, body = get(port, f"/{PREFIX}/")
    assert response.status == 200
    html = body.decode()
    assert '<div id="root">' in html
    # the page's own script, fetched through the proxy at the path the page names
    script = re.search(r'<script[^>]+src="\.?/?([^"]+\.js)"', html)
    assert script, html[:500]
    response, body = get(port, f"/{PREFIX}/{script[1]}")
    assert response.status == 200 and len(body) > 10_000

    # the path is passed through, not rewritten: without the prefix nothing is proxied
    response, _ = get(port, "/_stcore/health")
    assert response.status == 404


def test_websocket_upgrade_is_proxied(stack):
    key = base64.b64encode(os.urandom(16)).decode()
    request = (f"GET /{PREFIX}/_stcore/stream HTTP/1.1\r\n"
               f"Host: 127.0.0.1:{stack['port']}\r\n"
               "Upgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
               "Sec-WebSocket-Protocol: streamlit\r\n"
               f"Origin: http://127.0.0.1:{stack['port']}\r\n\r\n")
    with socket.create_connection(("127.0.0.1", stack["port"]), timeout=30) as sock:
        sock.sendall(request.encode())
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(4096)
            assert chunk, answer
            answer += chunk
    head = answer.split(b"\r\n\r\n")[0].decode()
    assert head.startswith("HTTP/1.1 101"), head
    expected = base64.b64encode(hashlib.sha1((key + WEBSOCKET_GUID).encode()).digest()).decode()
    assert f"sec-websocket-accept: {expected.lower()}" in head.lower()


def test_sessions_stick_to_one_replica_and_both_replicas_serve(stack):
    """`hash $remote_addr consistent`: one client address -> always one replica;
    several client addresses (127.0.0.2-17, still loopback) spread over both."""
    port = stack["port"]
    replicas = {f"127.0.0.1:{app.port}" for app in stack["apps"]}
    clients = [f"127.0.0.{i}" for i in range(2, 18)]
    for _ in range(3):
        for client in clients:
            response, body = get(port, f"/{PREFIX}/_stcore/health?c={client}", source=client)
            assert response.status == 200 and body == b"ok"
    time.sleep(0.3)  # access log is written after the response
    seen: dict[str, set[str]] = {}
    for client, path, upstream in stack["proxy"].upstreams_in_log():
        if "?c=" in path:
            seen.setdefault(client, set()).add(upstream)
    assert set(seen) == set(clients)
    assert all(len(upstreams) == 1 for upstreams in seen.values()), seen
    used = set().union(*seen.values())
    assert used == replicas, (used, replicas)


def test_the_app_runs_in_a_browser_through_the_proxy(stack, browser):
    """A real session over the proxied WebSocket: the home page renders its figures, the
    Explainer draws (its code fetched from the prefixed app/static/)."""
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    try:
        page.goto(f"http://127.0.0.1:{stack['port']}/{PREFIX}/", timeout=60_000)
        wait_app_idle(page)
        page.wait_for_selector(".js-plotly-plot", timeout=120_000)
        assert page.locator("[data-testid='stException']").count() == 0
        assert "DINOv2" in page.inner_text("[data-testid='stMain']")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "proxy-home.png"))

        # the Explainer imports its code from app/static/ under the prefix
        page.goto(f"http://127.0.0.1:{stack['port']}/{PREFIX}/vit_explainer", timeout=60_000)
        wait_app_idle(page)
        page.wait_for_function("() => window.__vitExplainer && window.__vitExplainer.readyAt",
                               timeout=120_000)
        assert page.locator("[data-testid='vit-explainer'] .vx-block").count() > 0
    finally:
        page.close()
