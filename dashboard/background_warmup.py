"""The gallery warmed in the background of a serving process, so a class that opens the
default picture's Explainer and page 9 finds them computed.

`dashboard.serve` (what `make run` and each replica's systemd unit start) calls `start` after
the models are loaded: a daemon thread waits until the server's port answers its health
check, then computes every page's default views for each gallery picture
(`lessons.warmup.lecture_order`: the default picture's Explainer and page 9 first), one line
per step in the log. Page 9 reads `PROGRESS` and says, while it runs, that a first view may
still take a while. Replicas sharing one cache folder take turns (a file lock in it): the
second replica's turn reads what the first wrote to the shared result store, filling its own
memory in seconds instead of computing everything again. `VIT_LENS_WARM_GALLERY=0` turns it
off (a test's server, a machine that serves no gallery).
"""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

ENV = "VIT_LENS_WARM_GALLERY"
LOCK_FILE = "gallery-warmup.lock"
HEALTH_WAIT_S = 600  # the server's port: at most this long after the models are loaded


@dataclass
class Progress:
    """Where the warm-up is; read by page 9 (one writer: the warm-up's thread)."""

    state: str = "off"  # off | waiting | running | done
    done: int = 0
    total: int = 0
    now: str = ""  # the step being computed, in words
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def running(self) -> bool:
        return self.state in ("waiting", "running")


PROGRESS = Progress()
_START = threading.Lock()


def enabled(environ=os.environ) -> bool:
    return environ.get(ENV, "1").strip().lower() not in ("0", "no", "false", "off")


def start(health_url: str | None, log=print, images: list[str] | None = None) -> bool:
    """Start the warm-up thread once per process (False when it is off or already started):
    after `health_url` answers (None: at once), every page's default views for `images`
    (default: the whole gallery)."""
    with _START:
        if not enabled() or PROGRESS.state != "off":
            return False
        PROGRESS.state = "waiting"
    threading.Thread(target=_run, args=(health_url, log, images), daemon=True,
                     name="vit-lens-gallery-warmup").start()
    return True


def _run(health_url: str | None, log, images: list[str] | None) -> None:
    from xai_core.infra.health import wait_healthy
    from xai_core.infra.priority import lower_this_thread

    lower_this_thread()  # a visitor's page first: the warm-up takes the CPU time left over

    if health_url is not None and not wait_healthy(health_url, HEALTH_WAIT_S):
        log(f"ViT Lens warm-up: {health_url} did not answer; the gallery is not warmed")
        PROGRESS.state = "done"
        return
    try:
        with _turn(log):
            warm(log, images)
    except Exception as error:  # noqa: BLE001  a warm-up failure must never stop the server
        log(f"ViT Lens warm-up stopped: {type(error).__name__}: {error}")
    finally:
        PROGRESS.state = "done"


@contextmanager
def _turn(log):
    """One replica at a time per cache folder (an advisory lock there; none if the folder
    cannot be written: then each replica warms on its own)."""
    from xai_core.models.settings import cache_dir

    try:
        import fcntl

        folder = cache_dir()
        folder.mkdir(parents=True, exist_ok=True)
        handle = open(folder / LOCK_FILE, "a")
    except (ImportError, OSError):
        yield
        return
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            PROGRESS.now = "waiting for another replica's warm-up"
            log("ViT Lens warm-up: another process is warming the gallery; waiting for it")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def warm(log, images: list[str] | None = None) -> Progress:
    """Every step of `lessons.warmup.lecture_order`, one log line each, into PROGRESS."""
    from dashboard.state import DEFAULT_IMAGE
    from xai_core.lessons.warmup import lecture_order, warm_step
    from xai_core.images import load_sample, sample_ids
    from xai_core.models import DEFAULT_CNN, DEFAULT_VIT, get_model

    vit, cnn = get_model(DEFAULT_VIT), get_model(DEFAULT_CNN)
    steps = lecture_order(images or sample_ids(), DEFAULT_IMAGE)
    PROGRESS.state, PROGRESS.total, PROGRESS.done = "running", len(steps), 0
    started = time.perf_counter()
    log(f"ViT Lens warm-up: {len(steps)} steps (the default picture's Explainer and page 9 "
        "first), in the background")
    for number, (image_id, page) in enumerate(steps, start=1):
        PROGRESS.now = f"{image_id}, {page.removesuffix('.py').replace('_', ' ')}"
        step_started = time.perf_counter()
        failure = warm_step(vit, cnn, load_sample(image_id), page)
        PROGRESS.done = number
        if failure:
            PROGRESS.failures.append(f"{image_id}: {failure}")
        log(f"ViT Lens warm-up {number}/{len(steps)}: {PROGRESS.now} "
            f"{time.perf_counter() - step_started:.1f} s" + (f" FAILED: {failure}" if failure
                                                               else ""))
    PROGRESS.seconds = time.perf_counter() - started
    log(f"ViT Lens warm-up: gallery ready in {PROGRESS.seconds:.0f} s"
        + (f", {len(PROGRESS.failures)} step(s) failed" if PROGRESS.failures else ""))
    return PROGRESS
