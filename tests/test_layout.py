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
