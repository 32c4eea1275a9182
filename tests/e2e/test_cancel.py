"""Long runs end when the user no longer wants them: Score-CAM on the Grad-CAM page (one
forward per batch of masked images, minutes on one thread) is started in Chromium;
leaving the page, and pressing Streamlit's Stop, end it between two batches.

"Ended" is measured on the server: the replica's CPU time stops growing. (Streamlit shows
the next page at once anyway - it starts a new script thread and leaves the old one to
finish in the background - so a fast page alone would prove nothing.)"""

from __future__ import annotations

import json
import os
import time

import pytest
from e2e_helpers import ARTIFACTS, open_view, running_apps, wait_app_idle

STOP_LIMIT_S = 20.0  # a batch of 16 EfficientNet-Lite0 forwards: ~2 s here (one thread); the run: minutes
QUIET_CPU_S = 0.25  # CPU seconds per second of an idle replica: well below a busy one's ~1
RUNNING = "[data-testid='stApp'][data-test-script-state='running']"


@pytest.fixture(scope="module")
def app():
    with running_apps(1, log_name="cancel-app") as apps:
        yield apps[0]


def cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def seconds_until_quiet(pid: int, since: float, limit: float = 300) -> float:
    """Seconds from `since` until the process uses (almost) no CPU for one second."""
    while time.monotonic() - since < limit:
        before = cpu_seconds(pid)
        time.sleep(1.0)
        if cpu_seconds(pid) - before < QUIET_CPU_S:
            return time.monotonic() - 1.0 - since
    return limit


def open_nav(page, title: str) -> None:
    page.locator("[data-testid='stSidebarNav'] a", has_text=title).first.click()


def start_score_cam(page) -> None:
    """Add Score-CAM to the CAM family and wait until the run is under way."""
    page.locator(".st-key-gc_family input").first.click()
    page.keyboard.type("Score-CAM")
    page.get_by_role("option", name="Score-CAM", exact=True).wait_for(timeout=10_000)
    page.keyboard.press("Enter")
    page.keyboard.press("Escape")
    page.wait_for_selector(RUNNING, timeout=30_000)
    page.wait_for_timeout(4_000)  # well into the batches
    assert page.locator(RUNNING).count() == 1, "Score-CAM should still be running"


def test_leaving_the_page_and_stop_end_score_cam(app, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(240_000)
    measured = {}
    try:
        page.goto(app.url, timeout=60_000)
        wait_app_idle(page)
        open_nav(page, "Grad-CAM")
        wait_app_idle(page)
        open_view(page, "gc_cnn_view", "The CAM family")
        page.wait_for_selector(".st-key-gc_family_maps .js-plotly-plot")

        start_score_cam(page)
        left_at = time.monotonic()
        open_nav(page, "Home")
        page.wait_for_function("() => document.body.innerText.includes('Top-5')")
        wait_app_idle(page)
        measured["leave_page_s"] = time.monotonic() - left_at
        measured["leave_s"] = seconds_until_quiet(app.process.pid, left_at)

        open_nav(page, "Grad-CAM")  # Score-CAM is still chosen: it starts again
        page.wait_for_selector(".st-key-gc_family", timeout=120_000)
        page.wait_for_selector(RUNNING, timeout=30_000)
        page.wait_for_timeout(4_000)
        assert page.locator(RUNNING).count() == 1
        stop = page.locator("[data-testid='stStatusWidget'] button", has_text="Stop")
        stopped_at = time.monotonic()
        stop.click()
        page.wait_for_selector("[data-testid='stApp'][data-test-script-state='notRunning']",
                               timeout=400_000)
        measured["stop_page_s"] = time.monotonic() - stopped_at
        measured["stop_s"] = seconds_until_quiet(app.process.pid, stopped_at)
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "cancel-stopped.png"))
        (ARTIFACTS / "cancel.json").write_text(json.dumps(measured))
        print(f"\ncancel: {measured}")
        assert measured["leave_s"] < STOP_LIMIT_S and measured["stop_s"] < STOP_LIMIT_S
        assert page.locator("[data-testid='stException']").count() == 0
        # no Score-CAM result was shown: the run ended before its end
        assert "Score-CAM ·" not in page.inner_text("[data-testid='stMain']")
    finally:
        page.close()
