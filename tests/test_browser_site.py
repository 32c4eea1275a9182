"""The model in the lesson and on a static site (dashboard/explainer/lesson_model.py): what
`export-lesson --with-model` packs is byte for byte the model, its data and the vendored
runtime; `export-site` writes content-named files beside its page and the headers file;
bad input exits 2 with one line; the vendored runtime is the pinned one; the nginx recipe
serves the site with cross-origin isolation."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from dashboard.explainer import lesson_model
from dashboard.explainer.lesson_export import (LessonImage, build_lesson, read_manifest,
                                               unescape_bytes)
from xai_core.lessons import explainer
from xai_core.browser_model import bundle
from xai_core.images import load_sample

ROOT = Path(__file__).resolve().parent.parent


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xai_core", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def lesson_page(dinov2) -> bytes:
    pack = lesson_model.inline_pack(dinov2, None)
    return build_lesson(dinov2, [LessonImage("Chelsea", load_sample("chelsea"))], blocks=[11],
                        model_pack=pack)


def model_blob(page: bytes, manifest: dict) -> bytes:
    marker = f'id="{manifest["browser_model"]["blob"]}">'.encode()
    start = page.index(marker) + len(marker)
    return unescape_bytes(page[start:page.index(b"</script>", start)])


def test_the_one_file_carries_the_model_its_data_and_the_runtime(dinov2, lesson_page):
    manifest = read_manifest(lesson_page)
    model = manifest["browser_model"]
    blob = model_blob(lesson_page, manifest)
    part = {name: zlib.decompress(blob[offset:offset + length])
            for name, (offset, length, codec) in model["parts"].items()}
    assert part["model"] == bundle.model_file(dinov2, "fp16").read_bytes()
    decoded = explainer.decode_message(part["data"])["browser_model"]
    assert decoded["knn"]["labels"] == list(dinov2.head.bank.labels)
    assert part["wasm"] == (lesson_model.VENDOR / lesson_model.WASM).read_bytes()
    runtime = part["runtime"].decode()
    assert "import.meta" not in runtime and "export{" not in runtime
    assert runtime.rstrip().endswith("};") and "self.ort={InferenceSession:" in runtime
    assert [m["name"] for m in model["modules"]][-1] == "own-photo.js"
    assert not re.search(r"^\s*(import|export)\s", model["worker"], re.M)  # a classic script
    policy = lesson_page.split(b'Content-Security-Policy" content="')[1].split(b'"')[0].decode()
    assert policy == lesson_model.INLINE_POLICY and "connect-src" not in policy
    assert b'id="lesson-own-photo"' in lesson_page
    head = lesson_page[:lesson_page.index(b'<script type="application/octet-stream"')]
    assert head.isascii()


def test_the_classic_runtime_refuses_a_module_it_does_not_know():
    with pytest.raises(ValueError, match="one export statement"):
        lesson_model.classic_runtime("export default 1; export{a as b};")


def test_the_vendored_runtime_is_the_pinned_one():
    sums = dict(reversed(line.split()) for line in
                (lesson_model.VENDOR / "SHA256SUMS").read_text().splitlines())
    for name in (lesson_model.RUNTIME, lesson_model.WASM):
        assert hashlib.sha256((lesson_model.VENDOR / name).read_bytes()).hexdigest() == sums[name]
    assert f"v{lesson_model.RUNTIME_VERSION}" in (lesson_model.VENDOR / lesson_model.RUNTIME) \
        .read_text()[:200]
    assert "MIT License" in (lesson_model.VENDOR / "LICENSE").read_text()


def test_export_site_writes_content_named_files(tmp_path):
    out = tmp_path / "site"
    done = run_cli("export-site", "--out", str(out), "--blocks", "11", "--json")
    assert done.returncode == 0, done.stderr
    page = (out / "index.html").read_bytes()
    files = read_manifest(page)["browser_model"]["files"]
    for name in ("model", "data"):
        data = (out / files[name]).read_bytes()
        assert hashlib.sha256(data).hexdigest()[:12] in files[name]
    wasm = zlib.decompress((out / files["wasm"]).read_bytes())
    assert wasm == (lesson_model.VENDOR / lesson_model.WASM).read_bytes()
    assert (out / files["runtime"]).read_bytes() == (lesson_model.VENDOR / lesson_model.RUNTIME) \
        .read_bytes()
    assert "Cross-Origin-Embedder-Policy: require-corp" in (out / "_headers").read_text()
    assert lesson_model.SITE_POLICY.encode() in page
    written = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    assert written == {"index.html", "_headers", *files.values(),
                       f"vendor/onnxruntime-web-{lesson_model.RUNTIME_VERSION}/LICENSE"}


@pytest.mark.parametrize("case", ["a file as --out", "random weights", "missing parent"])
def test_export_site_bad_input_exits_2_with_one_line(tmp_path, case):
    out = tmp_path / "site"
    args = ["--model", "dinov2-s14"]
    if case == "a file as --out":
        out.write_text("not a folder")
    elif case == "random weights":
        args = ["--model", "deit-s16-distilled", "--random-weights"]
    else:
        out = tmp_path / "nowhere" / "site"
    done = run_cli("export-site", *args, "--out", str(out))
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    expected = {"a file as --out": "is a file", "random weights": "trained weights",
                "missing parent": "does not exist"}[case]
    assert expected in lines[0]


def test_export_lesson_with_model_refuses_random_weights(tmp_path):
    out = tmp_path / "lesson.html"
    done = run_cli("export-lesson", "--model", "deit-s16-distilled", "--random-weights",
                   "--images", "sample:chelsea", "--with-model", "--out", str(out))
    assert done.returncode == 2 and "trained weights" in done.stderr, done.stderr
    assert not out.exists()


def test_nginx_serves_the_site_isolated_and_cached():
    recipe = (ROOT / "deploy" / "nginx" / "vit-lens.conf").read_text()
    block = recipe[recipe.index("location /vit-lens-explainer/ {"):]
    block = block[:block.index("\n    }\n")]
    assert "alias /opt/vit-lens/site/;" in block
    assert "Cross-Origin-Opener-Policy same-origin" in block
    assert "Cross-Origin-Embedder-Policy require-corp" in block
    assert "~^/vit-lens-explainer/(model|vendor)/  'public, max-age=31536000, immutable'" in recipe
