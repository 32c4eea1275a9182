"""The offline lesson (`python -m xai_core export-lesson`) in a real browser, opened from
file:// with every request but the file itself aborted: nothing is requested and nothing is
logged as an error; hover links, the tour runs 1 -> its last step on ArrowRight and closes on Esc,
block 6 opens with its query · key panel, presentation size, Save PNG, the phone layout,
"Go deeper" answered in words; the random-weight DeiT-S distilled (two prefix tokens, two
pictures: the picker) and DINOv2-reg4 (five prefix tokens) layouts open labelled RANDOM
WEIGHTS; and for one state (block 6, head 2, patch 120, rollout) the lesson's picture canvas
equals the live page's pixel for pixel."""

from __future__ import annotations

import base64
import io
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from e2e_helpers import ROOT as REPO
from e2e_helpers import AppProcess, app_env, wait_app_idle
from explainer_driver import ROOT, hover_patch, patch_point, state, wait_for_state
from PIL import Image
from test_explainer_browser import STAGE_ROWS

from dashboard.explainer.tour import TOUR, step_number

LIVE_PORT = 8640  # this test's own port (8640-8649)
LINKED = "?vx_block=6&vx_head=2&vx_patch=120&vx_map=rollout"


def export(out: Path, *args: str) -> Path:
    done = subprocess.run([sys.executable, "-m", "xai_core", "export-lesson", *args, "--out",
                           str(out)], cwd=REPO, env=app_env(), capture_output=True, text=True,
                          timeout=1200)
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="module")
def chelsea(tmp_path_factory) -> Path:
    return export(tmp_path_factory.mktemp("lesson") / "chelsea.html",
                  "--model", "dinov2-s14", "--images", "sample:chelsea")


class Opened:
    """A lesson open in its own browser context, every request but the file aborted."""

    def __init__(self, browser, path: Path, query: str = "", width: int = 1500,
                 height: int = 1800, **options):
        self.context = browser.new_context(viewport={"width": width, "height": height},
                                           accept_downloads=True, **options)
        self.tab = self.context.new_page()
        self.tab.set_default_timeout(60_000)
        self.file = path.resolve().as_uri()
        self.requests: list[str] = []
        self.problems: list[str] = []
        self.tab.on("request", lambda request: self.requests.append(request.url))
        self.tab.on("console", lambda message: message.type in ("error", "warning")
                    and self.problems.append(f"{message.type}: {message.text}"))
        self.tab.on("pageerror", lambda error: self.problems.append(f"pageerror: {error}"))
        self.tab.route("**/*", lambda route: route.continue_()
                       if route.request.url.split("?")[0] == self.file else route.abort())
        self.tab.goto(self.file + query)
        self.tab.wait_for_function(
            "() => window.__vitExplainer && window.__vitExplainer.readyAt !== null")
        self.settle()

    def settle(self) -> None:
        """Until every answer the host owes the component has been given."""
        self.tab.wait_for_timeout(400)  # the component asks 180 ms after a change
        self.tab.wait_for_function("() => window.__vitLesson.replies >= 1")

    def close(self) -> None:
        self.context.close()

    def only_the_file(self) -> None:
        assert {url.split("?")[0] for url in self.requests} == {self.file}, self.requests
        assert self.problems == [], self.problems


@pytest.fixture()
def opened(browser, chelsea):
    lesson = Opened(browser, chelsea)
    yield lesson
    lesson.only_the_file()
    lesson.close()


def canvas_pixels(tab) -> np.ndarray:
    drawn = tab.locator(f"{ROOT} canvas.vx-image").evaluate("c => c.toDataURL('image/png')")
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(drawn.split(",")[1]))).convert("RGBA"))


def token_index(name: str, prefix_names: list[str]) -> int:
    """A token as the query · key panel names it ("[CLS]", "patch 17 (r1, c3)")."""
    found = re.fullmatch(r"patch (\d+) \(r\d+, c\d+\)", name)
    return len(prefix_names) + int(found.group(1)) if found else prefix_names.index(name)


def assert_panel_dot_within_stated_bound(tab, block: int) -> None:
    """The q · k the panel shows (from the file's 8-bit q and k) against the float32
    capture's own q and k: within QUANTISATION's bound for that pair, plus the shown
    number's rounding (format.js fmt: 4 significant digits, 3 in exponent notation)."""
    from xai_core import pipeline
    from xai_core.analysis.tokens import prefix_token_names
    from xai_core.images import load_sample
    from xai_core.models import get_model

    panel = tab.locator(f"{ROOT} [data-part='qk']").first
    panel.locator(".vx-formula").wait_for()  # drawn once its q and k are in
    text = panel.inner_text()
    head = int(re.search(r"Query · key, head (\d+)", text).group(1))
    query, key = (re.search(rf"^{v} of (.+)$", text, re.M).group(1).strip() for v in "qk")
    shown = re.search(r"sum of the (\d+) products = (\S+)", text)
    model = get_model("dinov2-s14")
    record = pipeline.vit_capture(model, load_sample("chelsea")).blocks[block]
    names = prefix_token_names(model.module)
    q = record.acts["q"][0, head, token_index(query, names)].double().numpy()
    k = record.acts["k"][0, head, token_index(key, names)].double().numpy()
    assert int(shown.group(1)) == q.size
    eq, ek = np.abs(q).max() / 254, np.abs(k).max() / 254
    bound = eq * np.abs(k).sum() + ek * np.abs(q).sum() + q.size * eq * ek
    dot, value = float(q @ k), float(shown.group(2))
    digits = 3 if "e" in shown.group(2) else 4
    rounding = 0.5 * 10 ** (math.floor(math.log10(abs(value))) + 1 - digits)
    assert abs(value - dot) <= bound + rounding, (text, dot, bound)


def test_offline_hover_tour_and_block_6(opened):
    tab = opened.tab
    first = state(tab)
    assert first["stage"] == "blocks" and first["detail"] == first["block"] == "11"
    rows, cols = (int(n) for n in first["grid"].split("x"))
    hover_patch(tab, (rows // 2) * cols + cols // 4)
    tab.wait_for_timeout(150)
    one = state(tab), canvas_pixels(tab)
    hover_patch(tab, (rows // 4) * cols + 3 * cols // 4)
    tab.wait_for_timeout(150)
    two = state(tab), canvas_pixels(tab)
    assert one[0]["hover"] == str((rows // 2) * cols + cols // 4)
    assert one[0]["mapSum"] != two[0]["mapSum"] and not np.array_equal(one[1], two[1])

    tab.mouse.move(5, 5)
    switching = step_number("switch_sink")
    for step in range(1, len(TOUR) + 1):  # the first → starts the tour
        tab.keyboard.press("ArrowRight")
        wait_for_state(tab, "tour", str(step), timeout_s=20)
        if step == switching:  # the step's switched-off head comes with the file
            answer = tab.locator(f"{ROOT} [data-part='answer']")
            assert answer.get_attribute("data-shown") == "switched"
            assert answer.get_attribute("data-off") == state(tab)["off"] != ""
            # no server to run the model again: only the step's own switch shows, disabled
            assert tab.locator(f"{ROOT} .vx-headoff:visible").count() == 1
            assert tab.locator(f"{ROOT} .vx-headoff:visible").is_disabled()
    tab.keyboard.press("ArrowRight")  # past the last step: stays there
    tab.wait_for_timeout(300)
    assert state(tab)["tour"] == str(len(TOUR))
    tab.keyboard.press("ArrowLeft")
    wait_for_state(tab, "tour", str(len(TOUR) - 1), timeout_s=20)
    tab.keyboard.press("Escape")
    wait_for_state(tab, "tour", "0", timeout_s=20)

    tab.locator(f"{ROOT} .vx-block[data-block='6']").click()
    wait_for_state(tab, "block", "6", timeout_s=20)
    wait_for_state(tab, "detail", lambda held: "6" in (held or "").split(","), timeout_s=20)
    tab.locator(f"{ROOT} [data-part='qk']").first.scroll_into_view_if_needed()
    wait_for_state(tab, "qk", lambda held: "6" in (held or "").split(","), timeout_s=20)
    assert tab.locator("#lesson-notice").is_hidden()
    assert_panel_dot_within_stated_bound(tab, 6)


def test_go_deeper_is_answered_in_words_and_presentation_toggles(opened):
    tab = opened.tab
    tab.locator(f"{ROOT} [data-act='start']").click()
    wait_for_state(tab, "tour", "1", timeout_s=20)
    tab.locator(f"{ROOT} [data-act='deeper']").click()
    notice = tab.locator("#lesson-notice")
    notice.wait_for(state="visible")
    assert "not in this offline file" in notice.text_content(), notice.text_content()
    assert state(tab)["tour"] == "1"  # the tour stays where it was

    width = tab.locator(f"{ROOT} canvas.vx-image").bounding_box()["width"]
    tab.locator("#lesson-present").check()
    tab.wait_for_function("root => document.querySelector(root).classList.contains('present')",
                          arg=ROOT)
    tab.wait_for_timeout(200)
    assert tab.locator(f"{ROOT} canvas.vx-image").bounding_box()["width"] > width * 1.3


def test_save_png_downloads_the_picture_as_drawn(opened, tmp_path):
    tab = opened.tab
    tab.mouse.click(*patch_point(tab, 40))
    save = tab.locator(f"{ROOT} .vx-save")
    save.hover()
    shown = canvas_pixels(tab)[..., :3]
    with tab.expect_download() as download:
        save.click()
    path = tmp_path / download.value.suggested_filename
    download.value.save_as(path)
    saved = np.asarray(Image.open(path).convert("RGB"))
    np.testing.assert_array_equal(saved[:shown.shape[0]], shown)
    assert path.name == f"vit-lens-dinov2-s14-block{state(tab)['block']}-attention.png"


def test_a_phone_gets_one_column(browser, chelsea):
    lesson = Opened(browser, chelsea, width=390, height=844, is_mobile=True, has_touch=True)
    tab = lesson.tab
    stages = tab.locator(f"{ROOT} .vx-stage")
    for i in range(stages.count()):
        stages.nth(i).click()
        tab.wait_for_timeout(250)
        found = tab.locator(ROOT).evaluate(STAGE_ROWS)
        assert found["outside"] == [], (stages.nth(i).get_attribute("data-stage"), found)
    page_width = tab.evaluate("() => document.documentElement.scrollWidth")
    assert page_width <= 390, page_width  # nothing makes the page scroll sideways
    shown = {state(tab)["mapSum"]}
    for patch in (0, 100):
        tab.touchscreen.tap(*patch_point(tab, patch))
        tab.wait_for_timeout(200)
        shown.add(state(tab)["mapSum"])
    assert len(shown) == 3, shown
    lesson.only_the_file()
    lesson.close()


@pytest.mark.parametrize("model, pictures, prefix", [
    ("deit-s16-distilled", "sample:chelsea,sample:coffee", 2),
    ("dinov2-s14-reg4", "sample:chelsea", 5),
])
def test_random_layouts_export_open_and_say_random_weights(browser, tmp_path, model, pictures,
                                                           prefix):
    path = export(tmp_path / f"{model}.html", "--model", model, "--random-weights",
                  "--images", pictures, "--blocks", "0,11", "--tour")
    assert b"RANDOM WEIGHTS" in path.read_bytes()
    lesson = Opened(browser, path)
    tab = lesson.tab
    assert tab.locator(".lesson-random").is_visible()
    assert tab.locator(f"{ROOT} .vx-random").is_visible()  # the component's own label too
    assert state(tab)["tour"] == "1"  # --tour opens on the first step
    tokens = tab.locator(f"{ROOT} .vx-stage[data-stage='tokens']").text_content()
    assert f"({prefix} prefix +" in tokens, tokens
    tab.keyboard.press("Escape")
    wait_for_state(tab, "tour", "0", timeout_s=20)
    linked = Opened(browser, path, "?vx_block=11&vx_head=1")  # "Copy link": that view, not step 1
    wait_for_state(linked.tab, "head", "1", timeout_s=20)
    assert (state(linked.tab)["tour"], state(linked.tab)["block"]) == ("0", "11")
    linked.close()
    tab.locator(f"{ROOT} .vx-block[data-block='5']").click()  # not in the file: said so
    notice = tab.locator("#lesson-notice")
    notice.wait_for(state="visible")
    assert "Block 5 was left out of this file" in notice.text_content()
    tab.locator(f"{ROOT} .vx-block[data-block='0']").click()
    wait_for_state(tab, "detail", lambda held: "0" in (held or "").split(","), timeout_s=20)
    assert notice.is_hidden()
    if "," in pictures:  # the picker: the other picture, its own maps
        before = state(tab)["mapSum"]
        tab.locator("#lesson-image").select_option("1")
        wait_for_state(tab, "mapSum", lambda value: value != before, timeout_s=20)
        wait_for_state(tab, "detail", lambda held: bool(held), timeout_s=20)
    lesson.only_the_file()
    lesson.close()


def test_the_picture_equals_the_live_pages_pixel_for_pixel(browser, chelsea):
    """The same link (block 6, head 2, pinned patch 120, rollout) on the live page and in
    the lesson: the same canvas, every pixel."""
    app = AppProcess(log_name="lesson-live", port=LIVE_PORT)
    try:
        app.wait_healthy()
        context = browser.new_context(viewport={"width": 1500, "height": 1800})
        live = context.new_page()
        live.set_default_timeout(240_000)
        live.goto(app.url + "vit_explainer" + LINKED)
        wait_app_idle(live)
        live.wait_for_function("() => window.__vitExplainer && window.__vitExplainer.readyAt !== null")
        wait_for_state(live, "detail", lambda held: "6" in (held or "").split(","))
        live.wait_for_timeout(500)
        shown = state(live)
        assert (shown["block"], shown["head"], shown["overlay"]) == ("6", "2", "rollout")
        live_pixels = canvas_pixels(live)
        context.close()
    finally:
        app.stop()
    lesson = Opened(browser, chelsea, LINKED)
    wait_for_state(lesson.tab, "mapSum", shown["mapSum"], timeout_s=20)
    mine = state(lesson.tab)
    assert {k: mine[k] for k in ("block", "head", "overlay")} == \
        {k: shown[k] for k in ("block", "head", "overlay")}
    lesson_pixels = canvas_pixels(lesson.tab)
    assert lesson_pixels.shape == live_pixels.shape
    assert np.array_equal(lesson_pixels, live_pixels), \
        int((lesson_pixels != live_pixels).any(axis=-1).sum())
    lesson.only_the_file()
    lesson.close()
