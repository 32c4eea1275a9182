"""Hostile and broken uploads, end to end: the app (AppTest upload) and the CLI.

Every case of tests/hostile_corpus.py either works - the app shows the image at its
correctly oriented size, in RGB - or is refused with one plain sentence; nothing
raises, no traceback reaches the user, and the same session keeps working after.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from apptest_helpers import chart_specs
from hostile_corpus import Case, corpus, matches
from single_thread import one_torch_thread
from streamlit.testing.v1 import AppTest

from xai_core.cli.main import main as cli_main

ROOT = Path(__file__).resolve().parent.parent
ENTRY = str(ROOT / "dashboard" / "app.py")
CASES = corpus()
LEAKS = ("Traceback", "PIL", "Exception", "Error:", "File \"", "zlib", "struct")


@pytest.fixture(scope="module", autouse=True)
def single_thread():
    with one_torch_thread():
        yield


def plain(message: str) -> bool:
    """One readable sentence or two: no exception text, no internals."""
    return (10 < len(message) < 300 and "\n" not in message.strip()
            and not any(leak in message for leak in LEAKS))


def test_corpus_has_at_least_25_kinds_of_both_outcomes():
    assert len({case.name for case in CASES}) == len(CASES) >= 25
    assert sum(case.refused for case in CASES) >= 15
    assert sum(not case.refused for case in CASES) >= 10


# The uploader's type= list. Streamlit itself refuses other extensions (the browser's
# file picker hides them; a crafted client gets a StreamlitAPIException from the
# widget, before any app code runs), so the app sees hostile CONTENT under an allowed
# name: drawing.svg arrives as drawing.svg.png.
ALLOWED = (".png", ".jpg", ".jpeg", ".webp", ".gif", ".bmp", ".tif", ".tiff")


def upload_name(case: Case) -> str:
    return case.filename if case.filename.endswith(ALLOWED) else case.filename + ".png"


def image_chart_title(app) -> str:
    return json.dumps(chart_specs(app)[0]["layout"]["title"])


def test_every_case_in_one_app_session():
    app = AppTest.from_file(ENTRY, default_timeout=240)
    app.session_state["image_choice"] = "upload"
    app.run()
    outcomes = {}
    for case in CASES:
        app.sidebar.get("file_uploader")[0].set_value((upload_name(case), case.data,
                                                       "application/octet-stream")).run()
        assert not app.exception, (case.name, [e.value for e in app.exception])
        errors = [e.value for e in app.error]
        upload = app.session_state["upload_image"]
        if case.refused:
            assert upload is None, case.name
            assert len(errors) == 1 and plain(errors[0]), (case.name, errors)
            outcomes[case.name] = "refused"
        else:
            assert errors == [], (case.name, errors)
            assert matches(upload, case), (case.name, upload.mode, upload.size)
            width, height = case.expect_size
            assert f"({width}x{height})" in image_chart_title(app), case.name
            outcomes[case.name] = "shown"
    # the session survived all of it: a good upload after the last one still works
    assert len(outcomes) == len(CASES)
    good = next(case for case in CASES if case.name == "EXIF-rotated JPEG")
    app.sidebar.get("file_uploader")[0].set_value((good.filename, good.data, "image/jpeg")).run()
    assert not app.exception and not app.error and matches(app.session_state["upload_image"], good)


def cli_predict(path: Path, capsys) -> tuple[int, str, str]:
    code = cli_main(["predict", "--model", "efficientnet-lite0", "--image", str(path),
                     "--topk", "1"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def unknown_sentence(path: Path) -> str | None:
    """The open-set caveat predict prints for this file, None for a picture it knows."""
    from xai_core.cli.common import load_image
    from xai_core.models import get_model
    from xai_core.studies.open_set import open_set

    found = open_set(get_model("efficientnet-lite0"), load_image(str(path)))
    return None if found.known else (
        f"This picture looks like none of what the model knows: {found.why()}.")


def test_every_case_through_the_cli(tmp_path, capsys):
    for index, case in enumerate(CASES):
        path = tmp_path / f"{index:02d}-{Path(case.filename).name}"
        path.write_bytes(case.data)
        code, out, err = cli_predict(path, capsys)
        if case.refused:
            assert code == 2 and out == "", (case.name, code, out)
            line = err.strip()
            assert line.startswith(f"error: {path}: ") and "\n" not in line, (case.name, err)
            assert plain(line.split(": ", 2)[2]), (case.name, line)
        else:
            assert code == 0 and err == "", (case.name, code, err)
            prediction, *caveat = out.splitlines()  # + the open-set sentence, if unknown
            assert "%" in prediction and out.endswith("\n"), (case.name, out)
            sentence = unknown_sentence(path)
            assert caveat == ([] if sentence is None else [sentence]), (case.name, out)


def test_cli_process_refuses_a_bomb_with_exit_2(tmp_path):
    """The real process (the in-process runs above cover every case): exit status 2 and
    exactly one stderr line, no traceback."""
    case = next(case for case in CASES if case.name == "real 20000x20000 decompression bomb")
    path = tmp_path / case.filename
    path.write_bytes(case.data)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "xai_core", "predict", "--model",
                           "efficientnet-lite0", "--image", str(path), "--json"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (f"error: {path}: The image has too many pixels; the limit is "
                           "40 megapixels.\n")
