"""Background work yields the CPU to visitors.

The gallery's warm-up and the result store's writer run beside visitors' pages on the same
cores; neither is waited for by anyone on screen. On Linux a thread has its own nice value,
and the torch worker threads a thread starts inherit it, so lowering the calling thread is
enough: while a visitor's page computes, the kernel gives it the cores, and the background
work runs at full speed whenever the server is otherwise idle. Elsewhere it does nothing.
"""

from __future__ import annotations

import os
import sys
import threading

BACKGROUND_NICE = 19  # the lowest priority: runs only on CPU time nobody else wants


def lower_this_thread(nice: int = BACKGROUND_NICE) -> bool:
    """Give the calling thread (and the torch workers it will start) the nice value `nice`;
    False where the platform has no per-thread priority. Linux only: elsewhere
    `setpriority(PRIO_PROCESS, id)` takes the id for a process's, which could be another's."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
    except OSError:
        return False
    return True


def thread_nice(native_id: int | None = None) -> int | None:
    """The nice value of a thread of this process (default: the calling one); None off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    return os.getpriority(os.PRIO_PROCESS, native_id or threading.get_native_id())
