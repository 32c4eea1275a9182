"""Files the browser fetches from dashboard/static/, which `server.enableStaticServing`
serves at app/static/ (a path relative to every page, so it works behind a proxy's prefix)."""

from __future__ import annotations

import hashlib
from pathlib import Path

STATIC = Path(__file__).resolve().parent / "static"


def static_url(name: str) -> str:
    """The relative address of dashboard/static/<name>, versioned by a hash of its content:
    the browser may keep the file, and a changed file gets a new address."""
    digest = hashlib.sha256((STATIC / name).read_bytes()).hexdigest()[:12]
    return f"app/static/{name}?v={digest}"
