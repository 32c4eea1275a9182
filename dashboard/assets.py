"""Files the browser fetches from dashboard/static/, which `server.enableStaticServing`
serves at app/static/ (a path relative to every page, so it works behind a proxy's prefix).

A folder of ES modules (the Explainer's, dashboard/static/explainer/component/) is versioned as a
whole: the browser fetches every module at `<name>?v=<hash of the folder>`, so a change to
any module changes every address. The modules import each other only with top-of-file
`import { a, b } from "./name.js";` statements, which the loader (and the offline lesson)
can resolve without a build step."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

STATIC = Path(__file__).resolve().parent / "static"
# The Explainer's browser code, all of it, in one folder (docs/layout.md): the component
# (ES modules, entry main.js, and its CSS), the model in the browser (ES modules, entry
# own-photo.js) and the hosts that mount the component (the live loader, the offline
# lesson's two hosts and the one module linker they share).
EXPLAINER = STATIC / "explainer"
COMPONENT = "explainer/component"  # folders under STATIC, as folder_version/module_order take
BROWSER_MODEL = "explainer/model"
HOSTS = EXPLAINER / "host"
# the one import form the browser modules use: named, relative, in the same folder
MODULE_IMPORT = re.compile(r'^import \{([^}]*)\} from "\./([\w.-]+\.js)";', re.M)


def linker_js() -> str:
    """The one module linker (host/link.js), which every host that links ES modules in the
    browser starts with: the live loader, the offline lesson's host, the charts' loader."""
    return (HOSTS / "link.js").read_text(encoding="utf-8")


def packed_modules(folder: Path, entry: str) -> list[dict]:
    """The ES modules `entry` loads from `folder`, in load order (`module_order`), each as
    {"name", "parts"}: its source cut at its imports (`split_at_imports`), for the linker
    (host/link.js linkModules) to join in the browser. A missing module or a cycle is a
    ValueError."""
    names = module_order(folder.name, entry, root=folder.parent)
    return [{"name": name, "parts": split_at_imports((folder / name).read_text(encoding="utf-8"))}
            for name in names]


def static_url(name: str) -> str:
    """The relative address of dashboard/static/<name>, versioned by a hash of its content:
    the browser may keep the file, and a changed file gets a new address."""
    digest = hashlib.sha256((STATIC / name).read_bytes()).hexdigest()[:12]
    return f"app/static/{name}?v={digest}"


def folder_version(folder: str) -> str:
    """A hash of every file's name and content in dashboard/static/<folder>/."""
    digest = hashlib.sha256()
    for path in sorted((STATIC / folder).glob("*.js")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def module_imports(path: Path) -> list[str]:
    """The files a browser module imports (in the one allowed form), in order."""
    return [match[2] for match in MODULE_IMPORT.finditer(path.read_text(encoding="utf-8"))]


def split_at_imports(source: str) -> list[str]:
    """A module's source cut around the specifier of each import (`MODULE_IMPORT`, quotes
    included): even parts are code, odd parts the names of the modules imported. The offline
    lesson joins them again with blob: addresses, as the live loader does with the same
    pattern (dashboard/static/explainer/host/link.js, IMPORT)."""
    parts, start = [], 0
    for match in MODULE_IMPORT.finditer(source):
        quoted = f'"./{match[2]}"'
        at = match.start() + match[0].rindex(quoted)
        parts += [source[start:at], match[2]]
        start = at + len(quoted)
    return parts + [source[start:]]


def module_order(folder: str, entry: str = "main.js", root: Path | None = None) -> list[str]:
    """The modules `entry` loads from <root>/<folder>/ (root: dashboard/static), each after
    the modules it imports, `entry` last. A missing file or an import cycle is a ValueError."""
    base, order, visiting = (root or STATIC) / folder, [], []

    def visit(name: str) -> None:
        if name in order:
            return
        if name in visiting:
            raise ValueError("import cycle: " + " -> ".join(visiting[visiting.index(name):] + [name]))
        if not (base / name).is_file():
            raise ValueError(f"{folder}/{name} is imported but does not exist")
        visiting.append(name)
        for dependency in module_imports(base / name):
            visit(dependency)
        visiting.pop()
        order.append(name)

    visit(entry)
    return order
