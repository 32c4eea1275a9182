"""Clicking a patch in a real browser picks it (the invisible-marker workaround for
Streamlit #8760): page 2's query patch and page 1's position-embedding patch."""

from __future__ import annotations

import pytest

from e2e_helpers import running_apps, wait_app_idle


@pytest.fixture(scope="module")
def app_url():
    with running_apps(1, log_name="pages12") as apps:
        yield apps[0].url


def click_cell(page, chart_key: str, row: int, col: int, rows: int, cols: int) -> None:
    """Click the centre of cell (row, col) of a chart whose axes span rows x cols cells."""
    chart = page.locator(f".st-key-{chart_key} .js-plotly-plot").first
    chart.scroll_into_view_if_needed()
    area = chart.locator(".nsewdrag").first.bounding_box()
    page.mouse.click(area["x"] + (col + 0.5) / cols * area["width"],
                     area["y"] + (row + 0.5) / rows * area["height"])
    wait_app_idle(page)


def open_at(browser, url: str, ready_key: str):
    """A page once the script has drawn the widget `ready_key` and gone idle."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(url)
    page.wait_for_selector(f".st-key-{ready_key} input", timeout=240_000)
    wait_app_idle(page)
    return page


def number(page, key: str) -> int:
    return int(page.locator(f".st-key-{key} input").first.input_value())


def wait_number(page, key: str, expected: int, timeout_ms: int = 60_000) -> int:
    """The widget's number once it shows `expected` (a click's rerun may start late under
    load), or what it shows after `timeout_ms`."""
    try:
        page.wait_for_function(
            "([key, expected]) => { const box = document.querySelector(`.st-key-${key} input`);"
            " return box && Number(box.value) === expected; }", arg=[key, expected],
            timeout=timeout_ms)
    except Exception:  # noqa: BLE001  the assertion below says what was shown instead
        pass
    wait_app_idle(page)
    return number(page, key)


# Screen boxes of a chart's plot area, its image layers and its heatmaps, as drawn.
BOXES_JS = """gd => {
    const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
    return {area: box(gd.querySelector('.nsewdrag')),
            images: [...gd.querySelectorAll('.im image')].map(box),
            heatmaps: [...gd.querySelectorAll('.hm image')].map(box)};
}"""


def test_the_map_is_drawn_exactly_over_the_photo(browser, app_url):
    """The photo (a JPEG layer) and the patch map over it cover the same screen box, the
    plot area whose axes span the model input's pixels: a map cell sits on its patch."""
    page = open_at(browser, app_url + "self_attention?sa_view=model", "sa_query")
    chart = page.locator(".st-key-sa_chart .js-plotly-plot").first
    chart.scroll_into_view_if_needed()
    boxes = chart.evaluate(BOXES_JS)
    assert len(boxes["images"]) == 1 and len(boxes["heatmaps"]) == 1
    for drawn in (boxes["images"][0], boxes["heatmaps"][0]):
        assert max(abs(a - b) for a, b in zip(drawn, boxes["area"])) < 0.5, (drawn, boxes)
    source = chart.evaluate("gd => gd.querySelector('.im image').getAttribute('href')")
    assert source.startswith("data:image/jpeg;base64,")
    page.close()


def test_clicking_a_patch_sets_the_query(browser, app_url):
    page = open_at(browser, app_url + "self_attention?sa_view=model", "sa_query")
    assert number(page, "sa_query") == 8 * 16 + 8  # centre patch of DINOv2's 16x16 grid
    click_cell(page, "sa_chart", 3, 5, 16, 16)
    assert wait_number(page, "sa_query", 3 * 16 + 5) == 3 * 16 + 5
    assert "patch 53 (row 3, col 5)" in page.locator(".st-key-sa_chart").inner_text()
    page.close()


def test_clicking_a_position_map_enlarges_it(browser, app_url):
    page = open_at(browser, app_url + "tokenization?tok_view=position", "tok_pos_patch")
    # The mosaic holds 16 x 16 small maps, each 17 cells wide with its gap.
    click_cell(page, "tok_pos_chart", 2 * 17 + 8, 11 * 17 + 8, 16 * 17, 16 * 17)
    assert wait_number(page, "tok_pos_patch", 2 * 16 + 11) == 2 * 16 + 11
    page.close()
