"""The ViT Explainer in a real browser (system Chromium): hovering two patches draws two
different overlays with no WebSocket message to the server; play advances the block;
opening a block fetches its detail; `?tour=3` opens step 3; ArrowRight/ArrowLeft move
the tour and its deep link; no request leaves the app's own host. Screenshots of the
overview, an opened block and a tour step go to artifacts/screenshots/."""

from __future__ import annotations

import pytest
from e2e_helpers import ARTIFACTS, running_apps, wait_app_idle
from explainer_driver import (ROOT, Traffic, hover_patch, image_pixels_digest, metrics,
                              open_explainer, state, wait_for_state)

from dashboard.explainer_tour import TOUR

SHOTS = ARTIFACTS / "screenshots"


@pytest.fixture(scope="module")
def app():
    with running_apps(1, log_name="explainer-app") as apps:
        yield apps[0]


@pytest.fixture()
def page(app, browser):
    context = browser.new_context(viewport={"width": 1500, "height": 1800})
    tab = context.new_page()
    tab.set_default_timeout(240_000)
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    traffic = Traffic(tab)
    yield tab, traffic, errors
    context.close()
    assert errors == [], errors  # no JavaScript error in the browser


def shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.locator(ROOT).screenshot(path=str(SHOTS / f"{name}.png"))


def test_overview_hover_links_without_talking_to_the_server(app, page):
    tab, traffic, _ = page
    open_explainer(tab, app.url)
    first = state(tab)
    assert first["stage"] == "blocks" and first["detail"] == first["block"]
    rows, cols = (int(n) for n in first["grid"].split("x"))
    shot(tab, "explainer-overview")

    sent_before = len(traffic.sent)
    hover_patch(tab, (rows // 2) * cols + cols // 4)
    tab.wait_for_timeout(150)
    one = state(tab), image_pixels_digest(tab)
    hover_patch(tab, (rows // 4) * cols + 3 * cols // 4)
    tab.wait_for_timeout(150)
    two = state(tab), image_pixels_digest(tab)
    tab.wait_for_timeout(700)  # anything a hover might send late would be out by now

    assert one[0]["hover"] == str((rows // 2) * cols + cols // 4)
    assert two[0]["hover"] == str((rows // 4) * cols + 3 * cols // 4)
    assert one[0]["mapSum"] != two[0]["mapSum"]  # two attention rows
    assert one[1] != two[1]  # two different pictures on the canvas
    assert len(traffic.sent) == sent_before, "a hover sent a WebSocket message"
    assert traffic.foreign_hosts(app.url) == set()


def test_play_advances_the_block_in_the_browser(app, page):
    tab, traffic, _ = page
    open_explainer(tab, app.url)
    start = int(state(tab)["block"])
    sent_before = len(traffic.sent)
    tab.locator(f"{ROOT} .vx-play").click()
    seen = set()
    for _ in range(30):
        seen.add(state(tab)["block"])
        tab.wait_for_timeout(100)
    assert state(tab)["playing"] == "true"
    assert len(seen) >= 3, (seen, metrics(tab), state(tab))  # blocks advance while playing
    assert len(traffic.sent) == sent_before  # drawn client-side: no rerun while playing
    tab.locator(f"{ROOT} .vx-play").click()
    assert state(tab)["playing"] == "false"
    assert int(state(tab)["block"]) != start or len(seen) > 3


def test_opening_a_block_fetches_its_detail(app, page):
    tab, _, _ = page
    open_explainer(tab, app.url)
    tab.locator(f"{ROOT} .vx-block[data-block='3']").click()
    wait_for_state(tab, "block", "3")
    wait_for_state(tab, "detail", lambda loaded: "3" in loaded.split(","))
    wait_app_idle(tab)
    hover_patch(tab, 5)
    tab.wait_for_timeout(200)
    text = tab.locator(f"{ROOT} .vx-detail").inner_text()
    assert "Block 3 " in text and "softmax over all" in text
    assert "patch 5" in tab.locator(f"{ROOT} .vx-caption").inner_text()
    shot(tab, "explainer-block")


def test_tour_deep_link_and_arrow_keys(app, page):
    tab, traffic, _ = page
    open_explainer(tab, app.url, "?tour=3")
    assert state(tab)["tour"] == "3"
    title = tab.locator(f"{ROOT} .vx-tour-title").inner_text()
    assert title == TOUR[2].title
    assert state(tab)["stage"] == TOUR[2].stage
    shot(tab, "explainer-tour-step")

    tab.locator(f"{ROOT} .vx-tour-text").click()  # a presenter clicks the page, then the clicker
    tab.keyboard.press("ArrowRight")
    assert state(tab)["tour"] == "4"
    assert tab.locator(f"{ROOT} .vx-tour-title").inner_text() == TOUR[3].title
    tab.wait_for_function("() => new URL(location.href).searchParams.get('tour') === '4'")
    wait_app_idle(tab)
    tab.keyboard.press("ArrowLeft")
    tab.keyboard.press("ArrowLeft")
    assert state(tab)["tour"] == "2"
    tab.wait_for_function("() => new URL(location.href).searchParams.get('tour') === '2'")
    wait_app_idle(tab)
    assert tab.locator(f"{ROOT} .vx-tour-title").inner_text() == TOUR[1].title
    tab.locator(f"{ROOT} [data-act='close']").click()
    tab.wait_for_function("() => !new URL(location.href).searchParams.has('tour')")
    assert state(tab)["tour"] == "0"
    assert traffic.foreign_hosts(app.url) == set()
