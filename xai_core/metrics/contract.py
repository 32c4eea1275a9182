"""The metric contract: a metric declares itself once, as a method does (`methods/base.py`).

A module of this package declares each metric with `@metric(...)` over its compute function:

    @metric("deletion", better=LOWER, unit="pixel", needs="class", options=CURVE_OPTIONS,
            summary="area under the class score as the top-ranked pixels are removed")
    def deletion(request, *, steps, baseline) -> Curve:
        ...

Its options are the method contract's own types (`Int`, `Choice`, ...: a default, a range
or choices and help), so a metric's steps and baseline have one home: the benchmark's
settings, page 7's faithfulness view, the `metrics` and `benchmark` commands and the tests
read them from the declaration. Options are checked once, before anything runs
(`Metric.resolve`, no model needed); the compute function gets typed, valid values.
`xai_core.metrics` imports every module that declares one, so `METRICS` is complete.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..infra.errors import OptionError
from ..methods.base import Option, check_options_match, parse_options, register

LOWER, HIGHER = "lower", "higher"  # which value of a metric is better
# What a metric needs besides the map, the model, the image and the class.
NEEDS = {"class": "the class score only",
         "boxes": "boxes around the object (--boxes)",
         "twin": "the method's map on a copy of the model with random weights"}
UNITS = {"pixel": "ranks the input's pixels by the map upsampled to the model input",
         "cell": "ranks the map's own cells (a ViT's patches)"}


@dataclass(frozen=True)
class MetricRequest:
    """What a compute function gets besides its options."""

    model: Any  # xai_core.models.LoadedModel
    image: Any
    saliency: np.ndarray  # the map, on its own grid
    target: int  # a valid class index
    head: Any = None  # the head scoring the target (None: the model's)
    boxes: tuple = ()  # boxes on the model input, (x0, y0, x1, y1) in pixels (needs="boxes")
    seed: int = 0  # what a seeded metric draws with (ROAD's noise, the random twin)
    remap: Callable[[Any], np.ndarray] | None = None  # the same method's map on another
    # model (needs="twin"); raises ValueError when the method cannot run there
    progress: Callable[[int, int], None] | None = None
    should_stop: Callable[[], bool] | None = None


@dataclass(frozen=True, eq=False)
class Metric:
    name: str
    better: str  # LOWER or HIGHER
    summary: str  # one line: what the number is
    needs: str  # a key of NEEDS
    unit: str | None  # a key of UNITS for a faithfulness curve (its value is the curve's
    # area), None for a metric of one number
    options: tuple[Option, ...]
    compute: Callable[..., Any]

    @property
    def is_curve(self) -> bool:
        return self.unit is not None

    def option(self, name: str) -> Option:
        return next(option for option in self.options if option.name == name)

    def parse(self, given: dict | None) -> dict:
        """Typed values of the options given (strings or values), refused in words when a
        key is unknown or a value is of the wrong type or out of range."""
        return parse_options(self.name, self.options, given)

    def resolve(self, given: dict | None = None) -> dict:
        """Every option's value: the given ones checked, the others at their defaults."""
        parsed = self.parse(given)
        return {option.name: parsed.get(option.name, option.default) for option in self.options}

    def defaults(self) -> dict:
        return self.resolve({})

    def __call__(self, request: MetricRequest, **options):
        """The metric of `request.saliency`: a `Curve` for a curve metric (cached by
        content), else a number. A map it cannot use raises ValueError in words."""
        return self.compute(request, **self.resolve(options))

    @staticmethod
    def value(result) -> float:
        """The one number of a result: a curve's area, or the number itself."""
        return float(getattr(result, "auc", result))

    def describe(self) -> dict:
        return {"name": self.name, "better": self.better, "summary": self.summary,
                "needs": self.needs, "unit": self.unit,
                "options": [option.describe() for option in self.options]}


METRICS: dict[str, Metric] = {}


def metric(name: str, *, better: str, summary: str, needs: str = "class",
           unit: str | None = None, options: tuple[Option, ...] = ()):
    """Declare and register a metric; the decorated function `(request, *, <one keyword per
    option>)` becomes its entry point."""
    def decorate(compute) -> Metric:
        declared = Metric(name, better, summary, needs, unit, tuple(options), compute)
        _check_declaration(declared)
        return register(METRICS, declared, "metric")
    return decorate


def curve_metrics(unit: str | None = None) -> tuple[str, ...]:
    """The faithfulness curves (of one unit: "pixel" for deletion and insertion, "cell"
    for Chefer's perturbation), in declaration order."""
    return tuple(name for name, declared in METRICS.items()
                 if declared.is_curve and unit in (None, declared.unit))


def needing(needs: str) -> tuple[str, ...]:
    return tuple(name for name, declared in METRICS.items() if declared.needs == needs)


def _check_declaration(declared: Metric) -> None:
    """Mistakes in a declaration fail at import, not in front of a class."""
    if declared.better not in (LOWER, HIGHER):
        raise ValueError(f"{declared.name}: better must be '{LOWER}' or '{HIGHER}'.")
    if declared.needs not in NEEDS or (declared.unit is not None and declared.unit not in UNITS):
        raise ValueError(f"{declared.name}: needs must be one of {tuple(NEEDS)} and unit one "
                         f"of {tuple(UNITS)} or None.")
    check_options_match(declared)
    for option in declared.options:  # a default must pass its own bounds
        option.parse(option.default)
