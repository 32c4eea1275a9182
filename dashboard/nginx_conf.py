"""deploy/nginx/vit-lens.conf with the static-file paths of this checkout and its venv.

The recipe names the folders nginx serves from disk as they are in the systemd install
(/opt/vit-lens, Debian 12's Python 3.11). `python -m dashboard.nginx_conf` (`make
nginx-conf`) prints it with the real ones: Streamlit's bundle from the streamlit package
this Python imports, the app's files from dashboard/static/ (what the replicas serve).
"""

from __future__ import annotations

import sys
from pathlib import Path

from dashboard.assets import STATIC

RECIPE = Path(__file__).resolve().parent.parent / "deploy" / "nginx" / "vit-lens.conf"
# the recipe's alias targets (each ends with a slash, as nginx's alias for a prefix needs)
RECIPE_STREAMLIT_BUNDLE = "/opt/vit-lens/.venv/lib/python3.11/site-packages/streamlit/static/static/"
RECIPE_APP_STATIC = "/opt/vit-lens/dashboard/static/"


def streamlit_bundle() -> Path:
    """The folder of Streamlit's hashed JS/CSS/fonts: `static/` inside the folder the
    server serves index.html from (Streamlit's own `file_util.get_static_dir`)."""
    from streamlit import file_util

    return Path(file_util.get_static_dir()) / "static"


def render(recipe: str, bundle: Path, app_static: Path) -> str:
    """The recipe with its two alias paths replaced by `bundle` and `app_static`."""
    for path in (RECIPE_STREAMLIT_BUNDLE, RECIPE_APP_STATIC):
        if recipe.count(f"alias {path};") != 1:
            raise ValueError(f"the recipe has no single `alias {path};` line")
    return (recipe.replace(f"alias {RECIPE_STREAMLIT_BUNDLE};", f"alias {bundle}/;")
            .replace(f"alias {RECIPE_APP_STATIC};", f"alias {app_static}/;"))


def rendered() -> str:
    return render(RECIPE.read_text(), streamlit_bundle(), STATIC)


if __name__ == "__main__":
    sys.stdout.write(rendered())
