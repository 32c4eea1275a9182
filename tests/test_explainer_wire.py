"""The Explainer's wire format and module linker, each written once (issue 39).

The fields of a message to the component are declared in Python
(`xai_core.lessons.explainer.MESSAGE_FIELDS`) and mirrored in one browser module
(dashboard/static/explainer/component/wire.js); every sender (the live page, the offline
lesson's host, the model in the browser) builds its messages through `message`, naming only
what it sets. The `view` state the component sends back is declared the same way
(`explainer.VIEW_FIELDS`, wire.js VIEW_FIELDS): the browser builds every view with wire.js `view`,
the live page reads the declared fields (the builder in a browser:
tests/e2e/test_explainer_browser.py). The browser links ES modules with one linker
(host/link.js)."""

from __future__ import annotations

import ast
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


def js_fields(name: str = "FIELDS") -> dict:
    text = WIRE_JS.read_text(encoding="utf-8")
    body = re.search(rf"^export const {name} = Object\.freeze\((\{{.*?\}})\);$", text,
                     re.S | re.M)[1]
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


def test_the_browser_declares_the_same_view_fields_as_python():
    assert js_fields("VIEW_FIELDS") == explainer.VIEW_FIELDS
    assert list(js_fields("VIEW_FIELDS")) == list(explainer.VIEW_FIELDS)
    # every kind has a reader in Python and a "nothing" in the browser, and no other
    from dashboard.explainer import component

    nothing = re.search(r"^const NOTHING = Object\.freeze\(\{(.*?)\}\);$", WIRE_JS.read_text(),
                        re.M)[1]
    kinds = set(explainer.VIEW_FIELDS.values())
    assert set(component._READ) == kinds == set(re.findall(r"(\w+):", nothing))


def read_view(monkeypatch, sent):
    from dashboard.explainer import component

    monkeypatch.setattr(component, "_component_value",
                        lambda name: sent if name == "view" else None)
    return component._view()


def test_the_live_page_reads_each_declared_field_by_its_kind(monkeypatch):
    sent = {"block": 4, "tour": 2, "have": "sig", "blocks": [1, 4, "x", True], "qk": [4],
            "want_qk": True, "off": [[6, 3], [6, 3], [1, 2, 3]], "dismissed": True, "ask": 1,
            "extra": "ignored"}
    assert read_view(monkeypatch, sent) == {
        "block": 4, "tour": 2, "have": "sig", "blocks": {1, 4}, "qk": {4}, "want_qk": True,
        "off": [(6, 3)], "dismissed": True, "ask": 1}
    # what the browser's `view` builds with nothing given reads as nothing
    nothing = {"block": None, "tour": None, "have": None, "blocks": [], "qk": [],
               "want_qk": False, "off": [], "dismissed": False, "ask": None}
    assert read_view(monkeypatch, nothing) == {"blocks": set(), "qk": set(), "want_qk": False,
                                               "off": [], "dismissed": False}
    # a field of another kind is left out (an int or text) or false (a flag)
    wrong = {"block": "4", "tour": True, "have": 7, "blocks": "1", "want_qk": "yes"}
    assert read_view(monkeypatch, wrong) == {"want_qk": False, "off": [], "dismissed": False}
    assert read_view(monkeypatch, ["not", "a", "view"]) == {}


def test_the_live_page_reads_what_the_declaration_lists(monkeypatch):
    """The reader takes its fields from VIEW_FIELDS, not a list of its own: a field declared
    there is read, one dropped from it is not."""
    fields = {name: kind for name, kind in explainer.VIEW_FIELDS.items() if name != "have"}
    monkeypatch.setattr(explainer, "VIEW_FIELDS", {**fields, "zoom": "int"})
    read = read_view(monkeypatch, {"have": "sig", "zoom": 2, "block": 1})
    assert read["zoom"] == 2 and read["block"] == 1 and "have" not in read


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


# each declared field list and the builder that may name its fields (Python and wire.js)
DECLARED = {"message": set(explainer.MESSAGE_FIELDS), "view": set(explainer.VIEW_FIELDS)}


def most(fields: set) -> int:
    return len(fields) // 2 + 1  # a literal naming most fields is a copy of the list


def through(builder: str, before: str) -> bool:
    return re.search(rf"(?<!\w){builder}\(\{{?$", before) is not None


def python_string_lists(text: str) -> list[set[str]]:
    """The strings of each tuple, list or set literal in Python source (field names typed as
    a list: `for key in ("block", "tour", ...)`)."""
    return [{item.value for item in node.elts if isinstance(item, ast.Constant)
             and isinstance(item.value, str)}
            for node in ast.walk(ast.parse(text))
            if isinstance(node, (ast.Tuple, ast.List, ast.Set))]


def field_lists(path: Path) -> list[str]:
    """Literals in `path` that name most of a declaration's fields without going through its
    builder (`message`, `view`): a second copy of the field list."""
    text, found = path.read_text(encoding="utf-8"), []
    literals = groups(text) + [("", names) for names in
                               (python_string_lists(text) if path.suffix == ".py" else [])]
    for builder, fields in DECLARED.items():
        for before, keys in literals:
            named = keys & fields
            if len(named) >= most(fields) and not through(builder, before):
                found.append(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name}"
                             f": {sorted(named)}")
    return found


def test_the_field_lists_are_typed_nowhere_else():
    """A sender names the fields it sets through `message` or `view` (Python or wire.js); a
    literal naming most of either's fields elsewhere is the list typed a second time."""
    found = [hit for path in SOURCES if path not in DECLARATIONS for hit in field_lists(path)]
    assert found == []


def test_the_check_finds_a_second_field_list(tmp_path):
    """The scan above can fail: the reply as host.js composed it before (its own fields), the
    view as sync.js sent it before `view`, the reader's field tuples as it read them before
    VIEW_FIELDS; a literal through its builder is not a copy."""
    copy = tmp_path / "host.js"
    copy.write_text("const data = compose({\n  signature: s, presentation: p, overview: null, "
                    "detail: null,\n  vectors: null, tour: {steps: null}, initial: {block},\n"
                    "  link: { sample: null } }, messages);\nconst ok = wire.message({ "
                    "signature: s, presentation: p, overview: o, detail: d, vectors: v, "
                    "tour: t, initial: i });\n"
                    'send.setStateValue("view", { block: null, tour: null, have: null, '
                    "blocks: [], ask: 1 });\n"
                    'send.setStateValue("view", view({ block: b, tour: t, have: h, blocks: [], '
                    "ask: 1 }));\n")
    assert [hit.split(": ", 1)[1] for hit in field_lists(copy)] == [
        "['detail', 'initial', 'link', 'overview', 'presentation', 'signature', 'tour', "
        "'vectors']", "['ask', 'block', 'blocks', 'have', 'tour']"]
    reader = tmp_path / "reader.py"
    reader.write_text('clean = {key: view[key] for key in ("block", "tour")}\n'
                      'for name in ("blocks", "qk", "have", "off", "want_qk"):\n    pass\n')
    assert [hit.split(": ", 1)[1] for hit in field_lists(reader)] == [
        "['blocks', 'have', 'off', 'qk', 'want_qk']"]


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
