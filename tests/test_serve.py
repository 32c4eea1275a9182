"""`make run` (dashboard/serve.py) imports, before it freezes the garbage collector's view,
everything the pages import on their first visits: a module imported later stays in that
view, and Python's automatic full collections walk it during page visits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from dashboard import serve

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("pandas", "scipy", "sklearn", "matplotlib", "pytorch_grad_cam", "captum", "timm")

# in a fresh interpreter: import the app's modules as serve does, then run every page's
# first view in AppTest and report which packages only the pages brought in
PROBE = """
import json, sys
sys.path.insert(0, "tests")
from dashboard import serve
serve.import_app_modules()
before = set(sys.modules)
from apptest_helpers import open_app
from dashboard.page_list import existing_pages
for name, _, _ in existing_pages():
    app = open_app(None if name == "home.py" else name)
    assert not app.exception, (name, app.exception)
print(json.dumps(sorted({m.split(".")[0] for m in set(sys.modules) - before})))
"""


def test_modules_named_in_code_cover_function_level_imports_and_skip_the_optional():
    names = serve.modules_named_in_code()
    assert "pytorch_grad_cam" in names  # imported inside a function (methods/gradcam.py)
    assert "scipy.stats" in names and "pandas" in names and "xai_core.methods" in names
    assert not any(name.startswith(serve.NOT_PRELOADED) for name in names)


def test_pages_import_no_heavy_package_after_serve_prepared():
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, text=True,
                            capture_output=True, timeout=900)
    assert result.returncode == 0, result.stderr[-2000:]
    late = json.loads(result.stdout.strip().splitlines()[-1])
    assert not set(late) & set(HEAVY), late
