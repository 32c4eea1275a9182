"""The deploy recipe agrees with the app's own settings (the live proof, nginx in front
of two replicas, is tests/e2e/test_proxy.py), and the warm-up / health commands
follow the CLI's rules (exit 2 with one line on bad input)."""

from __future__ import annotations

import re
import socket
import tomllib
from pathlib import Path

from xai_core.cli.main import main as cli_main

ROOT = Path(__file__).resolve().parent.parent
NGINX = (ROOT / "deploy" / "nginx" / "vit-lens.conf").read_text()
UNIT = (ROOT / "deploy" / "systemd" / "vit-lens@.service").read_text()
WARMUP = (ROOT / "deploy" / "systemd" / "vit-lens-warmup.service").read_text()


def directives(text: str) -> str:
    return "\n".join(line.split("#", 1)[0] for line in text.splitlines())


def test_nginx_body_limit_covers_the_upload_limit():
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    upload_mb = config["server"]["maxUploadSize"]
    body = re.search(r"client_max_body_size\s+(\d+)m;", directives(NGINX))
    assert body and int(body[1]) > upload_mb  # multipart adds a little to the file


def test_prefix_websocket_and_sticky_upstream():
    conf = directives(NGINX)
    prefix = re.search(r"--server\.baseUrlPath\s+(\S+)", UNIT)[1]
    assert re.search(rf"location /{prefix}/ \{{", conf)
    # a named upstream and no URI part: the path is passed through, no rewrite
    assert re.search(r"proxy_pass http://\$vit_lens_upstream;", conf)
    assert "proxy_http_version 1.1;" in conf
    assert re.search(r"proxy_set_header Upgrade \$http_upgrade;", conf)
    assert re.search(r"proxy_set_header Connection \$vit_lens_connection;", conf)
    assert re.search(r"map \$http_upgrade \$vit_lens_connection \{\s*default upgrade;", conf)
    upstream = re.search(r"upstream vit_lens \{(.*?)\}", conf, re.S)[1]
    assert re.search(r"^\s*(hash \$remote_addr consistent|ip_hash);", upstream, re.M)
    assert len(re.findall(r"^\s*server 127\.0\.0\.1:\d+", upstream, re.M)) >= 2


def test_the_replica_cookie_routes_to_that_replica_with_a_backup():
    """The app names its replica in a cookie (dashboard/replica.py); every name the map
    knows has an upstream whose first server is that replica and whose other is a backup."""
    from dashboard.replica import COOKIE

    conf = directives(NGINX)
    routes = re.search(rf"map \$cookie_{COOKIE} \$vit_lens_upstream \{{(.*?)\}}", conf, re.S)[1]
    assert re.search(r"^\s*default vit_lens;", routes, re.M)
    pairs = re.findall(r"^\s*(\d+)\s+(\S+);", routes, re.M)
    replicas = re.findall(r"server 127\.0\.0\.1:(\d+)",
                          re.search(r"upstream vit_lens \{(.*?)\}", conf, re.S)[1])
    assert sorted(name for name, _ in pairs) == sorted(replicas)
    for name, group in pairs:
        body = re.search(rf"upstream {group} \{{(.*?)\}}", conf, re.S)[1]
        servers = re.findall(r"^\s*server 127\.0\.0\.1:(\d+)([^;]*);", body, re.M)
        assert servers[0][0] == name and "backup" not in servers[0][1]
        assert len(servers) >= 2 and all("backup" in rest for _, rest in servers[1:])
    # a refused or silent replica is retried on the next one, quickly
    assert re.search(r"proxy_next_upstream error timeout", conf)
    timeout = re.search(r"proxy_connect_timeout (\d+)s;", conf)
    assert timeout and int(timeout[1]) <= 5


def test_units_run_the_app_from_the_venv_after_the_warm_up():
    assert re.search(r"ExecStart=\S+/\.venv/bin/streamlit run dashboard/app\.py", UNIT)
    assert "--server.address 127.0.0.1" in UNIT and "--server.port %i" in UNIT
    assert re.search(r"Requires=vit-lens-warmup\.service", UNIT)
    assert re.search(r"After=.*vit-lens-warmup\.service", UNIT)
    assert re.search(r"ExecStart=\S+/\.venv/bin/python -m xai_core warmup", WARMUP)
    cache = re.search(r"VIT_LENS_CACHE_DIR=(\S+)", WARMUP)[1]
    assert f"VIT_LENS_CACHE_DIR={cache}" in UNIT  # replicas read what the warm-up wrote


def test_health_of_a_closed_port_exits_2(capsys):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: refused
        code = cli_main(["health", f"http://127.0.0.1:{port}/_stcore/health"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "did not answer 'ok'" in err


def test_warmup_of_an_unknown_model_exits_2(capsys):
    code = cli_main(["warmup", "--models", "no-such-model"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "no-such-model" in err
