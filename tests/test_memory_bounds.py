"""Shared-server memory: every cache the app keeps is bounded.

pipeline.CAPTURE_CACHE is bounded by entries and bytes (BoundedCache, tested in
test_models.py); Streamlit's own caches in dashboard/ and pages/ must say how many
entries they keep, or a class uploading images would grow them without limit.
bench/bench_memory.py measures the resulting plateau.
"""

from __future__ import annotations

import ast
from pathlib import Path

from xai_core import pipeline

ROOT = Path(__file__).resolve().parent.parent
STREAMLIT_CACHES = ("cache_data", "cache_resource")


def streamlit_cache_uses(path: Path) -> list[tuple[int, str, bool]]:
    """(line, decorator name, has max_entries) for every st.cache_data/st.cache_resource."""
    uses = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        call = node if isinstance(node, ast.Call) else None
        target = call.func if call else node
        if isinstance(target, ast.Attribute) and target.attr in STREAMLIT_CACHES:
            if call is None and isinstance(node, ast.Attribute):
                # a bare decorator `@st.cache_data` (no arguments): unbounded
                uses.append((node.lineno, target.attr, False))
            elif call is not None:
                bounded = any(k.arg == "max_entries" and not (
                    isinstance(k.value, ast.Constant) and k.value.value is None)
                    for k in call.keywords)
                uses.append((node.lineno, target.attr, bounded))
    # a Call's func is also visited as a bare Attribute: keep one entry per line
    by_line = {}
    for line, name, bounded in uses:
        by_line[(line, name)] = by_line.get((line, name), False) or bounded
    return [(line, name, bounded) for (line, name), bounded in sorted(by_line.items())]


def test_the_checker_sees_bounded_and_unbounded_caches(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("import streamlit as st\n"
                      "@st.cache_data\ndef a(): ...\n"
                      "@st.cache_resource(max_entries=4)\ndef b(): ...\n"
                      "@st.cache_data(ttl=60)\ndef c(): ...\n"
                      "@st.cache_data(max_entries=None)\ndef d(): ...\n")
    assert streamlit_cache_uses(sample) == [(2, "cache_data", False), (4, "cache_resource", True),
                                            (6, "cache_data", False), (8, "cache_data", False)]


def test_every_streamlit_cache_in_the_app_has_max_entries():
    files = sorted((ROOT / "dashboard").rglob("*.py")) + sorted((ROOT / "pages").glob("*.py"))
    assert any(path.name == "state.py" for path in files)
    uses = {f"{path.relative_to(ROOT)}:{line} st.{name}": bounded
            for path in files for line, name, bounded in streamlit_cache_uses(path)}
    assert uses, "the app caches its sample images with st.cache_resource"
    assert [where for where, bounded in uses.items() if not bounded] == []


def test_capture_cache_is_bounded_by_entries_and_bytes():
    cache = pipeline.CAPTURE_CACHE
    assert 0 < cache.max_entries <= 256
    assert 0 < cache.max_bytes <= 8 * 2**30
