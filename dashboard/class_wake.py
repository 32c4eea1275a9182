"""Waking the students of a class when the instructor moves, instead of a fast poll.

A following student's class bar is also the follow poll: a fragment (`classroom._student_bar`).
Rerun by the browser every second it cost a replica about 2.5 ms of CPU per student per second
(`bench/bench_class.py`: 25 % of a core at 100 idle students, where issue 41 allows 5 %). So
the browser reruns it only every `classroom.POLL_S` (a fallback), and one thread per process
watches the classes its sessions belong to: it reads each class's row every WATCH_S and, when
the instructor moved or a question or the check opened or was revealed, asks each of those
sessions for a run of its poll fragment, as the browser's timer would, on Streamlit's event
loop. The poll then switches the page (`st.switch_page`) or reruns the app.

Only the poll fragment is asked for, never a run of the whole app: Streamlit queues a fragment's
run behind the run in progress, while a whole-app request stops that run at its next element
(`runner.fastReruns`) and drops what it had not sent. A wake that asked for the whole app
stopped a student's "Send my answer" that was running: before the answer was stored (the
answer was lost), or after it and before "Received." went out (never acknowledged). The
`bench_class` run with 100 students lost one answer that way.

This reaches three things Streamlit does not document (`AppSession._client_state`,
`Runtime._get_async_objs`, the running fragment's id in `ThreadState`; streamlit is pinned in
requirements.txt). Should they change, the wake is skipped with one log line and the fallback
poll still moves the class, more slowly.
"""

from __future__ import annotations

import logging
import threading
import time

WATCH_S = 0.25
_LOG = logging.getLogger(__name__)
_LOCK = threading.Lock()
_SESSIONS: dict[str, dict[str, str]] = {}  # class code -> {session id: its poll fragment id}
_SEEN: dict[str, object] = {}  # class code -> what its sessions last saw
_THREAD: list[threading.Thread] = []
_BROKEN: list[str] = []  # why waking is off in this process (logged once)


def register(code: str, state_of) -> None:
    """Called inside the poll fragment: this session follows class `code`, and this fragment
    is its poll. `state_of(code)` gives what the sessions must be woken for when it changes
    (None: the class is gone)."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    fragment_id = _fragment_id()
    if ctx is None or not fragment_id or _BROKEN:
        return
    with _LOCK:
        for sessions in _SESSIONS.values():  # a session follows one class at a time
            sessions.pop(ctx.session_id, None)
        _SESSIONS.setdefault(code, {})[ctx.session_id] = fragment_id
        if not _THREAD:
            thread = threading.Thread(target=_watch, args=(state_of,), daemon=True,
                                      name="vit-lens-class-wake")
            _THREAD.append(thread)
            thread.start()


def _fragment_id() -> str | None:
    """The id of the fragment running now (None outside one)."""
    try:
        from streamlit.runtime.scriptrunner_utils.script_run_context import ThreadState

        return ThreadState.get().fragment_id
    except (ImportError, AttributeError, RuntimeError) as error:
        _off(error)
        return None


def _off(error: Exception) -> None:
    _BROKEN.append(f"{type(error).__name__}: {error}")
    _LOG.warning("class mode: waking students is off (%s); the follow poll remains",
                 _BROKEN[0])


def forget(code: str) -> None:
    """This session leaves the class."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    with _LOCK:
        if ctx and code in _SESSIONS:
            _SESSIONS[code].pop(ctx.session_id, None)


def _watch(state_of) -> None:
    while not _BROKEN:
        time.sleep(WATCH_S)
        with _LOCK:
            watched = {code: dict(sessions) for code, sessions in _SESSIONS.items() if sessions}
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
                for session_id, fragment_id in sessions.items():
                    wake(code, session_id, fragment_id)
            _SEEN[code] = state


def rerun_poll() -> None:
    """Ask for a run of this session's poll fragment once the run in progress is done."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    with _LOCK:
        found = next(((code, sessions[ctx.session_id]) for code, sessions in _SESSIONS.items()
                      if ctx and ctx.session_id in sessions), None)
    if found:
        wake(found[0], ctx.session_id, found[1])


def poll_request(client_state, fragment_id: str):
    """The request a browser's timer sends for the poll fragment: the session's last page
    and query, no widget changes, that fragment only."""
    from streamlit.proto.ClientState_pb2 import ClientState

    request = ClientState()
    request.CopyFrom(client_state)
    request.ClearField("widget_states")
    request.fragment_id, request.is_auto_rerun = fragment_id, True
    return request


def wake(code: str, session_id: str, fragment_id: str) -> None:
    """Ask session `session_id` for a run of its poll fragment (from any thread)."""
    from streamlit import runtime

    try:
        instance = runtime.get_instance()
        session = instance.get_app_session(session_id)
        if session is None:  # the tab closed
            with _LOCK:
                _SESSIONS.get(code, {}).pop(session_id, None)
            return
        request = poll_request(session._client_state, fragment_id)
        instance._get_async_objs().eventloop.call_soon_threadsafe(session.request_rerun,
                                                                  request)
    except (AttributeError, RuntimeError, TypeError) as error:  # not the Streamlit it knows
        _off(error)
