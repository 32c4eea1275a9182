"""The method registry behind `python -m xai_core explain` and the comparison page.

A method module defines a function `(request) -> ExplainResult` and decorates it
with `@register(name, family=..., needs_target=...)` (family "any" for methods that
work on every image classifier). `request` carries the
loaded model, the image, the resolved target class index (or None) and the
user's `--set key=value` options.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from PIL import Image

from ..errors import OptionError


class Options:
    """String options from the CLI or the UI, read with typed, range-checked getters."""

    def __init__(self, values: dict[str, Any] | None = None):
        self.values = dict(values or {})
        self._read: set[str] = set()

    def _raw(self, key, default):
        self._read.add(key)
        return self.values.get(key, default)

    def get_int(self, key: str, default: int, low: int, high: int) -> int:
        return self._int(key, self._raw(key, default), low, high)

    def get_int_or_word(self, key: str, default: int | str, low: int, high: int,
                        word: str) -> int | str:
        """A whole number in [low, high], or the literal `word` (e.g. start=auto)."""
        raw = self._raw(key, default)
        if str(raw) == word:
            return word
        try:
            return self._int(key, raw, low, high)
        except OptionError as error:
            raise OptionError(f"{error} It may also be '{word}'.") from None

    @staticmethod
    def _int(key: str, raw, low: int, high: int) -> int:
        try:
            value = int(raw)
        except (TypeError, ValueError):
            raise OptionError(f"Option {key} must be a whole number, got '{raw}'.") from None
        if not low <= value <= high:
            raise OptionError(f"Option {key}={value} is out of range ({low}-{high}).")
        return value

    def get_float(self, key: str, default: float, low: float, high: float) -> float:
        raw = self._raw(key, default)
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise OptionError(f"Option {key} must be a number, got '{raw}'.") from None
        if not (low <= value <= high):
            raise OptionError(f"Option {key}={value} is out of range ({low}-{high}).")
        return value

    def get_choice(self, key: str, default: str, choices: tuple[str, ...]) -> str:
        value = str(self._raw(key, default))
        if value not in choices:
            raise OptionError(f"Option {key}='{value}' is not one of: {', '.join(choices)}.")
        return value

    def check_all_used(self) -> None:
        unknown = sorted(set(self.values) - self._read)
        if unknown:
            raise OptionError(f"Unknown option(s) for this method: {', '.join(unknown)}.")

    def as_dict(self) -> dict[str, Any]:
        return dict(self.values)


@dataclass
class ExplainRequest:
    model: Any  # xai_core.models.LoadedModel
    image: Image.Image
    target: int | None
    options: Options
    head: Any = None  # a session's own k-NN head, when it has one


@dataclass
class ExplainResult:
    map: np.ndarray  # raw, unnormalised, grid-shaped float32
    arrays: dict[str, np.ndarray] = field(default_factory=dict)  # per head / per block
    meta: dict[str, Any] = field(default_factory=dict)


ANY_FAMILY = "any"  # input-gradient and perturbation methods: every image classifier


@dataclass(frozen=True)
class MethodInfo:
    name: str
    family: str  # "vit", "cnn", or "any"
    needs_target: bool
    run: Callable[[ExplainRequest], ExplainResult]
    summary: str
    theory: tuple[str, ...] | None = None  # the comparison page's theory-matrix rows
    off_by_default: str | None = None  # why the comparison page leaves it unticked

    def fits(self, model_family: str) -> bool:
        return self.family in (model_family, ANY_FAMILY)


METHODS: dict[str, MethodInfo] = {}


THEORY_ROWS = ("Mechanism", "Cost in principle", "Class specificity", "Spatial resolution",
               "Supervision needed", "Best used for")


def register(name: str, family: str, needs_target: bool, summary: str,
             theory: tuple[str, ...] | None = None, off_by_default: str | None = None):
    """`theory`: one sentence per `THEORY_ROWS` entry; `off_by_default`: why the
    comparison page does not run it unless asked (e.g. it is slow)."""
    if theory is not None and len(theory) != len(THEORY_ROWS):
        raise ValueError(f"{name}: theory needs {len(THEORY_ROWS)} rows, got {len(theory)}")

    def decorate(function):
        METHODS[name] = MethodInfo(name, family, needs_target, function, summary, theory,
                                   off_by_default)
        return function
    return decorate
