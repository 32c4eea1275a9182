"""Waking the students of a class when the instructor moves, instead of a fast poll.

A following student's follow poll is a fragment (`classroom._poll`). Rerun by the browser every
second it cost a replica about 2.5 ms of CPU per student per second (`bench/bench_class.py`:
25 % of a core at 100 idle students, where issue 41 allows 5 %). So the browser reruns it
only every `classroom.POLL_S` (a fallback), and one thread per process watches the classes its
sessions belong to: it reads each class's row every WATCH_S and, when the instructor moved or
a question or the check opened or was revealed, reruns each of those sessions at once, with
the session's last client state (its page, query and widgets), on Streamlit's event loop, as
Streamlit does itself when it reruns a session after a source file changed (`runOnSave`).
The rerun's follow poll, early in the sidebar, then switches the page before the old page's
body runs; for a question it draws the question.

This reaches two attributes Streamlit does not document (`AppSession._client_state`,
`Runtime._get_async_objs`; streamlit is pinned in requirements.txt). Should they change, the
wake is skipped with one log line and the fallback poll still moves the class, more slowly.
"""

from __future__ import annotations

import logging
import threading
import time

WATCH_S = 0.25
_LOG = logging.getLogger(__name__)
_LOCK = threading.Lock()
_SESSIONS: dict[str, set[str]] = {}  # class code -> the ids of its sessions here
_SEEN: dict[str, object] = {}  # class code -> what its sessions last saw
_THREAD: list[threading.Thread] = []
_BROKEN: list[str] = []  # why waking is off in this process (logged once)


def register(code: str, state_of) -> None:
    """Called inside the poll fragment: this session follows class `code`. `state_of(code)`
    gives what the sessions must be woken for when it changes (None: the class is gone)."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    if ctx is None or _BROKEN:
        return
    with _LOCK:
        for sessions in _SESSIONS.values():  # a session follows one class at a time
            sessions.discard(ctx.session_id)
        _SESSIONS.setdefault(code, set()).add(ctx.session_id)
        if not _THREAD:
            thread = threading.Thread(target=_watch, args=(state_of,), daemon=True,
                                      name="vit-lens-class-wake")
            _THREAD.append(thread)
            thread.start()


def forget(code: str) -> None:
    """This session leaves the class."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    with _LOCK:
        if ctx and code in _SESSIONS:
            _SESSIONS[code].discard(ctx.session_id)


def _watch(state_of) -> None:
    while not _BROKEN:
        time.sleep(WATCH_S)
        with _LOCK:
            watched = {code: set(sessions) for code, sessions in _SESSIONS.items() if sessions}
            for code in [c for c in _SESSIONS if not _SESSIONS[c]]:
                del _SESSIONS[code]
                _SEEN.pop(code, None)
        for code, sessions in watched.items():
            try:
                state = state_of(code)
            except Exception as error:  # noqa: BLE001  the database away: the poll goes on
                _LOG.warning("class watch: %s", type(error).__name__)
                continue
            if code in _SEEN and _SEEN[code] != state:
                for session_id in sessions:
                    _wake(code, session_id)
            _SEEN[code] = state


def _wake(code: str, session_id: str) -> None:
    from streamlit import runtime
    from streamlit.proto.ClientState_pb2 import ClientState

    try:
        instance = runtime.get_instance()
        session = instance.get_app_session(session_id)
        if session is None:  # the tab closed
            with _LOCK:
                _SESSIONS.get(code, set()).discard(session_id)
            return
        request = ClientState()
        request.CopyFrom(session._client_state)
        request.fragment_id, request.is_auto_rerun = "", False
        instance._get_async_objs().eventloop.call_soon_threadsafe(session.request_rerun,
                                                                  request)
    except (AttributeError, RuntimeError) as error:
        _BROKEN.append(f"{type(error).__name__}: {error}")
        _LOG.warning("class mode: waking students is off (%s); the follow poll remains",
                     _BROKEN[0])
