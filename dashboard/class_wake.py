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
answer was lost), or after it and before "Received." went out (never acknowledged).

A wake is asked for only once the session's event loop has handled the end of the run in
progress (`_request_when_idle`): a request handled while that end still waited in the loop's
queue made Streamlit start a new ScriptRunner and drop the old one's last messages, the
"Received." of an answer among them (the answer stored, the phone never told).

This reaches things Streamlit does not document (`AppSession._client_state`, `._state` and
`._scriptrunner._requests`, `Runtime._get_async_objs`, the running fragment's id in
`ThreadState`; streamlit is pinned in requirements.txt). Should they change, the wake is
skipped with one log line and the fallback poll still moves the class, more slowly.
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


IDLE_RETRY_S = 0.05  # how often a wake looks again whether the session's run is over
IDLE_WAIT_S = 120.0  # a wake waits this long at most (the fallback poll remains)


def wake(code: str, session_id: str, fragment_id: str) -> None:
    """Ask session `session_id` for a run of its poll fragment (from any thread), once the
    session's event loop has seen its run in progress end (`_request_when_idle`)."""
    from streamlit import runtime

    try:
        instance = runtime.get_instance()
        session = instance.get_app_session(session_id)
        if session is None:  # the tab closed
            with _LOCK:
                _SESSIONS.get(code, {}).pop(session_id, None)
            return
        request = poll_request(session._client_state, fragment_id)
        loop = instance._get_async_objs().eventloop
        loop.call_soon_threadsafe(_request_when_idle, loop, session, request,
                                  time.monotonic() + IDLE_WAIT_S)
    except (AttributeError, RuntimeError, TypeError) as error:  # not the Streamlit it knows
        _off(error)


def _request_when_idle(loop, session, request, deadline: float) -> None:
    """On the event loop: the request, once the loop has handled the end of the session's run.

    While a run's last messages (its deltas, "Received.", its `script_finished`) still wait
    in the loop's queue, its ScriptRunner may already have stopped (it found no request when
    it finished). A rerun request handled then makes AppSession start a new ScriptRunner and
    drop every event of the old one still queued, as "from a non-current ScriptRunner": the
    student's answer was stored but "Received." and the run's end never reached the phone.
    The session's state turns APP_NOT_RUNNING only when the loop handles that end, so waiting
    for it loses nothing; the poll is a fragment, which would queue behind the run anyway.

    Nor is it asked while a request of the browser waits for the ScriptRunner (a run just
    asked for, not started): Streamlit merges two waiting requests, the newer's widget values
    winning, and the wake's carry none, so a tap on a choice and "Send my answer" would reach
    the run with the choice gone. Browser requests are handled on this loop too, so none can
    slip in between this look and the request."""
    from streamlit.runtime.app_session import AppSessionState
    from streamlit.runtime.scriptrunner_utils.script_requests import ScriptRequestType

    try:
        state = session._state
        if state == AppSessionState.SHUTDOWN_REQUESTED:
            return
        runner = session._scriptrunner
        waiting = runner is not None and runner._requests._state == ScriptRequestType.RERUN
        if (state == AppSessionState.APP_IS_RUNNING or waiting) and \
                time.monotonic() < deadline:
            loop.call_later(IDLE_RETRY_S, _request_when_idle, loop, session, request,
                            deadline)
            return
        session.request_rerun(request)
    except (AttributeError, RuntimeError, TypeError) as error:  # not the Streamlit it knows
        _off(error)
