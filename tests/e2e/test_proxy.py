"""The deploy recipe, proved: Debian's nginx on loopback, configured by
deploy/nginx/vit-lens.conf (only its ports changed), in front of two app
replicas started with --server.baseUrlPath, as deploy/systemd starts them."""

from __future__ import annotations

import base64
import hashlib
import http.client
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from e2e_helpers import ARTIFACTS, ROOT, free_port, running_apps, wait_app_idle

RECIPE = ROOT / "deploy" / "nginx" / "vit-lens.conf"
PREFIX = "vit-lens"
WEBSOCKET_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455, section 1.3


def recipe_for(listen_port: int, replica_ports: list[int]) -> str:
    """deploy/nginx/vit-lens.conf with loopback ports instead of 80 and 8501/8502."""
    text = RECIPE.read_text()
    assert re.findall(r"^\s*listen 80;", text, re.M), "the recipe listens on port 80"
    text = re.sub(r"^(\s*)listen 80;", rf"\1listen 127.0.0.1:{listen_port};", text, flags=re.M)
    servers = re.findall(r"^\s*server 127\.0\.0\.1:\d+;", text, re.M)
    assert len(servers) == 2, "the recipe's upstream lists two replicas"
    for line, port in zip(servers, replica_ports):
        text = text.replace(line, re.sub(r":\d+;", f":{port};", line), 1)
    return text


def main_conf(tmp: Path, site: Path) -> str:
    user = "user root;\n" if os.geteuid() == 0 else ""  # temp dirs live in a private tmp
    return f"""{user}worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log info;
events {{ worker_connections 256; }}
http {{
    log_format upstream '$remote_addr "$request" $status $upstream_addr';
    access_log {tmp}/access.log upstream;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    include {site};
}}
"""


@pytest.fixture(scope="module")
def stack():
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(nginx).exists():
        pytest.fail("Debian's nginx is missing: run `make system-deps` (apt).")
    tmp = Path(tempfile.mkdtemp(prefix="vit-lens-nginx-"))
    with running_apps(2, base_path=PREFIX, log_name="replica") as apps:
        port = free_port()
        site = tmp / "vit-lens.conf"
        site.write_text(recipe_for(port, [app.port for app in apps]))
        conf = tmp / "nginx.conf"
        conf.write_text(main_conf(tmp, site))
        check = subprocess.run([nginx, "-t", "-p", str(tmp), "-c", str(conf)],
                               capture_output=True, text=True)
        assert check.returncode == 0, check.stderr
        process = subprocess.Popen([nginx, "-p", str(tmp), "-c", str(conf), "-g", "daemon off;"],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 20
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    assert process.poll() is None, process.stdout.read().decode()
                    assert time.monotonic() < deadline, "nginx did not start listening"
                    time.sleep(0.1)
            yield {"port": port, "apps": apps, "tmp": tmp}
        finally:
            process.terminate()
            process.wait(timeout=15)
            ARTIFACTS.mkdir(exist_ok=True)
            for name in ("access.log", "error.log"):
                if (tmp / name).exists():
                    shutil.copy(tmp / name, ARTIFACTS / f"nginx-{name}")
            shutil.rmtree(tmp, ignore_errors=True)


def get(port: int, path: str, source: str = "127.0.0.1", headers: dict | None = None):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30,
                                            source_address=(source, 0))
    connection.request("GET", path, headers=headers or {})
    response = connection.getresponse()
    body = response.read()
    connection.close()
    return response, body


def upstreams_in_log(tmp: Path) -> list[tuple[str, str, str]]:
    """(client address, request path, upstream address) per proxied request."""
    rows = []
    for line in (tmp / "access.log").read_text().splitlines():
        match = re.match(r'(\S+) "GET (\S+) [^"]*" (\d+) (\S+)', line)
        if match:
            rows.append((match[1], match[2], match[4]))
    return rows


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
    port, tmp = stack["port"], stack["tmp"]
    replicas = {f"127.0.0.1:{app.port}" for app in stack["apps"]}
    clients = [f"127.0.0.{i}" for i in range(2, 18)]
    for _ in range(3):
        for client in clients:
            response, body = get(port, f"/{PREFIX}/_stcore/health?c={client}", source=client)
            assert response.status == 200 and body == b"ok"
    time.sleep(0.3)  # access log is written after the response
    seen: dict[str, set[str]] = {}
    for client, path, upstream in upstreams_in_log(tmp):
        if "?c=" in path:
            seen.setdefault(client, set()).add(upstream)
    assert set(seen) == set(clients)
    assert all(len(upstreams) == 1 for upstreams in seen.values()), seen
    used = set().union(*seen.values())
    assert used == replicas, (used, replicas)


def test_the_app_runs_in_a_browser_through_the_proxy(stack, browser):
    """A real session over the proxied WebSocket: the home page renders its figures."""
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    try:
        page.goto(f"http://127.0.0.1:{stack['port']}/{PREFIX}/", timeout=60_000)
        wait_app_idle(page)
        page.wait_for_selector(".js-plotly-plot", timeout=120_000)
        assert page.locator("[data-testid='stException']").count() == 0
        assert "DINOv2" in page.inner_text("[data-testid='stMain']")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "proxy-home.png"))
    finally:
        page.close()
