"""Shared presentation pieces: figures, presentation mode, pickers, friendly errors."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from xai_core.infra.errors import OptionError

from . import charts, links, literal, state
from .widgets import Interval, keep_valid

def text_size() -> charts.TextSize:
    """The size of every figure's text: larger in presentation mode."""
    return charts.PRESENTATION if state.selection().presentation else charts.NORMAL


def count(number: int, noun: str) -> str:
    """'1 prefix token', '5 prefix tokens': the page's words agree with the model's count."""
    return f"{number} {noun}{'' if number == 1 else 's'}"


def show_figure(fig: go.Figure, key: str, **kwargs):
    """Every Plotly figure goes through here, so presentation mode reaches every text of
    them all (`charts.TextSize`)."""
    return charts.plotly_chart(fig, key=key, size=text_size(), **kwargs)


def text_table(data, wide: str | None = None) -> None:
    """A table of words and numbers (a DataFrame, or what pandas builds one from: a dict of
    columns, or of values for a one-column card) drawn as ONE markdown block. `st.table`
    renders every cell as a markdown element of its own: with page 7's theory matrix (about
    100 cells) the browser spent 0.25-0.28 s in markdown on a first visit, 0.15-0.21 s with
    this one block (the page's other text included). A meaningful index (not 0, 1, ...) is
    the bold first column; numeric columns are right-aligned. `wide` (a key): a table of
    many columns (page 7's ten methods) whose cells may break a long word anywhere so that
    every column shows (TABLE_CSS); any other breaks a word only when it alone is wider than
    its cell."""
    if wide:
        with st.container(key=f"wide_table_{wide}"):
            text_table(data)
        return
    frame = data if isinstance(data, pd.DataFrame) else pd.DataFrame(
        data if any(isinstance(v, (list, tuple)) for v in data.values()) else {"value": data})
    show_index = not isinstance(frame.index, pd.RangeIndex)
    header = ([str(frame.index.name or "")] if show_index else []) + list(map(str, frame.columns))
    rule = ["---"] * show_index + ["---:" if pd.api.types.is_numeric_dtype(frame[c]) else "---"
                                   for c in frame.columns]
    lines = [_table_row(header), _table_row(rule)]
    for label, *row in frame.itertuples(name=None):  # keeps each column's type (iterrows casts)
        lines.append(_table_row([f"**{_cell(label)}**"] * show_index + [_cell(v) for v in row]))
    st.markdown("\n".join(lines))


def _cell(value) -> str:
    """A value as one markdown table cell: a '|' would end the cell, a newline the row."""
    return str(value).replace("|", "\\|").replace("\n", " ")


def _table_row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def view_picker(views: dict[str, str], key: str, label: str = "Show",
                opened_by: dict[str, tuple[str, ...]] | None = None) -> str:
    """The view of a page to draw (its other sections are not run, so a first visit draws
    only its first lesson): a segmented control of `views` (id -> title), linked by id
    (`?<key>=<id>`), the first view by default, kept across page switches. A link that
    names a widget of another view (`opened_by`: view id -> its linked keys) opens that
    view, so the link still shows what it names."""
    if key not in st.query_params:
        for view, keys in (opened_by or {}).items():
            if any(k in st.query_params for k in keys):
                st.session_state[key] = view
                break
    return links.choice(st.segmented_control, label, list(views), key=key,
                        format_func=views.get, what="view", required=True)


def panel_switch(label: str, key: str, opened_by_prefix: str) -> bool:
    """A linked toggle for a panel whose widgets are drawn only while it is on: hidden widgets
    still cost the browser their rendering (page 7's 17 method options in collapsed
    expanders: 0.2-0.3 CPU s of the browser's on a first visit). A link that
    sets one of the panel's widgets (a key starting with `opened_by_prefix`) turns it on,
    so the link still shows what it sets."""
    if key not in st.query_params and any(k.startswith(opened_by_prefix) for k in st.query_params):
        st.session_state[key] = True
    return links.flag(st.toggle, label, key=key)


# A table drawn by `text_table` scrolls sideways inside its column, as `st.table` does,
# instead of running past the page's edge (page 7's ten methods at presentation size). From a
# laptop up its cells hyphenate a long word at a syllable when it must, and break one only
# when it alone is wider than its cell, so the table fits its column and shows every column
# (page 7's theory matrix was cut at 1280 px) without words cut anywhere ("sourc e" in Home's
# model card, with `overflow-wrap: anywhere`); a phone keeps the scroll.
TABLE_CSS = (".stMarkdown table {display: block; overflow-x: auto; max-width: 100%;} "
             "@media (min-width: 640px) {.stMarkdown :is(td, th) {overflow-wrap: break-word; "
             "hyphens: auto;} [class*='st-key-wide_table'] :is(td, th) "
             "{overflow-wrap: anywhere;}}")
# Larger text for a lecture hall; a heading's text sits in a span of its own, which the
# first rule would shrink to the body's size, so the headings get theirs back. The open
# sidebar widens and its page names, smaller than the text (16 px), sit one a line, closer
# together, so every page is above the fold of a 720-line projector (wrapped at the larger
# size, pages 8 and 9 fell below it); a collapsed sidebar stays out of the way. The larger
# root type would also widen Streamlit's rem-based page margins (108 px a side); on a
# projector that width goes to the content.
PRESENTATION_CSS = (
    "html, body, [class*='st-'], .stMarkdown p, .stMarkdown li {font-size: 1.35rem !important;} "
    "h1, h1 [class*='st-'] {font-size: 3rem !important;} "
    "h2, h2 [class*='st-'] {font-size: 2.25rem !important;} "
    "h3, h3 [class*='st-'] {font-size: 1.75rem !important;} "
    "[data-testid='stSidebar'][data-collapsed='false'] {min-width: min(19rem, 24vw) !important;} "
    "[data-testid='stSidebarNav'] a * {font-size: 0.75rem !important; line-height: 1.4 "
    "!important; white-space: normal !important;} "
    "[data-testid='stSidebarNav'] a {min-height: 0 !important; padding-top: 0.15rem "
    "!important; padding-bottom: 0.15rem !important;} "
    "[data-testid='stMainBlockContainer'] {padding: 3.5rem 1.5rem 4rem !important;} "
    # a multiselect's chips wrap onto more lines instead of scrolling out of sight ("egrad
    # x" on page 7), and a widget's label wraps instead of ending in "..."
    "[data-testid='stMultiSelectTagsContainer'] {flex-wrap: wrap !important; "
    "overflow: visible !important; mask-image: none !important;} "
    "div:has(> [data-testid='stMultiSelectTagsContainer']) {max-height: none !important;} "
    ".stMarkdownEllipsis, .stMarkdownEllipsis p {white-space: normal !important; "
    "overflow: visible !important; text-overflow: clip !important;}")


def apply_page_css() -> None:
    """The app's own style rules, drawn where they are called (the sidebar's end: an empty
    element there takes no room the page needs). A markdown element, not a style-only
    `st.html`: Streamlit applies that one after the page's first elements, so a new tab
    showed the page unstyled for 0.4 s (presentation fonts jumped, tables ran wide)."""
    presentation = PRESENTATION_CSS if state.selection().presentation else ""
    st.markdown(f"<style>{TABLE_CSS} {presentation}</style>", unsafe_allow_html=True)


def cache_notice(spot) -> None:
    """Fill the sidebar placeholder `spot` with the disk-cache notice, when there is one:
    the app works without the cache, but the server's admin should know why it is slow
    to start and how to fix it."""
    from xai_core.models.disk_cache import notice

    text = notice()
    if text:
        spot.caption(f":material/warning: {text}")


def stop_check():
    """`should_stop` for xai_core's long loops (Score-CAM batches, metric curves).

    Streamlit acts on a pending Stop or rerun (the user pressed Stop, changed a widget or
    left the page) only inside its next `st` call, and a torch loop makes none. Each check
    makes one - it clears an empty placeholder - so Streamlit raises its own stop/rerun
    exception right there, between two batches, and the run ends within one batch (the
    model's lock and hooks are released on the way out). Nothing else asks to stop, so the
    check itself answers False."""
    spot = st.empty()

    def should_stop() -> bool:
        spot.empty()
        return False

    return should_stop


@contextmanager
def progress_bar():
    """A `progress(fraction, what)` callback for xai_core's long computations, drawn as a
    bar that is removed when the block ends (a cached answer never calls it: no bar)."""
    spot = st.empty()
    try:
        yield lambda fraction, what: spot.progress(min(max(fraction, 0.0), 1.0),
                                                   text=literal.text(what))
    finally:
        spot.empty()


@contextmanager
def friendly_errors():
    """Turn bad input or an unavailable model into a message instead of a traceback (shown
    as plain text: it may quote what the visitor gave, e.g. a results.json's content)."""
    try:
        yield
    except state.USER_ERRORS as error:
        st.error(literal.text(error))


def target_picker(model, image, key: str, label: str = "Target class", head=None,
                  default_rank: int = 0) -> int | None:
    """Top predictions first, then every class (searchable). Returns a class index; the
    default is the prediction of rank `default_rank` (0 = top), and a link names the class
    by `head.class_id`."""
    from xai_core.pipeline import predict

    head = head or model.head
    if head is None:
        return None
    names = head.class_names
    top = [p.index for p in predict(model, image, topk=5, head=head)]
    options = top + [i for i in range(len(names)) if i not in top]
    chosen = links.choice(
        st.selectbox, label, options, key=key, default=top[min(default_rank, len(top) - 1)],
        to_id=head.class_id, what="class",
        format_func=lambda i: f"{names[i]}" + ("  (top-5)" if i in top else ""),
        help="Pick a class from the top predictions, or type to search all classes.")
    unknown_picture_note(model, image, head, compact=True)
    return chosen


def unknown_picture_note(model, image, head=None, compact: bool = False) -> None:
    """Say in words, next to an answer, when the picture looks like none of what the model
    knows (`xai_core.studies.open_set`): a warning, or one caption line beside a picker."""
    from xai_core.studies.open_set import open_set

    found = open_set(model, image, head)
    if found.known:
        return
    if compact:
        st.caption(f":material/warning: Looks like none of what the model knows "
                   f"({found.why()}): its top classes are guesses.")
    else:
        st.warning(found.warning())


def vit_page_inputs():
    """The chosen image and ViT for a page; stops the page after saying why when the
    upload is missing or the model cannot load."""
    image = state.current_image()
    model = state.current_vit() if image is not None else None
    if model is None:
        st.stop()
    model_caption(model)
    return image, model


def scoring_head(model, missing: str = "no class score to explain"):
    """The session's head of `model` (its classifier or k-NN bank), or None after saying
    that the model has neither and what that leaves the page without (`missing`)."""
    head = state.session_head(model)
    if head is None:
        st.warning(f"{model.label} has no classifier and no k-NN memory bank, so there is "
                   f"{missing}.")
    return head


def model_caption(model) -> None:
    st.caption(f"Model: **{model.label}** · weights: {model.weights_source} · "
               f"device: {model.device}")


@dataclass(frozen=True)
class OptionWidget:
    """How a page draws one declared option: the widget and its words. The range, default
    and help stay the method's (`xai_core.methods`): a page never redeclares them."""

    label: str | None = None  # the option's name when None
    slider: bool = False  # a slider instead of a number box (a number option)
    format: str | None = None  # the number's printf format ("%d", "%.2f")
    step: float = 0.05  # a float option's step
    format_func: Callable | None = None  # how a choice is named
    container: Any = None  # where it is drawn (a column); the page's flow when None
    before: Callable[[dict], None] | None = None  # called with the values drawn so far,
    # before this widget (e.g. move an end block that now lies before its start)
    extra: dict = field(default_factory=dict)  # other keywords of the widget


def method_options(method, model, key: str, only: tuple[str, ...] | None = None,
                   widgets: dict[str, OptionWidget] | None = None,
                   every: bool = False) -> dict | None:
    """One widget per declared option of `method` (xai_core.methods.Method), or of those
    named in `only`, drawn as `widgets` says (default: a number box or a select box), its
    range or choices read from `model` and, for a whole number, clipped to what fits the
    server's budget (xai_core.infra.budget) with the other options as they are; linked by
    value. Returns the options set away from their defaults (`every`: every option's value,
    the others at their defaults), or None after saying why in one sentence when the options
    asked for (a link) exceed the budget: then the method does not run, and its options go
    back to their defaults."""
    from xai_core.infra import budget

    asked = _asked_options(method, key)
    try:
        values = method.resolve(model, asked)
    except OptionError:  # a value the widgets refuse themselves (the link's warning)
        values = method.resolve(model, {})
    try:
        budget.check(method, values, model=model)
    except budget.OverBudget as error:
        st.error(str(error))
        for name in asked:
            st.query_params.pop(f"{key}_{name}", None)
            st.session_state.pop(f"{key}_{name}", None)
        return None
    changed = {}
    for option in method.options:
        if only is not None and option.name not in only:
            continue
        look = (widgets or {}).get(option.name, OptionWidget())
        if look.before is not None:
            look.before(values)
        value = _option_widget(method, option, model, values, f"{key}_{option.name}", look)
        values[option.name] = value
        if value != option.limits(model)["default"]:
            changed[option.name] = value
    return values if every else changed


def _option_widget(method, option, model, values: dict, widget_key: str, look: OptionWidget):
    """Draw one option's widget; returns its value."""
    from xai_core.infra import budget

    limits = option.limits(model)
    default, label, where = limits["default"], look.label or option.name, look.container or st
    kwargs = {"help": option.help, **look.extra}
    if look.format_func is not None:
        kwargs["format_func"] = look.format_func
    if option.kind == "choice" or option.word is not None:
        choices = list(limits["choices"]) if option.kind == "choice" else [
            option.word, *range(limits["low"], limits["high"] + 1)]
        return links.choice(where.selectbox, label, choices, key=widget_key, default=default,
                            **kwargs)
    if look.format is not None:
        kwargs["format"] = look.format
    if option.kind == "int":
        low, high = budget.fitting_range(method, option.name, values, model) or (
            limits["low"], limits["high"])
        kwargs["help"] += _clipped(limits, low, high)
        draw = where.slider if look.slider else where.number_input
        return links.number(draw, label, low, high, key=widget_key,
                            default=min(max(default, low), high), step=1, **kwargs)
    keep_valid(widget_key, Interval(limits["low"], limits["high"]), default)
    draw = where.slider if look.slider else where.number_input
    kwargs.setdefault("persist_state", "session")  # kept across pages, as a linked widget is
    return draw(label, float(limits["low"]), float(limits["high"]), step=look.step,
                key=widget_key, **kwargs)


def _asked_options(method, key: str) -> dict:
    """The options asked for: a link's value, else this session's (neither: the default)."""
    asked = {}
    for option in method.options:
        widget_key = f"{key}_{option.name}"
        raw = st.query_params.get(widget_key, st.session_state.get(widget_key))
        if raw is not None:
            asked[option.name] = raw
    return asked


def _clipped(limits: dict, low: int, high: int) -> str:
    if (low, high) == (limits["low"], limits["high"]):
        return ""
    return (f" This server's budget allows {low}-{high} here with the other options as set "
            f"(the method takes {limits['low']}-{limits['high']}).")
