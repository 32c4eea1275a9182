"""Is a running app serving? Its Streamlit health endpoint, asked over HTTP: the `health`
command, the server's own background warm-up (which waits for its port) and the tests use it."""

from __future__ import annotations

import time


def healthy(url: str, timeout: float = 5.0) -> bool:
    """True when Streamlit's health endpoint at `url` answers 200 "ok"."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status == 200 and response.read().strip() == b"ok"
    except (urllib.error.URLError, OSError, ValueError):
        return False


def wait_healthy(url: str, wait: float) -> bool:
    deadline = time.monotonic() + wait
    while True:
        if healthy(url):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.5)
