"""Deep links in a real browser: a pasted link with ids opens the page on that image, block
and head; the address bar follows the widgets with ids; another page drops the first page's
choices and keeps the sidebar's."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlparse

import pytest
from e2e_helpers import running_apps, wait_app_idle


@pytest.fixture(scope="module")
def app_url():
    with running_apps(1, log_name="links") as apps:
        yield apps[0].url


def query(page) -> dict[str, str]:
    return {k: v[-1] for k, v in parse_qs(urlparse(page.url).query).items()}


def test_a_link_with_ids_opens_the_page_and_the_url_follows(browser, app_url):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(app_url + "self_attention?image_choice=motorcycle&sa_block=3&sa_head=1")
    page.wait_for_selector(".st-key-sa_chart .js-plotly-plot", timeout=240_000)
    wait_app_idle(page)
    assert page.locator(".st-key-image_choice input").input_value() == "Motorcycle"
    title = page.locator(".st-key-sa_chart .js-plotly-plot").first.evaluate(
        "gd => gd.layout.title.text")
    assert re.sub(r"<[^>]+>", "", title.replace("<br>", " ")).startswith("Block 3, head 2")  # Streamlit adds <b>
    # the link opened the part of the page that holds the block and head, and says so
    assert query(page) == {"image_choice": "motorcycle", "sa_view": "model", "sa_block": "3",
                           "sa_head": "1"}

    page.locator(".st-key-image_choice button[aria-label='Open']").click()
    page.locator("[role='option']", has_text="Cup of coffee").click()
    page.wait_for_function("() => location.search.includes('image_choice=coffee')",
                           timeout=240_000)
    wait_app_idle(page)
    assert query(page)["image_choice"] == "coffee"

    page.locator("[data-testid='stSidebarNav'] a", has_text="Home").first.click()
    page.wait_for_function("() => location.pathname.replace(/\\/$/, '').split('/').pop() "
                           "!== 'self_attention'", timeout=240_000)
    wait_app_idle(page)
    page.wait_for_function("() => !location.search.includes('sa_')", timeout=60_000)
    assert query(page) == {"image_choice": "coffee"}
    page.close()
