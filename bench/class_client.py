"""A class member without a browser: one Streamlit session over its WebSocket, kept open.

It does what a browser tab does for class mode: opens a page (`rerun_script` with the query
string), reruns the fragments the server asks to rerun on a timer (`auto_rerun`: the follow
poll, the projector's live count) until the server says to stop (`stop_auto_rerun`), as
Chromium does, follows the page switches the server makes (`page_info_changed`), and answers
a question by sending the widget states a tap on a radio button and on "Send my answer" send
(a press of a button drawn by a fragment reruns that fragment only, as in a browser). Every
message is timed, so a benchmark can tell when a student arrived where the instructor went and
when an answer was acknowledged.
Only loopback addresses are accepted (`dashboard.page_visit.loopback`).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

from dashboard.page_visit import RUN_DONE, loopback

FRAGMENT_DONE = ForwardMsg.FINISHED_FRAGMENT_RUN_SUCCESSFULLY


@dataclass
class Seen:
    """What the session has received so far."""

    widgets: dict[str, tuple] = field(default_factory=dict)  # user key -> (kind, id, proto)
    fragments: dict[str, str] = field(default_factory=dict)  # user key -> its fragment's id
    texts: list[tuple[float, str]] = field(default_factory=list)  # (time, markdown/alert text)
    pages: list[tuple[float, str, str]] = field(default_factory=list)  # (time, path, query)
    finished: list[float] = field(default_factory=list)  # times of finished full runs
    fragment_runs: list[float] = field(default_factory=list)  # times of finished fragment runs
    exceptions: int = 0
    errors: list[str] = field(default_factory=list)


def _user_key(widget_id: str) -> str:
    """'$$ID-<hash>-<key>' -> '<key>' (a keyed widget's id ends with its key)."""
    return widget_id.split("-", 2)[-1] if widget_id.startswith("$$ID-") else widget_id


class ClassSession:
    def __init__(self, base: str, cookies: dict | None = None):
        self.base = base
        self.host, self.port = loopback(base)
        self.cookies = dict(cookies or {})
        self.seen = Seen()
        self.page = ""
        self.page_hash = ""
        self.query = ""
        self._socket = None
        self._reader: asyncio.Task | None = None
        self._pollers: dict[str, asyncio.Task] = {}
        self._states: dict[str, object] = {}  # widget id -> value sent with every rerun

    # --- sending ------------------------------------------------------------------------

    def _rerun(self, fragment_id: str = "", triggers: dict | None = None,
               auto: bool = True) -> bytes:
        message = BackMsg()
        state = message.rerun_script
        state.query_string = self.query
        if self.page_hash:
            state.page_script_hash = self.page_hash
        else:
            state.page_name = self.page
        state.widget_states.SetInParent()
        for widget_id, value in {**self._states, **(triggers or {})}.items():
            entry = state.widget_states.widgets.add()
            entry.id = widget_id
            if value is True and widget_id in (triggers or {}):
                entry.trigger_value = True
            elif isinstance(value, bool):
                entry.bool_value = value
            elif isinstance(value, int):
                entry.int_value = value
            else:
                entry.string_value = str(value)
        if fragment_id:
            state.fragment_id, state.is_auto_rerun = fragment_id, auto
        context = state.context_info
        context.timezone, context.timezone_offset, context.locale = "UTC", 0, "en-US"
        context.url, context.is_embedded = self.base + self.page, False
        return message.SerializeToString()

    async def open(self, page: str = "", query: str = "", timeout: float = 120) -> None:
        from websockets.asyncio.client import connect
        from websockets.typing import Subprotocol

        self.page, self.query = page, query
        cookie = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        self._socket = await asyncio.wait_for(connect(
            "ws" + self.base.rstrip("/")[4:] + "/_stcore/stream", proxy=None,
            origin=f"http://{self.host}:{self.port}", max_size=None,
            subprotocols=[Subprotocol("streamlit")], ping_interval=None,
            additional_headers={"Cookie": cookie} if cookie else None), timeout)
        self._reader = asyncio.create_task(self._read())
        finished = len(self.seen.finished)
        await self._send(self._rerun())
        await self.wait_for(lambda: len(self.seen.finished) > finished, timeout)

    async def set_and_press(self, values: dict[str, object], button: str,
                            timeout: float = 60, until: tuple[str, ...] = ()) -> float:
        """Set widgets (user key -> value) and press a button (user key); seconds until the
        run it starts has finished, or with `until`, until a text holding one of those
        words has arrived and its run has finished (another run, e.g. one the server
        started, may finish first)."""
        for key, value in values.items():
            self._states[self.widget_id(key)] = value
        started = time.perf_counter()
        fragment = self.seen.fragments.get(button, "")

        def ended() -> list[float]:  # the press's run: the fragment's, or a full one
            return [at for at in self.seen.finished + self.seen.fragment_runs
                    if at >= started]

        def answered() -> bool:
            texts = [at for at, text in self.seen.texts
                     if at >= started and any(word in text for word in until)]
            return bool(texts) and any(done >= texts[0] for done in ended())
        await self._send(self._rerun(fragment, triggers={self.widget_id(button): True},
                                     auto=False))
        await self.wait_for(answered if until else (lambda: bool(ended())), timeout)
        return time.perf_counter() - started

    async def _send(self, message: bytes) -> None:
        from websockets.exceptions import ConnectionClosed

        try:
            await self._socket.send(message)
        except ConnectionClosed as error:  # the replica went away
            raise ConnectionError(f"the socket closed: {error}") from None

    def widget_id(self, key: str) -> str:
        if key not in self.seen.widgets:
            raise KeyError(f"no widget {key} on the page")
        return self.seen.widgets[key][1]

    # --- receiving ----------------------------------------------------------------------

    async def _read(self) -> None:
        try:
            async for payload in self._socket:
                self._take(ForwardMsg.FromString(payload), time.perf_counter())
        except Exception as error:  # noqa: BLE001  a closed or refused socket is a result
            self.seen.errors.append(f"{type(error).__name__}: {error}")

    def _take(self, message: ForwardMsg, now: float) -> None:
        kind = message.WhichOneof("type")
        if kind == "script_finished" and message.script_finished in RUN_DONE:
            self.seen.finished.append(now)
        elif kind == "script_finished" and message.script_finished == FRAGMENT_DONE:
            self.seen.fragment_runs.append(now)
        elif kind == "page_info_changed":
            self.query = message.page_info_changed.query_string
        elif kind == "navigation":  # every run names its page: a switch, or the same one
            navigation = message.navigation
            self.page_hash = navigation.page_script_hash
            path = next((page.url_pathname for page in navigation.app_pages
                         if page.page_script_hash == navigation.page_script_hash), "")
            self.seen.pages.append((now, path, self.query))
        elif kind == "auto_rerun":
            rerun = message.auto_rerun
            if rerun.fragment_id not in self._pollers:
                self._pollers[rerun.fragment_id] = asyncio.create_task(
                    self._poll(rerun.fragment_id, rerun.interval))
        elif kind == "stop_auto_rerun":
            for fragment_id in message.stop_auto_rerun.fragment_ids:
                poller = self._pollers.pop(fragment_id, None)
                if poller is not None:
                    poller.cancel()
        elif kind == "delta" and message.delta.WhichOneof("type") == "new_element":
            element = message.delta.new_element
            which = element.WhichOneof("type")
            body = getattr(element, which)
            if which == "exception":
                self.seen.exceptions += 1
            elif which in ("markdown", "alert"):
                self.seen.texts.append((now, body.body))
            elif hasattr(body, "id") and isinstance(getattr(body, "id"), str) and body.id:
                self.seen.widgets[_user_key(body.id)] = (which, body.id, body)
                self.seen.fragments[_user_key(body.id)] = message.delta.fragment_id

    async def _poll(self, fragment_id: str, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await self._send(self._rerun(fragment_id))
            except ConnectionError:  # the reader notes why
                return

    async def wait_for(self, condition, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if self._reader is not None and self._reader.done():
                raise ConnectionError(self.seen.errors[-1] if self.seen.errors
                                      else "the socket closed")
            if time.monotonic() > deadline:
                raise TimeoutError("no answer from the server in time")
            await asyncio.sleep(0.05)

    def text_since(self, since: float) -> str:
        return " ".join(text for at, text in self.seen.texts if at >= since)

    async def close(self) -> None:
        for task in self._pollers.values():
            task.cancel()
        if self._socket is not None:
            try:
                await self._socket.close()
            except Exception:  # noqa: BLE001  already closed by the server's end
                pass
        if self._reader is not None:
            self._reader.cancel()
