"""The view contract: every view of every page declared once, as a method is (`methods/base.py`).

A page draws one view at a time (`ui.view_picker`, deep-linked as `?<picker>=<view id>`). Each
view is declared in the module of its page in this package:

    LAB_PAGE = Page("9_interventions.py", options=(Choice("iv_model", "vit", ...),
                                                   Target("iv_target", ...)))
    LAB = LAB_PAGE.picker("iv_view")

    @view(LAB, "heads", "Switch heads off", figure=figs.before_after_bars, cost=OUTCOME,
          options=(Many("iv_heads", FromPicture("the strongest sink head", ...), ...),
                   FILL))
    def heads(model, image, values):
        ...  # the cached core calls the page makes at these values

A declaration holds: its page and picker, its deep-link id, its title, its typed options (the
deep-link keys of its controls: `Int`, `Choice`, `FromModel` of the method contract, and the
kinds below), the settings of its unlinked controls whose defaults a computation reads, the
core computation its default runs (a function of the model, the image and every option's
value; it calls the cached core with what the page asks, so `warmup --gallery` fills the
very keys a visit reads), its figure builder where one exists, and its cost in passes through
the model (the method contract's `Cost`, read by the server's budget, `infra/budget.py`).

Pages read their view list, titles and option defaults from here; `lessons/warmup.py` computes
each view's default from its declaration; `python -m xai_core views --json` lists them;
`tests/test_view_contract.py` checks them against the pages.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable

from ...infra.errors import OptionError
from ...methods.base import COSTS, FIXED_COSTS, Cost, FromModel, _known, _words

MODELS = ("vit", "cnn", "text")  # the session's models a computation runs on


# --- option kinds beyond the method contract's ---------------------------------------------

@dataclass(frozen=True)
class FromPicture:
    """A default only the model and the picture know (the top prediction, the strongest sink
    head), read when a computation or a page needs it."""

    words: str
    read: Callable[[Any, Any], Any]  # (loaded model, image) -> the value


@dataclass(frozen=True)
class Flag:
    """A checkbox or toggle (`links.flag`)."""

    name: str
    default: bool
    help: str
    kind: str = "flag"

    def parse(self, raw) -> bool:
        text = str(raw).strip().lower()
        if isinstance(raw, bool) or text in ("true", "false"):
            return raw if isinstance(raw, bool) else text == "true"
        raise OptionError(f"Option {self.name} takes true or false, got '{raw}'.")

    def check(self, value, model) -> bool:
        return self.parse(value)

    def describe(self) -> dict:
        return {"name": self.name, "type": self.kind, "default": self.default, "help": self.help}


@dataclass(frozen=True)
class Text:
    """A text a visitor types (a sentence): any words up to `most` characters."""

    name: str
    default: str
    help: str
    most: int
    kind: str = "text"

    def parse(self, raw) -> str:
        value = str(raw)
        if len(value) > self.most:
            raise OptionError(f"Option {self.name} takes at most {self.most} characters.")
        return value

    def check(self, value, model) -> str:
        return self.parse(value)

    def describe(self) -> dict:
        return {"name": self.name, "type": self.kind, "default": self.default,
                "most": self.most, "help": self.help}


@dataclass(frozen=True)
class Many:
    """A multiselect (`links.choices`): some of `choices`, linked as comma-separated ids."""

    name: str
    default: Any  # a tuple, FromModel or FromPicture
    choices: Any  # a tuple or FromModel
    help: str
    kind: str = "many"

    def parse(self, raw) -> tuple:
        items = [item for item in raw.split(",") if item] if isinstance(raw, str) else list(raw)
        if not isinstance(self.choices, FromModel):
            unknown = [item for item in items if item not in self.choices]
            if unknown:
                raise OptionError(f"Option {self.name}: {', '.join(map(str, unknown))} is not "
                                  f"one of: {', '.join(map(str, self.choices))}.")
        return tuple(items)

    def check(self, value, model) -> tuple:
        choices = _known(self.choices, model)
        unknown = [item for item in value if item not in choices]
        if unknown:
            raise OptionError(f"Option {self.name}: {', '.join(map(str, unknown))} is not "
                              f"{_words(self.choices)} of {model.spec.display_name}.")
        return tuple(value)

    def describe(self) -> dict:
        choices = self.choices
        return {"name": self.name, "type": self.kind, "default": _describe_default(self.default),
                "choices": choices.words if isinstance(choices, FromModel) else list(choices),
                "help": self.help}


@dataclass(frozen=True)
class Target:
    """A class picker (`ui.target_picker`): a class index, linked by the head's class id;
    by default the prediction of rank `rank` (0: the top one) of the shared head."""

    name: str
    help: str
    rank: int = 0
    kind: str = "class"

    @property
    def default(self) -> FromPicture:
        words = "the top prediction" if self.rank == 0 else f"the prediction of rank {self.rank}"
        return FromPicture(words, lambda model, image: ranked_class(model, image, self.rank))

    def parse(self, raw) -> int:
        try:
            return int(raw)
        except (TypeError, ValueError):
            raise OptionError(f"Option {self.name} takes a class index, got '{raw}'.") from None

    def check(self, value, model) -> int:
        classes = len(model.head.class_names)
        if not 0 <= value < classes:
            raise OptionError(f"Option {self.name}={value} is not a class of "
                              f"{model.spec.display_name} (0-{classes - 1}).")
        return value

    def describe(self) -> dict:
        return {"name": self.name, "type": self.kind, "default": self.default.words,
                "help": self.help}


def ranked_class(model, image, rank: int = 0) -> int:
    """The class a target picker starts from: the prediction of `rank` among the shared
    head's top five (`ui.target_picker`'s list)."""
    from ...pipeline import predict

    top = predict(model, image, topk=5, head=model.head)
    return top[min(rank, len(top) - 1)].index


def _describe_default(default) -> Any:
    if isinstance(default, (FromModel, FromPicture)):
        return default.words
    return list(default) if isinstance(default, tuple) else default


def describe(option) -> dict:
    """An option's declaration as plain JSON (a default only the picture knows, in words)."""
    if not isinstance(option.default, FromPicture) or isinstance(option, (Target, Many)):
        return option.describe()
    return {**replace(option, default=None).describe(), "default": option.default.words}


def default_of(option, model=None, image=None):
    """An option's default for this model and picture (a value, FromModel or FromPicture)."""
    value = option.default
    if isinstance(value, FromPicture):
        return value.read(model, image)
    return _known(value, model)


def check_default(option, model=None, image=None):
    """The default of `option` for this model and picture, checked against the option's own
    type, range and choices (what the contract test asks of every declaration): a fixed
    default against the fixed bounds, and with a model against the bounds it sets."""
    value = default_of(option, model, image)
    if not isinstance(option.default, (FromModel, FromPicture)):
        value = option.parse(value)
    return value if model is None else option.check(value, model)


# --- pages, pickers, views -----------------------------------------------------------------

@dataclass(eq=False)
class Page:
    """A page of `dashboard/page_list.py`: its controls drawn before any picker (`options`),
    the computation every view of it starts with, and its pickers and views."""

    file: str
    options: tuple = ()  # linked controls, named by their deep-link key
    settings: tuple = ()  # unlinked controls whose default a computation reads
    compute: Callable | None = None  # (model, image, values) -> None
    models: tuple[str, ...] = ("vit",)
    cost: Cost | None = None  # what `compute` asks of each model (None: nothing)
    refusals: Callable[[Any], dict] = lambda model: {}  # model -> {view id: why the page
    # does not show that view for it}
    method_options: tuple = ()  # (method, key prefix) pairs, as a view's
    pickers: list = field(default_factory=list)
    views: list = field(default_factory=list)

    def __post_init__(self):
        if self.file in PAGES:
            raise ValueError(f"The page {self.file} is declared twice.")
        PAGES[self.file] = self

    def picker(self, key: str, label: str = "Show", within: "View | None" = None) -> "Picker":
        made = Picker(self, key, label, within)
        self.pickers.append(made)
        return made

    def options_by_key(self) -> dict:
        """Every control of the page: its own, then each view's (a key two views share is
        one control)."""
        found = {option.name: option for option in (*self.options, *self.settings)}
        for declared in self.views:
            for option in (*declared.options, *declared.settings):
                found.setdefault(option.name, option)
        return found

    def option(self, key: str):
        return self.options_by_key()[key]

    def default(self, key: str, model=None, image=None):
        """The declared default of control `key` (for this model and picture when it depends
        on them)."""
        return default_of(self.option(key), model, image)

    def bounds(self, key: str, model=None) -> tuple:
        option = self.option(key)
        return _known(option.low, model), _known(option.high, model)

    def choices(self, key: str, model=None) -> list:
        return list(_known(self.option(key).choices, model))

    def titles(self, picker_key: str) -> dict[str, str]:
        return self._picker(picker_key).titles()

    def picker_args(self, picker_key: str) -> dict:
        """`ui.view_picker`'s arguments: the views, the key, the label and which linked
        controls open which view."""
        found = self._picker(picker_key)
        return {"views": found.titles(), "key": found.key, "label": found.label,
                "opened_by": found.opened_by()}

    def _picker(self, key: str) -> "Picker":
        return next(p for p in self.pickers if p.key == key)

    def describe(self) -> dict:
        return {"page": self.file, "models": list(self.models),
                "options": [describe(o) for o in self.options],
                "settings": [describe(o) for o in self.settings],
                "method_options": _method_options(self.method_options),
                "pickers": [p.describe() for p in self.pickers],
                "views": [v.describe() for v in self.views]}


@dataclass(eq=False)
class Picker:
    """One `ui.view_picker` of a page: its key (the deep-link parameter), its label, and the
    view of another picker it is drawn inside (page 5's sections inside its CNN part)."""

    page: Page
    key: str
    label: str
    within: "View | None" = None

    @property
    def views(self) -> list["View"]:
        return [v for v in self.page.views if v.picker is self]

    def titles(self) -> dict[str, str]:
        return {v.id: v.title for v in self.views}

    def opened_by(self) -> dict[str, tuple[str, ...]]:
        """View id -> the linked controls that open it: a link naming one of them opens that
        view. Open nothing: the first view's controls (a link without the picker opens it
        anyway, and its values stay in the address while the learner picks another view,
        which they must not take back), controls two views share, and those a view marks
        `quiet` (drawn only once another of its controls is set)."""
        views = self.views
        counts: dict[str, int] = {}
        for declared in views:
            for option in declared.options:
                counts[option.name] = counts.get(option.name, 0) + 1
        return {v.id: keys for v in views[1:]
                if (keys := tuple(o.name for o in v.options
                                  if counts[o.name] == 1 and o.name not in v.quiet))}

    def describe(self) -> dict:
        return {"key": self.key, "label": self.label,
                "within": None if self.within is None
                else f"{self.within.picker.key}={self.within.id}",
                "views": [v.id for v in self.views]}


@dataclass(frozen=True, eq=False)
class View:
    picker: Picker | None  # None: the page's only view (no picker)
    page: Page
    id: str
    title: str
    options: tuple  # linked controls, named by their deep-link key
    settings: tuple  # unlinked controls whose default the computation reads
    compute: Callable | None  # (model, image, values) -> None; calls the cached core
    models: tuple[str, ...]
    figure: Callable | None
    cost: Cost
    quiet: tuple[str, ...]  # linked controls that do not open the view
    method_options: tuple[tuple[str, str], ...]  # (method, key prefix): that method's
    # declared options (methods/base.py), linked as `<prefix>_<option>` (`ui.method_options`)
    also: dict  # control -> other values (a tuple or FromModel) whose computation the
    # warm-up runs too, besides the default: a choice a class is expected to make

    @property
    def deep_link(self) -> str:
        return "" if self.picker is None else f"{self.picker.key}={self.id}"

    def chain(self) -> list["View"]:
        """The views drawn around this one, outermost first (a nested picker's view), and
        this one."""
        outer = [] if self.picker is None or self.picker.within is None \
            else self.picker.within.chain()
        return [*outer, self]

    def scope(self) -> tuple:
        """Every control in force when this view is open: the page's, then each enclosing
        view's, then its own."""
        found = [*self.page.options, *self.page.settings]
        for declared in self.chain():
            found += [*declared.options, *declared.settings]
        return tuple(found)

    def defaults(self, model=None, image=None) -> dict:
        return {option.name: default_of(option, model, image) for option in self.scope()}

    def passes(self, model, image=None) -> int:
        """Image passes through the model its default asks at most: its cost at the
        defaults, and that of the views around it."""
        values = self.defaults(model, image)
        page = self.page.cost.passes(values, model) if self.page.cost is not None else 0
        return page + sum(v.cost.passes(values, model) for v in self.chain())

    def warm(self, models: dict, image) -> None:
        """Run the default: the page's computation, then each enclosing view's and this
        one's, on each model they name (`models`: "vit"/"cnn"/"text" -> a loaded model)."""
        for step, names in ((self.page.compute, self.page.models),
                            *((v.compute, v.models) for v in self.chain())):
            if step is None:
                continue
            for name in names:
                model = models.get(name)
                if model is not None:
                    step(model, image, self.defaults(model, image))
        for key, values in self.also.items():
            for name in self.models:
                model = models.get(name)
                if model is None:
                    continue
                defaults = self.defaults(model, image)
                for value in _known(values, model):
                    if value != defaults[key]:
                        self.compute(model, image, {**defaults, key: value})

    def describe(self) -> dict:
        return {"id": self.id, "title": self.title, "link": self.deep_link,
                "models": list(self.models),
                "options": [describe(o) for o in self.options],
                "settings": [describe(o) for o in self.settings],
                "method_options": _method_options(self.method_options),
                "computes": _qualified(self.compute), "figure": _qualified(self.figure),
                "also_warmed": {key: _describe_default(values)
                                for key, values in self.also.items()},
                "cost": self.cost.kind, "cost_words": COSTS[self.cost.kind]}


NO_PASS = Cost("forward", forwards=lambda values, model: 0)  # nothing through the model
FORWARD, GRADIENT = FIXED_COSTS["forward"], FIXED_COSTS["gradient"]  # one image
PAGES: dict[str, Page] = {}


def view(where: Page | Picker, view_id: str, title: str, *, options: tuple = (),
         settings: tuple = (), models: tuple[str, ...] | None = None,
         figure: Callable | None = None, cost: Cost = NO_PASS, quiet: tuple[str, ...] = (),
         method_options: tuple[tuple[str, str], ...] = (), also: dict | None = None):
    """Declare and register a view of a page (`where`: the page for its only view, else its
    picker); the decorated function `(model, image, values)` is the computation its default
    runs (decorate None-returning `lambda` or use `view(...)(None)` for a view that computes
    nothing on the model)."""
    picker = where if isinstance(where, Picker) else None
    page = where.page if picker is not None else where

    def declare(compute: Callable | None) -> View:
        declared = View(picker, page, view_id, title, tuple(options), tuple(settings), compute,
                        tuple(page.models if models is None else models), figure, cost,
                        tuple(quiet), tuple(method_options), dict(also or {}))
        _check_declaration(declared)
        page.views.append(declared)
        return declared
    return declare


def _check_declaration(declared: View) -> None:
    """Mistakes in a declaration fail at import, not in front of a class."""
    siblings = [v.id for v in declared.page.views if v.picker is declared.picker]
    if declared.id in siblings:
        raise ValueError(f"{declared.page.file}: two views are called '{declared.id}'.")
    if declared.picker is None and siblings:
        raise ValueError(f"{declared.page.file}: a page with one view has no picker.")
    if any(name not in MODELS for name in declared.models):
        raise ValueError(f"{declared.id}: models must be among {MODELS}.")
    names = [o.name for o in (*declared.options, *declared.settings)]
    if len(set(names)) != len(names):
        raise ValueError(f"{declared.id}: a control is declared twice.")
    for option in (*declared.options, *declared.settings):
        if not isinstance(option.default, (FromModel, FromPicture)):
            check_default(option)  # a fixed default must pass its own fixed bounds


def _method_options(pairs) -> list[dict]:
    return [{"method": method, "keys": f"{prefix}_<option>"} for method, prefix in pairs]


def _qualified(function) -> str | None:
    return None if function is None else f"{function.__module__}.{function.__qualname__}"


def every_view() -> list[View]:
    return [v for page in PAGES.values() for v in page.views]
