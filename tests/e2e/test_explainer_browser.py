"""The ViT Explainer in a real browser (system Chromium): hovering two patches draws two
different overlays with no WebSocket message to the server; play advances the block;
opening a block fetches its detail and nothing else; `?tour=3` opens step 3;
ArrowRight/ArrowLeft move the tour and its deep link; the tour resumes after "Go deeper";
the random-weight layouts (two prefix tokens, five, CaiT's class attention) hover, play
and tour too; "Save PNG" saves the picture as drawn; a phone gets one column; a large upload is described as it is; no request leaves the app's own
host. Screenshots go to artifacts/screenshots/."""

from __future__ import annotations

import base64
import io
import math

import numpy as np
import pytest
from e2e_helpers import ARTIFACTS, ROOT as REPO, running_apps, wait_app_idle, watched_tab
from explainer_driver import (ROOT, Traffic, check_tour_above, choose_random_vit,
                              hit_area, hover_patch, image_pixels_digest, in_view, metrics,
                              open_explainer, patch_point, state, upload_photo,
                              wait_for_state)
from PIL import Image

from dashboard.explainer.component import loader_js
from dashboard.explainer.tour import TOUR

SHOTS = ARTIFACTS / "screenshots"
# what Streamlit sends with each rerun: the CSS and the loader (the code comes over HTTP)
COMPONENT_CODE = len(loader_js().encode()) + len(
    (REPO / "dashboard" / "static" / "explainer" / "component" / "explainer.css").read_bytes())


@pytest.fixture(scope="module")
def app():
    with running_apps(1, log_name="explainer-app") as apps:
        yield apps[0]


def new_page(browser, width=1500, height=1800, **options):
    context, tab, errors = watched_tab(browser, width, height, **options)
    return context, tab, Traffic(tab), errors


@pytest.fixture()
def page(app, browser):
    context, tab, traffic, errors = new_page(browser)
    yield tab, traffic, errors
    context.close()
    assert errors == [], errors  # no JavaScript error in the browser


@pytest.fixture()
def laptop(app, browser):
    """A 1280x800 laptop screen, where the page is narrow and short."""
    context, tab, traffic, errors = new_page(browser, 1280, 800)
    yield tab, traffic, errors
    context.close()
    assert errors == [], errors


def shot(page, name: str, whole: bool = False) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    if whole:
        page.locator(ROOT).screenshot(path=str(SHOTS / f"{name}.png"))
    else:
        page.screenshot(path=str(SHOTS / f"{name}.png"))


def test_the_view_the_component_sends_has_every_declared_field(browser):
    """wire.js `view` (every sender's builder of the `view` state) in Chromium: the fields
    given, every other declared field at its kind's "nothing", which the live page reads as
    absent (explainer.VIEW_FIELDS, tests/test_explainer_wire.py); a misspelt field throws."""
    from xai_core.lessons import explainer

    wire = (REPO / "dashboard" / "static" / "explainer" / "component" / "wire.js").read_text()
    context = browser.new_context()
    tab = context.new_page()
    built, error = tab.evaluate("() => {" + wire.replace("export ", "") + """
        let error = null;
        try { view({ blokc: 1 }); } catch (e) { error = e.message; }
        return [view({ block: 3, off: [[6, 3]] }), error];
    }""")
    context.close()
    assert list(built) == list(explainer.VIEW_FIELDS)
    assert built == {"block": 3, "tour": None, "have": None, "blocks": [], "qk": [],
                     "want_qk": False, "off": [[6, 3]], "dismissed": False, "ask": None}
    assert error == "not fields of an Explainer view: blokc"


def test_overview_hover_links_without_talking_to_the_server(app, page):
    tab, traffic, _ = page
    open_explainer(tab, app.url)
    first = state(tab)
    assert first["stage"] == "blocks" and first["detail"] == first["block"]
    rows, cols = (int(n) for n in first["grid"].split("x"))
    shot(tab, "explainer-overview", whole=True)

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
    wait_for_state(tab, "playing", "false", timeout_s=5)  # a busy CI box may lag a frame
    assert int(state(tab)["block"]) != start or len(seen) > 3


def test_opening_a_block_sends_that_block_only(app, page):
    """The browser names the overview it holds: the reply carries the new block's detail,
    not the overview and the tour again; a tour step on a block it keeps carries no array
    at all, only the component's own code (which Streamlit re-sends on every rerun)."""
    tab, traffic, _ = page
    open_explainer(tab, app.url)
    loaded = next(m for m in traffic.messages if m["header"]["overview"] is not None)
    assert loaded["header"]["tour"]["steps"]

    count = len(traffic.messages)
    tab.locator(f"{ROOT} .vx-block[data-block='3']").click()
    wait_for_state(tab, "block", "3")
    wait_for_state(tab, "detail", lambda kept: "3" in kept.split(","))
    wait_app_idle(tab)
    replies = traffic.messages[count:]
    assert len(replies) == 1
    header = replies[0]["header"]
    assert header["overview"] is None and header["tour"]["steps"] is None
    assert header["detail"]["block"] == 3
    # with its panel in view, the block's q and k come in the same reply
    in_view = state(tab).get("qkInView") == "true"
    assert (header["vectors"] is not None) == in_view
    assert ("3" in state(tab)["qk"].split(",")) == in_view
    vectors = sum(math.prod(array["shape"]) * {"i8": 1, "f32": 4}[array["dtype"]]
                  for n in "qk" for array in header["vectors"][n].values()) if in_view else 0
    overview_bytes = loaded["frame"] - (replies[0]["frame"] - vectors)
    assert overview_bytes > 40_000, (loaded["frame"], replies[0]["frame"], vectors)

    hover_patch(tab, 5)
    tab.wait_for_timeout(200)
    text = tab.locator(f"{ROOT} .vx-detail").inner_text()
    assert "Block 3 " in text and "softmax over all" in text
    assert "patch 5" in tab.locator(f"{ROOT} .vx-caption").inner_text()
    shot(tab, "explainer-block", whole=True)

    # back to the last block (kept in the browser): no detail travels
    count = len(traffic.messages)
    tab.locator(f"{ROOT} .vx-block[data-block='{state(tab)['detail'].split(',')[0]}']").click()
    tab.locator(f"{ROOT} [data-act='start']").click()
    tab.wait_for_function("() => new URL(location.href).searchParams.get('tour') === '1'")
    wait_app_idle(tab)
    for reply in traffic.messages[count:]:
        assert reply["header"]["overview"] is None and reply["header"]["detail"] is None
        assert reply["frame"] < COMPONENT_CODE + 8_000, reply["frame"]


def test_queries_and_keys_come_when_their_panel_scrolls_into_view(app, laptop):
    """On a laptop screen the query · key panel starts below the fold: the first screen
    carries no q and k; scrolling to the panel fetches them once (no overview, no detail)
    and it recomputes the softmax from them."""
    tab, traffic, _ = laptop
    open_explainer(tab, app.url)
    shown = state(tab)
    assert shown["qkInView"] == "false" and shown["qk"] == ""
    assert all(m["header"].get("vectors") is None for m in traffic.messages)
    count = len(traffic.messages)
    tab.locator(f"{ROOT} [data-part='qk']").scroll_into_view_if_needed()
    wait_for_state(tab, "qk", shown["block"])
    wait_app_idle(tab)
    replies = traffic.messages[count:]
    assert len(replies) == 1
    header = replies[0]["header"]
    assert header["vectors"]["block"] == int(shown["block"])
    assert header["overview"] is None and header["detail"] is None
    assert "softmax over all" in tab.locator(f"{ROOT} [data-part='qk']").inner_text()


def test_tour_deep_link_and_arrow_keys(app, page):
    tab, traffic, _ = page
    open_explainer(tab, app.url, "?tour=3")
    assert state(tab)["tour"] == "3"
    title = tab.locator(f"{ROOT} .vx-tour-title").inner_text()
    assert title == TOUR[2].title
    assert state(tab)["stage"] == TOUR[2].stage
    shot(tab, "explainer-tour-step", whole=True)

    tab.locator(f"{ROOT} .vx-tour-title").click()  # a presenter clicks the page, then the clicker
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


def test_tour_resumes_after_going_deeper(app, laptop):
    """"Go deeper" opens the step's page; coming back offers the step the learner left,
    a presenter's clicker (ArrowRight) picks it up, and closing the tour forgets it."""
    tab, _, _ = laptop
    open_explainer(tab, app.url, "?tour=5")
    tab.keyboard.press("ArrowRight")
    tab.wait_for_function("() => new URL(location.href).searchParams.get('tour') === '6'")
    wait_app_idle(tab)
    deeper = TOUR[5].page
    tab.locator(f"{ROOT} [data-act='deeper']").click()
    tab.wait_for_function(f"() => !location.pathname.endsWith('vit_explainer')")
    wait_app_idle(tab)
    assert tab.locator(ROOT).count() == 0, f"still on the Explainer, not {deeper}"

    tab.get_by_role("link", name="0 · ViT Explainer").click()
    tab.locator(ROOT).wait_for()
    wait_for_state(tab, "resume", "6")
    assert state(tab)["tour"] == "0"
    offer = tab.locator(f"{ROOT} [data-act='resume']").inner_text()
    assert "step 6" in offer and TOUR[5].title in offer
    shot(tab, "explainer-resume")
    tab.keyboard.press("ArrowRight")
    assert state(tab)["tour"] == "6"
    assert tab.locator(f"{ROOT} .vx-tour-title").inner_text() == TOUR[5].title
    tab.wait_for_function("() => new URL(location.href).searchParams.get('tour') === '6'")
    wait_app_idle(tab)

    tab.keyboard.press("Escape")  # done with the tour: nothing to resume any more
    wait_app_idle(tab)
    tab.get_by_role("link", name="1 · Tokenization").click()
    wait_app_idle(tab)
    tab.get_by_role("link", name="0 · ViT Explainer").click()
    tab.locator(ROOT).wait_for()
    wait_app_idle(tab)
    assert state(tab)["resume"] == "0"
    assert tab.locator(f"{ROOT} [data-act='start']").count() == 1
    tab.keyboard.press("ArrowRight")  # with nothing to resume, → starts the tour
    assert state(tab)["tour"] == "1"


def test_tour_opened_by_link_resumes_after_going_deeper(app, laptop):
    """A lecture's `?tour=9` link, no step taken on the page: after "Go deeper" and back
    (the sidebar, then the browser's Back) the Explainer offers step 9 and → resumes it."""
    tab, _, _ = laptop
    open_explainer(tab, app.url, "?tour=9")
    assert state(tab)["tour"] == "9"
    for back in ("sidebar", "browser"):
        tab.locator(f"{ROOT} [data-act='deeper']").click()
        tab.wait_for_function("() => !location.pathname.endsWith('vit_explainer')")
        wait_app_idle(tab)
        if back == "sidebar":
            tab.get_by_role("link", name="0 · ViT Explainer").click()
        else:
            tab.go_back()
        tab.locator(ROOT).wait_for()
        wait_app_idle(tab)
        assert (state(tab)["tour"], state(tab)["resume"]) == ("0", "9"), back
        tab.keyboard.press("ArrowRight")
        assert state(tab)["tour"] == "9"
        tab.wait_for_function("() => new URL(location.href).searchParams.get('tour') === '9'")
        wait_app_idle(tab)


def test_presentation_toggle_keeps_the_view(app, page):
    """Switching presentation mode on reruns the page and Streamlit re-creates the
    component's element: the open block stays, and the overview is not sent again."""
    tab, traffic, _ = page
    open_explainer(tab, app.url)
    tab.locator(f"{ROOT} .vx-block[data-block='4']").click()
    wait_for_state(tab, "detail", lambda kept: "4" in kept.split(","))
    wait_app_idle(tab)
    count = len(traffic.messages)
    tab.get_by_text("Presentation mode").click()
    wait_app_idle(tab)
    tab.wait_for_function("() => new URL(location.href).searchParams.get('presentation') === 'true'")
    tab.locator(f"{ROOT}.present").wait_for()
    assert state(tab)["block"] == "4"
    assert all(m["header"]["overview"] is None for m in traffic.messages[count:])


def test_tour_step_keeps_its_part_in_view_on_a_laptop(app, laptop):
    """On a 1280x800 screen the tour box stays at the top and the page scrolls the part
    each step talks about into view under it."""
    tab, _, _ = laptop
    open_explainer(tab, app.url, "?tour=6")
    spots = {6: "[data-part='steps']", 7: "[data-part='qk']", 9: "[data-part='heads']"}
    for step, presses in ((6, 0), (7, 1), (9, 2)):
        for _ in range(presses):
            tab.keyboard.press("ArrowRight")
        tab.wait_for_timeout(900)  # the smooth scroll
        assert state(tab)["tour"] == str(step)
        check_tour_above(tab, spots[step])
    shot(tab, "explainer-laptop-step")


# `outside` leaves out what a row that scrolls sideways holds (a phone's block steps): its
# container is inside the component, and the learner swipes to the rest
STAGE_ROWS = """root => {
  const stages = [...root.querySelectorAll('.vx-stage')];
  const rows = {};
  stages.forEach(s => { const top = Math.round(s.getBoundingClientRect().top);
                        rows[top] = (rows[top] || 0) + 1; });
  const right = root.getBoundingClientRect().right;
  const swiped = (e) => { const row = e.parentElement && e.parentElement.closest('.vx-steps');
    return !!row && getComputedStyle(row).overflowX === 'auto'; };
  return {perRow: Object.values(rows), cut: stages.filter(s => [s, ...s.children].some(
            e => e.scrollWidth > e.clientWidth + 1)).map(s => s.dataset.stage),
          outside: [...root.querySelectorAll('*')].filter(
            e => e.getBoundingClientRect().right > right + 1 && !swiped(e)).map(e => e.textContent.slice(0, 20))};
}"""


def test_presentation_mode_on_a_projector(app, browser):
    """1920x1080 with presentation mode on: larger type, the tour and the part it talks
    about both on screen, the pipeline's stages on one row; on a 1366x768 projector the
    stages go on two even rows instead of cutting their names, and nothing sticks out past
    the component's edge (the block player's "11 of 0-11" did); 768 rows of pixels get a
    smaller scale, so the tour box and what it spotlights both fit."""
    context, tab, traffic, errors = new_page(browser, 1920, 1080)
    open_explainer(tab, app.url, "?presentation=true&tour=8")
    def font_px() -> float:
        return tab.locator(ROOT).evaluate("e => parseFloat(getComputedStyle(e).fontSize)")

    size = font_px()
    assert size >= 24, size
    tab.wait_for_timeout(900)
    tour, image = in_view(tab, f"{ROOT} .vx-tour"), in_view(tab, f"{ROOT} canvas.vx-image")
    assert tour["y"] + tour["height"] <= image["y"] + 2 and image["y"] < image["viewport"] - 200
    shot(tab, "explainer-presentation")
    assert tab.locator(ROOT).evaluate(STAGE_ROWS) == {"perRow": [8], "cut": [], "outside": []}
    tab.set_viewport_size({"width": 1366, "height": 768})
    tab.wait_for_timeout(500)
    small = font_px()
    assert 20 <= small < size  # fewer rows of pixels: the same share of the height per letter
    found = tab.locator(ROOT).evaluate(STAGE_ROWS)
    assert found["cut"] == [] and found["outside"] == [] and found["perRow"] in ([8], [4, 4])
    tab.keyboard.press("ArrowRight")  # step 9 talks about the head chips
    tab.wait_for_timeout(900)
    check_tour_above(tab, "[data-part='heads']")  # the chips are 82 px tall: all of them
    tab.set_viewport_size({"width": 1366, "height": 1024})  # as wide, taller: full size
    tab.wait_for_timeout(500)
    found = tab.locator(ROOT).evaluate(STAGE_ROWS)  # one row: a presentation link collapsed
    assert found["cut"] == [] and found["outside"] == [] and found["perRow"] in ([8], [4, 4])
    assert traffic.foreign_hosts(app.url) == set()
    context.close()
    assert errors == [], errors


def test_save_png_is_the_picture_as_drawn(app, page, tmp_path):
    """"Save PNG" downloads the picture exactly as drawn (the map, the pinned patch's
    outline), with its caption, colour scale and model written under it, named after the
    model, block and map."""
    tab, traffic, _ = page
    open_explainer(tab, app.url)
    count = len(traffic.messages)
    tab.mouse.click(*patch_point(tab, 40))  # pin a patch
    save = tab.locator(f"{ROOT} .vx-save")
    save.hover()  # the pointer leaves the picture: the pinned patch's map stays
    drawn = tab.locator(f"{ROOT} canvas.vx-image").evaluate("c => c.toDataURL('image/png')")
    shown = np.asarray(Image.open(io.BytesIO(base64.b64decode(drawn.split(",")[1]))).convert("RGB"))
    with tab.expect_download() as download:
        save.click()
    path = tmp_path / download.value.suggested_filename
    download.value.save_as(path)
    saved = np.asarray(Image.open(path).convert("RGB"))
    rows = shown.shape[0]
    assert saved.shape[1] == shown.shape[1] and saved.shape[0] > rows + 60
    np.testing.assert_array_equal(saved[:rows], shown)
    assert saved[rows:].min() < 100 and saved[rows:].max() == 255  # dark text on white
    block = state(tab)["block"]
    assert path.name == f"vit-lens-dinov2-s14-block{block}-attention.png"
    assert len(traffic.messages) == count  # drawn and saved in the browser


def test_copy_link_reopens_the_same_view(app, page, browser):
    """An instructor sets up a view (block 6, head 2, a pinned patch, the rollout map) and
    copies its link; the link opens the same picture in a new browser."""
    tab, _, _ = page
    open_explainer(tab, app.url)
    tab.locator(f"{ROOT} .vx-block").nth(6).click()
    wait_for_state(tab, "detail", lambda held: "6" in (held or "").split(","))
    tab.locator(f"{ROOT} .vx-headchip[data-head='2']").click()
    tab.locator(f"{ROOT} [data-overlay='rollout']").click()
    tab.mouse.click(*patch_point(tab, 120))
    tab.locator(f"{ROOT} .vx-copy").click()
    link = tab.locator(f"{ROOT} .vx-tools input").input_value()
    assert all(f"{k}={v}" in link for k, v in
               (("vx_block", 6), ("vx_head", 2), ("vx_patch", 120), ("vx_map", "rollout")))
    shown = {key: state(tab)[key] for key in ("block", "head", "overlay", "mapSum")}
    # a screen reader reads the picture as its caption
    said = tab.locator(f"{ROOT} canvas.vx-image").get_attribute("aria-label")
    assert said.startswith("What patch 120 (row 7, col 8) attends to in Block 6 (head 2)"), said
    context = browser.new_context(viewport={"width": 1500, "height": 1800})
    other = context.new_page()
    other.set_default_timeout(240_000)
    other.goto(link)
    wait_app_idle(other)
    other.locator(f"{ROOT} .vx-stage").first.wait_for()
    wait_for_state(other, "mapSum", shown["mapSum"])
    assert {key: state(other)[key] for key in shown} == shown
    assert "vx_block" not in other.url  # read once: the address no longer pins the view
    context.close()


def test_a_phone_gets_one_column(app, browser):
    """A learner on a phone (390x844, touch): whichever stage is open, nothing sticks out past
    the component's edge (the image, its controls and the block's attention matrix did, by
    35-270 px, cut off by the page), a head's power switch takes a finger, a tap on the picture shows that patch's attention, and a
    tour step shows its part under the tour box: step 9 the head chips whole and at least half
    of the picture (the chips went under the screen's edge)."""
    context, tab, traffic, errors = new_page(browser, 390, 844, is_mobile=True, has_touch=True)
    open_explainer(tab, app.url)
    # a head's power switch is drawn 18 px wide; a finger gets at least 24 px (WCAG 2.5.8)
    switch = f"{ROOT} .vx-headchip[data-head='2'] + .vx-headoff"
    assert min(hit_area(tab, switch)) >= 24, hit_area(tab, switch)
    stages = tab.locator(f"{ROOT} .vx-stage")
    for i in range(stages.count()):
        stages.nth(i).click()
        wait_app_idle(tab)
        found = tab.locator(ROOT).evaluate(STAGE_ROWS)
        assert found["outside"] == [], (stages.nth(i).get_attribute("data-stage"), found)
    image = in_view(tab, f"{ROOT} canvas.vx-image")
    assert 0.8 * image["width"] <= image["height"] <= 1.2 * image["width"]  # a square, not squeezed
    shown = {state(tab)["mapSum"]}  # [CLS]'s row; a tap shows (and pins) the patch's row
    for patch in (0, 100):
        tab.touchscreen.tap(*patch_point(tab, patch))
        tab.wait_for_timeout(200)
        shown.add(state(tab)["mapSum"])
    assert len(shown) == 3, shown
    open_explainer(tab, app.url, "?tour=6")
    tab.wait_for_timeout(900)  # the smooth scroll
    check_tour_above(tab, "[data-part='steps']")
    assert not tab.locator(f"{ROOT} .vx-tour .vx-keys").is_visible()  # no arrow keys on a phone
    for _ in range(3):  # step 9: the head chips under the picture, which do not both fit
        tab.locator(f"{ROOT} .vx-tour [data-act='next']").tap()
        wait_app_idle(tab)
    tab.wait_for_timeout(900)
    assert state(tab)["tour"] == "9"
    tour, image = in_view(tab, f"{ROOT} .vx-tour"), in_view(tab, f"{ROOT} canvas.vx-image")
    chips = in_view(tab, f"{ROOT} [data-part='heads']")
    assert tour["y"] + tour["height"] <= chips["y"] and chips["y"] + chips["height"] <= 844
    shown = min(image["y"] + image["height"], 844) - max(image["y"], tour["y"] + tour["height"])
    assert shown >= image["height"] / 2, (shown, image)  # the chips' maps land there
    context.close()
    assert errors == [], errors


@pytest.mark.parametrize("name, model, prefix_names, cls_joins_late", [
    ("deit-distilled", "DeiT-S/16 distilled", ["[CLS]", "[DIST]"], False),
    ("registers", "DINOv2 ViT-S/14 with 4 registers",
     ["[CLS]", "[REG1]", "[REG2]", "[REG3]", "[REG4]"], False),
    ("cait", "CaiT-S24", ["[CLS]"], True),
])
def test_random_weight_layouts_hover_play_and_tour(app, page, name, model, prefix_names,
                                                   cls_joins_late):
    tab, traffic, _ = page
    open_explainer(tab, app.url)
    choose_random_vit(tab, model)
    banner = tab.locator(f"{ROOT} .vx-random").inner_text()
    assert "random weights" in banner.lower()
    overview = next(m["header"]["overview"] for m in reversed(traffic.messages)
                    if m["header"]["overview"])
    assert overview["model"]["random"] and "RANDOM WEIGHTS" in overview["model"]["label"]
    assert overview["layout"]["prefix_names"] == prefix_names
    assert overview["layout"]["cls_joins_late"] is cls_joins_late
    if not cls_joins_late:
        seq = tab.locator(f"{ROOT} .vx-seq-info").inner_text()
        assert f"{len(prefix_names)} prefix + {overview['layout']['patches']} patches" in seq

    tab.locator(f"{ROOT} .vx-block[data-block='0']").click()  # a block with patch queries
    wait_for_state(tab, "detail", lambda kept: "0" in kept.split(","))
    wait_app_idle(tab)
    rows, cols = (int(n) for n in state(tab)["grid"].split("x"))
    sent = len(traffic.sent)
    hover_patch(tab, cols + 1)
    tab.wait_for_timeout(150)
    one = state(tab)["mapSum"]
    hover_patch(tab, (rows - 2) * cols + cols - 2)
    tab.wait_for_timeout(150)
    assert state(tab)["mapSum"] != one
    tab.wait_for_timeout(500)
    assert len(traffic.sent) == sent

    tab.mouse.move(1, 1)
    tab.locator(f"{ROOT} .vx-play").click()
    seen = set()
    for _ in range(25):
        seen.add(state(tab)["block"])
        tab.wait_for_timeout(100)
    tab.locator(f"{ROOT} .vx-play").click()
    assert len(seen) >= 3, seen

    tab.locator(f"{ROOT} [data-act='start']").click()
    for step in range(2, 9):
        tab.keyboard.press("ArrowRight")
        assert state(tab)["tour"] == str(step)
        text = tab.locator(f"{ROOT} .vx-tour-text").inner_text()
        assert "{" not in text, (step, text)
    wait_app_idle(tab)
    shot(tab, f"explainer-{name}", whole=True)
    assert traffic.foreign_hosts(app.url) == set()


def test_a_large_upload_is_described_as_it_is(app, page, tmp_path):
    """A 4000x3000 photo through the sidebar: the app keeps a 1024x768 copy, and the Image
    panel says so and shows the part the model keeps."""
    photo = tmp_path / "holiday.jpg"
    source = Image.open(REPO / "dashboard" / "favicon.png").convert("RGB")
    source.resize((4000, 3000)).save(photo, quality=90)
    tab, traffic, _ = page
    open_explainer(tab, app.url)
    upload_photo(tab, photo)
    tab.wait_for_function("() => window.__vitExplainer.updates > 1")
    overview = next(m["header"]["overview"] for m in reversed(traffic.messages)
                    if m["header"]["overview"])
    assert overview["picture"]["source"] == [4000, 3000]
    assert overview["picture"]["size"] == [1024, 768]
    tab.locator(f"{ROOT} .vx-stage[data-stage='image']").click()
    text = tab.locator(f"{ROOT} .vx-detail").inner_text()
    assert "1024×768" in text and "4000×3000" in text, text
    assert "of the picture" in text
    assert f"It is shrunk {768 / 256:.1f}x" in text, text  # short side to floor(224 / 0.875)
    # the upload stays on the server: the link names the sample, and says so
    tab.locator(f"{ROOT} .vx-copy").click()
    assert "image_choice=chelsea" in tab.locator(f"{ROOT} .vx-tools input").input_value()
    assert "your picture is not in the link" in tab.locator(f"{ROOT} .vx-tools span").inner_text()
    shot(tab, "explainer-upload", whole=True)
    assert traffic.foreign_hosts(app.url) == set()
