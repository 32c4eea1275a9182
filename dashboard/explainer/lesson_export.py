"""A ViT Explainer lesson as one self-contained HTML file, opened from disk with no server
and no network (`python -m xai_core export-lesson`, and the Explainer page's "Export lesson"
button).

This module only packs: the component's own ES modules and CSS (the same files the live
page serves), the messages Python sends the live component (`explainer.encode_message`,
pre-encoded per image: the overview, each chosen block's detail and its queries and keys),
the tour text filled per image, the model card and a footer. A small host
(`dashboard/static/explainer/host/lesson.js`) plays the server's part in the browser: it answers the
component's `view` state from the embedded messages as `explainer/component.component_data`
does, so the component cannot tell the file from the live page.

How the bytes travel. Each message is deflated (the queries and keys are 8-bit codes, as on
the live page, and nearly incompressible: deflate keeps about 92 % of them). The deflated
bytes of one image sit raw in a `<script type="application/octet-stream">` element of a
windows-1252 page (base64 would add a third: four pictures of DINOv2-S/14's 12 blocks
would not fit 25 MB):
that decoding maps every byte to one character, and the host reads the bytes back from the
characters. The four bytes the HTML parser would change or act on (NUL, CR, `<`) and the
escape byte `=` itself are written as `=` and the byte plus 64. Everything else in the page
is ASCII (JSON with \\u escapes, HTML character references).

The component's modules are inlined as text with their `from "./x.js"` specifiers cut out;
the host turns each module into a Blob URL in dependency order, joining the text with the
URLs of the modules it imports (Chromium, Firefox and Safari import Blob-URL modules from a
file:// page; a Content-Security-Policy lets scripts come only from the page and from
blob:, and nothing at all from the network).
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import importlib.util
import json
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from dashboard import assets
from dashboard.explainer.tour import browser_tour, resolve_steps, switcher
from xai_core import __version__
from xai_core.lessons import explainer
from xai_core.capture import transformer_blocks
from xai_core.images import COLLAGE_ID, COLLAGE_TITLE, SAMPLES
from xai_core.models.card import model_card
from xai_core.pipeline import head_of, prepare

# The lesson file's own layout (manifest, byte escaping, part codecs). A host reads only
# files of its own format; a change to any of them is a new number (2: every part plain
# deflate, since the queries and keys became 8-bit codes; 1 byte-shuffled their float16).
LESSON_FORMAT = 2
MODULE_DIR = assets.STATIC / assets.COMPONENT  # the component as ES modules (entry main.js)
COMPONENT_CSS = MODULE_DIR / "explainer.css"
HOST_JS = assets.HOSTS / "lesson.js"
PAGE_CSS = assets.HOSTS / "lesson.css"
ENTRY = "main.js"
FONTS = {"Source Sans Pro": "SourceSansVF-Upright*.woff2",
         "Source Code Pro": "SourceCodeVF-Upright*.woff2"}
ESCAPE = 0x3D  # "="
ESCAPED = re.compile(rb"[\x00\r<=]")
SERVER_ONLY = (
    "another model or your own photo (the app computes a new forward pass)",
    "interventions: switching heads off (the file holds the two its tour switches off), "
    "masking patches (page 9)",
    "the deeper pages the tour points to (attention maps, rollout, comparison, ...)",
    "blocks left out of this file when it was exported",
)
# With the model in the browser, only these need the server.
MODEL_SERVER_ONLY = (
    "another model (this file carries one)",
    "interventions other than switching heads off: masking patches, dropping tokens (page 9)",
    "the deeper pages the tour points to (attention maps, rollout, comparison, ...)",
    "blocks left out of this file when it was exported",
)
POLICY = ("default-src 'none'; script-src 'unsafe-inline' blob:; style-src 'unsafe-inline'; "
          "img-src data: blob:; font-src data:")
MODEL_HOST_JS = assets.HOSTS / "model-host.js"
Progress = Callable[[float, str], None]


class LessonError(ValueError):
    """The lesson cannot be built as asked (said in one sentence)."""


@dataclass(frozen=True)
class LessonImage:
    title: str
    image: object  # PIL.Image.Image


def sample_title(sample_id: str) -> str:
    return COLLAGE_TITLE if sample_id == COLLAGE_ID else SAMPLES[sample_id].title


# --- the component's code ----------------------------------------------------------------------

def component_modules() -> list[dict]:
    """The component's ES modules in dependency order (`assets.module_order`, as the live
    loader links them), each {"name", "parts"}: its source cut at each import's specifier
    (`assets.split_at_imports`), odd parts naming the module imported there."""
    try:
        return assets.packed_modules(MODULE_DIR, ENTRY)
    except ValueError as error:
        raise LessonError(f"The Explainer's modules cannot be packed: {error}.") from None


def font_faces() -> str:
    """@font-face rules for the type the live page uses (Streamlit's Source Sans and Source
    Code, OFL-licensed variable fonts shipped in its package) as data: URLs: the component's
    layout is measured in them (a phone's two rows of stages fit in Source Sans, not in a
    wider fallback). The package is found, not imported."""
    package = Path(importlib.util.find_spec("streamlit").origin).parent / "static" / "static"
    rules = []
    for family, pattern in FONTS.items():
        found = sorted((package / "media").glob(pattern))
        if not found:
            raise LessonError(f"Streamlit's font {pattern} is missing from {package}.")
        data = base64.b64encode(found[0].read_bytes()).decode()
        rules.append(f'@font-face {{ font-family: "{family}"; font-weight: 200 900; '
                     f'font-style: normal; src: url(data:font/woff2;base64,{data}) '
                     'format("woff2"); }')
    return "\n".join(rules)


def ascii_css(text: str) -> str:
    """CSS with every non-ASCII character as a CSS escape (the page is windows-1252)."""
    return "".join(ch if ord(ch) < 128 else f"\\{ord(ch):x} " for ch in text)


# --- packing bytes -------------------------------------------------------------------------------

def escape_bytes(data: bytes) -> bytes:
    """Bytes as windows-1252 text the HTML parser keeps as they are (see the module note)."""
    return ESCAPED.sub(lambda match: bytes([ESCAPE, (match.group()[0] + 64) & 0xFF]), data)


def unescape_bytes(text: bytes) -> bytes:
    """The inverse of `escape_bytes` (what the host does in the browser)."""
    out, at = bytearray(), 0
    while (found := text.find(bytes([ESCAPE]), at)) >= 0:
        out += text[at:found]
        out.append((text[found + 1] - 64) & 0xFF)
        at = found + 2
    return bytes(out + text[at:])


class PartWriter:
    """The deflated messages of one image, one after another; `add` returns where."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.size = 0

    def add(self, message: dict) -> list:
        packed = zlib.compress(explainer.encode_message(message), 9)
        self.chunks.append(packed)
        self.size += len(packed)
        return [self.size - len(packed), len(packed), "deflate"]

    def bytes(self) -> bytes:
        return b"".join(self.chunks)


# --- building ----------------------------------------------------------------------------------

def parse_blocks(text: str) -> list[int] | None:
    """`--blocks`: "all" (None: every block) or comma-separated block numbers."""
    if text.strip().lower() == "all":
        return None
    try:
        blocks = sorted({int(item) for item in text.split(",") if item.strip()})
    except ValueError:
        raise LessonError(f"--blocks takes 'all' or block numbers like 0,6,11; got '{text}'.") \
            from None
    if not blocks:
        raise LessonError("--blocks names no block.")
    return blocks


def check_blocks(blocks: list[int] | None, count: int) -> list[int]:
    if blocks is None:
        return list(range(count))
    wrong = [b for b in blocks if not 0 <= b < count]
    if wrong:
        raise LessonError(f"This model has blocks 0-{count - 1}; there is no block "
                          f"{', '.join(map(str, wrong))}.")
    return blocks


def image_entry(model, lesson_image: LessonImage, index: int, head, blocks: list[int],
                tick: Callable[[str], None]) -> tuple[dict, bytes]:
    """One image's manifest entry and its packed messages."""
    image = lesson_image.image
    overview = explainer.overview_payload(model, image, head)
    blocks = check_blocks(blocks, len(overview["blocks"]))
    writer = PartWriter()
    entry = {"title": lesson_image.title,
             "signature": f"lesson|{index}|{model.spec.id}|{prepare(model, image).sha256[:16]}",
             "steps": resolve_steps(overview, switcher(model, image, head), live=False),
             "overview": writer.add({"overview": overview}),
             "detail": {}, "vectors": {},
             "limits": {"blocks": len(overview["blocks"]), "heads": overview["dims"]["heads"],
                        "patches": overview["layout"]["patches"],
                        "maps": [m for m in explainer.OVERLAYS
                                 if m != "daam" or "unavailable" not in overview["daam"]]}}
    tick(f"{lesson_image.title}: overview")
    for block in blocks:
        entry["detail"][str(block)] = writer.add(
            {"detail": explainer.block_payload(model, image, block)})
        entry["vectors"][str(block)] = writer.add(
            {"vectors": explainer.vectors_payload(model, image, block)})
        tick(f"{lesson_image.title}: block {block}")
    return entry, writer.bytes()


def build_lesson(model, images: list[LessonImage], head=None, blocks: list[int] | None = None,
                 tour: bool = False, progress: Progress | None = None,
                 now: _dt.datetime | None = None, model_pack=None) -> bytes:
    """The lesson as the bytes of one HTML file. `blocks`: None for every block;
    `tour`: open on step 1 of the guided tour (its text is always in the file);
    `progress(fraction, what)` after each step; `model_pack`: the model in the browser
    (`dashboard.explainer.lesson_model`: packed in the file, or files beside a site's page)."""
    if not images:
        raise LessonError("A lesson needs at least one picture.")
    head = head_of(model, head)
    modules = component_modules()
    count = len(transformer_blocks(model.module))
    chosen = check_blocks(blocks, count)
    total, done = len(images) * (1 + len(chosen)), 0

    def tick(what: str) -> None:
        nonlocal done
        done += 1
        if progress:
            progress(done / total, what)

    entries, blobs = [], []
    for index, lesson_image in enumerate(images):
        entry, blob = image_entry(model, lesson_image, index, head, chosen, tick)
        entry["blob"] = f"lesson-image-{index}"
        entries.append(entry)
        blobs.append(blob)
    when = (now or _dt.datetime.now(_dt.timezone.utc)).strftime("%Y-%m-%d %H:%M UTC")
    manifest = {"format": LESSON_FORMAT, "message": explainer.MESSAGE_MAGIC.decode(),
                "vit_lens": __version__, "written": when, "tour": tour, "blocks": chosen,
                "model": {"id": model.spec.id, "label": model.label,
                          "random": model.random_weights, "weights": model.weights_source},
                "images": entries, "modules": modules}
    if model_pack is not None:
        # the tour for the learner's photo: its words, and the model's facts it quotes
        first = explainer.overview_payload(model, images[0].image, head)
        manifest["browser_model"] = {**model_pack.manifest, "tour": browser_tour(first)}
    return render_page(model, images[0].image, manifest, blobs, model_pack)


def _json_script(value) -> str:
    """JSON for a <script> element: ASCII only, and no "<" (so no "</script>")."""
    return json.dumps(value, ensure_ascii=True, separators=(",", ":")).replace("<", "\\u003c")


def _text(value) -> str:
    return html.escape(str(value), quote=True)


def footer_words(manifest: dict) -> str:
    model = manifest["model"]
    random = " · RANDOM WEIGHTS: shapes only, the numbers mean nothing" if model["random"] else ""
    return (f"Model: {model['label']} ({model['id']}) · weights: {model['weights']}{random} · "
            f"ViT Lens {manifest['vit_lens']} · written {manifest['written']} · lesson "
            f"format {manifest['format']}, Explainer messages {manifest['message']}")


def render_page(model, card_image, manifest: dict, blobs: list[bytes], model_pack=None) -> bytes:
    """The HTML: page chrome, model card and footer as escaped ASCII, the manifest as JSON,
    each picture's packed messages as escaped bytes, the host last (and the model's host
    after it when the model is in the browser)."""
    images = manifest["images"]
    picker = ('<label class="lesson-pick">Picture <select id="lesson-image">'
              + "".join(f'<option value="{i}">{_text(e["title"])}</option>'
                        for i, e in enumerate(images)) + "</select></label>"
              if len(images) > 1 or model_pack else
              f'<span class="lesson-pick">Picture: {_text(images[0]["title"])}</span>')
    random = ('<p class="lesson-random">RANDOM WEIGHTS: this model was not trained; the '
              "shapes are real, the numbers mean nothing.</p>" if model.random_weights else "")
    card = "".join(f"<tr><th>{_text(k)}</th><td>{_text(v)}</td></tr>"
                   for k, v in model_card(model, card_image).items())
    blocks = manifest["blocks"]
    every = len(blocks) == images[0]["limits"]["blocks"]
    exported = (f"every block (0-{blocks[-1]})" if every else
                f"block{'s' if len(blocks) > 1 else ''} {', '.join(map(str, blocks))}")
    head = f"""<!doctype html>
<html lang="en"><head>
<meta charset="windows-1252">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="{model_pack.policy if model_pack else POLICY}">
<meta name="generator" content="ViT Lens {_text(__version__)}">
<meta name="vit-lens-lesson-format" content="{LESSON_FORMAT}">
<title>ViT Lens lesson: {_text(model.label)}</title>
<style>{font_faces()}</style>
<style>{ascii_css(PAGE_CSS.read_text(encoding="utf-8"))}</style>
<style>{ascii_css(COMPONENT_CSS.read_text(encoding="utf-8"))}</style>
</head><body>
<header class="lesson-head">
<h1>ViT Explainer <small>a ViT Lens lesson</small></h1>
{random}
<div class="lesson-bar">{picker}
<label class="lesson-present"><input type="checkbox" id="lesson-present"> Presentation size</label>
</div>
<p id="lesson-notice" class="lesson-notice" role="status" hidden></p>
</header>
{'<section id="lesson-own-photo" class="lesson-own"></section>' if model_pack else ""}
<main id="lesson-explainer"><p class="lesson-loading">Opening the lesson&hellip;</p>
<noscript>This lesson draws with JavaScript: allow it for this file.</noscript></main>
<section class="lesson-more">
<h2>What this file holds, and what needs the ViT Lens server</h2>
<p>This file is the ViT Explainer for {_text(model.label)} on {len(images)} picture{"s" if len(images) > 1 else ""},
with {_text(exported)} openable and the guided tour. It works offline: nothing is downloaded.
These need the ViT Lens app and its server:</p>
<ul>{"".join(f"<li>{_text(item)}</li>" for item in (MODEL_SERVER_ONLY if model_pack else SERVER_ONLY))}</ul>
<h2>Model card</h2>
<table class="lesson-card">{card}</table>
</section>
<footer class="lesson-foot" id="lesson-footer">{_text(footer_words(manifest))}</footer>
<script type="application/json" id="lesson-manifest">{_json_script(manifest)}</script>
"""
    out = [head.encode("ascii", "xmlcharrefreplace")]
    for entry, blob in zip(images, blobs):
        out += [f'<script type="application/octet-stream" id="{entry["blob"]}">'.encode(),
                escape_bytes(blob), b"</script>\n"]
    host = assets.linker_js() + HOST_JS.read_text(encoding="utf-8")
    if not host.isascii():
        raise LessonError("dashboard/static/explainer/host/ (link.js, lesson.js) must be ASCII (the page is windows-1252).")
    # async: the host runs as soon as the parser reaches it, so the recorded picture is drawn
    # while the rest of the page (the model's bytes, when it carries the model) is still read
    out.append(f'<script type="module" async>{host}</script>\n'.encode("ascii"))
    if model_pack is not None:
        if model_pack.blob is not None:
            out += [f'<script type="application/octet-stream" id="{model_pack.manifest["blob"]}">'
                    .encode(), escape_bytes(model_pack.blob), b"</script>\n"]
        model_host = MODEL_HOST_JS.read_text(encoding="utf-8")
        if not model_host.isascii():
            raise LessonError("dashboard/static/explainer/host/model-host.js must be ASCII.")
        out.append(f'<script type="module">{model_host}</script>\n'.encode("ascii"))
    out.append(b"</body></html>\n")
    return b"".join(out)


# --- reading a lesson back (tests, bench) -------------------------------------------------------

def read_manifest(page: bytes) -> dict:
    start = page.index(b'id="lesson-manifest">') + len(b'id="lesson-manifest">')
    return json.loads(page[start:page.index(b"</script>", start)])


def read_part(page: bytes, manifest: dict, image: int, where: list) -> dict:
    """One embedded message, decoded as the browser would (`explainer.decode_message`)."""
    marker = f'id="{manifest["images"][image]["blob"]}">'.encode()
    start = page.index(marker) + len(marker)
    blob = unescape_bytes(page[start:page.index(b"</script>", start)])
    offset, length, codec = where
    if codec != "deflate":
        raise ValueError(f"unknown part codec {codec!r}")
    return explainer.decode_message(zlib.decompress(blob[offset:offset + length]))
