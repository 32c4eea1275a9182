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


def test_clicking_a_patch_sets_the_query(browser, app_url):
    page = open_at(browser, app_url + "self_attention", "sa_query")
    assert number(page, "sa_query") == 8 * 16 + 8  # centre patch of DINOv2's 16x16 grid
    click_cell(page, "sa_chart", 3, 5, 16, 16)
    assert number(page, "sa_query") == 3 * 16 + 5
    assert "patch 53 (row 3, col 5)" in page.locator(".st-key-sa_chart").inner_text()
    page.close()


def test_clicking_a_position_map_enlarges_it(browser, app_url):
    page = open_at(browser, app_url + "tokenization", "tok_pos_patch")
    # The mosaic holds 16 x 16 small maps, each 17 cells wide with its gap.
    click_cell(page, "tok_pos_chart", 2 * 17 + 8, 11 * 17 + 8, 16 * 17, 16 * 17)
    assert number(page, "tok_pos_patch") == 2 * 16 + 11
    page.close()
