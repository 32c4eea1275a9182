"""Fixtures of the end-to-end tests (helpers live in e2e_helpers.py)."""

from __future__ import annotations

import pytest
from e2e_helpers import CHROMIUM_FLAGS, chromium_path


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium_path(), headless=True,
                                              args=CHROMIUM_FLAGS)
        yield launched
        launched.close()
