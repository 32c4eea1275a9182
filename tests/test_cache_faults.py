"""An unwritable or full cache directory never stops the app: DINOv2's weights are
converted and its k-NN bank built in memory, the CLI answers (exit 0) with one warning
line that says why and how to fix it, the app's home page shows its predictions and a
small notice, `health` and `warmup` report the folder, and nothing partial is left.

Two ways to make the fault: a monkeypatch that raises the real errno at the write (and
leaves half a file behind, as a full disk does), in-process; and - where the test may make
a private mount namespace (root) - a real read-only bind mount and a real 20 MB tmpfs for a
CLI run in a subprocess."""

from __future__ import annotations

import errno
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import safetensors.torch

from apptest_helpers import chart_specs, open_app
from xai_core.cli.main import main as cli_main
from xai_core.models import disk_cache, loaders, settings

ROOT = Path(__file__).resolve().parent.parent
PREDICT = ["predict", "--model", "dinov2-s14", "--image", "sample:chelsea", "--topk", "3",
           "--json"]


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """An empty cache folder, no model loaded yet in this process, no cache notice."""
    folder = tmp_path / "cache"
    monkeypatch.setenv(settings.CACHE_ENV, str(folder))
    monkeypatch.setattr(loaders, "_models", {})  # the process's models come back afterwards
    disk_cache.forget()
    from xai_core import pipeline

    pipeline.CAPTURE_CACHE.clear()
    yield folder
    disk_cache.forget()
    pipeline.CAPTURE_CACHE.clear()


def failing_write(monkeypatch, code: int):
    """safetensors' save_file writes a little, then fails with the operating system's error
    `code`: what a full disk (ENOSPC) or a file system turned read-only (EROFS) does."""
    attempts = []

    def save_file(tensors, filename, metadata=None):
        attempts.append(Path(filename))
        Path(filename).write_bytes(b"\0" * 4096)  # a partial file, as a full disk leaves it
        raise OSError(code, os.strerror(code), filename)

    monkeypatch.setattr(safetensors.torch, "save_file", save_file)
    return attempts


def one_warning(err: str, reason: str, folder: Path) -> None:
    lines = err.splitlines()
    assert len(lines) == 1 and err.endswith("\n"), err
    assert lines[0].startswith("warning: Nothing new can be cached on disk")
    assert str(folder) in lines[0] and reason in lines[0]
    assert f"Set {settings.CACHE_ENV}" in lines[0] and f"{disk_cache.SPACE_NEEDED_MB} MB" in lines[0]


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS], ids=["full", "read-only"])
def test_cli_and_app_go_on_without_the_cache(fresh, monkeypatch, capsys, code):
    attempts = failing_write(monkeypatch, code)
    assert cli_main(PREDICT) == 0
    out, err = capsys.readouterr()
    top = json.loads(out)["top"]
    assert top[0]["label"] == "cat" and top[0]["probability"] > 0.5
    one_warning(err, f"{os.strerror(code)} (errno {code})", fresh)
    assert "converted DINOv2 weights" in err and "k-NN memory bank" in err
    # both files were attempted; neither they nor their temporary files are left
    assert {p.name.split(".safetensors")[0] for p in attempts} >= {"dinov2-s14-224"}
    assert any(p.name.startswith("knn-bank-dinov2-s14") for p in attempts)
    assert sorted(fresh.iterdir()) == []

    app = open_app()  # same process: the model is loaded, the notice stands
    assert not app.exception, app.exception
    assert not app.error, [e.value for e in app.error]
    titles = " ".join(json.dumps(spec) for spec in chart_specs(app))
    assert "k-NN" in titles and "ImageNet-1k" in titles  # both columns predicted
    notes = [str(c.value) for c in app.sidebar.caption if "Nothing new can be cached" in c.value]
    assert len(notes) == 1 and os.strerror(code) in notes[0]


def test_a_cache_that_works_says_nothing(fresh, capsys):
    assert cli_main(PREDICT) == 0
    assert capsys.readouterr().err == ""
    names = sorted(p.name for p in fresh.iterdir())
    assert names[0] == "dinov2-s14-224.safetensors" and names[1].startswith("knn-bank-")
    assert len(names) == 2  # no temporary file left


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


def test_health_and_warmup_report_an_unwritable_cache(fresh, monkeypatch, capsys, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    folder = blocker / "cache"  # mkdir fails for real: Not a directory, root or not
    monkeypatch.setenv(settings.CACHE_ENV, str(folder))
    reason = f"{os.strerror(errno.ENOTDIR)} (errno {errno.ENOTDIR})"
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/_stcore/health"
        assert cli_main(["health", url, "--json"]) == 0
        out, err = capsys.readouterr()
        assert json.loads(out)["cache"] == {"dir": str(folder), "writable": False,
                                            "reason": reason}
        one_warning(err, reason, folder)
    finally:
        server.shutdown()
    disk_cache.forget()
    assert cli_main(["warmup", "--models", "efficientnet-lite0"]) == 0
    out, err = capsys.readouterr()
    assert f"{folder}: NOT writable ({reason})" in out and "loaded in" in out
    one_warning(err, reason, folder)
    assert blocker.read_text() == "not a folder"


# --- real file systems, in a private mount namespace --------------------------------------

def private_mounts_allowed() -> bool:
    unshare = shutil.which("unshare")
    if not unshare:
        return False
    probe = subprocess.run([unshare, "-m", "sh", "-c", "mount -t tmpfs tmpfs /mnt"],
                           capture_output=True)
    return probe.returncode == 0


needs_mounts = pytest.mark.skipif(
    not private_mounts_allowed(),
    reason="needs a private mount namespace (unshare -m, root); the monkeypatched errno "
           "tests above cover the same code")


def cli_in_namespace(setup: str, folder: Path) -> subprocess.Popen:
    """`predict` with the cache at `folder` after `setup` (mount commands), all in a mount
    namespace of its own; then list what the folder holds, as the namespace sees it."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", VIT_LENS_DEVICE="cpu", OMP_NUM_THREADS="1",
               **{settings.CACHE_ENV: str(folder)})
    command = (f"{setup} && {sys.executable} -m xai_core {' '.join(PREDICT)}; "
               f"echo \"rc=$?\"; ls -A {folder}")
    return subprocess.Popen(["unshare", "-m", "sh", "-c", command], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@needs_mounts
def test_real_read_only_and_full_file_systems(tmp_path):
    read_only, full = tmp_path / "read-only", tmp_path / "full"
    read_only.mkdir()
    full.mkdir()
    runs = {
        "read-only": (cli_in_namespace(f"mount --bind {read_only} {read_only} && "
                                       f"mount -o remount,bind,ro {read_only}", read_only),
                      read_only, f"{os.strerror(errno.EROFS)} (errno {errno.EROFS})"),
        "full": (cli_in_namespace(f"mount -t tmpfs -o size=20m tmpfs {full}", full),
                 full, f"{os.strerror(errno.ENOSPC)} (errno {errno.ENOSPC})"),
    }
    for name, (run, folder, reason) in runs.items():
        out, err = run.communicate(timeout=900)
        body, _, listing = out.partition("rc=")
        code, _, files = listing.partition("\n")
        assert code.strip() == "0", (name, err)
        assert json.loads(body)["top"][0]["label"] == "cat"
        one_warning(err, reason, folder)
        left = files.split()
        assert not [f for f in left if f.endswith(".tmp") or f.startswith("dinov2")], left
        if name == "full":  # 20 MB: no room for the 89 MB weights; the small bank fits
            assert "converted DINOv2 weights" in err and "k-NN" not in err
            assert len(left) == 1 and left[0].startswith("knn-bank-dinov2-s14")
        else:
            assert left == [] and sorted(folder.iterdir()) == []


def test_cli_output_on_a_full_disk_is_one_line_and_no_partial_file(monkeypatch, capsys,
                                                                    tmp_path):
    """The CLI's own output (--out) is a file the app writes too: a full disk gives exit 2,
    one line with the system's reason, and no half-written file."""
    import numpy as np

    def savez_compressed(handle, **arrays):
        handle.write(b"PK\3\4" + b"\0" * 4096)  # the start of a zip, then the disk is full
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(np, "savez_compressed", savez_compressed)
    out = tmp_path / "map.npz"
    code = cli_main(["explain", "--model", "efficientnet-lite0", "--image", "sample:coffee",
                     "--method", "gradcam", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"error: Could not write {out}: No space left on device (errno 28)")
    assert list(tmp_path.iterdir()) == []
