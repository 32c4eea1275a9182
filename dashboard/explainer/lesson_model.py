"""The model in the lesson: what `export-lesson --with-model` packs into the one HTML file
and what `export-site` writes beside its page (dashboard/explainer/lesson_export.py calls these).

The browser side is plain ES modules (dashboard/static/explainer/model/, entry own-photo.js,
and worker.js for the Web Worker), the vendored onnxruntime-web (WebAssembly build, pinned,
dashboard/static/vendor/onnxruntime-web/ with its licence), the model (its ONNX graphs and
weights) and its data (xai_core/browser_model), and the tour's words and the model's facts
it quotes (dashboard/explainer/tour.browser_tour, added by the lesson's packer). In the one file they travel deflated in one
`<script type="application/octet-stream">` (escaped as the pictures' bytes are); on a site
they are plain files named by their content's hash, so a browser or CDN may keep them.
"""

from __future__ import annotations

import hashlib
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from dashboard import assets
from xai_core.browser_model import bundle

MODULE_DIR = assets.STATIC / assets.BROWSER_MODEL
ENTRY, WORKER = "own-photo.js", "worker.js"
VENDOR = assets.STATIC / "vendor" / "onnxruntime-web"
RUNTIME_VERSION = "1.31.1"  # dashboard/static/vendor/onnxruntime-web.sh pins the same
RUNTIME, WASM = "ort.wasm.bundle.min.mjs", "ort-wasm-simd-threaded.wasm"
MODEL_HOST_JS = assets.HOSTS / "model-host.js"
BLOB_ID = "lesson-model"
# The one file fetches nothing: scripts from the page and blob: (the modules, the worker,
# the runtime), WebAssembly compiled from bytes in the page.
INLINE_POLICY = ("default-src 'none'; script-src 'unsafe-inline' blob: 'wasm-unsafe-eval'; "
                 "worker-src blob:; style-src 'unsafe-inline'; img-src data: blob:; "
                 "font-src data:")
# A site reads its own files (the model, the runtime) and nothing from another host.
SITE_POLICY = ("default-src 'none'; script-src 'self' 'unsafe-inline' blob: 'wasm-unsafe-eval'; "
               "worker-src 'self' blob:; connect-src 'self'; style-src 'unsafe-inline'; "
               "img-src data: blob:; font-src data:")


@dataclass
class ModelPack:
    """The model's part of a lesson: its manifest entry, the bytes packed in the page (the
    one file) or the files written beside it (a site), and the page's security policy."""

    manifest: dict
    policy: str
    blob: bytes | None = None
    files: dict[str, bytes] = field(default_factory=dict)  # path under the site -> bytes


def browser_modules() -> list[dict]:
    """The browser-model modules in dependency order, split at their imports (as the
    component's, `lesson_export.component_modules`)."""
    return assets.packed_modules(MODULE_DIR, ENTRY)


MODULE_EXPORT = re.compile(r"export\{([^}]*)\};?\s*(//# sourceMappingURL=\S*\s*)?$")


def classic_runtime(source: str) -> str:
    """The runtime's ES module as a classic script that sets `self.ort` (a worker started
    from a blob: URL in a page opened from disk can be classic only, and import nothing):
    its one export statement becomes an assignment and `import.meta.url` the worker's own
    address (the runtime reads it only to find files that the lesson hands it as bytes)."""
    found = MODULE_EXPORT.search(source)
    if found is None or re.search(r"(^|[;}\s])export[\s{]", source[:found.start()]):
        raise ValueError("the vendored onnxruntime-web has not the one export statement expected")
    names = []
    for item in found[1].split(","):
        local, _, exported = item.strip().partition(" as ")
        names.append(f"{exported or local}:{local}")
    body = source[:found.start()].replace("import.meta.url", "__ortScript")
    return f"var __ortScript=self.location.href;\n{body}self.ort={{{','.join(names)}}};\n"


def _common(model, head, precision: str) -> tuple[dict, dict[str, bytes]]:
    contents = {"model": bundle.model_file(model, precision).read_bytes(),
                "data": bundle.model_message(model, head),
                "runtime": (VENDOR / RUNTIME).read_bytes(), "wasm": (VENDOR / WASM).read_bytes()}
    manifest = {"modules": browser_modules(),
                "worker": (MODULE_DIR / WORKER).read_text(encoding="utf-8"),
                "precision": precision,
                "runtime": f"onnxruntime-web {RUNTIME_VERSION} (WebAssembly)",
                "bytes": {name: len(data) for name, data in contents.items()}}
    return manifest, contents


def inline_pack(model, head, precision: str = bundle.DEFAULT_PRECISION) -> ModelPack:
    """Everything in the page: each part deflated, one after another in one blob."""
    manifest, contents = _common(model, head, precision)
    contents["runtime"] = classic_runtime(contents["runtime"].decode("utf-8")).encode("utf-8")
    chunks, parts, size = [], {}, 0
    for name, data in contents.items():
        packed = zlib.compress(data, 6)
        parts[name] = [size, len(packed), "deflate"]
        chunks.append(packed)
        size += len(packed)
    return ModelPack({**manifest, "blob": BLOB_ID, "parts": parts}, INLINE_POLICY,
                     blob=b"".join(chunks))


def _hashed(folder: str, stem: str, suffix: str, data: bytes) -> str:
    return f"{folder}/{stem}-{hashlib.sha256(data).hexdigest()[:12]}{suffix}"


def site_pack(model, head, precision: str = bundle.DEFAULT_PRECISION) -> ModelPack:
    """Plain files beside the page, named by content (cache them for ever)."""
    manifest, contents = _common(model, head, precision)
    vendor = f"vendor/onnxruntime-web-{RUNTIME_VERSION}"
    contents["wasm"] = zlib.compress(contents["wasm"], 9)  # inflated by the worker
    paths = {"model": _hashed("model", f"{model.spec.id}-{precision}", ".bin", contents["model"]),
             "data": _hashed("model", f"{model.spec.id}-data", ".bin", contents["data"]),
             "runtime": f"{vendor}/{RUNTIME}", "wasm": f"{vendor}/{WASM}.deflate"}
    files = {paths[name]: data for name, data in contents.items()}
    files[f"{vendor}/LICENSE"] = (VENDOR / "LICENSE").read_bytes()
    return ModelPack({**manifest, "files": paths}, SITE_POLICY, files=files)


def check_supported(model) -> None:
    """Refuse, in one sentence, a model the browser cannot run: random weights, blocks the
    graph does not follow, or a head other than the k-NN bank."""
    from xai_core.browser_model.graph import self_attention_blocks
    from xai_core.infra.errors import OptionError

    if model.random_weights:
        raise OptionError("The model in the browser needs trained weights; this one has "
                          "random weights.")
    self_attention_blocks(model.module)
    if model.head is None or model.head.kind != "knn":
        raise OptionError("The model in the browser answers with the k-NN memory bank "
                          "(DINOv2); choose dinov2-s14.")


# Netlify and Cloudflare Pages read this file: cross-origin isolation, so the model may run
# on several threads (docs/hosting.md gives nginx's lines).
HEADERS_FILE = """/*
  Cross-Origin-Opener-Policy: same-origin
  Cross-Origin-Embedder-Policy: require-corp
"""


def write_site(folder: Path, page: bytes, pack: ModelPack) -> dict[str, int]:
    """index.html and the model's files under `folder` (made if missing), each written
    whole (a reader never sees half a file); returns each file's size."""
    from xai_core.models.disk_cache import replace_atomically

    files = {"index.html": page, "_headers": HEADERS_FILE.encode(), **pack.files}
    for name, data in files.items():
        target = folder / name
        if target.is_file() and target.stat().st_size == len(data) and target.read_bytes() == data:
            continue  # unchanged: a site re-exported keeps its files (and their dates)
        replace_atomically(target, lambda temporary, data=data: Path(temporary).write_bytes(data))
    return {name: len(data) for name, data in files.items()}
