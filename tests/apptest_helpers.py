"""Helpers shared by the AppTest page tests: open the app (on a page), read the Plotly figures
of the last run, decode their typed arrays, and gather the text of one kind of element."""

import base64
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
from streamlit.testing.v1 import AppTest

CHART_COMPONENT = "vit_lens.chart"
ENTRY = str(Path(__file__).resolve().parent.parent / "dashboard" / "app.py")


def open_app(page: str | None = None, timeout: float = 300, **session_state) -> AppTest:
    """Run the entry script with `session_state` set first; with `page` (a file in pages/,
    e.g. "5_gradcam.py") switch to that page and run it too."""
    app = AppTest.from_file(ENTRY, default_timeout=timeout)
    for key, value in session_state.items():
        app.session_state[key] = value
    app.run()
    if page is None:
        return app
    return app.switch_page(f"../pages/{page}").run()


def charts(app: AppTest) -> list:
    """Every Plotly chart of the last run (dashboard/charts.py's component), in page order."""
    return [element for element in app.get("bidi_component")
            if element.proto.component_name == CHART_COMPONENT]


def chart_message(chart) -> dict:
    """What the chart's element sends the browser: {"src", "select", "figure"}."""
    return json.loads(chart.proto.bytes)


def chart_specs(app: AppTest) -> list[dict]:
    """Every Plotly chart of the last run, as the figure JSON the browser gets."""
    return [chart_message(chart)["figure"] for chart in charts(app)]


def chart_keys(app: AppTest) -> set[str]:
    """The keys of the Plotly charts of the last run (what a view draws)."""
    return {chart.key for chart in charts(app)}


def keyed_chart(app: AppTest, key: str) -> dict:
    """The figure JSON of the one chart drawn with `key` in the last run."""
    found = [chart for chart in charts(app) if chart.key == key]
    assert len(found) == 1, f"no single chart with key {key}"
    return chart_message(found[0])["figure"]


def show(app: AppTest, view_key: str, view: str) -> AppTest:
    """Open one view of a page (its segmented control), as a click on it does."""
    app.segmented_control(key=view_key).set_value(view).run()
    assert not app.exception, app.exception
    return app


def chart_title(spec: dict) -> str:
    """A figure's title text ("" when it has none)."""
    return str((spec["layout"].get("title") or {}).get("text") or "")


def plotly_array(value) -> np.ndarray:
    """A data array of a Plotly spec: a plain list, or a typed array {"dtype", "bdata" (base64),
    "shape"}, where 1-D arrays carry no shape and a shape is "a,b" or a list."""
    if isinstance(value, dict) and "bdata" in value:
        flat = np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"])
        shape = value.get("shape")
        if not shape:
            return flat
        if isinstance(shape, str):
            shape = shape.split(",")
        return flat.reshape([int(n) for n in shape])
    return np.asarray(value, dtype=float)


def element_text(app: AppTest, kind: str = "markdown") -> str:
    """The values of every element of one kind ("caption", "error", ...), space-joined."""
    return " ".join(str(element.value) for element in getattr(app, kind))


def numbers(text: str) -> list[str]:
    """The whole and decimal numbers a text quotes, in order: what a title or a message says
    without depending on its wording."""
    return re.findall(r"-?\d+(?:\.\d+)?", text)


def no_problems(app: AppTest) -> None:
    """The last run raised nothing and showed no st.error."""
    assert not app.exception, app.exception
    assert not app.error, [e.value for e in app.error]


def text_tables(app: AppTest) -> list:
    """Every table the last run drew with `dashboard.ui.text_table` (one markdown block each),
    as DataFrames of its cell strings in page order; a bold first column is the index."""
    tables = []
    for element in app.markdown:
        lines = str(element.value).split("\n")
        if len(lines) < 2 or not set(lines[1]) <= set("|-: "):
            continue
        header, *rows = [_table_cells(line) for line in lines[:1] + lines[2:]]
        frame = pd.DataFrame(rows, columns=header)
        if header[0] == "" or all(r[0].startswith("**") for r in rows):
            frame = frame.set_index(header[0])
            frame.index = [label.strip("*") for label in frame.index]
        tables.append(frame)
    return tables


def _table_cells(line: str) -> list[str]:
    cells = line.strip().removeprefix("|").removesuffix("|").replace("\\|", "\0").split("|")
    return [cell.strip().replace("\0", "|") for cell in cells]


def sink_columns(capture):
    """The sink oracle of pages 3 and 4: (scores, keys) per block and head, the largest mean
    attention any key receives and that key."""
    means = np.stack([b.acts["attn"][0].double().mean(1).numpy() for b in capture.blocks])
    return means.max(-1), means.argmax(-1)


def quoting(app: AppTest, kind: str, *quoted: str) -> str:
    """The first element of one kind ("caption", "markdown", ...) whose numbers begin with
    `quoted` (as the page formats them): finds a sentence by the data it states, not its
    wording."""
    for element in getattr(app, kind):
        if numbers(str(element.value))[:len(quoted)] == list(quoted):
            return str(element.value)
    raise AssertionError(f"no {kind} quotes {quoted}: "
                         f"{[numbers(str(e.value)) for e in getattr(app, kind)]}")


def percent(share: float, digits: int = 1) -> str:
    """A share as a page writes it with f"{share:.1%}", without the sign: what `numbers` reads."""
    return f"{share:.{digits}%}".rstrip("%")


# a random-weight DeiT-S distilled (two prefix tokens), selected as the sidebar does
RANDOM_DEIT = {"vit_model": "deit-s16-distilled", "vit_random": True}


def chart_quoting(app: AppTest, key: str, *title_numbers: str) -> dict:
    """The chart drawn with `key`, its title quoting `title_numbers` (blocks, heads, ...)."""
    spec = keyed_chart(app, key)
    assert numbers(chart_title(spec))[:len(title_numbers)] == list(title_numbers), \
        chart_title(spec)
    return spec


def ok(app: AppTest) -> AppTest:
    assert not app.exception, app.exception
    return app
