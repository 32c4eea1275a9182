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


def test_the_health_address_follows_the_servers_options():
    assert serve.health_url([]) == "http://127.0.0.1:8501/_stcore/health"
    assert serve.health_url(["--server.port", "8600"]) == "http://127.0.0.1:8600/_stcore/health"
    # as the replicas' unit starts it, and with `=`: the prefix, a wildcard address on loopback
    assert serve.health_url(["--server.address", "127.0.0.1", "--server.port", "8501",
                             "--server.baseUrlPath", "vit-lens", "--server.headless", "true"]
                            ) == "http://127.0.0.1:8501/vit-lens/_stcore/health"
    assert serve.health_url(["--server.address=0.0.0.0", "--server.port=9000",
                             "--server.baseUrlPath=/a/b/"]) == \
        "http://127.0.0.1:9000/a/b/_stcore/health"


def test_the_warm_up_takes_the_default_pictures_explainer_and_page_9_first():
    from dashboard.state import DEFAULT_IMAGE
    from xai_core.lessons import warmup
    from xai_core.images import sample_ids

    steps = warmup.lecture_order(sample_ids(), DEFAULT_IMAGE)
    assert steps[:2] == [(DEFAULT_IMAGE, "0_vit_explainer.py"),
                         (DEFAULT_IMAGE, "9_interventions.py")]
    pages = warmup.picture_pages()
    assert "8_text_attention.py" not in pages and "home.py" in pages
    assert {image for image, _ in steps[2:len(pages)]} == {DEFAULT_IMAGE}
    # every page of every picture once, nothing twice
    assert sorted(steps) == sorted(
        [(image, page) for image in sample_ids() for page in pages])
    assert len(set(steps)) == len(steps)


def test_the_warm_up_starts_once_and_can_be_turned_off(monkeypatch):
    from dashboard import background_warmup as background

    monkeypatch.setattr(background, "PROGRESS", background.Progress())
    monkeypatch.setenv(background.ENV, "0")
    assert not background.start(None) and background.PROGRESS.state == "off"
    monkeypatch.setenv(background.ENV, "1")
    started = []
    monkeypatch.setattr(background, "_run", lambda *args: started.append(args))
    assert background.start("http://127.0.0.1:1/_stcore/health")
    assert not background.start("http://127.0.0.1:1/_stcore/health")  # once per process
    assert background.PROGRESS.running
