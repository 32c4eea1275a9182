"""The torch threads wait passively (issue 16): `xai_core` sets OMP_WAIT_POLICY before torch
loads libgomp, unless the environment already chose, and every entry point imports it
before torch (or the setting would come too late to count)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# (`python -m xai_core` runs the package's __init__ first by itself)
ENTRY_POINTS = ["dashboard/app.py", "dashboard/serve.py", "bench/run.py", "tests/conftest.py"]


def policy_after_import(env_value: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if env_value is not None:
        env["OMP_WAIT_POLICY"] = env_value
    code = "import os, xai_core, torch; print(os.environ['OMP_WAIT_POLICY'])"
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True,
                          capture_output=True, text=True).stdout.strip()


def test_passive_unless_the_environment_chose():
    assert policy_after_import(None) == "PASSIVE"
    assert policy_after_import("ACTIVE") == "ACTIVE"


def first_import_line(path: Path, wanted: str) -> int | None:
    """Line of the first import that loads `wanted` (as a package or from it), anywhere."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                 else [])
        if any(name == wanted or name.startswith(wanted + ".") for name in names):
            lines.append(node.lineno)
    return min(lines) if lines else None


def test_entry_points_import_xai_core_before_torch():
    for name in ENTRY_POINTS:
        path = ROOT / name
        core = first_import_line(path, "xai_core")
        torch = first_import_line(path, "torch")
        assert core is not None, name
        assert torch is None or core < torch, name


def test_the_server_leaves_one_core_unless_the_environment_chose():
    from dashboard.serve import serving_threads

    assert [serving_threads(cores, {}) for cores in (1, 2, 16)] == [1, 1, 15]
    assert serving_threads(8, {"OMP_NUM_THREADS": "4"}) is None
    assert serving_threads(8, {"OMP_NUM_THREADS": ""}) == 7


def test_a_thread_count_set_before_serving_holds_in_the_sessions_threads():
    """Streamlit runs each page script in a thread of its own; OpenMP keeps a thread count
    per thread, so the one `make run` sets must reach threads started later (torch applies
    it there)."""
    code = ("import threading, xai_core, torch\n"
            "torch.set_num_threads(1)\n"
            "seen = []\n"
            "worker = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))\n"
            "worker.start(); worker.join()\n"
            "x = torch.ones(256, 256)\n"
            "print(seen[0], torch.get_num_threads(), float((x @ x)[0, 0]))")
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True,
                         capture_output=True, text=True).stdout.split()
    assert out == ["1", "1", "256.0"]
