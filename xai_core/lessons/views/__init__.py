"""Every page's views, declared once (`view.py` is the contract): one module per page, named
after the page's file. Importing this package imports each of them, so `PAGES` lists every
declared page in menu order and a new view is one declaration in its page's module."""

import importlib
import pkgutil

from .view import (FORWARD, GRADIENT, NO_PASS, PAGES, Flag, FromPicture, Many, Page, Picker,
                   Target, Text, View, check_default, default_of, describe, every_view, view)

for _module in sorted(pkgutil.iter_modules(__path__), key=lambda found: found.name):
    if _module.name not in ("view", "answers"):
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["FORWARD", "GRADIENT", "NO_PASS", "PAGES", "Flag", "FromPicture", "Many", "Page",
           "Picker", "Target", "Text", "View", "check_default", "default_of", "describe",
           "every_view", "view"]
