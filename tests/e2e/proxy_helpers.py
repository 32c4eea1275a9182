"""nginx on loopback, configured by deploy/nginx/vit-lens.conf with only its ports and
paths changed (the static-file paths as `make nginx-conf` fills them in, the access log in
a temporary folder), in front of app replicas started as deploy/systemd starts them."""

from __future__ import annotations

import contextlib
import http.client
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from e2e_helpers import ARTIFACTS, free_port

from dashboard.nginx_conf import precompress, rendered, streamlit_bundle

PREFIX = "vit-lens"
WORKER_CONNECTIONS = 4096  # docs/hosting.md, "A class at once": nginx.conf's events {}
# the recipe's log format: '$remote_addr [$time_local] "$request_method $vit_lens_log_uri"
# $status $body_bytes_sent $request_time "$upstream_addr"'
LOG_LINE = re.compile(r'(\S+) \[[^\]]+\] "(\S+) ([^"]*)" (\d+) (\d+) \S+ "([^"]*)"$')


def recipe_for(listen_port: int, replica_ports: list[int], log_dir: Path,
               bundle: Path | None = None) -> str:
    """deploy/nginx/vit-lens.conf as `make nginx-conf PORTS=... LISTEN=...` renders it for a
    loopback port and `replica_ports`, the static-file paths filled in (`bundle`: a copy
    of Streamlit's), its access log written to `log_dir`."""
    text = rendered(bundle, ports=list(replica_ports), listen=f"127.0.0.1:{listen_port}")
    log = re.compile(r"^(\s*)access_log /var/log/nginx/vit-lens\.access\.log vit_lens;", re.M)
    assert len(log.findall(text)) == 1, "the recipe logs to one access log, as vit_lens"
    text = log.sub(rf"\1access_log {log_dir}/access.log vit_lens;", text)
    directives = "\n".join(line.split("#", 1)[0] for line in text.splitlines())
    if not {8501, 8502} & set(replica_ports):
        assert not re.search(r"\b(8501|8502)\b", directives), "a replica port left unrendered"
    return text


def main_conf(tmp: Path, site: Path) -> str:
    user = "user root;\n" if os.geteuid() == 0 else ""  # temp dirs live in a private tmp
    return f"""{user}worker_processes auto;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log info;
worker_rlimit_nofile {2 * WORKER_CONNECTIONS};
events {{ worker_connections {WORKER_CONNECTIONS}; }}
http {{
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    include {site};
}}
"""


@dataclass
class Proxy:
    port: int
    tmp: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/{PREFIX}/"

    @property
    def access_log(self) -> Path:
        return self.tmp / "access.log"

    def upstreams_in_log(self, skip: int = 0) -> list[tuple[str, str, str]]:
        """(client address, logged path, upstream address(es) or "-") per request, from
        line `skip` of the access log on."""
        rows = []
        for line in self.access_log.read_text().splitlines()[skip:]:
            match = LOG_LINE.match(line)
            assert match, f"not the recipe's log format: {line}"
            rows.append((match[1], match[3], match[6]))
        return rows


@contextlib.contextmanager
def nginx_in_front(apps, log_name: str = "nginx", bundle: Path | None = None):
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(nginx).exists():
        pytest.fail("Debian's nginx is missing: run `make system-deps` (apt).")
    tmp = Path(tempfile.mkdtemp(prefix="vit-lens-nginx-"))
    port = free_port()
    site = tmp / "vit-lens.conf"
    site.write_text(recipe_for(port, [app.port for app in apps], tmp, bundle))
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
        yield Proxy(port, tmp)
    finally:
        process.terminate()
        process.wait(timeout=15)
        ARTIFACTS.mkdir(exist_ok=True)
        for name in ("access.log", "error.log"):
            if (tmp / name).exists():
                shutil.copy(tmp / name, ARTIFACTS / f"{log_name}-{name}")
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def precompressed_bundle():
    """A temporary copy of Streamlit's bundle with the .gz files `make nginx-gzip` writes
    (the shared venv's own folder stays untouched)."""
    with tempfile.TemporaryDirectory(prefix="vit-lens-bundle-") as tmp:
        served = Path(tmp) / "static"  # index.html, favicon, ... and the bundle in static/
        shutil.copytree(streamlit_bundle().parent, served)
        precompress(served / "static")
        yield served / "static"


def get(port: int, path: str, source: str = "127.0.0.1", headers: dict | None = None):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30,
                                            source_address=(source, 0))
    connection.request("GET", path, headers=headers or {})
    response = connection.getresponse()
    body = response.read()
    connection.close()
    return response, body
