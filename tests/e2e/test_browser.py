"""A real browser (Debian's Chromium, driven by Playwright) on a real `streamlit run`:
every page of PAGE_LIST opens without an exception, an upload is used, a slider
moves, the DAAM animation plays, a patch click changes a figure. A screenshot of
every page is kept in artifacts/screenshots/."""

from __future__ import annotations

import io
import re
from urllib.parse import quote

import pytest
from e2e_helpers import ARTIFACTS, open_view, running_apps, wait_app_idle, watched_tab
from PIL import Image

from dashboard.page_list import existing_pages
from dashboard.state import UPLOAD_CHOICE

SHOTS = ARTIFACTS / "screenshots"
UPLOAD_SIZE = (320, 200)


def page_list() -> list[tuple[str, str]]:
    """(file, title) of every page in the app's menu whose file exists."""
    return [(name, title) for name, title, _ in existing_pages()]


def upload_png() -> bytes:
    image = Image.new("RGB", UPLOAD_SIZE, (30, 110, 200))
    image.paste((240, 200, 20), (40, 40, 160, 160))  # a yellow square on blue
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return buffer.getvalue()


@pytest.fixture(scope="module")
def app():
    with running_apps(1, log_name="browser-app") as apps:
        yield apps[0]


@pytest.fixture(scope="module")
def session(app, browser):
    """One browser tab = one Streamlit session, kept across the tests (in file order)."""
    context, page, errors = watched_tab(browser, 1500, 2000)
    page.goto(app.url + "?image_choice=" + quote(UPLOAD_CHOICE))  # links carry option ids
    wait_app_idle(page)
    yield page, errors
    context.close()


def plotly(page, key: str):
    """The Plotly graph div of the chart shown with `key` (Streamlit adds st-key-<key>)."""
    locator = page.locator(f".st-key-{key} .js-plotly-plot").first
    locator.wait_for()
    return locator


def title_of(page, key: str) -> str:
    text = plotly(page, key).evaluate("gd => (gd.layout.title && gd.layout.title.text) || ''")
    # a title wrapped to the chart's width (dashboard/chart/chart.js) has <br> for spaces
    return re.sub(r"<[^>]+>", "", text.replace("<br>", " "))


def no_exception(page) -> None:
    shown = page.locator("[data-testid='stException']")
    assert shown.count() == 0, shown.first.inner_text()


def open_page(page, title: str) -> None:
    link = page.locator("[data-testid='stSidebarNav'] a", has_text=title).first
    target = link.get_attribute("href")
    link.click()
    # the URL path follows the page: wait for it before waiting for the script to finish
    page.wait_for_function("href => new URL(href, location.href).pathname === location.pathname",
                           arg=target)
    wait_app_idle(page)


def shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def test_upload_is_used(session):
    page, _ = session
    page.locator("[data-testid='stFileUploader'] input[type='file']").set_input_files(
        files=[{"name": "square.png", "mimeType": "image/png", "buffer": upload_png()}])
    page.wait_for_function(
        "() => [...document.querySelectorAll('.js-plotly-plot')].some("
        "gd => JSON.stringify(gd.layout.title || '').includes('(320x200)'))",
        timeout=240_000)
    wait_app_idle(page)
    no_exception(page)
    assert "(320x200)" in title_of(page, "home_image")


@pytest.mark.parametrize("name, title", page_list())
def test_every_page_opens(session, name, title):
    page, errors = session
    open_page(page, title)
    no_exception(page)
    main = page.locator("[data-testid='stMain']")
    assert len(main.inner_text()) > 200  # words, not a blank page
    # every chart drew (dashboard/charts.py: the library came from app/static/)
    page.wait_for_function("() => [...document.querySelectorAll('.vl-chart')]"
                           ".every(c => c.dataset.state !== 'drawing')")
    states = page.evaluate("() => [...document.querySelectorAll('.vl-chart')]"
                           ".map(c => c.dataset.state)")
    assert "failed" not in states and (states or name == "0_vit_explainer.py"), states
    shot(page, name.removesuffix(".py"))
    assert errors == [], errors  # no JavaScript error in the browser


def test_patch_click_changes_the_figure(session):
    """Page 1: clicking the top-left square of the position mosaic enlarges patch 0."""
    page, _ = session
    open_page(page, dict(page_list())["1_tokenization.py"])
    open_view(page, "tok_view", "Position embeddings")
    before = title_of(page, "tok_pos_one")
    mosaic = plotly(page, "tok_pos_chart")
    mosaic.scroll_into_view_if_needed()
    point = mosaic.evaluate("""gd => {
        const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
        const targets = gd._fullData.find(t => t.type === 'scatter');
        const box = gd.getBoundingClientRect();
        return {x: box.left + xa._offset + xa.l2p(targets.x[0]),
                y: box.top + ya._offset + ya.l2p(targets.y[0])};
    }""")
    page.mouse.click(point["x"], point["y"])
    page.wait_for_function(
        "before => { const gd = document.querySelector('.st-key-tok_pos_one .js-plotly-plot');"
        " return gd && gd.layout.title.text !== before; }", arg=before, timeout=240_000)
    wait_app_idle(page)
    no_exception(page)
    assert before != "Patch (row 0, col 0) vs every patch"
    assert title_of(page, "tok_pos_one") == "Patch (row 0, col 0) vs every patch"


def test_daam_animation_plays_and_slider_moves(session):
    page, _ = session
    open_page(page, dict(page_list())["6_daam_flow.py"])
    flow = page.locator(".js-plotly-plot", has=page.locator(".updatemenu-button")).first
    flow.scroll_into_view_if_needed()
    last = flow.evaluate("gd => gd.layout.title.text")
    frames = flow.evaluate("gd => gd._transitionData._frames.length")
    assert frames >= 2
    flow.locator(".updatemenu-button", has_text="Play").click()
    seen = set()
    for _ in range(30):  # the frames step in the browser, with no rerun
        seen.add(flow.evaluate("gd => gd.layout.title.text"))
        page.wait_for_timeout(100)
    assert len(seen) >= 3, seen
    shot(page, "6_daam_flow-playing")

    open_view(page, "daam_view", "Channel inspector")
    channels = plotly(page, "daam_channels")
    labels = "gd => gd.layout.annotations.map(a => a.text).join('|')"
    before = channels.evaluate(labels)
    # Streamlit's slider is a react-aria range input (visually hidden, keyboard-driven)
    slider = page.locator(".st-key-daam_channel_block input[type='range']").first
    slider.focus()
    page.keyboard.press("Home")  # block 0 instead of the last block
    page.wait_for_function(
        f"before => {{ const gd = document.querySelector('.st-key-daam_channels .js-plotly-plot');"
        f" return gd && ({labels})(gd) !== before; }}", arg=before, timeout=240_000)
    wait_app_idle(page)
    no_exception(page)
    assert re.search(r"ch \d+", channels.evaluate(labels))
    assert last  # the animation figure had a title to begin with


def open_styled(page, url: str, element: str, rule: str) -> None:
    """Open `url` and wait until the script has run, `element` shows and the app's style
    rules (with `rule` in them) are there: they come in a markdown element that the browser
    applies a moment after the page's first elements."""
    page.goto(url)
    wait_app_idle(page)
    page.locator(element).first.wait_for()
    page.wait_for_function("rule => [...document.querySelectorAll('style')]"
                           ".some(s => s.textContent.includes(rule))", arg=rule)


MEASURE_TEXT = """() => {
  const size = el => parseFloat(getComputedStyle(el).fontSize);
  const heading = [...document.querySelectorAll('h2')].find(h => h.innerText.includes('theory'));
  const table = document.querySelector('.stMarkdown table');
  const column = document.querySelector("[data-testid='stMain'] .stMarkdown");
  const pageNames = [...document.querySelectorAll("[data-testid='stSidebarNav'] a")]
    .filter(link => link.textContent.includes('·'));
  const cut = link => [...link.querySelectorAll('*')]  // the name's elements, not the icon's
    .filter(e => e.textContent.includes('·')).some(e => e.scrollWidth > e.clientWidth + 1);
  const block = document.querySelector("[data-testid='stMainBlockContainer']");
  return {cutNames: pageNames.filter(cut).map(link => link.textContent),
          columnShare: block.clientWidth
            ? (block.clientWidth - parseFloat(getComputedStyle(block).paddingLeft)
               - parseFloat(getComputedStyle(block).paddingRight)) / block.clientWidth : 0,
          pageNames: pageNames.length,
          heading: size(heading.querySelector('span') || heading),
          text: size(document.querySelector("[data-testid='stMain'] .stMarkdown p")),
          cell: size(table.querySelector('td')), overflow: getComputedStyle(table).overflowX,
          tableRight: table.getBoundingClientRect().right,
          columnRight: column.getBoundingClientRect().right};
}"""


@pytest.mark.parametrize("presentation", [False, True])
def test_headings_stay_larger_and_tables_stay_in_their_column(app, browser, presentation):
    """Page 7's theory matrix (a markdown table, dashboard/ui.text_table) scrolls sideways
    inside the page's column instead of running past its edge, in presentation mode a
    section heading stays larger than the text (the mode's rule enlarges every element),
    and the sidebar's page names are whole in both modes (the larger type needs a wider
    sidebar), and presentation mode gives the page's margins to its content."""
    context = browser.new_context(viewport={"width": 1500, "height": 1300})
    try:
        page = context.new_page()
        page.set_default_timeout(240_000)
        open_styled(page, app.url + f"comparison?presentation={str(presentation).lower()}",
                    ".stMarkdown table", "stMarkdown table")
        found = page.evaluate(MEASURE_TEXT)
        assert found["heading"] > 1.4 * found["text"], found
        assert found["cell"] >= found["text"] - 0.5, found  # the table reads like the text
        assert found["overflow"] == "auto" and found["tableRight"] <= found["columnRight"] + 1
        numbered = [title for _, title, _ in existing_pages() if "·" in title]
        assert found["pageNames"] == len(numbered) == 10 and found["cutNames"] == [], found
        if presentation:
            assert found["text"] >= 1.3 * 15, found  # the theme's 15 px, enlarged
            # the enlarged root would widen Streamlit's rem-based margins too
            assert found["columnShare"] >= 0.9, found
            page.set_viewport_size({"width": 1366, "height": 768})  # a smaller projector
            page.wait_for_timeout(300)
            assert page.evaluate(MEASURE_TEXT)["cutNames"] == []
    finally:
        context.close()


# a formula wider than its column scrolls inside it (KaTeX's 1-2 px rounding aside)
FORMULA_OVERFLOW = """() => [...document.querySelectorAll("[data-testid='stMain'] .katex-display")]
  .map(e => e.scrollWidth - e.clientWidth)"""


def test_formulas_fit_a_projector(app, browser):
    """Every page's formula fits its column in presentation mode on a 1366x768 projector
    with the sidebar open (DAAM's five equations ran 1816 px in 973, page 4's three 1076)."""
    context = browser.new_context(viewport={"width": 1366, "height": 768})
    try:
        page = context.new_page()
        page.set_default_timeout(240_000)
        for path in ("tokenization", "self_attention", "attention_distance", "rollout_heads",
                     "gradcam", "daam_flow"):
            open_styled(page, app.url + f"{path}?presentation=true",
                        "[data-testid='stMain'] .katex-display", "1.35rem")
            overflow = page.evaluate(FORMULA_OVERFLOW)
            assert overflow and max(overflow) <= 4, (path, overflow)
    finally:
        context.close()
