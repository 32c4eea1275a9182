"""Page 9 in a real browser: predict, then reveal. The learner clicks k patches on the image (no
map shown), presses Reveal, and the page says in signed words how far exactly those patches
moved the score, as the core computes it."""

from __future__ import annotations

import re

import pytest
from e2e_helpers import AppProcess, wait_app_idle, watched_tab

from xai_core.studies import cause_vs_claim as claims
from xai_core.images import load_sample
from xai_core.models import get_model

PORT = 8621  # this page's tests' own port
PATCHES = (100, 120)


@pytest.fixture(scope="module")
def app():
    server = AppProcess(log_name="interventions-app", port=PORT)
    try:
        server.wait_healthy()
        yield server
    finally:
        server.stop()


def click_patch(page, patch: int) -> None:
    """Click the invisible target of one patch on the predict-then-reveal image."""
    chart = page.locator(".st-key-iv_predict_pick .js-plotly-plot").first
    chart.scroll_into_view_if_needed()
    point = chart.evaluate("""(gd, patch) => {
        const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
        const targets = gd._fullData.find(t => t.type === 'scatter');
        const box = gd.getBoundingClientRect();
        return {x: box.left + xa._offset + xa.l2p(targets.x[patch]),
                y: box.top + ya._offset + ya.l2p(targets.y[patch])};
    }""", patch)
    page.mouse.click(point["x"], point["y"])
    wait_app_idle(page)


def test_predict_then_reveal_shows_the_learners_drop(app, browser):
    context, page, errors = watched_tab(browser, 1400, 1800)
    try:
        page.goto(app.url + "interventions?iv_view=predict&iv_k=2")
        wait_app_idle(page)
        main = page.locator("[data-testid='stMain']")
        assert "Picked: 0 of 2" in main.inner_text()
        for count, patch in enumerate(PATCHES, start=1):
            click_patch(page, patch)
            page.wait_for_function(
                "text => document.querySelector(\"[data-testid='stMain']\").innerText"
                ".includes(text)", arg=f"Picked: {count} of 2", timeout=240_000)
        page.get_by_role("button", name="Reveal").click()
        page.wait_for_function(
            "() => document.querySelector(\"[data-testid='stMain']\").innerText"
            ".includes('than random patches do')", timeout=240_000)
        wait_app_idle(page)
        text = main.inner_text()
        model, image = get_model("dinov2-s14"), load_sample("chelsea")
        found = claims.cause_vs_claim(model, image, ks=(2,), learner=PATCHES)
        shown = re.findall(r"your 2 patches (lowered|raised) the score by (\d\.\d{4})", text)
        # signed words: a drop above 0 lowered the score, below 0 raised it
        assert [(-1 if way == "raised" else 1) * float(size) for way, size in shown] == [
            pytest.approx(round(found.removals[r].learner, 4), abs=1e-4)
            for r in ("tokens", "pixels")]
        assert "shared patches / k" in text
        assert errors == [], errors
    finally:
        context.close()
