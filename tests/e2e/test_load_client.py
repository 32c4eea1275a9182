"""The load benchmark's simulated student (bench/load_client.py) against a real browser:
for the same address, Streamlit's server sends the protocol client the same elements, in
the same order, as it sends a Chromium tab, and the client fetches every static file that
tab fetched on its first visit."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from e2e_helpers import running_apps

from bench.load_client import chromium_first_visit, first_visit_files
from dashboard.page_visit import element_kinds, open_page, run_in_thread
from dashboard.state import image_title

PREFIX = "vit-lens"


@pytest.fixture(scope="module")
def app():
    with running_apps(1, base_path=PREFIX, log_name="load-client") as apps:
        yield apps[0]


@pytest.mark.parametrize("page_name", ["", "vit_explainer"])
def test_the_client_gets_the_elements_a_browser_gets(app, browser, page_name):
    query = "image_choice=" + quote(image_title("coffee"))
    payloads, _ = chromium_first_visit(browser, f"{app.url}{page_name}?{query}", app.url)
    browser_kinds, browser_exceptions, finished = element_kinds(payloads)
    assert finished and browser_exceptions == 0

    run = run_in_thread(open_page(app.url, page_name, query, timeout=240))
    assert run.error == "" and run.seconds > 0
    assert run.elements == browser_kinds
    assert "bidi_component" in run.elements  # the page's figure or Explainer came too
    assert run.exceptions == 0


def test_the_client_fetches_the_files_a_first_visit_fetches(app, browser):
    _, static = chromium_first_visit(browser, app.url, app.url)
    scripts = [path for path in static if path.endswith(".js")]
    assert len(scripts) >= 5 and any(p.startswith("static/media/") for p in static), static
    files = run_in_thread(first_visit_files(app.url, "", static, timeout=120))
    assert files.errors == [], files.errors
    assert files.requests == len(static) + 1  # index.html, then each file
    assert files.wire_bytes > 1_000_000  # Streamlit's bundle: megabytes, even gzipped


def test_warming_a_replica_runs_every_page_cleanly(app):
    """What the replica unit runs after its health check: every page of the menu, once, each
    run finished with elements and no exception shown."""
    from dashboard.page_list import existing_pages
    from dashboard.warm_replica import main, warm

    runs = warm(app.url)
    assert len(runs) == len(existing_pages())
    for path, run in runs:
        assert not run.error and run.exceptions == 0 and len(run.elements) > 5, (path, run)
    assert main([app.url]) == 0  # warm now: every page again, exit 0
