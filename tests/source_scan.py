"""Reading the project's own source for defaults typed outside their declarations: the scans
of tests/test_metric_contract.py and tests/test_view_contract.py (ast, so a comment or a
string in prose never counts)."""

from __future__ import annotations

import ast
from pathlib import Path

from xai_core.metrics import METRICS

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("pages", "dashboard", "xai_core")


def python_files():
    for folder in SCANNED:
        yield from sorted((ROOT / folder).rglob("*.py"))


def metric_name_lists(tree: ast.AST) -> list[int]:
    """Lines of a literal tuple, list or set holding two or more declared metric names."""
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, (ast.Tuple, ast.List, ast.Set))
            and sum(isinstance(e, ast.Constant) and e.value in METRICS for e in node.elts) >= 2]


def typed_defaults(tree: ast.AST, options) -> list[str]:
    """`name = value` for each option (`name` its own name, or ending in `_<name>`): a keyword,
    a parameter's default, an assignment, a dataclass field or an argparse `--name` default
    whose value is the literal the declaration holds."""
    wanted = {option.name: option.default for option in options}

    def named(name: str | None) -> str | None:
        name = (name or "").lower().lstrip("-")
        return next((n for n in wanted if name == n or name.endswith(f"_{n}")), None)

    def hit(name, value) -> str | None:
        option = named(name)
        if option and isinstance(value, ast.Constant) and value.value == wanted[option] \
                and type(value.value) is type(wanted[option]):
            return f"line {value.lineno}: {name} = {value.value!r}"
        return None

    found = []
    for node in ast.walk(tree):
        pairs = []
        if isinstance(node, ast.Call):
            pairs += [(k.arg, k.value) for k in node.keywords]
            if node.args and isinstance(node.args[0], ast.Constant) and isinstance(
                    node.args[0].value, str) and node.args[0].value.startswith("--"):
                pairs += [(node.args[0].value, k.value) for k in node.keywords
                          if k.arg == "default"]
        elif isinstance(node, ast.arguments):
            positional = node.posonlyargs + node.args
            pairs += list(zip([a.arg for a in positional[len(positional) - len(node.defaults):]],
                              node.defaults))
            pairs += [(a.arg, d) for a, d in zip(node.kwonlyargs, node.kw_defaults) if d]
        elif isinstance(node, ast.Assign):
            pairs += [(t.id, node.value) for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            pairs.append((node.target.id, node.value))
        found += [h for name, value in pairs if (h := hit(name, value))]
    return sorted(found, key=lambda h: int(h.split()[1].rstrip(":")))
