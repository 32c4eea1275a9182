"""The shared result store: a page's default computation cold (computed, and written through
to the store), the same with the store off (what the writing costs), and in a new process
that reads it from the store (another replica, or the app after a restart); every page's
defaults for one gallery image the same two ways; and, after `warmup --gallery`'s work for
that image, each real page (AppTest) in a new process: what it still computes.

Every measurement runs in a fresh Python process with the models loaded first (not timed),
on DINOv2 ViT-S/14 and EfficientNet-Lite0, in a temporary store folder.

    .venv/bin/python -m bench.run result_store
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = "chelsea"  # the app's first gallery image: what a page opens on

TIMED = textwrap.dedent("""
    import json, sys, time
    sys.path.insert(0, {root!r})
    import xai_core
    from xai_core.lessons import warmup
    from xai_core.images import load_sample
    from xai_core.models import DEFAULT_CNN, DEFAULT_VIT, disk_cache, get_model
    vit, cnn = get_model(DEFAULT_VIT), get_model(DEFAULT_CNN)
    image = load_sample({sample!r})
    warmup._top(vit, image), warmup._top(cnn, image)  # the models' first pass
    what = sys.argv[1]
    started = time.perf_counter()
    if what == "page4":
        warmup.rollout_and_gae(vit, cnn, image)
        computed, read = warmup._counts()
    else:
        row = warmup.warm_image(vit, cnn, {sample!r}, image)
        computed, read = row.computed, row.from_disk
    seconds = time.perf_counter() - started
    store = disk_cache.result_store()
    if store:
        store.flush()  # the writer thread's work, which the answer did not wait for
    written = time.perf_counter() - started
    print(json.dumps({{"seconds": seconds, "written": written, "computed": computed,
                       "read": read, "bytes": store.total_bytes() if store else 0}}))
""")

PAGES = textwrap.dedent("""
    import gc, json, sys, time
    sys.path.insert(0, {root!r})
    import xai_core
    from streamlit.testing.v1 import AppTest
    from xai_core.infra import cache
    from dashboard.page_list import existing_pages

    computed = []
    store_value = cache.BoundedCache._store
    def counted(self, key, value):  # every value a cache computes passes here
        computed.append(key[0])
        return store_value(self, key, value)
    cache.BoundedCache._store = counted
    def as_a_new_process():  # memory emptied; the store on disk stays
        for found in gc.get_objects():
            if type(found) is cache.BoundedCache:
                found.clear()
        computed.clear()

    rows = []
    for page, title, _icon in existing_pages():
        app = AppTest.from_file({entry!r}, default_timeout=900)
        app.session_state["image_choice"] = {sample!r}
        if page != "home.py":
            app.run()  # a visitor arrives on the home page first
            app.switch_page(f"../pages/{{page}}")
        as_a_new_process()
        started = time.perf_counter()
        app.run()
        seconds = time.perf_counter() - started
        failed = bool(app.exception)
        kinds = sorted(set(k for k in computed if k not in ("prepared", "figure",
                                                            "figure-layer")))
        rows.append({{"page": page, "seconds": seconds, "computed": kinds, "failed": failed}})
    print(json.dumps(rows))
""")


def _python(script: str, store: str, *args: str) -> dict | list:
    env = {**os.environ, "VIT_LENS_RESULTS_DIR": store, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", script, *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=3600)
    if done.returncode:
        raise RuntimeError(done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def _row(name: str, value: float, unit: str = "s", note: str = "") -> dict:
    return {"name": name, "value": round(value, 3), "unit": unit, "note": note}


def run() -> list[dict]:
    timed = TIMED.format(root=str(ROOT), sample=SAMPLE)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for what, label in (("page4", "page 4's default view (rollout, sinks, GAE)"),
                            ("all", f"every page's default views, '{SAMPLE}'")):
            store = str(Path(folder) / what)
            off = _python(timed, "off", what)
            cold = _python(timed, store, what)
            warm = _python(timed, store, what)
            rows += [
                _row(f"{label}: computed, store off", off["seconds"]),
                _row(f"{label}: computed, store on", cold["seconds"],
                     note=f"{cold['computed']} results computed; all {cold['bytes'] / 2**20:.0f}"
                          f" MB on disk after {cold['written']:.2f} s (the writer thread)"),
                _row(f"{label}: new process, read from the store", warm["seconds"],
                     note=f"{warm['computed']} computed (the resizes), {warm['read']} read; "
                          f"{cold['seconds'] / max(warm['seconds'], 1e-9):.1f}x faster than "
                          "cold")]
        pages = _python(PAGES.format(root=str(ROOT), sample=SAMPLE,
                                     entry=str(ROOT / "dashboard" / "app.py")),
                        str(Path(folder) / "all"))
    for page in pages:
        rows.append(_row(f"after the warm-up, new process: {page['page']}", page["seconds"],
                         note=("FAILED; " if page["failed"] else "")
                         + ("computes " + ", ".join(page["computed"]) if page["computed"]
                            else "computes nothing (all from the store)")))
    return rows


if __name__ == "__main__":
    for row in run():
        print(f"{row['name']:75} {row['value']:8.3f} {row['unit']}  {row['note']}")
