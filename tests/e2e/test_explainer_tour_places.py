"""The tour on the screens a class uses (issue 28): on a 1280x720 projector in presentation
mode, a 1366x768 laptop and a 390x844 phone (touch), every step that names a patch on the
picture (the one it pins, or one its text names, such as the sink's "patch 3 (row 0,
col 3)") shows that patch on screen below the sticky tour box, not under it; and no step
asks a phone to hover."""

from __future__ import annotations

import re

import pytest
from e2e_helpers import running_apps, wait_app_idle, watched_tab
from explainer_driver import ROOT, open_explainer, state, wait_for_state

from dashboard.explainer_tour import TOUR
from xai_core.capture import centre_patch

SCREENS = {"projector": (1280, 720, "?presentation=true&tour=1", {}),
           "laptop": (1366, 768, "?tour=1", {}),
           "phone": (390, 844, "?tour=1", {"is_mobile": True, "has_touch": True})}
# steps with the picture among their parts (a patch named there must be seen there)
PICTURE_STEPS = [number for number, step in enumerate(TOUR, 1) if "image" in step.spot]
NAMED = re.compile(r"\bpatch (\d+) \(row (\d+), col(?:umn)? (\d+)\)")


@pytest.fixture(scope="module")
def app():
    with running_apps(1, log_name="explainer-tour-places") as apps:
        yield apps[0]


def named_patch(step, text: str, grid: tuple[int, int]) -> int | None:
    """The patch a step names: its pinned centre patch, else the first its text names
    (checked against the row and column the text gives)."""
    if step.patch == "centre":
        return centre_patch(grid)
    match = NAMED.search(text)
    if not match:
        return None
    patch, row, col = (int(n) for n in match.groups())
    assert divmod(patch, grid[1]) == (row, col), text
    return patch


def patch_box(page, patch: int, grid: tuple[int, int]) -> dict:
    """The patch's box on screen (viewport coordinates), from the picture's box."""
    canvas = page.locator(f"{ROOT} canvas.vx-image").bounding_box()
    rows, cols = grid
    row, col = divmod(patch, cols)
    top = canvas["y"] + row * canvas["height"] / rows
    left = canvas["x"] + col * canvas["width"] / cols
    return {"top": top, "bottom": top + canvas["height"] / rows,
            "left": left, "right": left + canvas["width"] / cols}


def go_to_step(page, number: int, touch: bool) -> None:
    """Next (tapped on the phone, which has no step dots), as a learner does, up to `number`."""
    while int(state(page)["tour"]) < number:
        shown = int(state(page)["tour"])
        button = page.locator(f"{ROOT} .vx-tour [data-act='next']")
        button.tap() if touch else button.click()
        wait_for_state(page, "tour", str(shown + 1))
    wait_app_idle(page)  # the step's block detail, when it was not here
    page.wait_for_timeout(1200)  # the smooth scroll, and the one after the detail arrives


@pytest.mark.parametrize("screen", list(SCREENS))
def test_a_step_shows_the_patch_it_names_below_the_tour_box(app, browser, screen):
    width, height, query, options = SCREENS[screen]
    touch = bool(options)
    context, page, errors = watched_tab(browser, width, height, **options)
    try:
        open_explainer(page, app.url, query)
        grid = tuple(int(n) for n in state(page)["grid"].split("x"))
        checked, hidden, words = [], [], []
        for number in PICTURE_STEPS:
            go_to_step(page, number, touch)
            text = page.locator(f"{ROOT} .vx-tour-text").inner_text()
            # on touch no step may ask to hover; the texts say "point at or tap", which reads
            # right with a mouse too (dashboard/explainer_tour.py)
            if re.search(r"\bhover", text, re.I):
                words.append((number, text))
            patch = named_patch(TOUR[number - 1], text, grid)
            if patch is None:
                continue
            tour = page.locator(f"{ROOT} .vx-tour").bounding_box()
            box = patch_box(page, patch, grid)
            checked.append(number)
            inside = (box["top"] >= tour["y"] + tour["height"] - 1 and box["bottom"] <= height
                      and box["left"] >= 0 and box["right"] <= width)
            if not inside:
                hidden.append({"step": number, "patch": patch, "box": box,
                               "tour_bottom": tour["y"] + tour["height"]})
        # the centre patch is pinned at steps 3 and 8 ("Cut into patches", "Softmax"); step 10,
        # the sink step, names the sink's patch (DINOv2's sink is on a patch)
        assert {3, 8, 10} <= set(checked), checked
        assert hidden == [], hidden
        assert words == [], words
    finally:
        context.close()
    assert errors == [], errors
