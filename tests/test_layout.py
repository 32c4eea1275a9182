"""The core's import graph: no module of xai_core imports itself back, and none imports
streamlit. Read from the source (ast), so imports inside functions count too."""

from __future__ import annotations

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parents[1] / "xai_core"


def module_name(path: Path) -> str:
    parts = path.relative_to(CORE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def core_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(CORE.rglob("*.py"))}


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


def import_graph() -> dict[str, set[str]]:
    """Module -> the core modules it makes Python load. Importing `a.b.c` also runs the
    `__init__` of `a.b` and `a`, unless the importer sits inside that package (then the
    package is already loading)."""
    modules = core_modules()
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
    assert "xai_core.pipeline" in graph["xai_core.compare"]  # from .pipeline import ...
    assert "xai_core.infra.cache" in graph["xai_core.pipeline"]
    assert "xai_core.methods" in graph["xai_core.compare"]  # a package's __init__ runs


def test_xai_core_has_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_xai_core_never_imports_streamlit():
    modules = core_modules()
    offenders = [name for name, path in modules.items()
                 if any(target.split(".")[0] == "streamlit"
                        for target in imported_modules(path, name, modules))]
    assert offenders == []


# --- thin pages ---------------------------------------------------------------------------------

ROOT = CORE.parent
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
