"""A lab server no visitor can monopolise, through the nginx recipe (error log at `info`) in
front of two replicas started as the units start them: a warming replica gets no new visitor
(the readiness path nginx asks), no nginx log names a session, an upload or a media file, the
replicas' metrics are closed, foreign-Origin WebSockets are refused without holding up
anything, a visitor past its allowance waits with a progress line while another visitor's
page goes on, and visitors' uploads never evict the warm-ups' results."""

from __future__ import annotations

import asyncio
import io
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pytest
from e2e_helpers import ROOT, AppProcess, app_env, wait_app_idle, watched_tab
from proxy_helpers import PREFIX, get, nginx_in_front

from dashboard import readiness, replica
from dashboard.page_visit import open_page, run_in_thread
from dashboard.state import UPLOAD_CHOICE, image_title
from dashboard.warm_replica import warm
from xai_core.infra import fair_share
from xai_core.infra.result_store import SUFFIX, WARM

LOAD_TIMEOUT_MS = 300_000
VISITORS_MB = 0.1  # the visitors' area of the result store: less than two photos' results
SHARE_PASSES = 60  # a minute's allowance: the second run below waits about half a minute
WAITING = "You have used your share of this server for the moment"


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    results = tmp_path_factory.mktemp("results")
    env = {**app_env(), "VIT_LENS_RESULTS_DIR": str(results), "VIT_LENS_RESULTS_MB":
           str(VISITORS_MB), fair_share.ENV_PASSES: str(SHARE_PASSES),
           fair_share.ENV_CPU: "none", fair_share.ENV_WAIT: "120"}
    apps = [AppProcess(PREFIX, "fair", env=env) for _ in range(2)]
    try:
        for app in apps:
            app.wait_healthy()
        with nginx_in_front(apps, log_name="fair-nginx") as proxy:
            yield apps, proxy, results, env
    finally:
        for app in apps:
            app.stop()


def status_of(url: str, headers: dict | None = None) -> tuple[int, str]:
    try:
        request = urllib.request.Request(url, headers=headers or {})
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def first_visits(proxy, count: int, pause_s: float = 0) -> list[str]:
    """`count` new browsers, as Streamlit's client arrives: the health check through nginx
    (which gives the browser its id, and the warm replica that answered it names itself in the
    replica cookie), then, `pause_s` later, the page over the WebSocket with those cookies.
    Returns the replica (upstream address) each WebSocket reached."""
    skip = len(proxy.access_log.read_text().splitlines())

    async def one() -> None:
        loop = asyncio.get_running_loop()
        response, body = await loop.run_in_executor(
            None, lambda: get(proxy.port, f"/{PREFIX}/_stcore/health"))
        assert (response.status, body) == (200, b"ok")
        set_cookies = response.getheader("Set-Cookie") or ""
        cookies = dict(re.findall(rf"(vit_lens_uid|{replica.COOKIE})=([^;,]+)", set_cookies))
        assert set(cookies) == {"vit_lens_uid", replica.COOKIE}, set_cookies
        await asyncio.sleep(pause_s)
        run = await open_page(proxy.url, "", "", cookies=cookies, timeout=240)
        assert run.error == "" and run.exceptions == 0, run

    async def all_of_them() -> None:
        for start in range(0, count, 4):  # four at a time: a class arriving, not a burst
            await asyncio.gather(*(one() for _ in range(min(4, count - start))))

    run_in_thread(all_of_them())
    time.sleep(0.5)  # a WebSocket is logged when it closes
    return [upstream for _, path, upstream in proxy.upstreams_in_log(skip)
            if path.endswith("/_stcore/stream")]


def test_a_warming_replica_gets_no_new_visitor(stack):
    """One replica warm (every page run, as its unit's warm-up does), the other cold: 16 new
    browsers all reach the warm one, also those whose WebSocket comes after nginx stopped
    leaving the cold one out (CI saw one of 16 reach it before the replica cookie); once the other has warmed too (and nginx's 10 s of
    leaving it out are over) new browsers reach both again."""
    apps, proxy, _, _ = stack
    warm_one, cold = apps
    assert all(not run.error for _, run in warm(warm_one.url))

    def ready(app):
        return status_of(app.url + "_stcore/health", {readiness.HEADER: "1"})
    assert ready(warm_one) == (200, "ok")
    code, words = ready(cold)
    assert code == 503 and words.startswith("warming up:"), words
    assert status_of(cold.url + "_stcore/health") == (200, "ok")  # alive all the same
    reached = first_visits(proxy, 16)
    assert len(reached) == 16 and set(reached) == {f"127.0.0.1:{warm_one.port}"}, reached
    # browsers whose WebSocket comes after nginx's fail_timeout (10 s) has run out: nginx
    # would try the warming replica again, but the WebSocket follows the health check
    reached = first_visits(proxy, 4, pause_s=11)
    assert len(reached) == 4 and set(reached) == {f"127.0.0.1:{warm_one.port}"}, reached

    assert all(not run.error for _, run in warm(cold.url))
    assert ready(cold) == (200, "ok")
    time.sleep(11)  # fail_timeout=10s in the recipe
    reached = first_visits(proxy, 16)
    assert {f"127.0.0.1:{app.port}" for app in apps} <= set(reached), reached


def noisy_png(seed: int, side: int = 200) -> bytes:
    """A photo-like PNG of `side` px: random, so it compresses poorly (about 120 kB for 200
    px, far above nginx's default 16 kB body buffer) and is new to every cache."""
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (side, side, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "PNG")
    return buffer.getvalue()


def upload_photo(page, photo: bytes, side: int) -> None:
    page.get_by_test_id("stSidebar").get_by_role("combobox").nth(2).click()
    page.get_by_role("option", name=image_title(UPLOAD_CHOICE)).click()
    wait_app_idle(page, LOAD_TIMEOUT_MS)
    page.locator("[data-testid='stFileUploader'] input[type='file']").set_input_files(
        files=[{"name": "photo.png", "mimeType": "image/png", "buffer": photo}])
    page.wait_for_function(
        "(size) => [...document.querySelectorAll('.js-plotly-plot')]"
        ".some(p => JSON.stringify(p.layout.title || '').includes(size))",
        arg=f"({side}x{side})", timeout=LOAD_TIMEOUT_MS)
    wait_app_idle(page, LOAD_TIMEOUT_MS)


def test_no_log_names_a_session_an_upload_or_a_media_file(stack, browser):
    """An upload of 120 kB through nginx (error log at info): the ids in its address (the
    session's, which resumes it from another browser, and the file's) and the media files'
    ids appear in no nginx log line, and in neither replica's log; nothing went to a
    temporary file."""
    apps, proxy, _, _ = stack
    context, page, errors = watched_tab(browser, 1400, 1000, timeout_ms=LOAD_TIMEOUT_MS)
    addresses: list[str] = []
    page.on("request", lambda request: addresses.append(request.url))
    try:
        page.goto(proxy.url, timeout=60_000)
        wait_app_idle(page, LOAD_TIMEOUT_MS)
        photo = noisy_png(1)
        assert len(photo) > 64_000
        upload_photo(page, photo, 200)
        assert errors == []
    finally:
        context.close()
    time.sleep(0.5)
    ids = set()
    for address in addresses:
        found = re.search(r"/_stcore/upload_file/([^/?]+)/([^/?]+)", address)
        if found:
            ids |= {found[1], found[2]}
        found = re.search(rf"/{PREFIX}/media/([^/?.]+)", address)  # not static/media/
        if found:
            ids.add(found[1])
    assert len(ids) >= 2, addresses  # the session's and the file's at least
    logs = {"access": proxy.access_log.read_text(),
            "error": (proxy.tmp / "error.log").read_text()}
    logs.update({f"replica {app.port}": app.log() for app in apps})
    for name, text in logs.items():
        assert not [i for i in ids if i in text], f"an id in the {name} log"
    assert "/_stcore/upload_file/-" in logs["access"]  # the upload is logged, masked
    assert "temporary file" not in logs["error"]


def test_the_replicas_metrics_are_closed_through_the_recipe(stack):
    apps, proxy, _, _ = stack
    response, _ = get(proxy.port, f"/{PREFIX}/_stcore/metrics")
    assert response.status == 404
    code, text = status_of(apps[0].url + "_stcore/metrics")  # on the machine itself: open
    assert code == 200 and "session_events" in text


def foreign_burst(port: int, count: int = 20) -> tuple[list[str], float]:
    """`count` WebSockets with a foreign Origin at once and, while they are answered, a
    health check on the same port: (how each ended, seconds the health check took)."""
    import websockets

    async def foreign() -> str:
        try:
            async with websockets.connect(
                    f"ws://127.0.0.1:{port}/{PREFIX}/_stcore/stream", proxy=None,
                    origin="http://evil.example", open_timeout=30):
                return "opened"
        except websockets.InvalidStatus as refused:
            return str(refused.response.status_code)

    async def burst():
        sockets = [asyncio.create_task(foreign()) for _ in range(count)]
        await asyncio.sleep(0.05)
        started = time.perf_counter()
        loop = asyncio.get_running_loop()
        code, _ = await loop.run_in_executor(
            None, lambda: status_of(f"http://127.0.0.1:{port}/{PREFIX}/_stcore/health"))
        took = time.perf_counter() - started
        assert code == 200
        return await asyncio.gather(*sockets), took

    return run_in_thread(burst())


def test_foreign_origin_websockets_are_refused_without_stalling_anything(stack):
    """20 foreign-Origin WebSockets at once (Streamlit's own check stalled a replica's health
    check 5 s with them): through nginx and straight at a replica, each is refused with 403
    and the health check asked meanwhile answers within a second; the site's own WebSocket
    still opens."""
    apps, proxy, _, _ = stack
    for port in (proxy.port, apps[1].port):
        ends, took = foreign_burst(port)
        assert ends == ["403"] * 20, ends
        assert took < 1.0, f"health took {took:.2f} s beside the refused sockets ({port})"
    run = run_in_thread(open_page(proxy.url, "", "", timeout=240))
    assert run.error == "" and run.exceptions == 0


def test_a_visitor_past_its_allowance_waits_with_a_progress_line(stack, browser):
    """Ann runs SmoothGrad (48 passes) from a link, then the same link with a new seed: a new
    computation past her 60 passes a minute, so the page says she waits and counts down,
    then shows the result. Bob, another browser, opens Home meanwhile: his page finishes
    while Ann still waits."""
    _, proxy, _, _ = stack
    link = (proxy.url + "comparison?image_choice=" + quote(image_title("coffee"))
            + "&cmp_methods_vit=smoothgrad&cmp_opt_vit_smoothgrad_samples=24"
            + "&cmp_opt_vit_smoothgrad_batch=12&cmp_opt_vit_smoothgrad_seed=")
    ann_context, ann, ann_errors = watched_tab(browser, 1400, 1000, timeout_ms=LOAD_TIMEOUT_MS)
    bob_context, bob, bob_errors = watched_tab(browser, 1400, 1000, timeout_ms=LOAD_TIMEOUT_MS)
    try:
        ann.goto(link + "101", timeout=60_000)
        wait_app_idle(ann, LOAD_TIMEOUT_MS)
        assert "smoothgrad" in ann.inner_text("body").lower()
        assert WAITING not in ann.inner_text("body")
        ann.goto(link + "102", timeout=60_000)
        progress = ann.locator("[data-testid='stProgress']", has_text=WAITING)
        progress.first.wait_for(timeout=LOAD_TIMEOUT_MS)
        first_words = progress.first.inner_text()
        assert re.search(r"this starts in about \d+ s", first_words), first_words
        bob.goto(proxy.url, timeout=60_000)
        wait_app_idle(bob, LOAD_TIMEOUT_MS)
        assert ann.locator("[data-testid='stProgress']", has_text=WAITING).count() == 1, \
            "Bob's page should finish while Ann still waits"
        ann.wait_for_function(
            "(words) => !document.body.innerText.includes(words)", arg=WAITING,
            timeout=LOAD_TIMEOUT_MS)
        wait_app_idle(ann, LOAD_TIMEOUT_MS)
        body = ann.inner_text("body")
        assert "smoothgrad" in body.lower() and "cannot run here" not in body
        assert ann.locator("[data-testid='stException']").count() == 0
        assert ann_errors == [] and bob_errors == []
    finally:
        ann_context.close()
        bob_context.close()


def area_files(results: Path, warm: bool) -> set[str]:
    folder = results / WARM if warm else results
    return {path.name for path in folder.glob(f"[0-9a-f][0-9a-f]/*{SUFFIX}")}


def test_uploads_never_evict_the_warm_ups_results(stack, browser):
    """`dashboard.warm_pages` fills the warm-ups' area (the cat's Home); then three students'
    photos through nginx fill the visitors' area past its bound, evicting one another: every
    warm-up file is still there, and the visitors' area keeps to its bound."""
    _, proxy, results, env = stack
    warmed = subprocess.run([sys.executable, "-m", "dashboard.warm_pages", "--images",
                             "chelsea", "--pages", "home.py"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=900)
    assert warmed.returncode == 0, warmed.stdout[-2000:] + warmed.stderr[-2000:]
    pinned = area_files(results, warm=True)
    assert len(pinned) >= 5, pinned
    seen: set[str] = set()
    context, page, errors = watched_tab(browser, 1400, 1000, timeout_ms=LOAD_TIMEOUT_MS)
    try:
        page.goto(proxy.url, timeout=60_000)
        wait_app_idle(page, LOAD_TIMEOUT_MS)
        for seed in (11, 12, 13):
            upload_photo(page, noisy_png(seed, side=160 + seed), 160 + seed)
            time.sleep(3)  # the store's writer thread
            seen |= area_files(results, warm=False)
        assert errors == []
    finally:
        context.close()
    now = area_files(results, warm=False)
    sizes = sorted(p.stat().st_size for p in results.glob(f"[0-9a-f][0-9a-f]/*{SUFFIX}"))
    assert len(seen) > len(now), f"the visitors' area never had to evict: {sizes}"
    assert pinned <= area_files(results, warm=True)
    size = sum(path.stat().st_size for path in results.glob(f"[0-9a-f][0-9a-f]/*{SUFFIX}"))
    assert size <= VISITORS_MB * 2**20
    assert os.path.isdir(results / WARM)
