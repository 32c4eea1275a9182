"""The Explainer's wire format and module linker, each written once (issue 39).

The fields of a message to the component are declared in Python
(`xai_core.lessons.explainer.MESSAGE_FIELDS`) and mirrored in one browser module
(dashboard/static/explainer/component/wire.js); every sender (the live page, the offline
lesson's host, the model in the browser) builds its messages through `message`, naming only
what it sets. The browser links ES modules with one linker (host/link.js)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dashboard import assets
from xai_core.lessons import explainer

ROOT = Path(__file__).resolve().parents[1]
WIRE_JS = assets.STATIC / assets.COMPONENT / "wire.js"
LINK_JS = assets.HOSTS / "link.js"
DECLARATIONS = {ROOT / "xai_core" / "lessons" / "explainer.py", WIRE_JS}
# the code that could send the component a message or link browser modules
SOURCES = ([*(ROOT / "dashboard").rglob("*.py"), *(ROOT / "xai_core").rglob("*.py")]
           + [path for path in (ROOT / "dashboard").rglob("*.js")
              if "vendor" not in path.parts and "node_modules" not in path.parts
              and not path.name.endswith(".min.js")])


def js_fields() -> dict:
    text = WIRE_JS.read_text(encoding="utf-8")
    body = re.search(r"^export const FIELDS = Object\.freeze\((\{.*?\})\);$", text, re.S | re.M)[1]
    return json.loads(body)


def test_the_browser_declares_the_same_fields_and_frame_as_python():
    assert js_fields() == explainer.MESSAGE_FIELDS
    assert list(js_fields()) == list(explainer.MESSAGE_FIELDS)  # the same order too
    magic = re.search(r'^export const MAGIC = "(\w+)";$', WIRE_JS.read_text(), re.M)[1]
    assert magic.encode() == explainer.MESSAGE_MAGIC


def test_a_message_has_every_field_and_only_those():
    built = explainer.message(signature="s", detail={"block": 3})
    assert list(built) == list(explainer.MESSAGE_FIELDS)
    assert built["signature"] == "s" and built["detail"] == {"block": 3}
    assert built["overview"] is None and built["switch"] == {"live": False, "result": None}
    built["tour"]["steps"] = [1]  # a default is the message's own, not the declaration's
    assert explainer.MESSAGE_FIELDS["tour"]["steps"] is None
    with pytest.raises(ValueError, match="not fields of an Explainer message: stepz"):
        explainer.message(stepz=[])


def groups(text: str):
    """(the text before each bracket, the keys its literal names at its own level)."""
    stack, out = [], []
    for at, char in enumerate(text):
        if char in "{(":
            stack.append((at, []))
        elif char in "})" and stack:
            start, spans = stack.pop()
            body, last = [], start + 1
            for inner_start, inner_end in spans:  # keep this level only
                body.append(text[last:inner_start])
                last = inner_end
            body.append(text[last:at])
            flat = "".join(body)
            keys = set(re.findall(r"""(?:^|[\s,{(])["']?(\w+)["']?\s*(?::|=(?!=))""", flat))
            out.append((text[max(0, start - 20):start + 1], keys))
            if stack:
                stack[-1][1].append((start, at + 1))
    return out


FIELDS = set(explainer.MESSAGE_FIELDS)
MOST = len(FIELDS) // 2 + 1  # a literal naming most fields is a copy of the list


def field_lists(path: Path) -> list[str]:
    """Literals in `path` that name most of the wire's fields without going through a
    `message` builder: a second copy of the field list."""
    found = []
    for before, keys in groups(path.read_text(encoding="utf-8")):
        named = keys & FIELDS
        if len(named) >= MOST and not re.search(r"(?<!\w)message\(\{?$", before):
            found.append(f"{path.relative_to(ROOT)}: {sorted(named)}")
    return found


def test_the_field_list_is_typed_nowhere_else():
    """A sender names the fields it sets through `message` (Python or wire.js); a literal
    naming most fields elsewhere is the list typed a second time."""
    found = [hit for path in SOURCES if path not in DECLARATIONS for hit in field_lists(path)]
    assert found == []


def test_the_check_finds_a_second_field_list(tmp_path):
    """The scan above can fail: the reply as host.js composed it before (its own fields)."""
    copy = tmp_path / "host.js"
    copy.write_text("const data = compose({\n  signature: s, presentation: p, overview: null, "
                    "detail: null,\n  vectors: null, tour: {steps: null}, initial: {block},\n"
                    "  link: { sample: null } }, messages);\nconst ok = wire.message({ "
                    "signature: s, presentation: p, overview: o, detail: d, vectors: v, "
                    "tour: t, initial: i });\n")
    hits = [(before, keys) for before, keys in groups(copy.read_text())
            if len(keys & FIELDS) >= MOST]
    assert len(hits) == 2  # both literals name most fields ...
    flagged = [before for before, _ in hits if not re.search(r"(?<!\w)message\(\{?$", before)]
    assert len(flagged) == 1 and "compose(" in flagged[0]  # ... only the one outside `message`


# --- one module linker ---------------------------------------------------------------------

def is_linker(text: str) -> bool:
    """Code that links ES modules itself: an import statement's pattern, or modules turned
    into blob: addresses and imported."""
    return bool(re.search(r"/\^import \\\{", text)) or (
        "createObjectURL" in text and re.search(r"\bimport\s*\(", text) is not None
        and "text/javascript" in text)


def test_one_module_linker():
    js = [path for path in SOURCES if path.suffix == ".js"]
    assert [str(path.relative_to(ROOT)) for path in js if is_linker(path.read_text())] == [
        str(LINK_JS.relative_to(ROOT))]
    # in Python, only assets.split_at_imports cuts a module at its imports
    python = [str(path.relative_to(ROOT)) for path in SOURCES if path.suffix == ".py"
              and re.search(r"import \\\\?\{", path.read_text(encoding="utf-8"))]
    assert python == ["dashboard/assets.py"]


def test_every_host_starts_with_the_linker():
    from dashboard.explainer import component, lesson_export

    linker = assets.linker_js()
    assert component.loader_js().startswith(linker)
    page = lesson_export.render_page.__code__  # the lesson's host: linker + lesson.js
    assert "linker_js" in page.co_names
    for host in ("loader.js", "lesson.js"):
        text = (assets.HOSTS / host).read_text()
        assert "linkModules(" in text and not is_linker(text), host


def test_the_browser_writes_the_frame_in_one_module():
    """The frame ("VXB1", the header's length, the header, the arrays) is read and written in
    the browser by wire.js only: the lesson's host and the model in the browser use it."""
    magic = re.compile(r"VXB1|0x56,\s*0x58,\s*0x42,\s*0x31")
    writers = [str(path.relative_to(ROOT)) for path in SOURCES if path.suffix == ".js"
               and magic.search(re.sub(r"/\*.*?\*/|//[^\n]*", "", path.read_text(), flags=re.S))]
    assert writers == [str(WIRE_JS.relative_to(ROOT))]
