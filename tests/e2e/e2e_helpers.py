"""Helpers of the end-to-end tests: free loopback ports, app replicas run
with `streamlit run` exactly as deploy/systemd starts them, and the system
Chromium driven by Playwright (never `playwright install`)."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts"
APP_READY = "[data-testid='stApp'][data-test-script-state='notRunning']"
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                  "--disable-background-networking", "--disable-component-update",
                  "--no-first-run"]

# The browser model's runtime takes one thread fewer than the cores (runtime.js threadCount):
# a page whose browser reports three cores runs the model on two, whatever this machine has.
THREE_CORES = ("Object.defineProperty(Navigator.prototype, 'hardwareConcurrency', "
               "{get: () => 3})")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def app_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", VIT_LENS_DEVICE=os.environ.get("VIT_LENS_DEVICE", "cpu"),
               PYTHONUNBUFFERED="1")
    # One session at a time per test: intra-op threads would only spin on a busy CI box.
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def healthy(url: str) -> bool:
    from xai_core.infra.health import healthy as check

    return check(url, timeout=2)


STREAMLIT_RUN = ("-m", "streamlit", "run", "dashboard/replica_app.py")  # the app alone: no warm-up
MAKE_RUN = ("-m", "dashboard.serve")  # as `make run` and deploy/systemd start it


class AppProcess:
    """One app server on a free loopback port (`launcher`: the python arguments before the
    Streamlit server options; `env`: the environment, `app_env()` by default)."""

    def __init__(self, base_path: str = "", log_name: str = "app",
                 launcher: tuple[str, ...] = STREAMLIT_RUN, env: dict[str, str] | None = None,
                 port: int | None = None):
        self.port = port or free_port()
        self.base_path = base_path.strip("/")
        ARTIFACTS.mkdir(exist_ok=True)
        self.log_path = ARTIFACTS / f"{log_name}-{self.port}.log"
        command = [sys.executable, *launcher,
                   "--server.address", "127.0.0.1", "--server.port", str(self.port),
                   "--server.headless", "true"]
        if self.base_path:
            command += ["--server.baseUrlPath", self.base_path]
        self._log = open(self.log_path, "ab")  # a restart on the same port appends
        self.process = subprocess.Popen(command, cwd=ROOT, env=env or app_env(),
                                        stdout=self._log, stderr=subprocess.STDOUT)

    @property
    def url(self) -> str:
        prefix = f"/{self.base_path}" if self.base_path else ""
        return f"http://127.0.0.1:{self.port}{prefix}/"

    def wait_healthy(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"streamlit exited: {self.log_path.read_text()[-2000:]}")
            if healthy(self.url + "_stcore/health"):
                return
            time.sleep(0.3)
        raise TimeoutError(f"{self.url} not healthy after {timeout} s")

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        """Die the hard way (SIGKILL): no shutdown, no closing handshake."""
        self.process.kill()
        self.process.wait()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()


@contextlib.contextmanager
def running_apps(count: int, base_path: str = "", log_name: str = "app",
                 env: dict[str, str] | None = None):
    """`count` replicas; `env`: variables set on top of `app_env()`."""
    apps = [AppProcess(base_path, log_name, env={**app_env(), **(env or {})})
            for _ in range(count)]
    try:
        for app in apps:
            app.wait_healthy()
        yield apps
    finally:
        for app in apps:
            app.stop()


def png_bytes() -> bytes:
    """A 120x80 red PNG to upload."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (120, 80), (200, 40, 40)).save(buffer, "PNG")
    return buffer.getvalue()


def chromium_path() -> str:
    path = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(path).exists():
        pytest.fail("Debian's chromium is missing: run `make system-deps` (apt).")
    return path


def watched_tab(browser, width: int, height: int, timeout_ms: int | None = 240_000, **options):
    """(context, tab, errors): a new browser context with one tab whose script errors are
    collected in `errors` (a test asserts it is empty); `options` go to the context."""
    context = browser.new_context(viewport={"width": width, "height": height}, **options)
    tab = context.new_page()
    if timeout_ms is not None:
        tab.set_default_timeout(timeout_ms)
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    return context, tab, errors


def wait_app_idle(page, timeout_ms: int = 240_000) -> None:
    """Wait until Streamlit has started and then finished running the script."""
    page.wait_for_selector("[data-testid='stApp']", timeout=timeout_ms)
    page.wait_for_timeout(300)  # let a rerun triggered by the last action start
    page.wait_for_selector(APP_READY, timeout=timeout_ms)


def open_view(page, key: str, title: str) -> None:
    """Click the button `title` of a page's view picker (the segmented control `key`)."""
    page.locator(f".st-key-{key} button", has_text=title).first.click()
    wait_app_idle(page)
