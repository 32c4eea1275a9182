"""The deploy recipe, proved: Debian's nginx on loopback, configured by
deploy/nginx/vit-lens.conf (only its ports and paths changed), in front of two app
replicas started with --server.baseUrlPath, as deploy/systemd starts them. What nginx
serves without a replica is tests/e2e/test_nginx_static.py."""

from __future__ import annotations

import base64
import hashlib
import os
import re
import socket
import time
from urllib.parse import quote

import pytest
from e2e_helpers import (ARTIFACTS, CHROMIUM_FLAGS, chromium_path, png_bytes, running_apps,
                         wait_app_idle)
from proxy_helpers import PREFIX, get, nginx_in_front

from dashboard.state import UPLOAD_CHOICE, image_title

WEBSOCKET_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455, section 1.3
NAMED_HOST = "vitlens.test"  # not loopback by name: what a lab server's address looks like
UID_COOKIE = "vit_lens_uid"  # deploy/nginx/vit-lens.conf, userid_name
FIRST_VISITS = 40


@pytest.fixture(scope="module")
def stack():
    # routing, not readiness, is tested here: each replica counts as warm from its start
    # (a warming one is left out of first visits: tests/e2e/test_fair_server.py)
    with running_apps(2, base_path=PREFIX, log_name="replica",
                      env={"VIT_LENS_READY_AFTER_S": "0"}) as apps, \
            nginx_in_front(apps) as proxy:
        yield {"port": proxy.port, "apps": apps, "proxy": proxy}


@pytest.fixture(scope="module")
def named_host_browser(browser):
    """Chromium that resolves NAMED_HOST to 127.0.0.1, so it sends `Host: NAMED_HOST:port`.
    Launched through the session's Playwright (a second sync_playwright() in the same
    process fails once the session's is running)."""
    launched = browser.browser_type.launch(
        executable_path=chromium_path(), headless=True,
        args=[*CHROMIUM_FLAGS, f"--host-resolver-rules=MAP {NAMED_HOST} 127.0.0.1"])
    yield launched
    launched.close()


def websocket_handshake(port: int, host: str) -> str:
    """The head of the answer to a browser's WebSocket upgrade sent with `Host: host`
    and the matching Origin; asserts the accept key when the answer is 101."""
    key = base64.b64encode(os.urandom(16)).decode()
    request = (f"GET /{PREFIX}/_stcore/stream HTTP/1.1\r\n"
               f"Host: {host}\r\n"
               "Upgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
               "Sec-WebSocket-Protocol: streamlit\r\n"
               f"Origin: http://{host}\r\n\r\n")
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(request.encode())
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(4096)
            assert chunk, answer
            answer += chunk
    head = answer.split(b"\r\n\r\n")[0].decode()
    if head.startswith("HTTP/1.1 101"):
        accept = base64.b64encode(
            hashlib.sha1((key + WEBSOCKET_GUID).encode()).digest()).decode()
        assert f"sec-websocket-accept: {accept.lower()}" in head.lower()
    return head


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
    head = websocket_handshake(stack["port"], f"127.0.0.1:{stack['port']}")
    assert head.startswith("HTTP/1.1 101"), head


def test_first_visits_from_one_address_spread_over_both_replicas(stack):
    """Behind a campus NAT a class shares one address. The recipe hashes nginx's per-browser
    id (the userid cookie it sets on a first response), not the address: 40 first visits
    from 127.0.0.1 land on both replicas in a fair share, and a browser that sends its
    cookie back stays on its replica."""
    port, proxy = stack["port"], stack["proxy"]
    replicas = {f"127.0.0.1:{app.port}" for app in stack["apps"]}
    skip = len(proxy.access_log.read_text().splitlines())

    def health(browser: int) -> str:
        """A proxied path that names the browser in the log: the health check under a page
        (the replica answers 404, as it does to Streamlit's own probe there)."""
        return f"/{PREFIX}/b{browser}/_stcore/health"

    cookies = []
    for browser in range(FIRST_VISITS):
        response, _ = get(port, health(browser))
        assert response.status == 404
        cookie = uid_cookie(response)
        assert cookie and f"path=/{PREFIX}/" in cookie
        cookies.append(cookie.split(";", 1)[0])
    for browser, cookie in enumerate(cookies):  # each browser again, with its id
        response, _ = get(port, health(browser), headers={"Cookie": cookie})
        assert response.status == 404 and uid_cookie(response) is None
    time.sleep(0.3)  # the access log is written after the response
    served: dict[int, list[str]] = {}
    for _, path, upstream in proxy.upstreams_in_log(skip):
        if path.startswith(f"/{PREFIX}/b"):
            served.setdefault(int(path.split("/")[2][1:]), []).append(upstream)
    assert sorted(served) == list(range(FIRST_VISITS))
    assert all(len(set(upstreams)) == 1 and len(upstreams) == 2  # stayed on its replica
               for upstreams in served.values()), served
    first = [upstreams[0] for upstreams in served.values()]
    assert set(first) == replicas, first
    shares = {replica: first.count(replica) / FIRST_VISITS for replica in replicas}
    assert min(shares.values()) >= 0.25, shares


def uid_cookie(response) -> str | None:
    """The Set-Cookie line of nginx's browser id, if the response sets it."""
    lines = response.msg.get_all("Set-Cookie") or []
    return next((line for line in lines if line.startswith(f"{UID_COOKIE}=")), None)


def test_named_host_on_a_port_other_than_80(stack):
    """The browser sends `Host: <name>:<port>` and an Origin with that port; the recipe
    passes Host with its port, so Streamlit's Origin check accepts the WebSocket (with the
    port dropped it answers 403)."""
    head = websocket_handshake(stack["port"], f"{NAMED_HOST}:{stack['port']}")
    assert head.startswith("HTTP/1.1 101"), head


def test_the_app_runs_in_a_browser_through_the_proxy(stack, named_host_browser):
    """A real session over the proxied WebSocket, at a named host on a non-default port
    (Chromium resolves it to loopback): the home page renders its figures, the Explainer
    draws (its code served by nginx from app/static/). Then an upload: the access log
    keeps neither the query strings nor the upload URL's session id."""
    proxy = stack["proxy"]
    base = f"http://{NAMED_HOST}:{stack['port']}/{PREFIX}/"
    context = named_host_browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    failed: list[str] = []
    page.on("response", lambda r: r.status >= 400 and not base_path_probe(r.url)
            and failed.append(f"{r.status} {r.url}"))
    sockets: list[str] = []
    page.on("websocket", lambda ws: sockets.append(ws.url))
    uploads: list[str] = []
    page.on("request", lambda r: "/_stcore/upload_file/" in r.url and uploads.append(r.url))
    try:
        page.goto(base + "?image_choice=" + quote(image_title("coffee")), timeout=60_000)
        wait_app_idle(page)
        page.wait_for_selector(".js-plotly-plot", timeout=120_000)
        assert page.locator("[data-testid='stException']").count() == 0
        assert "DINOv2" in page.inner_text("[data-testid='stMain']")
        assert sockets and all(url.startswith(f"ws://{NAMED_HOST}:") for url in sockets), sockets
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "proxy-home.png"))

        # the Explainer imports its code from app/static/ under the prefix
        page.goto(base + "vit_explainer", timeout=60_000)
        wait_app_idle(page)
        page.wait_for_function("() => window.__vitExplainer && window.__vitExplainer.readyAt",
                               timeout=120_000)
        assert page.locator("[data-testid='vit-explainer'] .vx-block").count() > 0

        page.goto(base + "?image_choice=" + quote(image_title(UPLOAD_CHOICE)), timeout=60_000)
        wait_app_idle(page)
        page.locator("[data-testid='stFileUploader'] input[type='file']").set_input_files(
            files=[{"name": "red.png", "mimeType": "image/png", "buffer": png_bytes()}])
        page.wait_for_function(
            "() => [...document.querySelectorAll('.js-plotly-plot')]"
            ".some(p => JSON.stringify(p.layout.title || '').includes('(120x80)'))",
            timeout=120_000)
        wait_app_idle(page)
        assert failed == [], failed
    finally:
        context.close()
    assert_log_is_private(proxy, uploads)


def base_path_probe(url: str) -> bool:
    """Streamlit's client, opened at a page's address, first asks for the server's health
    and host config under that page's path (a 404 from the replica), then under its parent."""
    return bool(re.search(r"/vit-lens/[^/]+/_stcore/(health|host-config)$", url))


def assert_log_is_private(proxy, uploads: list[str]) -> None:
    session_ids = {url.split("/_stcore/upload_file/", 1)[1].split("/")[0] for url in uploads}
    assert session_ids and all(len(session_id) >= 16 for session_id in session_ids), uploads
    time.sleep(0.3)
    log = proxy.access_log.read_text()
    rows = proxy.upstreams_in_log()
    logged_uploads = [path for _, path, _ in rows if "/_stcore/upload_file/" in path]
    assert logged_uploads and set(logged_uploads) == {f"/{PREFIX}/_stcore/upload_file/-"}
    assert all("?" not in path for _, path, _ in rows)
    assert "image_choice" not in log and "Coffee" not in log
    for session_id in session_ids:
        assert session_id not in log
