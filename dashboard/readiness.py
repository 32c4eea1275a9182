"""Whether this replica is warm: what nginx asks before it sends a new visitor here.

Streamlit's `/_stcore/health` answers "ok" as soon as the server listens; a replica that has
just (re)started is then cold: its first Home took 4.2 s, and it was warm (every page's code
imported, its models loaded, its caches filled) 18 s later. Traffic sent to it meanwhile
waited. A replica is warm once every page of the menu has finished a run in this process
(the replica unit's `dashboard.warm_replica` runs each once); after READY_AFTER_S it counts
as warm whatever ran, so a replica whose warm-up never comes still serves.

nginx asks it on the browser's own health check (Streamlit's client asks `/_stcore/health`
before it opens its WebSocket), with the header `X-Vit-Lens-Ready`: the replica's request
guard (`dashboard/request_guard.py`) answers 503 and how far it got while it warms, and
Streamlit's own health answer (with its cookies) once warm. A warming replica is then left
out of new visitors' upstream for nginx's `fail_timeout` (deploy/nginx/vit-lens.conf).
The health check without that header, the unit's liveness check that must pass before the
warm-up starts, stays Streamlit's.
"""

from __future__ import annotations

import os
import threading
import time

from dashboard.page_list import existing_pages, url_path

HEADER = "X-Vit-Lens-Ready"  # on a health check: answer whether warm, not merely alive
READY_AFTER_ENV = "VIT_LENS_READY_AFTER_S"
READY_AFTER_S = 600.0  # warm_replica's own limit: by then it has run what it will
_STARTED = time.monotonic()
_finished: set[str] = set()
_lock = threading.Lock()


def page_finished(path: str) -> None:
    """A run of the page at `path` (its URL path, '' for Home) ended in this process."""
    with _lock:
        _finished.add(path)


def pages_left() -> list[str]:
    """The menu's pages that have not finished a run here yet."""
    with _lock:
        return [path for path in (url_path(name) for name, _, _ in existing_pages())
                if path not in _finished]


def ready_after() -> float:
    try:
        return float(os.environ.get(READY_AFTER_ENV, READY_AFTER_S))
    except ValueError:
        return READY_AFTER_S


def state(clock=time.monotonic) -> tuple[bool, str]:
    """(ready, what the path answers)."""
    left = pages_left()
    if not left:
        return True, "ok"
    if clock() - _STARTED >= ready_after():
        return True, "ok"
    total = len(existing_pages())
    return False, f"warming up: {total - len(left)} of {total} pages have run"
