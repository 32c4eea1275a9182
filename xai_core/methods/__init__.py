"""Explanation methods over captured tensors. Importing this package imports every module in
it, and each module's `@method` declarations register themselves: a new method is one new
file (see `base.py` for the contract)."""

import importlib
import pkgutil

from .base import (ANY_FAMILY, COSTS, METHODS, THEORY_ROWS, ExplainRequest, ExplainResult,
                   Method, Theory)

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["ANY_FAMILY", "COSTS", "METHODS", "THEORY_ROWS", "ExplainRequest", "ExplainResult",
           "Method", "Theory"]
