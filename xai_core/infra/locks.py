"""A first-come-first-served lock for models shared by many sessions."""

from __future__ import annotations

import threading
from collections import deque


class FairLock:
    """A FIFO lock: waiting threads acquire it in arrival order.

    `threading.Lock` lets a thread that releases and re-acquires quickly starve
    the others; on a shared class server that means one busy session can block
    everyone else's page for a long time.
    """

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._queue: deque[threading.Event] = deque()
        self._held = False

    def acquire(self) -> None:
        with self._mutex:
            if not self._held and not self._queue:
                self._held = True
                return
            turn = threading.Event()
            self._queue.append(turn)
        turn.wait()

    def release(self) -> None:
        with self._mutex:
            if self._queue:
                self._queue.popleft().set()  # hand over directly: stays held
            else:
                self._held = False

    def __enter__(self) -> "FairLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
