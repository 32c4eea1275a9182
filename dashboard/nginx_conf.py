"""deploy/nginx/vit-lens.conf with the static-file paths of this checkout and its venv, and
Streamlit's bundle compressed once for nginx's gzip_static.

The recipe names the folders nginx serves from disk as they are in the systemd install
(/opt/vit-lens, Debian 12's Python 3.11). `python -m dashboard.nginx_conf` (`make
nginx-conf`) prints it with the real ones: Streamlit's bundle from the streamlit package
this Python imports, the app's files from dashboard/static/ (what the replicas serve).
`python -m dashboard.nginx_conf --gzip-bundle` (`make nginx-gzip`) writes `<file>.gz`
beside each compressible file of the bundle: compressed per request, 25 clients fetching
100 of its scripts at once took 30 s instead of 1 s (docs/hosting.md, "What nginx serves
itself"). Only the bundle: its names are content-hashed, so a .gz cannot go stale
(gzip_static does not compare it with its file); the app's files keep their names when they
change and are compressed per request.
"""

from __future__ import annotations

import argparse
import gzip
import os
import re
import sys
import tempfile
from pathlib import Path

from dashboard.assets import STATIC

RECIPE = Path(__file__).resolve().parent.parent / "deploy" / "nginx" / "vit-lens.conf"
# the recipe's alias targets (each ends with a slash, as nginx's alias for a prefix needs)
RECIPE_STREAMLIT_BUNDLE = "/opt/vit-lens/.venv/lib/python3.11/site-packages/streamlit/static/static/"
RECIPE_APP_STATIC = "/opt/vit-lens/dashboard/static/"


def streamlit_bundle() -> Path:
    """The folder of Streamlit's hashed JS/CSS/fonts: `static/` inside the folder the
    server serves index.html from (Streamlit's own `file_util.get_static_dir`), which
    nginx serves index.html from too."""
    from streamlit import file_util

    return Path(file_util.get_static_dir()) / "static"


def render(recipe: str, bundle: Path, app_static: Path) -> str:
    """The recipe with its paths replaced: Streamlit's bundle `bundle` (index.html in its
    parent folder) and the app's `app_static`."""
    paths = {f"alias {RECIPE_STREAMLIT_BUNDLE};": f"alias {bundle}/;",
             f"root {RECIPE_STREAMLIT_BUNDLE.removesuffix('/static/')};": f"root {bundle.parent};",
             f"alias {RECIPE_APP_STATIC};": f"alias {app_static}/;"}
    for line, filled in paths.items():
        if recipe.count(line) != 1:
            raise ValueError(f"the recipe has no single `{line}` line")
        recipe = recipe.replace(line, filled)
    return recipe


RECIPE_PORTS = (8501, 8502)  # the replicas the recipe names
RECIPE_LISTEN = "80"
_UPSTREAM = re.compile(r"^upstream (\S+) \{\n(.*?)^\}\n", re.M | re.S)
_COOKIE_MAP = re.compile(r"(map \$cookie_vit_lens_replica \$vit_lens_upstream \{\n"
                         r"(?:.*\n)*?)((?:    \d+ +vit_lens_\d+;\n)+)(\})")


def with_ports(recipe: str, ports: list[int], listen: str = RECIPE_LISTEN) -> str:
    """The recipe for replicas on `ports` (in order: each one's backup is the next), nginx
    listening on `listen` (a port, or address:port): the cookie map, the first-visit and
    fallback upstreams and one upstream per replica, written for those ports."""
    if len(ports) < 1 or len(set(ports)) != len(ports) or not all(0 < p < 65536 for p in ports):
        raise ValueError(f"replica ports must be distinct numbers from 1 to 65535: {ports}")
    blocks = {name: body for name, body in _UPSTREAM.findall(recipe)}
    if not {"vit_lens", "vit_lens_any", *(f"vit_lens_{p}" for p in RECIPE_PORTS)} <= set(blocks):
        raise ValueError("the recipe's upstreams are not the ones this renderer knows")

    def servers(body: str, suffix: str) -> str:
        kept = [line for line in body.splitlines(keepends=True)
                if not line.lstrip().startswith("server ")]
        lines = [f"    server 127.0.0.1:{port}{suffix};\n" for port in ports]
        first = next(i for i, line in enumerate(body.splitlines(keepends=True))
                     if line.lstrip().startswith("server "))
        return "".join(kept[:first] + lines + kept[first:])

    def own(port: int, backup: int | None) -> str:
        lines = [f"    server 127.0.0.1:{port} max_fails=1 fail_timeout=10s;\n"]
        if backup is not None:
            lines.append(f"    server 127.0.0.1:{backup} backup;\n")
        return f"upstream vit_lens_{port} {{\n{''.join(lines)}    keepalive 8;\n}}\n"

    per_replica = "\n".join(own(port, ports[(i + 1) % len(ports)] if len(ports) > 1 else None)
                            for i, port in enumerate(ports))
    out, placed = recipe, False
    for name, body in _UPSTREAM.findall(recipe):
        whole = f"upstream {name} {{\n{body}}}\n"
        if name == "vit_lens":
            out = out.replace(whole, f"upstream vit_lens {{\n"
                                     f"{servers(body, ' max_fails=1 fail_timeout=10s')}}}\n")
        elif name == "vit_lens_any":
            out = out.replace(whole, f"upstream vit_lens_any {{\n{servers(body, ' max_fails=0')}}}\n")
        elif name in {f"vit_lens_{p}" for p in RECIPE_PORTS}:  # all in the first one's place
            out = out.replace(whole + "\n", "" if placed else per_replica + "\n", 1)
            placed = True
    routes = "".join(f"    {port:<7} vit_lens_{port};\n" for port in ports)
    out, found = _COOKIE_MAP.subn(lambda m: m[1] + routes + m[3], out)
    listens = re.findall(rf"^(\s*)listen {RECIPE_LISTEN};", out, re.M)
    if found != 1 or len(listens) != 1:
        raise ValueError("the recipe has no single cookie map or `listen 80;` line")
    return re.sub(rf"^(\s*)listen {RECIPE_LISTEN};", rf"\g<1>listen {listen};", out, flags=re.M)


def rendered(bundle: Path | None = None, ports: list[int] | None = None,
             listen: str = RECIPE_LISTEN) -> str:
    """The recipe for this install (`bundle`: another copy of Streamlit's bundle; `ports`:
    the replicas' ports, the recipe's own by default; `listen`: nginx's port)."""
    recipe = render(RECIPE.read_text(), bundle or streamlit_bundle(), STATIC)
    if ports is None and listen == RECIPE_LISTEN:
        return recipe
    return with_ports(recipe, list(ports or RECIPE_PORTS), listen)


COMPRESSIBLE = (".js", ".css", ".json", ".svg", ".ttf", ".otf")  # the recipe's gzip_types


def precompress(folder: Path) -> tuple[int, int]:
    """Write `<file>.gz` (level 9) beside every compressible file under `folder` that has
    none or an older one; returns (written, already there)."""
    written = kept = 0
    for path in sorted(folder.rglob("*")):
        if not path.is_file() or path.suffix not in COMPRESSIBLE:
            continue
        target = path.with_name(path.name + ".gz")
        if target.exists() and target.stat().st_mtime >= path.stat().st_mtime:
            kept += 1
            continue
        with tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as part:
            part.write(gzip.compress(path.read_bytes(), compresslevel=9, mtime=0))
        os.chmod(part.name, 0o644)  # nginx's user reads it
        os.replace(part.name, target)  # whole or not at all, for a worker reading it now
        written += 1
    return written, kept


def _ports(text: str) -> list[int] | None:
    if not text.strip():
        return None
    if not re.fullmatch(r"\d{1,5}(,\d{1,5})*", text.strip()):
        raise ValueError(f"--ports takes port numbers, comma-separated, not '{text}'")
    return [int(port) for port in text.split(",")]


def _listen(text: str) -> str:
    if not re.fullmatch(r"([\w.\[\]:-]+:)?\d{1,5}", text):
        raise ValueError(f"--listen takes a port or address:port, not '{text}'")
    return text


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m dashboard.nginx_conf",
                                     description="Print the nginx recipe with this install's "
                                                 "paths, or precompress Streamlit's bundle.")
    parser.add_argument("--gzip-bundle", action="store_true",
                        help="write <file>.gz beside the bundle's JS/CSS/JSON/SVG/fonts")
    parser.add_argument("--ports", default="",
                        help="the replicas' ports, comma-separated (default 8501,8502)")
    parser.add_argument("--listen", default=RECIPE_LISTEN,
                        help="nginx's port, or address:port (default 80)")
    args = parser.parse_args(argv)
    if not args.gzip_bundle:
        try:
            sys.stdout.write(rendered(ports=_ports(args.ports), listen=_listen(args.listen)))
        except ValueError as error:
            print(f"nginx_conf: {error}", file=sys.stderr)
            return 2
        return 0
    bundle = streamlit_bundle()
    try:
        written, kept = precompress(bundle)
    except OSError as error:
        print(f"cannot write beside {bundle}: {error.strerror} (run as the venv's owner)",
              file=sys.stderr)
        return 2
    print(f"{bundle}: {written} files compressed, {kept} already were", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
