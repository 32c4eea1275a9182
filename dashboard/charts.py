"""Plotly figures in the browser: a small custom component (Streamlit components v2) over
a vendored plotly.js partial bundle, instead of `st.plotly_chart`.

Why: `st.plotly_chart` makes every new tab load and start Streamlit's full plotly.js chunk
(4.7 MB). Measured in Chromium on the 2-core machine: a page with one small chart became
interactive 1.1-1.2 s after navigation against 0.4 s without it, however few charts it
had. plotly.js's official cartesian dist file (1.5 MB) started in about half that time;
the same version's core with the traces this app draws (bar, heatmap, image, scatter),
bundled as one IIFE by dashboard/chart/plotly_bundle (`make plotly-bundle`; 1.25 MB),
starts faster still: a static page drew its first chart 0.40-0.57 s after navigation
against 0.83-0.92 s with the dist file (evaluating it took 0.21-0.26 s against 0.65-0.77 s;
an esbuild build of the dist file's own module list was as fast as ours, so its packaging is
the difference). It lives in dashboard/static/ (served by `server.enableStaticServing` at
app/static/, a path relative to every page of the app, behind a proxy's prefix too) with
its MIT licence; the same version as the plotly.js inside the `plotly` Python package, so
figures mean the same.

The figure travels as plotly.py's own JSON (arrays as typed base64), inside bytes, so it
is not escaped a second time. Clickable charts keep st.plotly_chart's selection state,
`{"selection": {"points": [{..., "customdata": ...}]}}` in `st.session_state[key]`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio
import streamlit as st

from dashboard import assets

HERE = Path(__file__).resolve().parent
PLOTLY_JS = "plotly-vitlens-4.1.1.min.js"
PLOTLY_URL = f"app/static/{PLOTLY_JS}"  # relative: resolves under any base URL path
NO_SELECTION = {"points": []}
# plotly_white's layout without the parts for trace kinds this app never draws (polar,
# ternary, geo, 3-D), in the app's font and text colour: a light look like Streamlit's
# chart theme, in 1.5 kB per figure instead of the 6.5 kB of the full default template.
APP_FONT = dict(family='"Source Sans", "Source Sans Pro", sans-serif', color="#31333F")
TEMPLATE = go.layout.Template(layout={
    name: value for name, value in pio.templates["plotly_white"].layout.to_plotly_json().items()
    if name not in {"polar", "ternary", "geo", "mapbox", "scene", "shapedefaults",
                    "annotationdefaults", "coloraxis"}})
TEMPLATE.layout.font = APP_FONT
# 2.5×10⁻⁴ instead of plotly's SI "250µ", which read as "250u", a unit, on colour bars
for _axis in (TEMPLATE.layout.xaxis, TEMPLATE.layout.yaxis):
    _axis.exponentformat = "power"
# No shared colour-axis entry: the app's two colour axes (page 7's matrix, page 8's heads)
# run from 0 to at most 1, where no prefix appears, and the template goes with every chart.
TEMPLATE.data.heatmap = [go.Heatmap(colorbar=dict(exponentformat="power"))]
TEMPLATE.layout.hoverlabel.font.family = APP_FONT["family"]
# ... put into each figure's message as plain JSON: `fig.update_layout(template=TEMPLATE)`
# validated the whole template again for every chart of every run (a fifth of a Home run's
# script time when a class follows its instructor there)
TEMPLATE_SPEC = TEMPLATE.to_plotly_json()



def chart_js() -> str:
    """The chart's code for the component: the ES modules of dashboard/chart/ (entry
    chart.js), inline, joined in the browser by the one module linker (assets.linker_js)."""
    modules = assets.packed_modules(HERE / "chart", "chart.js")
    return assets.linker_js() + f"""
const MODULES = {json.dumps(modules)};  // dependencies first, chart.js last
const linked = import(linkModules(MODULES)[MODULES[MODULES.length - 1].name]);

export default function mount(args) {{
  linked.then((module) => module.default(args), (error) => {{
    args.parentElement.textContent = `This chart could not be drawn: ${{error.message}}`;
  }});
}}
"""


_CHART_JS = chart_js()
_mount = st.components.v2.component(
    "vit_lens.chart",
    html="",
    css=".vl-chart { width: 100%; }",
    js=_CHART_JS,
    isolate_styles=False,  # plotly.js styles its charts from the document's <head>
)
_mount_preload = st.components.v2.component(
    "vit_lens.chart_library", html="", js=_CHART_JS, isolate_styles=False)


def preload() -> None:
    """Start fetching the chart library as the page opens (call it from the sidebar), not
    when the first chart arrives: page 7 sends its first chart after about a second of
    computing, and a new browser spends a few tenths of a second more fetching and
    compiling the library. Draws nothing."""
    message = json.dumps({"preload": True, "src": PLOTLY_URL})
    _mount_preload(key="chart_library", data=message.encode())


def _rerun_only() -> None:
    """A click reruns the script (or the fragment that drew the chart); nothing else."""


@dataclass(frozen=True)
class TextSize:
    """The size of a figure's text: `base` px for everything that inherits the layout's font
    (ticks, legends, hover labels; a title gets plotly's 1.4 times it), every size a builder
    set itself multiplied by `scale`, and nothing under `smallest` px, also when the chart
    fits its labels to the room it has (dashboard/chart/chart.js)."""

    base: int
    scale: float = 1.0
    smallest: int = 9
    taller: float = 1.0  # the chart's height times this: room for the larger labels


NORMAL = TextSize(13)
# a lecture hall: the same figure with all its text 20/13 larger, none under 14 px (a bar's
# label too, which plotly.js would shrink to the bar's thickness), in a chart a quarter
# taller, so the plot keeps most of the room the larger labels take
PRESENTATION = TextSize(20, 20 / 13, 14, 1.25)
DEFAULT_HEIGHT = 450  # plotly.js's, for a figure that names none
# where plotly keeps the fonts of a layout or a trace: a dict under one of these keys
_FONT_KEYS = {"font", "tickfont", "textfont", "insidetextfont", "outsidetextfont"}


def _scale_fonts(node, size: TextSize) -> None:
    """Every explicit font size in a figure's dict, scaled and raised to `size.smallest`."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _FONT_KEYS and isinstance(value, dict) and isinstance(
                    value.get("size"), (int, float)):
                value["size"] = max(size.smallest, round(value["size"] * size.scale, 1))
            if isinstance(value, (dict, list, tuple)):
                _scale_fonts(value, size)
    elif isinstance(node, (list, tuple)):
        for item in node:
            _scale_fonts(item, size)


def figure_json(fig: go.Figure, size: TextSize = NORMAL) -> str:
    """The figure as plotly.js reads it, in the app's template, across its container's width,
    with its text at `size`. The figure itself is not changed (a built figure may be shared
    by every session: `xai_core/figures/reuse.py`)."""
    spec = fig.to_plotly_json()  # a copy
    if size.scale != 1.0 or size.smallest != NORMAL.smallest:
        _scale_fonts(spec, size)
    layout = spec.setdefault("layout", {})
    layout["template"] = TEMPLATE_SPEC  # after the scaling: it has no size to scale
    layout.pop("width", None)
    layout["autosize"] = True
    layout["font"] = {**layout.get("font", {}), "size": size.base}
    hover = layout.setdefault("hoverlabel", {})
    hover["font"] = {**hover.get("font", {}), "size": size.base}
    if size != NORMAL:
        layout["height"] = round(layout.get("height", DEFAULT_HEIGHT) * size.taller)
        layout["uniformtext"] = {"minsize": size.smallest, "mode": "show"}
    return pio.to_json(spec, validate=False)


def figure_message(fig: go.Figure, select: bool, size: TextSize = NORMAL) -> bytes:
    """What the browser gets: the library's URL, whether clicks count, the smallest text the
    chart may fit its labels down to, the figure."""
    head = json.dumps({"src": PLOTLY_URL, "select": select, "smallest": size.smallest})
    return (head[:-1] + ', "figure": ' + figure_json(fig, size) + "}").encode()


def plotly_chart(fig: go.Figure, key: str, on_select: str | Callable | None = None,
                 selection_mode: str = "points", height: int | None = None,
                 size: TextSize = NORMAL):
    """Draw `fig` across the container's width, its text at `size`. `on_select` ("rerun" or
    a callback) makes a click on a point select it, as `st.plotly_chart(on_select=...,
    selection_mode="points")` does; the only mode this app uses."""
    if selection_mode != "points":
        raise ValueError("only point selection is supported")
    if height is not None:
        fig.update_layout(height=height)
    select = on_select is not None
    callbacks = {}
    if select:
        callbacks = {"default": {"selection": NO_SELECTION},
                     "on_selection_change": _rerun_only if on_select == "rerun" else on_select}
    return _mount(key=key, data=figure_message(fig, select, size), **callbacks)
