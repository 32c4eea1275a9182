"""Who the visitor of a script run is, for the budget over time (`xai_core.infra.fair_share`),
and the progress line a visitor past its allowance sees while it waits.

A visitor is counted under its Streamlit session and under a client key for all its
sessions: nginx's browser id (the `vit_lens_uid` cookie the recipe sets), or, from a client
that sends none, its address (`X-Real-IP` from nginx, else the connection's). The key is
hashed with a secret of this process, so neither the id nor the address is kept.
A client that makes up a new browser id for every visit is counted per session only.

A session opened on loopback without a proxy's address header is the server's own: the
replica's warm-up (`dashboard.warm_replica`), a health or admin tool, `make run` on a laptop.
It is nobody's share (nginx always sends the visitor's address).
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from collections import OrderedDict

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from xai_core.infra import fair_share

BROWSER_COOKIE = "vit_lens_uid"  # nginx's userid_name in deploy/nginx/vit-lens.conf
ADDRESS_HEADER = "X-Real-IP"  # the recipe's proxy_set_header
PROXY_HEADERS = (ADDRESS_HEADER, "X-Forwarded-For")
LOOPBACK = ("127.0.0.1", "::1")
SESSIONS_KEPT = 10_000
_SALT = secrets.token_bytes(16)
_known: OrderedDict[str, fair_share.Visitor | None] = OrderedDict()
_lock = threading.Lock()
_spots = threading.local()  # per thread: (the run it belongs to, the progress line shown)


def client_key(cookies, headers, address: str | None) -> str | None:
    """The hashed key of the client behind a session: its browser id, else its address."""
    browser = cookies.get(BROWSER_COOKIE) if cookies is not None else None
    forwarded = headers.get(ADDRESS_HEADER) if headers is not None else None
    raw = f"browser:{browser}" if browser else (
        f"address:{forwarded or address}" if (forwarded or address) else None)
    return hashlib.sha256(_SALT + raw.encode()).hexdigest()[:24] if raw else None


def server_own(headers, address: str | None) -> bool:
    """A session opened on loopback with no proxy in between: the server's own tools."""
    forwarded = headers is not None and any(headers.get(name) for name in PROXY_HEADERS)
    return address in LOOPBACK and not forwarded


def current_visitor() -> fair_share.Visitor | None:
    """The visitor whose script run this thread is (None outside a script run)."""
    ctx = get_script_run_ctx(suppress_warning=True)
    if ctx is None:
        return None
    with _lock:
        if ctx.session_id in _known:
            _known.move_to_end(ctx.session_id)
            return _known[ctx.session_id]
    try:
        context = st.context
        cookies, headers, address = context.cookies, context.headers, context.ip_address
    except Exception:  # noqa: BLE001  no request behind this session (a headless test run)
        cookies = headers = address = None
    if server_own(headers, address):
        found = None
    else:
        found = fair_share.Visitor(
            hashlib.sha256(_SALT + ctx.session_id.encode()).hexdigest()[:24],
            client_key(cookies, headers, address))
    with _lock:
        _known[ctx.session_id] = found
        while len(_known) > SESSIONS_KEPT:
            _known.popitem(last=False)
    return found


def show_wait(left: float, total: float) -> None:
    """The progress line while this run waits for its share; gone when the wait ends. Each
    update is an `st` call, so leaving the page or pressing Stop ends the wait there."""
    ctx = get_script_run_ctx(suppress_warning=True)
    if ctx is None:
        return
    run, spot = getattr(_spots, "shown", (None, None))
    if run is not ctx.cursors:  # a line of an earlier run (a wait ended by a rerun)
        spot = None
    if left <= 0:
        if spot is not None:
            spot.empty()
        _spots.shown = (None, None)
        return
    if spot is None:
        spot = st.empty()
        _spots.shown = (ctx.cursors, spot)  # a new dict for every run: tells runs apart
    done = 1.0 - left / total if total > 0 else 1.0
    spot.progress(min(max(done, 0.0), 1.0), text=fair_share.waiting_words(left))


def settle_run() -> None:
    """At the end of a page run: its CPU time since the last model call, counted."""
    fair_share.settle()


def install() -> None:
    """Tell the core who the visitors are and how to show a wait (once per process)."""
    fair_share.identify_visitors_with(current_visitor)
    fair_share.report_waits_with(show_wait)


install()
