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


def rendered(bundle: Path | None = None) -> str:
    """The recipe for this install (`bundle`: another copy of Streamlit's bundle)."""
    return render(RECIPE.read_text(), bundle or streamlit_bundle(), STATIC)


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


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m dashboard.nginx_conf",
                                     description="Print the nginx recipe with this install's "
                                                 "paths, or precompress Streamlit's bundle.")
    parser.add_argument("--gzip-bundle", action="store_true",
                        help="write <file>.gz beside the bundle's JS/CSS/JSON/SVG/fonts")
    args = parser.parse_args(argv)
    if not args.gzip_bundle:
        sys.stdout.write(rendered())
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
