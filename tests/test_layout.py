"""The core's import graph: no module of xai_core imports itself back, and none imports
streamlit. The project's rooms, declared once and lowest first (`LAYERS`): no import runs back
up, and no two core modules share a name unless `SHARED_NAMES` (and docs/layout.md) say why.
Read from the source (ast), so imports inside functions count too. The
documentation's shape: a README that reads in five minutes, links that lead somewhere. The
Explainer's browser modules: none over 400 lines, one import form, no cycle."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "xai_core"

# The rooms, lowest first: a module imports from its own room and the rooms below it, never
# from one above. A package is one room; each module at xai_core's top level is a room of its
# own (the engine's entry points); `xai_core` is the package's __init__ (the version).
LAYERS = ("xai_core", "xai_core.images", "xai_core.capture", "xai_core.maps", "xai_core.infra",
          "xai_core.pipeline", "xai_core.models", "xai_core.analysis", "xai_core.methods",
          "xai_core.metrics", "xai_core.figures", "xai_core.studies", "xai_core.benchmark",
          "xai_core.lessons", "xai_core.browser_model", "xai_core.classroom", "dashboard",
          "xai_core.cli",
          "xai_core.__main__", "pages", "bench")
ENTRY_POINTS = 5  # modules at xai_core's top level besides __init__ and __main__
# Module (and package) names used twice in xai_core: only a command-line module in cli/ named
# after the package or module it runs. Each with the two modules and why, as docs/layout.md.
SHARED_NAMES = {
    name: ({f"xai_core.cli.{name}", f"xai_core.{room}"}, "a command and what it runs")
    for name, room in (("benchmark", "benchmark"), ("metrics", "metrics"),
                       ("studies", "studies"), ("warmup", "lessons.warmup"),
                       ("classroom", "classroom"))}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def core_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(CORE.rglob("*.py"))}


def project_modules() -> dict[str, Path]:
    """Every module of the rooms: xai_core, dashboard, the page scripts and the benchmarks."""
    return {module_name(path): path for folder in ("xai_core", "dashboard", "pages", "bench")
            for path in sorted((ROOT / folder).rglob("*.py"))}


def imported_modules(path: Path, name: str, modules) -> set[str]:
    """Every module `name` imports (absolute names), wherever the import statement sits.
    `from pkg import x` names the module `pkg.x` when there is one, else `pkg` itself."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return found


def import_graph(modules: dict[str, Path] | None = None) -> dict[str, set[str]]:
    """Module -> the modules (of `modules`, by default xai_core's) it makes Python load.
    Importing `a.b.c` also runs the `__init__` of `a.b` and `a`, unless the importer sits
    inside that package (then the package is already loading)."""
    modules = core_modules() if modules is None else modules
    graph = {}
    for name, path in modules.items():
        edges = set()
        for target in imported_modules(path, name, modules):
            if target in modules and target != name:
                edges.add(target)
            parts = target.split(".")
            for end in range(1, len(parts)):
                ancestor = ".".join(parts[:end])
                if ancestor in modules and not (name + ".").startswith(ancestor + "."):
                    edges.add(ancestor)
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules (first == last), or None."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_cycle_finder_sees_a_cycle_and_a_clean_graph():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_graph_reads_relative_imports_and_package_inits():
    graph = import_graph()
    assert "xai_core.pipeline" in graph["xai_core.studies.method_runs"]  # from .pipeline import ...
    assert "xai_core.infra.cache" in graph["xai_core.pipeline"]
    assert "xai_core.methods" in graph["xai_core.studies.method_runs"]  # a package's __init__ runs


def test_xai_core_has_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def room_of(name: str, layers=LAYERS) -> str | None:
    """The declared room holding module `name`: the longest layer it is or sits inside
    (`xai_core` holds only the package's own __init__); None when no room holds it."""
    rooms = [room for room in layers if name == room
             or (room != "xai_core" and name.startswith(room + "."))]
    return max(rooms, key=len, default=None)


def imports_up(graph: dict[str, set[str]], layers=LAYERS) -> list[str]:
    """Every import that runs from a room to a room above it, and every module in no room."""
    rank = {room: at for at, room in enumerate(layers)}
    found = [f"{name}: in no room of LAYERS" for name in sorted(graph) if not room_of(name, layers)]
    for name in sorted(graph):
        for target in sorted(graph[name]):
            here, there = room_of(name, layers), room_of(target, layers)
            if here and there and rank[there] > rank[here]:
                found.append(f"{name} -> {target} ({there} is above {here})")
    return found


def test_the_layer_check_finds_an_import_up_and_a_module_in_no_room():
    layers = ("xai_core", "xai_core.infra", "xai_core.pipeline", "dashboard", "xai_core.cli")
    graph = {"xai_core.infra.faults": {"xai_core.pipeline", "xai_core.infra.locks"},
             "xai_core.infra.locks": set(), "xai_core.pipeline": {"xai_core.infra.faults"},
             "xai_core.cli.main": {"xai_core", "xai_core.pipeline", "dashboard.assets"},
             "dashboard.serve": {"xai_core.cli.warmup"}, "xai_core.cli.warmup": set(),
             "dashboard.assets": set(), "xai_core.loose": {"xai_core"}}
    assert imports_up(graph, layers) == [
        "xai_core.loose: in no room of LAYERS",
        "dashboard.serve -> xai_core.cli.warmup (xai_core.cli is above dashboard)",
        "xai_core.infra.faults -> xai_core.pipeline (xai_core.pipeline is above xai_core.infra)"]
    assert room_of("xai_core.cli.main", layers) == "xai_core.cli"
    assert room_of("xai_core", layers) == "xai_core" and room_of("xai_core.x", layers) is None


def test_no_import_runs_back_up_a_layer():
    """xai_core, dashboard, the pages and the benchmarks, lowest room first as LAYERS says."""
    assert imports_up(import_graph(project_modules())) == []


def test_xai_core_top_level_holds_only_the_entry_points():
    top = [path.stem for path in CORE.glob("*.py") if path.stem not in ("__init__", "__main__")]
    assert len(top) <= ENTRY_POINTS, sorted(top)
    assert {f"xai_core.{name}" for name in top} <= set(LAYERS)


def shared_names(modules) -> dict[str, set[str]]:
    """Module name -> the modules called that, for every name used more than once."""
    by_name: dict[str, set[str]] = {}
    for name in modules:
        if name != "xai_core":
            by_name.setdefault(name.rsplit(".", 1)[1], set()).add(name)
    return {short: found for short, found in by_name.items() if len(found) > 1}


def test_no_two_core_modules_share_a_name_unless_the_docs_say_why():
    assert shared_names(["xai_core.a.sinks", "xai_core.b.sinks", "xai_core.b"]) == {
        "sinks": {"xai_core.a.sinks", "xai_core.b.sinks"}}
    assert shared_names(core_modules()) == {name: modules for name, (modules, _why)
                                            in SHARED_NAMES.items()}
    layout = (ROOT / "docs" / "layout.md").read_text()
    names_section = layout.split("## Names used twice", 1)[1].split("\n## ", 1)[0]
    for name, (modules, why) in SHARED_NAMES.items():
        assert f"`{name}`" in names_section and why in " ".join(names_section.split()), name


def test_xai_core_never_imports_streamlit():
    modules = core_modules()
    offenders = [name for name, path in modules.items()
                 if any(target.split(".")[0] == "streamlit"
                        for target in imported_modules(path, name, modules))]
    assert offenders == []


README_MAX_LINES = 220  # "README in five minutes": about 200 lines, the rest in docs/
DOC_WIDTH = 100  # prose and lists; tables and code blocks may be wider
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")  # [text](target), ![alt](target)


def documentation() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append((number, line))
    return lines


def heading_anchors(path: Path) -> set[str]:
    """GitHub's ids for a file's headings: lower case, punctuation dropped, spaces to
    hyphens; a repeated heading gets -1, -2, ..."""
    anchors: set[str] = set()
    for _, line in prose_lines(path.read_text()):
        if heading := re.match(r"#{1,6} +(.*?) *#*$", line):
            slug = re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-")
            anchor, repeat = slug, 0
            while anchor in anchors:
                repeat += 1
                anchor = f"{slug}-{repeat}"
            anchors.add(anchor)
    return anchors


def broken_links(paths: list[Path], root: Path = ROOT) -> list[str]:
    """Every relative link (and #anchor into a Markdown file) in `paths` that leads nowhere."""
    problems = []
    for path in paths:
        prose = " ".join(line for _, line in prose_lines(path.read_text()))  # links may wrap
        for target in LINK.findall(re.sub(r"`[^`]*`", "", prose)):  # none in code spans
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:: not ours to check
                continue
            file_part, _, anchor = target.partition("#")
            linked = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(root)}: {target}"
            if not linked.exists():
                problems.append(f"{where}: no such file")
            elif anchor and linked.suffix == ".md" and anchor not in heading_anchors(linked):
                problems.append(f"{where}: no heading with that anchor")
    return problems


def test_readme_reads_in_five_minutes():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"


def test_every_relative_link_in_the_readme_and_docs_leads_somewhere():
    assert broken_links(documentation()) == []


def test_the_link_check_finds_missing_files_and_anchors(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# Big title\n\n## Sinks and `start=auto`\n")
    readme = tmp_path / "README.md"
    readme.write_text(
        "[ok](docs/a.md#sinks-and-startauto) ![pic](docs/a.md) [web](https://example.org/x)\n"
        "[gone](docs/gone.md) [bad anchor](docs/a.md#big) [split\nlink](docs/a.md#big-title)\n"
        "`METHODS['x'](...)`\n"
        "```\n[in code](docs/nowhere.md)\n```\n")
    found = broken_links([readme], root=tmp_path)
    assert found == ["README.md: docs/gone.md: no such file",
                     "README.md: docs/a.md#big: no heading with that anchor"]


def test_readme_and_docs_are_wrapped_at_100_characters():
    too_wide = [f"{path.relative_to(ROOT)}:{number} ({len(line)})"
                for path in documentation()
                for number, line in prose_lines(path.read_text())
                if len(line) > DOC_WIDTH and not line.lstrip().startswith("|")]
    assert too_wide == []


# The Explainer's browser modules (dashboard/static/explainer/component/): small files that the
# loader and the offline lesson link without a build step, so only one import form is allowed.
EXPLAINER_JS = CORE.parent / "dashboard" / "static" / "explainer" / "component"
JS_IMPORT = re.compile(r'^import \{([^}]*)\} from "\./([\w.-]+\.js)";\n', re.M)
JS_EXPORT = re.compile(r"^export (?:function|class|const) (\w+)", re.M)


def js_modules() -> dict[str, str]:
    return {path.name: path.read_text(encoding="utf-8") for path in sorted(EXPLAINER_JS.glob("*.js"))}


def js_import_graph(modules: dict[str, str]) -> dict[str, set[str]]:
    return {name: {match[2] for match in JS_IMPORT.finditer(text)} for name, text in modules.items()}


def test_the_live_loader_and_the_lesson_link_the_same_import_form():
    """One import form, linked two ways: at run time by the live loader's regex, ahead of
    time by `assets.split_at_imports` for the offline lesson. The two patterns are equal."""
    from dashboard import assets

    linker = assets.linker_js()
    pattern = re.search(r"^const IMPORT = /(.+)/gm;$", linker, re.M)[1]
    assert pattern.replace("\\/", "/") == assets.MODULE_IMPORT.pattern


def test_explainer_modules_are_small():
    modules = js_modules()
    assert "main.js" in modules and len(modules) >= 10
    lines = {name: text.count("\n") for name, text in modules.items()}
    assert max(lines.values()) <= 400, {name: n for name, n in lines.items() if n > 400}


def test_explainer_modules_import_only_named_siblings_at_the_top():
    modules = js_modules()
    for name, text in modules.items():
        statements = [line for line in text.splitlines() if re.match(r"\s*(import|export)\b", line)]
        imports = JS_IMPORT.findall(text)
        assert len([s for s in statements if s.startswith("import")]) == len(imports), name
        assert not re.search(r"\bimport\s*\(|\bimport\.meta\b|\bfetch\s*\(|\brequire\s*\(", text), name
        # the imports come first, after the opening comment
        code = re.sub(r"/\*.*?\*/", "", text, count=1, flags=re.S).lstrip()
        assert code.startswith("".join(f"import {{{names}}} from \"./{target}\";\n"
                                       for names, target in imports)), name
        for names, target in imports:
            assert target in modules, f"{name} imports missing {target}"
            exported = set(JS_EXPORT.findall(modules[target]))
            wanted = {n.strip() for n in names.split(",")}
            assert wanted <= exported, f"{name} imports {wanted - exported} not exported by {target}"
        exports = [s for s in statements if s.startswith("export")]
        allowed = r"export (function|class|const) \w+"
        defaults = [s for s in exports if not re.match(allowed, s)]
        if name == "main.js":
            assert defaults == ["export default function mount({ parentElement, data, "
                                "setStateValue, setTriggerValue }) {"], defaults
        else:
            assert defaults == [], (name, defaults)


def test_explainer_modules_have_no_import_cycle_and_all_load():
    graph = js_import_graph(js_modules())
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)
    reached, todo = set(), ["main.js"]
    while todo:
        name = todo.pop()
        if name not in reached:
            reached.add(name)
            todo.extend(graph[name])
    assert reached == set(graph), f"not loaded by main.js: {set(graph) - reached}"


def test_each_part_writes_only_its_own_elements():
    """A part changes what it built; the root's marks for tests go through the root's owner
    (app.js `mark`), a faded panel follows the store (issue 39: player.js and tour.js wrote
    the detail panel's and the root's elements)."""
    foreign = re.compile(r"\bapp\.(?:root|\w+\.(?:element|canvas|box))\."
                         r"(?:dataset\.\w+\s*=|style\.(?!getPropertyValue)|classList\.(?!contains)"
                         r"|innerHTML|textContent|append|remove)")
    found = {name: foreign.findall(text) for name, text in js_modules().items() if name != "app.js"}
    assert {name: hits for name, hits in found.items() if hits} == {}


# the component's modules that are no part: the entry, the wiring, helpers that hold no view
NOT_PARTS = {"main.js", "app.js", "store.js", "protocol.js", "wire.js", "maps.js", "colour.js",
             "dom.js", "format.js", "metrics.js"}
# sync.js's view messages keep their names while the view message is declared once (wire.js)
VIEW_MESSAGE = re.compile(r'app\.send\.setStateValue\("view",.*?\);\n', re.S)


# the Explainer reached (`app.x`, `this.app`) or handed over (`constructor(app`, `new X(app`,
# `{ app }`)
EXPLAINER = re.compile(r"\bapp\.(?!js\b)[A-Za-z_$]|\bthis\.app\b"
                       r"|\b(?:constructor|new\s+\w+)\s*\(\s*app\b|\{\s*app\s*[,}]")


def explainer_parts() -> dict[str, str]:
    return {name: VIEW_MESSAGE.sub("", text) for name, text in js_modules().items()
            if name not in NOT_PARTS}


def test_parts_get_narrow_dependencies_and_act_through_the_store():
    """Issue 39: a part receives what it uses (the store, the host's data, the maps, the
    painter), never the whole Explainer, and asks another part to act by dispatching to the
    store; app.js is the one place that wires them, and builds no part with itself."""
    parts = explainer_parts()
    assert {"picture.js", "tour.js", "sync.js", "player.js", "qk.js"} <= set(parts)
    reached = {name: sorted({m.group(0) for m in EXPLAINER.finditer(text)})
               for name, text in parts.items()}
    assert {name: hits for name, hits in reached.items() if hits} == {}
    # the host's data is the Explainer's to change: a part reads it
    written = re.compile(r"\bdata\.\w+(?:\.\w+)*\s*(?:=(?!=)|\+=|-=)")
    assert {name: written.findall(text) for name, text in parts.items()
            if written.search(text)} == {}
    wiring = js_modules()["app.js"]
    assert re.findall(r"new \w+\(\s*this\b", wiring) == []
    # the actions app.js names (`actions()`) are exactly those the parts dispatch
    actions = re.search(r"\n  actions\(\) \{\n(.*?)\n  \}\n", wiring, re.S).group(1)
    named = set(re.findall(r"^ {6}(\w+): \(", actions, re.M))
    dispatched = {m for text in parts.values()
                  for m in re.findall(r'dispatch\(\s*(?:"(\w+)"|[^,)]*\?\s*"(\w+)"\s*:\s*"(\w+)")',
                                      text) for m in m if m}
    assert dispatched == named and len(named) > 10, dispatched ^ named


def test_the_part_scan_finds_the_explainer_and_writes_to_data():
    for caught in ("app.player.stop();", "constructor(app) {", "new QKPanel(app, b)",
                   "this.app = x;", "const x = { app };"):
        assert EXPLAINER.search(caught), caught
    for fine in ("// wired in app.js", "the ViT Lens app; this file", "needs the app. */",
                 'store.dispatch("stop")'):
        assert not EXPLAINER.search(fine), fine
    sync = 'app.send.setStateValue("view", { block: app.state.block,\n  off: 1 });\nx = 2;\n'
    assert VIEW_MESSAGE.sub("", sync) == "x = 2;\n"


def test_tour_steps_are_found_by_id():
    """Code and tests find a step by its `id`, never by its title (a title may be reworded)."""
    by_title = re.compile(r"""(?<!\["page"\])\[["']title["']\]\s*==|\.title\s*===?\s*["'`]""")
    files = [*js_modules().items(), *((path.name, path.read_text(encoding="utf-8")) for path in
                                      (CORE.parent / "tests").rglob("test_*.py"))]
    assert [name for name, text in files if by_title.search(text)] == []


def test_the_loader_gets_every_module_after_its_imports_under_one_version(tmp_path, monkeypatch):
    from dashboard import assets

    order = assets.module_order(assets.COMPONENT)
    graph = js_import_graph(js_modules())
    assert order[-1] == "main.js" and sorted(order) == sorted(graph)
    for at, name in enumerate(order):
        assert graph[name] <= set(order[:at]), name
    # the version covers every module: a change to any one gives every address a new one
    monkeypatch.setattr(assets, "STATIC", tmp_path)
    (tmp_path / "explainer").mkdir()
    for name, text in js_modules().items():
        (tmp_path / "explainer" / name).write_text(text)
    before = assets.folder_version("explainer")
    (tmp_path / "explainer" / "format.js").write_text(js_modules()["format.js"] + "\n")
    assert assets.folder_version("explainer") != before
    (tmp_path / "explainer" / "b.js").write_text('import { a } from "./a.js";\nexport const b = a;\n')
    (tmp_path / "explainer" / "a.js").write_text('import { b } from "./b.js";\nexport const a = 1;\n')
    (tmp_path / "explainer" / "main.js").write_text('import { b } from "./b.js";\n')
    with pytest.raises(ValueError, match="import cycle: b.js -> a.js -> b.js"):
        assets.module_order("explainer")


# --- thin pages ---------------------------------------------------------------------------------

PAGE_LINES = 300  # a page is layout and words; its logic lives in xai_core


def test_no_page_file_is_over_300_lines():
    long = {path.name: n for path in sorted((ROOT / "pages").glob("*.py"))
            if (n := len(path.read_text().splitlines())) > PAGE_LINES}
    assert long == {}


def method_modules(tree: ast.AST) -> set[str]:
    """The method modules (`xai_core.methods.<name>`) a file imports."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "xai_core.methods":
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "xai_core.methods."):
            found.add(node.module.rsplit(".", 1)[1])
    return found


def literal_option_widgets(source: str) -> list[str]:
    """Widgets that redeclare a method's option: a call whose `key` ends with the name of an
    option declared by a method module the file imports (`p4_discard`: rollout's discard)
    and that writes that option's range or choices as literals (a number for both bounds,
    or a list of constants). The range, default and choices come from the declaration, via
    `ui.method_options` or the method module's own constants."""
    from xai_core.methods import METHODS

    tree = ast.parse(source)
    options = {}
    for info in METHODS.values():
        if info.compute.__module__.rsplit(".", 1)[1] in method_modules(tree):
            options |= {option.name: info.name for option in info.options}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        key = next((k.value.value for k in node.keywords if k.arg == "key"
                    and isinstance(k.value, ast.Constant) and isinstance(k.value.value, str)),
                   None)
        name = key.rsplit("_", 1)[-1] if key else None
        if name not in options:
            continue
        args = node.args[1:] if _is_widget(node.func) else node.args[2:]  # links.number(draw,
        bounds = [a for a in args[:2]] + [k.value for k in node.keywords  # label, low, high)
                                          if k.arg in ("min_value", "max_value")]
        numbers = [b for b in bounds if isinstance(b, ast.Constant)
                   and isinstance(b.value, (int, float))]
        lists = [a for a in args[:1] if isinstance(a, (ast.List, ast.Tuple))
                 and all(isinstance(e, ast.Constant) for e in a.elts)]
        if len(numbers) >= 2 or lists:
            found.append(f"line {node.lineno}: {key} redeclares {options[name]}'s {name}")
    return found


def _is_widget(func: ast.AST) -> bool:
    """A Streamlit widget call (`st.slider`, `column.slider`), not `links.number(draw, ...)`."""
    return not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                and func.value.id == "links")


def test_the_check_finds_a_redeclared_option():
    """Page 4 before it read the declaration: its own discard range (to 0.95; the method
    allows 0.99) and a literal fusion list."""
    page = ("from xai_core.methods import rollout\n"
            "discard = c2.slider('Discard ratio', 0.0, 0.95, step=0.05, key='p4_discard')\n"
            "fusion = st.selectbox('Head fusion', ['mean', 'max'], key='p4_fusion')\n"
            "end = links.number(c4.slider, 'End', 0, 11, key='p4_end', default=11)\n"
            "kept = c2.slider('Discard ratio', 0.0, 0.95, key='p4_discard_other')\n")
    assert literal_option_widgets(page) == [
        "line 2: p4_discard redeclares rollout's discard",
        "line 3: p4_fusion redeclares rollout's fusion",
        "line 4: p4_end redeclares rollout's end"]
    assert literal_option_widgets(page.replace("rollout", "gradcam")) == []  # not its method


def test_no_page_redeclares_a_method_option():
    files = sorted((ROOT / "pages").glob("*.py")) + sorted((ROOT / "dashboard").rglob("*.py"))
    found = {path.name: hits for path in files
             if (hits := literal_option_widgets(path.read_text()))}
    assert found == {}
