"""The deploy recipe agrees with the app's own settings (the live proof, nginx in front
of two replicas, is tests/e2e/test_proxy.py), and the warm-up / health commands
follow the CLI's rules (exit 2 with one line on bad input)."""

from __future__ import annotations

import re
import socket
import time
import tomllib
from pathlib import Path

import pytest

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
    # held in memory whole: never a temporary file (nor the error log's line naming it)
    buffer = re.search(r"client_body_buffer_size\s+(\d+)m;", directives(NGINX))
    assert buffer and int(buffer[1]) >= int(body[1])


def location(conf: str, path: str) -> str:
    """The body of `location <path> {...}` (nested braces included)."""
    start = conf.index(f"location {path} {{") + len(f"location {path} {{")
    depth, end = 1, start
    while depth:
        depth += {"{": 1, "}": -1}.get(conf[end], 0)
        end += 1
    return conf[start:end - 1]


def test_no_id_reaches_an_error_log_and_metrics_are_closed():
    """nginx's error log quotes a request's line whole: the two locations whose addresses
    carry ids log no errors (the access log masks them); the replicas' metrics are not
    served to visitors."""
    conf = directives(NGINX)
    for path in ("/vit-lens/_stcore/upload_file/", "/vit-lens/media/"):
        body = location(conf, path)
        assert re.search(r"^\s*error_log /dev/null;", body, re.M), path
        assert "proxy_pass http://$vit_lens_upstream;" in body  # the session's replica
    assert re.search(r"^\s*return 404;", location(conf, "= /vit-lens/_stcore/metrics"), re.M)


def test_the_browsers_health_check_asks_the_first_visit_replicas_readiness():
    """Streamlit's client asks /_stcore/health before its WebSocket: nginx asks it of the
    `vit_lens` upstream (first visits) with the readiness header, so a warming replica
    answers 503 and is left out of it; when none is warm, any live replica answers, hashed
    alike."""
    from dashboard import readiness

    conf = directives(NGINX)
    health = location(conf, "= /vit-lens/_stcore/health")
    assert "proxy_pass http://vit_lens;" in health  # the first visits' upstream
    assert f"proxy_set_header {readiness.HEADER} 1;" in health
    assert "proxy_set_header Host $http_host;" in health  # the rest, as set here replaces
    assert "proxy_intercept_errors on;" in health
    assert re.search(r"error_page 502 503 504 = @vit_lens_alive;", health)
    main = location(conf, "/vit-lens/")
    assert re.search(r"proxy_next_upstream error timeout http_502 http_503;", main)
    assert re.search(r"^        error_page 502 = @vit_lens_any;", main, re.M)
    first = re.search(r"upstream vit_lens \{(.*?)\}", conf, re.S)[1]
    anyone = re.search(r"upstream vit_lens_any \{(.*?)\}", conf, re.S)[1]
    servers = re.findall(r"server (127\.0\.0\.1:\d+)", first)
    assert re.findall(r"server (127\.0\.0\.1:\d+) max_fails=0;", anyone) == servers
    assert "hash $vit_lens_browser consistent;" in anyone
    for fallback in ("@vit_lens_alive", "@vit_lens_any"):
        assert "proxy_pass http://vit_lens_any;" in location(conf, fallback)


def test_a_foreign_origin_websocket_is_refused_by_nginx():
    conf = directives(NGINX)
    stream = location(conf, "= /vit-lens/_stcore/stream")
    assert re.search(r"if \(\$vit_lens_foreign_origin\) \{\s*return 403;\s*\}", stream)
    origin_map = re.search(r'map "\$http_origin\|\$http_host" \$vit_lens_foreign_origin '
                           r"\{(.*?)\n\}", conf, re.S)[1]
    assert re.search(r"^\s*default\s+1;", origin_map, re.M)


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
    assert len(re.findall(r"^\s*server 127\.0\.0\.1:\d+", upstream, re.M)) >= 2
    # Host with its port: Streamlit compares it with the WebSocket's Origin
    assert re.search(r"proxy_set_header Host \$http_host;", conf)
    assert not re.search(r"proxy_set_header Host \$host;", conf)


def test_first_visits_are_hashed_by_browser_not_by_address():
    """A campus NAT gives a class one address: the first visit is hashed by nginx's userid
    cookie, the one it received or (first request) the one it sets now."""
    conf = directives(NGINX)
    upstream = re.search(r"upstream vit_lens \{(.*?)\}", conf, re.S)[1]
    assert re.search(r"^\s*hash \$vit_lens_browser consistent;", upstream, re.M)
    assert "$remote_addr consistent" not in conf and "ip_hash" not in conf
    browser = re.search(r"map \$uid_got \$vit_lens_browser \{(.*?)\}", conf, re.S)[1]
    assert re.search(r"^\s*''\s+\$uid_set;", browser, re.M)
    assert re.search(r"^\s*default\s+\$uid_got;", browser, re.M)
    server = conf[conf.index("server {"):]
    assert re.search(r"^    userid on;", server, re.M)  # the server's level: every location


def test_static_files_come_from_the_installed_packages():
    """`make nginx-conf` fills in folders that hold what the browser asks for: index.html's
    hashed scripts under static/, the app's files under app/static/."""
    from dashboard.assets import STATIC
    from dashboard.nginx_conf import RECIPE_APP_STATIC, RECIPE_STREAMLIT_BUNDLE, rendered

    unit_root = re.search(r"WorkingDirectory=(\S+)", UNIT)[1]
    assert RECIPE_APP_STATIC == f"{unit_root}/dashboard/static/"
    assert RECIPE_STREAMLIT_BUNDLE.startswith(f"{unit_root}/.venv/")
    aliases = dict(re.findall(r"location (/vit-lens/\S*) \{\s*alias (\S+);",
                              directives(rendered())))
    bundle, app_static = Path(aliases["/vit-lens/static/"]), Path(aliases["/vit-lens/app/static/"])
    index = (bundle.parent / "index.html").read_text()
    scripts = re.findall(r'src="\./static/([^"]+)"', index)
    assert scripts and all((bundle / script).is_file() for script in scripts)
    assert app_static == STATIC and (app_static / "explainer" / "component" / "main.js").is_file()
    # every page's address gets the index.html Streamlit serves, from the same package
    page_root = re.search(r"location ~ \^/vit-lens/\[\^/\.\]\*\$ \{\s*root (\S+);",
                          directives(rendered()))[1]
    assert Path(page_root) == bundle.parent and (Path(page_root) / "index.html").is_file()


def test_access_log_keeps_no_query_string_and_no_ids():
    conf = directives(NGINX)
    fmt = re.search(r"log_format vit_lens (.*?);", conf, re.S)[1]
    for leaky in ("$request ", "$request_uri", "$args", "$query_string", "$http_referer",
                  "$uri", "$cookie"):
        assert leaky not in fmt.replace('"', " ") + " ", leaky
    assert "$vit_lens_log_uri" in fmt
    masks = re.search(r"map \$request_uri \$vit_lens_log_uri \{(.*?)\n\}", conf, re.S)[1]
    assert "/_stcore/upload_file/" in masks and "/media/" in masks
    assert re.search(r"\[\^\?\]\*", masks)  # the rest: up to the query string
    assert re.search(r"access_log \S+ vit_lens;", conf)


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
    # as `make run` starts it: models loaded, then the app, then the gallery warmed
    assert re.search(r"ExecStart=\S+/\.venv/bin/python -m dashboard\.serve", UNIT)
    assert "--server.address 127.0.0.1" in UNIT and "--server.port %i" in UNIT
    assert re.search(r"Requires=vit-lens-warmup\.service", UNIT)
    assert re.search(r"After=.*vit-lens-warmup\.service", UNIT)
    assert re.search(r"ExecStart=\S+/\.venv/bin/python -m xai_core warmup", WARMUP)
    cache = re.search(r"VIT_LENS_CACHE_DIR=(\S+)", WARMUP)[1]
    assert f"VIT_LENS_CACHE_DIR={cache}" in UNIT  # replicas read what the warm-up wrote


def test_a_replica_warms_every_page_after_its_health_check():
    posts = [line for line in UNIT.replace("\\\n", " ").splitlines()
             if line.startswith("ExecStartPost=")]
    assert "xai_core health" in posts[0] and "dashboard.warm_replica" in posts[1]
    prefix = re.search(r"--server\.baseUrlPath\s+(\S+)", UNIT)[1]
    assert posts[1].split()[-1] == f"http://127.0.0.1:%i/{prefix}/"
    assert posts[1].startswith("ExecStartPost=-")  # a failed page does not stop the replica
    from dashboard.warm_replica import TOTAL_S

    health_wait = int(re.search(r"health --wait (\d+)", UNIT)[1])
    assert int(re.search(r"^TimeoutStartSec=(\d+)$", UNIT, re.M)[1]) > health_wait + TOTAL_S


def test_warm_replica_refuses_an_address_off_this_machine(capsys):
    from dashboard import warm_replica

    assert warm_replica.main(["http://example.org:8501/vit-lens/"]) == 2
    assert "example.org" in capsys.readouterr().err


def test_warming_stops_when_its_time_is_spent(monkeypatch):
    """Past the warm-up's total, the remaining pages are not opened, and say so."""
    from dashboard import warm_replica
    from dashboard.page_list import existing_pages

    opened = []

    async def fake_open(base, path, timeout):
        opened.append((path, timeout))
        return warm_replica.PageRun(seconds=0.1)

    clock = iter([0.0, 0.0, 1.0, 700.0] + [700.0] * 20)
    monkeypatch.setattr(warm_replica, "open_page", fake_open)
    monkeypatch.setattr(warm_replica, "monotonic", lambda: next(clock))
    runs = warm_replica.warm("http://127.0.0.1:8501/vit-lens")
    assert [path for path, _ in opened] == ["", "vit_explainer"]
    assert opened[1][1] == pytest.approx(599.0)  # each page gets what is left
    assert len(runs) == len(existing_pages())
    assert all("not opened" in run.error for _, run in runs[2:])


def test_a_visit_can_name_a_pages_view_by_its_deep_link():
    """The load bench's 'interventions?iv_view=claims' opens that view on the visit's image."""
    from dashboard.page_visit import with_view

    assert with_view("interventions?iv_view=claims", "image_choice=Cat") == (
        "interventions", "image_choice=Cat&iv_view=claims")
    assert with_view("comparison", "image_choice=Cat") == ("comparison", "image_choice=Cat")
    assert with_view("", "") == ("", "")


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


def test_precompress_writes_a_gz_per_compressible_file_once(tmp_path):
    """`make nginx-gzip`: a .gz that decompresses to its file beside every JS/CSS/SVG/font
    file, none for what is compressed already; a second run writes nothing, a changed file
    gets a new one."""
    import gzip
    import os

    from dashboard.nginx_conf import precompress

    (tmp_path / "js").mkdir()
    script = tmp_path / "js" / "index.abc123.js"
    script.write_text("function f(){return 1}\n" * 500)
    (tmp_path / "style.css").write_text("a{color:red}\n" * 300)
    (tmp_path / "font.woff2").write_bytes(os.urandom(2000))
    assert precompress(tmp_path) == (2, 0)
    assert sorted(p.name for p in tmp_path.rglob("*.gz")) == ["index.abc123.js.gz", "style.css.gz"]
    packed = (tmp_path / "js" / "index.abc123.js.gz").read_bytes()
    assert gzip.decompress(packed) == script.read_bytes() and len(packed) < script.stat().st_size
    assert precompress(tmp_path) == (0, 2)
    script.write_text("function g(){return 2}\n" * 500)
    later = script.stat().st_mtime + 5
    os.utime(script, (later, later))
    assert precompress(tmp_path) == (1, 1)
    assert gzip.decompress((tmp_path / "js" / "index.abc123.js.gz").read_bytes()) == \
        script.read_bytes()


def test_gzip_bundle_that_cannot_write_exits_2(capsys, monkeypatch, tmp_path):
    from dashboard import nginx_conf

    locked = tmp_path / "static"
    locked.mkdir()
    (locked / "a.js").write_text("x" * 2000)
    monkeypatch.setattr(nginx_conf, "streamlit_bundle", lambda: locked)

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(nginx_conf.tempfile, "NamedTemporaryFile", refuse)
    assert nginx_conf.main(["--gzip-bundle"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Permission denied" in err and str(locked) in err


def test_nginx_conf_writes_the_recipe_for_other_ports(capsys):
    """`make nginx-conf PORTS=9001,9002,9003 LISTEN=8080`: every place that names the replicas
    follows (the cookie map, the first-visit and fallback upstreams, one upstream per
    replica with the next as its backup, in a ring), and nothing else changes."""
    from dashboard import nginx_conf

    assert nginx_conf.main(["--ports", "9001,9002,9003", "--listen", "8080"]) == 0
    conf = directives(capsys.readouterr().out)
    assert "8501" not in conf and "8502" not in conf
    assert re.findall(r"^\s*listen (\S+);", conf, re.M) == ["8080"]
    routes = re.search(r"map \$cookie_vit_lens_replica \$vit_lens_upstream \{(.*?)\}", conf,
                       re.S)[1]
    assert re.findall(r"^\s*(\d+)\s+(\S+);", routes, re.M) == [
        (p, f"vit_lens_{p}") for p in ("9001", "9002", "9003")]
    for group, suffix in (("vit_lens", " max_fails=1 fail_timeout=10s"),
                          ("vit_lens_any", " max_fails=0")):
        body = re.search(rf"upstream {group} \{{(.*?)\}}", conf, re.S)[1]
        assert re.findall(r"server (127\.0\.0\.1:\d+[^;]*);", body) == [
            f"127.0.0.1:{p}{suffix}" for p in (9001, 9002, 9003)]
    for port, backup in ((9001, 9002), (9002, 9003), (9003, 9001)):
        body = re.search(rf"upstream vit_lens_{port} \{{(.*?)\}}", conf, re.S)[1]
        assert re.findall(r"server 127\.0\.0\.1:(\d+)([^;]*);", body) == [
            (str(port), " max_fails=1 fail_timeout=10s"), (str(backup), " backup")]
    # apart from the replicas and the port, the recipe as it is
    same = nginx_conf.rendered()


    def strip(text: str) -> list[str]:
        text = re.sub(r"upstream vit_lens_\d+ \{.*?\}\n", "", directives(text), flags=re.S)
        return [line for line in text.splitlines() if line.strip()
                and not re.search(r"\b(850[12]|900[123]|listen)\b|vit_lens_\d", line)]
    assert strip(conf) == strip(same)
    assert nginx_conf.main(["--ports", "8501,8502"]) == 0
    assert capsys.readouterr().out == same


@pytest.mark.parametrize("args, words", [(["--ports", "8501,x"], "--ports takes"),
                                         (["--ports", "8501,8501"], "distinct"),
                                         (["--listen", "80; evil"], "--listen takes")])
def test_nginx_conf_refuses_bad_ports_in_one_line(capsys, args, words):
    from dashboard import nginx_conf

    assert nginx_conf.main(args) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1 and words in out.err


def test_the_install_stamp_runs_pip_only_when_the_requirements_change(tmp_path):
    """A clone whose .venv links another checkout's: its requirements.txt is newer than the
    stamp, and nothing changed, so pip does not run; changed requirements do run it."""
    import os
    import shutil
    import stat
    import subprocess

    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    (tmp_path / "requirements.txt").write_text("numpy\n")
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path / 'calls.log'}\n")
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    calls = tmp_path / "calls.log"

    def make() -> list[str]:
        subprocess.run(["make", "-s", "VENV=venv", "venv/.installed"], cwd=tmp_path,
                       check=True, capture_output=True)
        return calls.read_text().splitlines() if calls.exists() else []

    assert [line.split()[:3] for line in make()] == [["-m", "pip", "install"]] * 2
    later = time.time() + 60
    os.utime(tmp_path / "requirements.txt", (later, later))  # newer, the same
    assert len(make()) == 2
    (tmp_path / "requirements.txt").write_text("numpy\nscipy\n")
    os.utime(tmp_path / "requirements.txt", (later + 60, later + 60))
    assert len(make()) == 4
