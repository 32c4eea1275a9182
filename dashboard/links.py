"""Deep links: the widgets an instructor may want to share travel in the URL as stable ids.

Streamlit's own `bind="query-params"` puts a select box's *displayed label* in the URL, so a
link breaks when a label changes and `?image_choice=motorcycle` (the id) is ignored. Here the
URL carries each option's id (`to_id`, `str` by default): a sample or model id, a method
name, a class index (or a k-NN class name), a 0-based block or head index. Old links that
carry the displayed label are still understood.

Each linked widget is drawn through one of `choice`, `choices`, `number` or `flag`, which
1. before drawing, apply the URL's value when it differs from what this session last read
   or wrote (a pasted link, browser back/forward); a value the widget cannot take is named
   in a warning and dropped;
2. after drawing, write the widget's id to the URL, or remove it at the default value.
`prune()` at the end of a full run removes linked keys that no widget drew (another
page's). Values persist across page switches (`persist_state="session"`).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import streamlit as st

from . import literal
from .widgets import Interval, keep_valid

_SEEN = "_links_seen"  # key -> the URL value this session last applied or wrote
_DRAWN = "_links_drawn"  # keys drawn by the current full run
_REFUSED = object()


def start_run() -> None:
    """Call at the top of every full run of the entry script."""
    st.session_state[_DRAWN] = set()


def prune() -> None:
    """Drop linked keys that no widget drew in this run (left over from another page)."""
    drawn = st.session_state.get(_DRAWN, set())
    seen = st.session_state.get(_SEEN, {})
    for key in [k for k in seen if k not in drawn and k in st.query_params]:
        del st.query_params[key]


def drawn_keys() -> set[str]:
    """The linked keys drawn so far in this full run (what this page's address can carry)."""
    return set(st.session_state.get(_DRAWN, set()))


def _follow(key: str, parse: Callable[[str], Any], what: str) -> None:
    raw = st.query_params.get(key)
    seen = st.session_state.setdefault(_SEEN, {})
    if raw is None or seen.get(key) == raw:
        return
    seen[key] = raw
    value = parse(raw)
    if value is _REFUSED:
        st.warning(f"The link asks for {what} {literal.code(raw)}, which is not a choice here; "
                   "the current choice is kept.")
        del st.query_params[key]
        return
    st.session_state[key] = value


def _publish(key: str, url_value: str | None) -> None:
    st.session_state.setdefault(_SEEN, {})[key] = url_value
    st.session_state.setdefault(_DRAWN, set()).add(key)
    if url_value is None:
        if key in st.query_params:
            del st.query_params[key]
    elif st.query_params.get(key) != url_value:
        st.query_params[key] = url_value


def _lookup(options: Sequence, to_id: Callable, format_func: Callable | None) -> dict:
    """URL text -> option: ids first, then (old links) the labels shown."""
    table = {str(format_func(o)): o for o in options} if format_func else {}
    table.update({to_id(o): o for o in options})
    return table


def _draw(draw: Callable, args: tuple, key: str, default_kwarg: dict, kwargs: dict):
    kwargs.setdefault("persist_state", "session")
    if key not in st.session_state:  # a default next to a set value makes Streamlit warn
        kwargs.update(default_kwarg)
    return draw(*args, key=key, **kwargs)


# the keyword that sets a widget's first value, where it is not `index=`
_DEFAULT_KEYWORD = {"segmented_control": "default", "pills": "default", "select_slider": "value"}


def choice(draw: Callable, label: str, options: Sequence, *, key: str, default=None,
           to_id: Callable[[Any], str] = str, what: str | None = None, **kwargs):
    """A single choice (`st.selectbox`, `st.radio`, `st.segmented_control`,
    `st.select_slider` or a container's) linked by option id. `default` (the first option
    when None) is the value with nothing in the URL."""
    options = list(options)
    default = options[0] if default is None else default
    table = _lookup(options, to_id, kwargs.get("format_func"))
    _follow(key, lambda raw: table.get(raw, _REFUSED), what or label.lower())
    keep_valid(key, options, default)  # e.g. another model has other classes
    keyword = _DEFAULT_KEYWORD.get(getattr(draw, "__name__", ""))
    first = {keyword: default} if keyword else {"index": options.index(default)}
    value = _draw(draw, (label, options), key, first, kwargs)
    _publish(key, None if value == default else to_id(value))
    return value


def choices(draw: Callable, label: str, options: Sequence, *, key: str,
            default: Sequence = (), to_id: Callable[[Any], str] = str,
            what: str | None = None, **kwargs) -> list:
    """A multiselect linked as comma-separated ids (`?k=a,b`); unknown ids are refused."""
    options, default = list(options), list(default)
    table = _lookup(options, to_id, kwargs.get("format_func"))

    def parse(raw: str):
        picked = [table.get(part) for part in raw.split(",") if part]
        return _REFUSED if None in picked else list(dict.fromkeys(picked))
    _follow(key, parse, what or label.lower())
    value = _draw(draw, (label, options), key, {"default": default}, kwargs)
    _publish(key, None if value == default else ",".join(to_id(v) for v in value))
    return value


def number(draw: Callable, label: str, low: int, high: int, *, key: str, default: int,
           what: str | None = None, **kwargs) -> int:
    """An integer slider (a block, a head, a layer) linked by its value."""
    def parse(raw: str):
        try:
            value = int(raw)
        except ValueError:
            return _REFUSED
        return value if low <= value <= high else _REFUSED
    _follow(key, parse, what or label.lower())
    keep_valid(key, Interval(low, high), default)  # e.g. a model with fewer blocks
    value = _draw(draw, (label, low, high), key, {"value": default}, kwargs)
    _publish(key, None if value == default else str(int(value)))
    return value


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def is_true(raw: str | None) -> bool:
    """Whether a link's value for a flag reads as on (`flag`'s words)."""
    return raw is not None and raw.strip().lower() in _TRUE


def flag(draw: Callable, label: str, *, key: str, default: bool = False,
         what: str | None = None, **kwargs) -> bool:
    """A checkbox or toggle linked as `true` / `false`."""
    def parse(raw: str):
        text = raw.strip().lower()
        return True if text in _TRUE else False if text in _FALSE else _REFUSED
    _follow(key, parse, what or label.lower())
    value = _draw(draw, (label,), key, {"value": default}, kwargs)
    _publish(key, None if value == default else ("true" if value else "false"))
    return value
