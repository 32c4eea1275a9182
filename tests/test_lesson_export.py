"""The offline lesson file (dashboard/explainer/lesson_export.py, `python -m xai_core export-lesson`):
the bytes it packs read back equal to what the live page sends, its modules are ordered by
their imports, it names no other resource, and bad input exits 2 with one line and leaves
no file. The browser side (file://, every request blocked) is tests/e2e/test_lesson_export.py."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tiny_models import images as tiny_images
from tiny_models import tiny_vit

from dashboard import assets
from dashboard.explainer import lesson_export
from dashboard.explainer.tour import resolve_steps, switcher
from dashboard.explainer.lesson_export import (LESSON_FORMAT, LessonError, LessonImage,
                                               build_lesson, escape_bytes, read_manifest,
                                               read_part, unescape_bytes)
from xai_core.lessons import explainer

ROOT = Path(__file__).resolve().parents[1]


def arrays_equal(sent, packed) -> None:
    """`sent` (a payload as cached) and `packed` (decoded from the file) hold the same
    values, arrays bit for bit."""
    if isinstance(sent, dict) and "array" in sent:
        assert packed["dtype"] == sent["dtype"]
        expected = np.asarray(sent["array"]).astype(packed["array"].dtype)
        assert np.array_equal(expected, packed["array"], equal_nan=True)
    elif isinstance(sent, dict):
        assert sent.keys() == packed.keys()
        for key in sent:
            arrays_equal(sent[key], packed[key])
    elif isinstance(sent, (list, tuple)):
        assert len(sent) == len(packed)
        for a, b in zip(sent, packed):
            arrays_equal(a, b)
    else:
        assert sent == packed


# --- bytes in a windows-1252 page ----------------------------------------------------------------

def test_escaped_bytes_hold_no_byte_the_html_parser_changes_and_round_trip():
    data = bytes(range(256)) * 3 + np.random.default_rng(0).bytes(50_000)
    escaped = escape_bytes(data)
    for byte in (0x00, 0x0D, 0x3C):  # NUL -> U+FFFD, CR -> LF, "<" may end the script
        assert bytes([byte]) not in escaped
    assert unescape_bytes(escaped) == data
    # four of 256 byte values take two bytes: about 1.6 % more for random data
    assert len(escaped) - len(data) == sum(data.count(bytes([b])) for b in (0, 13, 60, 61))


# --- the component's modules --------------------------------------------------------------------

def test_specifiers_are_cut_out_and_the_rest_kept():
    """Only the one import form the modules may use (assets.MODULE_IMPORT, as the live
    loader) is linked; a string that looks like an import is code."""
    source = ('import { a, b } from "./util.js";\nimport { c } from "./more.js";\n'
              'const s = "from ./x.js";\n  import { d } from "./indented.js";\n')
    parts = assets.split_at_imports(source)
    assert parts[1::2] == ["util.js", "more.js"]
    assert "".join(p if i % 2 == 0 else f'"./{p}"' for i, p in enumerate(parts)) == source


def write_modules(folder: Path, sources: dict[str, str]) -> None:
    folder.mkdir()
    for name, text in sources.items():
        (folder / name).write_text(text)


def test_modules_come_each_after_those_it_imports(tmp_path, monkeypatch):
    folder = tmp_path / "explainer"
    write_modules(folder, {
        "main.js": 'import { draw } from "./draw.js";\nimport { read } from "./read.js";\n'
                   "export default function mount() {}\n",
        "draw.js": 'import { lut } from "./colour.js";\nexport const draw = 1;\n',
        "read.js": 'import { lut } from "./colour.js";\nexport const read = 2;\n',
        "colour.js": "export const lut = 3;\n",
        "unused.js": "export const nothing = 0;\n"})
    monkeypatch.setattr(lesson_export, "MODULE_DIR", folder)
    names = [m["name"] for m in lesson_export.component_modules()]
    assert names == ["colour.js", "draw.js", "read.js", "main.js"]  # unused.js left out


@pytest.mark.parametrize("sources, words", [
    ({"main.js": 'import { a } from "./a.js";', "a.js": 'import { m } from "./main.js";'},
     "main.js -> a.js -> main.js"),
    ({"main.js": 'import { a } from "./gone.js";'}, "gone.js is imported but does not exist"),
])
def test_a_cycle_or_a_missing_module_is_refused(tmp_path, monkeypatch, sources, words):
    write_modules(tmp_path / "explainer", sources)
    monkeypatch.setattr(lesson_export, "MODULE_DIR", tmp_path / "explainer")
    with pytest.raises(LessonError, match=re.escape(words)):
        lesson_export.component_modules()


def test_the_repository_component_is_packed_entry_last():
    modules = lesson_export.component_modules()
    assert modules[-1]["name"] == "main.js"
    assert "export default function mount" in "".join(modules[-1]["parts"])


# --- the file --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_lesson():
    model = tiny_vit("test-tiny-lesson", knn=False)
    pictures = [LessonImage("first <b>picture</b>", tiny_images(2)[0]),
                LessonImage("second", tiny_images(2)[1])]
    seen = []
    page = build_lesson(model, pictures, blocks=[0, 2], progress=lambda f, w: seen.append(f))
    return model, pictures, page, seen


def test_every_packed_message_equals_what_the_live_page_sends(tiny_lesson):
    model, pictures, page, _ = tiny_lesson
    manifest = read_manifest(page)
    assert manifest["format"] == LESSON_FORMAT and manifest["message"] == "VXB1"
    assert manifest["blocks"] == [0, 2] and manifest["model"]["random"] is True
    for index, picture in enumerate(pictures):
        entry = manifest["images"][index]
        overview = explainer.overview_payload(model, picture.image)
        arrays_equal(overview, read_part(page, manifest, index, entry["overview"])["overview"])
        assert entry["steps"] == resolve_steps(overview, switcher(model, picture.image, None),
                                              live=False)
        assert sorted(entry["detail"]) == sorted(entry["vectors"]) == ["0", "2"]
        for block in (0, 2):
            arrays_equal(explainer.block_payload(model, picture.image, block),
                         read_part(page, manifest, index, entry["detail"][str(block)])["detail"])
            arrays_equal(explainer.vectors_payload(model, picture.image, block),
                         read_part(page, manifest, index, entry["vectors"][str(block)])["vectors"])


def test_the_page_is_ascii_outside_its_data_and_names_no_other_resource(tiny_lesson):
    model, _, page, _ = tiny_lesson
    text = re.sub(rb'(<script type="application/octet-stream"[^>]*>).*?</script>', rb"\1</script>",
                  page, flags=re.S)
    assert text.isascii()
    assert b'<meta charset="windows-1252">' in text[:200]
    # no src/href attribute, no @import or url(): nothing for the browser to fetch
    assert not re.search(rb"\s(src|href)\s*=", text) and b"@import" not in text
    assert not re.search(rb"url\(\s*['\"]?(?!data:)", text)
    assert b"default-src 'none'" in text  # the policy that blocks any request anyway
    assert b"first &lt;b&gt;picture&lt;/b&gt;" in text  # a title is text, never markup
    assert b"RANDOM WEIGHTS" in text
    footer = re.search(rb'id="lesson-footer">(.*?)</footer>', text).group(1).decode()
    assert f"lesson format {LESSON_FORMAT}" in footer and "Explainer messages VXB1" in footer
    assert model.spec.id in footer and "ViT Lens 0.1.0" in footer


def test_progress_runs_to_one(tiny_lesson):
    *_, seen = tiny_lesson
    assert seen == sorted(seen) and seen[-1] == 1.0 and len(seen) == 2 * (1 + 2)


def test_blocks_outside_the_model_are_refused():
    model = tiny_vit("test-tiny-lesson", knn=False)
    with pytest.raises(LessonError, match="blocks 0-2; there is no block 3"):
        build_lesson(model, [LessonImage("x", tiny_images(1)[0])], blocks=[0, 3])
    with pytest.raises(LessonError, match="--blocks takes"):
        lesson_export.parse_blocks("0,six")


# --- layering ---------------------------------------------------------------------------------------

def test_only_the_lesson_command_reaches_into_dashboard_and_nothing_loads_streamlit():
    from test_layout import core_modules, imported_modules

    modules = core_modules()
    reaching = sorted(name for name, path in modules.items()
                      if any(t.split(".")[0] == "dashboard"
                             for t in imported_modules(path, name, modules)))
    assert reaching == ["xai_core.cli.lesson"]
    code = ("import sys, xai_core.cli.main, dashboard.explainer.lesson_export; "
            "print('streamlit' in sys.modules)")
    loaded = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, check=True)
    assert loaded.stdout.strip() == "False"


# --- the command line: bad input ---------------------------------------------------------------------

def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "xai_core", "export-lesson", *args], cwd=ROOT,
                          capture_output=True, text=True, env=env, timeout=600)


def read_only_folder(tmp_path: Path) -> Path:
    """A folder this process cannot write in: a chmod-ed one, or (as root, whom chmod does
    not stop) a read-only system folder."""
    if os.geteuid() != 0:
        folder = tmp_path / "locked"
        folder.mkdir()
        folder.chmod(0o555)
        return folder
    for candidate in (Path("/sys"), Path("/proc")):
        try:
            (candidate / "vit-lens-probe").touch()
        except OSError:
            return candidate
    pytest.fail("no folder here refuses root's writes")


@pytest.mark.parametrize("case", ["unknown model", "unreadable image", "block 99",
                                  "missing folder", "read-only folder", "unknown sample",
                                  "a CNN"])
def test_bad_input_exits_2_with_one_line_and_writes_nothing(tmp_path, case):
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG not really")
    out = tmp_path / "lesson.html"
    args = {"unknown model": ["--model", "vit-zz", "--images", "sample:chelsea"],
            "unreadable image": ["--model", "dinov2-s14", "--images", f"sample:chelsea,{broken}"],
            "unknown sample": ["--model", "dinov2-s14", "--images", "sample:nope"],
            "a CNN": ["--model", "efficientnet-lite0", "--images", "sample:chelsea"],
            "block 99": ["--model", "deit-s16-distilled", "--random-weights", "--images",
                         "sample:chelsea", "--blocks", "99"],
            "missing folder": ["--model", "dinov2-s14", "--images", "sample:chelsea"],
            "read-only folder": ["--model", "dinov2-s14", "--images", "sample:chelsea"]}[case]
    if case == "missing folder":
        out = tmp_path / "nowhere" / "lesson.html"
    elif case == "read-only folder":
        out = read_only_folder(tmp_path) / "lesson.html"
    done = run_cli(*args, "--out", str(out))
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "Traceback" not in done.stderr
    expected = {"unknown model": "vit-zz", "unreadable image": "broken.png",
                "block 99": "there is no block 99", "missing folder": "does not exist",
                "read-only folder": str(out.parent), "unknown sample": "nope",
                "a CNN": "choose a ViT model"}[case]
    assert expected in lines[0]
    assert not out.exists()
    if out.parent.exists():  # no temporary file left either
        assert list(out.parent.glob("lesson.html*")) == []


# --- the Explainer page's button ---------------------------------------------------------------------

def test_export_lesson_button_offers_the_file_for_the_view_on_screen():
    from apptest_helpers import open_app

    from dashboard.explainer.component import LESSON_KEY, LESSONS

    LESSONS.clear()
    app = open_app("0_vit_explainer.py")
    assert not app.exception, app.exception
    assert not [b for b in app.get("download_button")]  # nothing built before the click
    app.button(key="explainer_lesson_make").click().run()
    assert not app.exception, app.exception
    [page] = [value for value, _ in LESSONS._items.values()]
    assert app.session_state[LESSON_KEY][1] is page  # the shared file, not a copy of it
    manifest = read_manifest(page)
    assert manifest["model"]["id"] == "dinov2-s14" and manifest["blocks"] == list(range(12))
    assert [entry["title"] for entry in manifest["images"]] == ["Chelsea the cat"]
    [button] = app.get("download_button")
    assert button.proto.label == f"Download the lesson ({len(page) / 1e6:.1f} MB)"
    # the file itself, at an address (a deferred file is deleted by any two runs that end)
    assert button.proto.url.endswith(".html") and not button.proto.deferred_file_id
    # a second student exporting the same picture: no second build, no second copy
    built = LESSONS.misses
    other = open_app("0_vit_explainer.py")
    other.button(key="explainer_lesson_make").click().run()
    assert not other.exception and other.session_state[LESSON_KEY][1] is page
    assert len(LESSONS) == 1 and LESSONS.misses == built
