"""The method contract: a method declares itself once, and everyone calls it the same way.

A method module declares each method with `@method(...)` over its compute function:

    @method("rollout", family="vit", needs_target=False, cost="forward",
            summary="...", convention="...", theory=Theory(...),
            options=(Choice("fusion", "mean", FUSIONS, "How a block's heads become one."),
                     Int("start", "auto", 0, LAST_SELF_BLOCK, "...", word="auto"), ...))
    def explain(request, *, fusion, start, ...) -> ExplainResult:
        ...

The decorated name is the method's one cached entry point, registered in METHODS under its
name and called with keywords by the pages, the CLI and the comparison page alike:

    result = METHODS["rollout"](model, image, fusion="max")     # the same as rollout.explain

Options are checked once, before anything runs: their type and fixed range before a model
is even loaded (`Method.parse`, what the CLI does first), then a range that only the model
knows - its last block, its conv layers - against the loaded model's modules before any
capture (`Method.resolve`). The compute function receives typed, valid values and never
checks them again. Every module in this package is imported by `xai_core.methods`, so a
new method is one new file.
"""

from __future__ import annotations

import inspect
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from PIL import Image

from ..infra import budget, fair_share
from ..infra.cache import BoundedCache, cache_key
from ..capture import model_layout
from ..infra.errors import OptionError
from ..images import image_sha256
from ..pipeline import head_of, resolve_target

ANY_FAMILY = "any"  # a method that works on every image classifier (ViT or CNN)
FAMILIES = ("vit", "cnn", ANY_FAMILY)

# What one call costs, in passes through the model (the comparison page measures the truth).
COSTS = {
    "forward": "one forward pass, no gradient",
    "gradient": "one forward and one backward pass",
    "passes": "many forward (and backward) passes; the number grows with its options",
}


@dataclass(frozen=True)
class Cost:
    """What one call asks of the model, from its option values and the model's spec alone
    (no model load, no pass): images sent forward, images sent back, and images in one pass
    at once - what memory grows with (`xai_core.infra.budget` turns it into bytes and refuses a
    request over the server's budget). Declare a method's `cost=` as a COSTS key ("forward",
    "gradient": one image) or, for "passes", as a Cost with the functions of its options."""

    kind: str  # a key of COSTS
    forwards: Callable[[dict, Any], int] = lambda values, spec: 1
    backwards: Callable[[dict, Any], int] = lambda values, spec: 0
    batch: Callable[[dict, Any], int] = lambda values, spec: 1
    graded: bool = False  # a batch keeps its activations for a backward (much more memory)

    def passes(self, values: dict, spec) -> int:
        """Image passes through the model: each image forward, and each one back."""
        return int(self.forwards(values, spec)) + int(self.backwards(values, spec))


FIXED_COSTS = {"forward": Cost("forward"),
               "gradient": Cost("gradient", backwards=lambda values, spec: 1, graded=True)}

THEORY_ROWS = ("Mechanism", "Cost in principle", "Class specificity", "Spatial resolution",
               "Supervision needed", "Best used for")

# Results of recent calls (maps and the method's own detail object), shared by every session:
# the key names the model, weights, head, image and every option value.
RESULT_CACHE = BoundedCache(max_entries=128, max_bytes=256 * 2**20, shared=True)


@dataclass(frozen=True, kw_only=True)
class Theory:
    """The comparison page's theory matrix, one sentence per row (THEORY_ROWS), built with
    keywords so that no sentence lands in another row."""

    mechanism: str
    cost: str
    class_specificity: str
    resolution: str
    supervision: str
    best_for: str

    def rows(self) -> dict[str, str]:
        return dict(zip(THEORY_ROWS, (self.mechanism, self.cost, self.class_specificity,
                                      self.resolution, self.supervision, self.best_for)))


# --- options ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class FromModel:
    """A default, a bound or a list of choices only the loaded model knows (its last block,
    its conv layers), read from its modules before any capture runs."""

    words: str  # how `methods` and error messages name it, e.g. "the last block"
    read: Callable[[Any], Any]  # loaded model -> the value


def _last(indices) -> int:
    return len(indices) - 1


LAST_BLOCK = FromModel("the last block", lambda model: model_layout(model).num_blocks - 1)
LAST_SELF_BLOCK = FromModel("the last self-attention block (counted among them)",
                            lambda model: _last(model_layout(model).self_blocks))
LAST_PATCH = FromModel("the last patch",
                       lambda model: model_layout(model).tokens.num_patches - 1)
NAME = re.compile(r"[A-Za-z0-9_.\-]+")


def _known(value, model):
    return value.read(model) if isinstance(value, FromModel) else value


def _words(value) -> Any:
    return value.words if isinstance(value, FromModel) else value


@dataclass(frozen=True)
class Option:
    """One declared option. Build it with `Int`, `Float` or `Choice`."""

    name: str
    kind: str  # "int" | "float" | "choice"
    default: Any  # a value, or FromModel
    help: str
    choices: tuple | FromModel | None = None
    low: Any = None  # a number, or FromModel
    high: Any = None
    word: str | None = None  # an int option may also be this word ("auto")

    def parse(self, raw) -> Any:
        """A typed value from a string (CLI, URL) or a value: its type and every bound that
        does not depend on the model. Raises OptionError in words."""
        if self.kind == "choice":
            return self._parse_choice(raw)
        if self.word is not None and str(raw) == self.word:
            return self.word
        value = self._number(raw)
        low, high = self.low, self.high
        if (not isinstance(low, FromModel) and value < low) or (
                not isinstance(high, FromModel) and value > high) or value != value:
            raise OptionError(self._out_of_range(value, low, high))
        return value

    def check(self, value, model) -> Any:
        """`value` (already parsed) against the bounds or choices the model gives."""
        if self.kind == "choice":
            choices = _known(self.choices, model)
            if value not in choices:
                raise OptionError(f"Option {self.name}='{value}' is not "
                                  f"{_words(self.choices)} of {model.spec.display_name} "
                                  f"(the default is {self.default_for(model)}).")
            return value
        if value == self.word:
            return value
        low, high = _known(self.low, model), _known(self.high, model)
        if not low <= value <= high:
            raise OptionError(self._out_of_range(value, low, high))
        return value

    def default_for(self, model) -> Any:
        return _known(self.default, model)

    def limits(self, model) -> dict:
        """The concrete default, bounds or choices for one model (for a page's widgets)."""
        if self.kind == "choice":
            return {"default": self.default_for(model),
                    "choices": tuple(_known(self.choices, model))}
        return {"default": self.default_for(model), "low": _known(self.low, model),
                "high": _known(self.high, model)}

    def describe(self) -> dict:
        """The declaration as plain JSON (model-dependent parts in words)."""
        described = {"name": self.name, "type": self.kind, "default": _words(self.default),
                     "help": self.help}
        if self.kind == "choice":
            choices = self.choices
            described["choices"] = choices.words if isinstance(choices, FromModel) else list(
                choices)
        else:
            described.update(low=_words(self.low), high=_words(self.high))
            if self.word is not None:
                described["or"] = self.word
        return described

    def _parse_choice(self, raw) -> str:
        value = str(raw)
        if isinstance(self.choices, FromModel):
            if not NAME.fullmatch(value):
                raise OptionError(f"Option {self.name}='{value}' is not a name (letters, "
                                  "digits, '_', '-' and '.').")
            return value
        if value not in self.choices:
            raise OptionError(f"Option {self.name}='{value}' is not one of: "
                              f"{', '.join(map(str, self.choices))}.")
        return value

    def _number(self, raw):
        integer = self.kind == "int"
        if isinstance(raw, bool):
            raw = str(raw)
        try:
            if integer and isinstance(raw, float) and raw.is_integer():
                raw = int(raw)
            value = int(raw) if integer else float(raw)
        except (TypeError, ValueError):
            kind = "a whole number" if integer else "a number"
            also = f" It may also be '{self.word}'." if self.word else ""
            raise OptionError(f"Option {self.name} must be {kind}, got '{raw}'.{also}") from None
        if not integer and math.isinf(value):
            raise OptionError(self._out_of_range(value, self.low, self.high))
        return value

    def _out_of_range(self, value, low, high) -> str:
        also = f" It may also be '{self.word}'." if self.word else ""
        return (f"Option {self.name}={value} is out of range "
                f"({_words(low)}-{_words(high)}).{also}")


def parse_options(owner: str, options, given: dict | None) -> dict:
    """Typed values of the options given (strings or values) for `owner` (a method or a
    metric), refused in words when a key is unknown or a value does not parse."""
    given = dict(given or {})
    unknown = sorted(set(given) - {option.name for option in options})
    if unknown:
        raise OptionError(f"Unknown option(s) for {owner}: {', '.join(unknown)}"
                          + (f" (it has: {', '.join(o.name for o in options)})."
                             if options else " (it has none)."))
    return {option.name: option.parse(given[option.name])
            for option in options if option.name in given}


def Int(name: str, default, low, high, help: str, word: str | None = None) -> Option:
    return Option(name, "int", default, help, low=low, high=high, word=word)


def Float(name: str, default: float, low: float, high: float, help: str) -> Option:
    return Option(name, "float", default, help, low=low, high=high)


def Choice(name: str, default, choices, help: str) -> Option:
    return Option(name, "choice", default, help, choices=choices)


# --- requests and results ---------------------------------------------------------------------

@dataclass(frozen=True)
class ExplainRequest:
    """What a compute function gets besides its options."""

    model: Any  # xai_core.models.LoadedModel
    image: Image.Image
    target: int | None  # a valid class index for a method that needs one, else None
    head: Any = None  # the head that scores the target (a session's own k-NN bank, or the
    # model's); None for a method without a target
    should_stop: Callable[[], bool] | None = None  # asked between batches by methods of many
    # passes (Occlusion, KernelSHAP...): Stop ends them within one batch; not in the cache key


@dataclass
class ExplainResult:
    map: np.ndarray  # raw, unnormalised, grid-shaped float32
    arrays: dict[str, np.ndarray] = field(default_factory=dict)  # per head / per block
    meta: dict[str, Any] = field(default_factory=dict)  # JSON-able; always has "convention"
    detail: Any = None  # the method's own result object for its page (not exported)
    options: dict[str, Any] = field(default_factory=dict)  # every option's value, resolved


# --- the declaration --------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class Method:
    name: str
    family: str  # "vit", "cnn" or ANY_FAMILY
    needs_target: bool
    summary: str
    convention: str | Callable[[dict], str]  # the words `meta` and the UI show
    theory: Theory
    cost: Cost  # what one call asks of the model (`cost=` in the declaration)
    options: tuple[Option, ...]
    compute: Callable[..., ExplainResult]
    off_by_default: str | None = None  # why the comparison page leaves it unticked
    check: Callable[[dict, Any], None] | None = None  # options together, against the model
    benchmark_skip: str | None = None  # why `benchmark --methods all` leaves it out
    title: str | None = None  # its name in a figure or sentence ("GAE"); see `shown_name`

    @property
    def shown_name(self) -> str:
        """The method's name for people: its declared title, else its id with spaces
        ("input-x-gradient" -> "input x gradient")."""
        return self.title or self.name.replace("-", " ")

    def fits(self, model_family: str) -> bool:
        return self.family in (model_family, ANY_FAMILY)

    def check_family(self, spec) -> None:
        """Refuse, in words, a model (its spec: no load needed) of a family this method does
        not handle."""
        if not self.fits(spec.family):
            raise OptionError(f"Method '{self.name}' needs a {self.family.upper()} model; "
                              f"{spec.id} is a {spec.family.upper()}.")

    def option(self, name: str) -> Option:
        return next(option for option in self.options if option.name == name)

    def parse(self, given: dict | None) -> dict:
        """Typed values for the options given (strings or values), refused in words when a
        key is unknown or a value is of the wrong type or outside a fixed bound. Needs no
        model: the CLI calls it before loading one."""
        return parse_options(self.name, self.options, given)

    def resolve(self, model, given: dict | None) -> dict:
        """Every option's value for this model: the given ones parsed and checked against
        the model's modules, the rest at their defaults. Runs before any capture."""
        self.check_family(model.spec)
        parsed = self.parse(given)
        values = {option.name: (option.check(parsed[option.name], model)
                                if option.name in parsed else option.default_for(model))
                  for option in self.options}
        if self.check is not None:
            self.check(values, model)
        return values

    def spec_values(self, parsed: dict) -> dict:
        """`parsed` options with the other options at their defaults, except those only
        the model knows: what the cost's passes are read from before a model loads."""
        known = {o.name: o.default for o in self.options if not isinstance(o.default, FromModel)}
        return {**known, **parsed}

    def convention_for(self, values: dict) -> str:
        return self.convention(values) if callable(self.convention) else self.convention

    def __call__(self, model, image, *, target=None, head=None, should_stop=None,
                 **options) -> ExplainResult:
        """The method on one image, cached by content. `target` is a class index or name
        (None: the top prediction) for a method that needs one and ignored otherwise;
        `head` a session's own head; `should_stop` the caller's stop check (ExplainRequest).
        Results are shared: treat them as read-only."""
        values = self.resolve(model, options)
        budget.check(self, values, model=model)  # refused before any pass
        if self.needs_target:
            head = head_of(model, head)
            target = resolve_target(model, target, image, head)
        else:
            target, head = None, None
        key = cache_key("method", model, self.name, target, *sorted(values.items()),
                        image=image_sha256(image), head=head)

        def compute() -> ExplainResult:  # a miss: a new seed is a new computation, counted
            fair_share.admit(self.cost.passes(values, model), what=self.name,
                             should_stop=should_stop)
            result = self.compute(ExplainRequest(model, image, target, head, should_stop), **values)
            result.meta = {**result.meta, "convention": self.convention_for(values)}
            result.options = dict(values)
            return result
        return RESULT_CACHE.get_or_compute(key, compute)

    def describe(self) -> dict:
        """The whole declaration as plain JSON (`python -m xai_core methods --json`)."""
        defaults = {o.name: o.default for o in self.options
                    if not isinstance(o.default, FromModel)}
        convention = self.convention_for(defaults)  # at the defaults
        return {"name": self.name, "family": self.family, "needs_target": self.needs_target,
                "summary": self.summary, "convention": convention, "cost": self.cost.kind,
                "cost_words": COSTS[self.cost.kind], "off_by_default": self.off_by_default,
                "benchmark_skip": self.benchmark_skip,
                "theory": self.theory.rows(), "options": [o.describe() for o in self.options]}


METHODS: dict[str, Method] = {}


def method(name: str, *, family: str, needs_target: bool, summary: str,
           convention: str | Callable[[dict], str], theory: Theory, cost: str | Cost,
           options: tuple[Option, ...] = (), off_by_default: str | None = None,
           check: Callable[[dict, Any], None] | None = None, benchmark_skip: str | None = None,
           title: str | None = None):
    """Declare and register a method; the decorated function becomes its entry point.
    The function takes `(request, *, <one keyword per option>)`; `cost` is "forward",
    "gradient" or a `Cost` of kind "passes"."""
    def decorate(compute) -> Method:
        declared = Method(name, family, needs_target, summary, convention, theory,
                          FIXED_COSTS.get(cost, cost),
                          tuple(options), compute, off_by_default, check, benchmark_skip,
                          title)
        _check_declaration(declared)
        return register(METHODS, declared, "method")
    return decorate


def register(registry: dict, declared, kind: str):
    """Put a declared method or metric in its registry; a second one of the same name from
    another module is refused (a module imported twice declares the same one again)."""
    existing = registry.get(declared.name)
    if existing is not None and existing.compute.__module__ != declared.compute.__module__:
        raise ValueError(f"Two {kind}s are called '{declared.name}' "
                         f"({existing.compute.__module__} and {declared.compute.__module__}).")
    registry[declared.name] = declared
    return declared


def check_options_match(declared) -> None:
    """A method's or metric's options are exactly its compute function's keyword-only
    parameters, each named once."""
    keywords = {p.name for p in inspect.signature(declared.compute).parameters.values()
                if p.kind is inspect.Parameter.KEYWORD_ONLY}
    names = [option.name for option in declared.options]
    if len(set(names)) != len(names) or keywords != set(names):
        raise ValueError(f"{declared.name}: the options {sorted(names)} must be exactly the "
                         f"compute function's keyword-only parameters {sorted(keywords)}.")


def _check_declaration(declared: Method) -> None:
    """Mistakes in a declaration fail at import, not in front of a class."""
    if declared.family not in FAMILIES:
        raise ValueError(f"{declared.name}: family must be one of {FAMILIES}.")
    if not isinstance(declared.cost, Cost) or declared.cost.kind not in COSTS:
        raise ValueError(f"{declared.name}: cost must be one of {tuple(FIXED_COSTS)} or a "
                         f"Cost of kind 'passes'.")
    check_options_match(declared)
    for option in declared.options:  # a fixed default must pass its own fixed bounds
        if not isinstance(option.default, FromModel):
            option.parse(option.default)
