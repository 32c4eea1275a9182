"""dashboard/charts.py: the vendored plotly.js bundle and the message each chart sends.
(The browser side - drawing, clicks, the library served at app/static/ - is checked by the
e2e tests: every page opens with every chart drawn, a patch click changes a figure.)"""

from __future__ import annotations

import ast
import json
import re
import tomllib
from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio
import plotly.offline

from dashboard import charts

ROOT = Path(__file__).resolve().parent.parent
BUNDLE = ROOT / "dashboard" / "static" / charts.PLOTLY_JS


def _bundle_text() -> str:
    return BUNDLE.read_text(encoding="utf-8")


def test_bundle_is_the_plotly_js_of_the_python_package_with_its_licence():
    version = plotly.offline.get_plotlyjs_version()
    header = _bundle_text()[:300]
    assert f"plotly.js v{version} (ViT Lens partial bundle" in header
    assert version in charts.PLOTLY_JS
    recipe = json.loads((ROOT / "dashboard" / "chart" / "plotly_bundle" / "package.json")
                        .read_text())
    assert recipe["devDependencies"]["plotly.js"] == version  # pinned, the same version
    licence = BUNDLE.with_name(charts.PLOTLY_JS.replace(".min.js", ".LICENSE.txt")).read_text()
    assert "MIT License" in licence and "Plotly" in licence
    assert "Bundled license information" in _bundle_text()[-3000:]  # the bundled libraries'


def test_static_serving_is_on_so_the_browser_can_fetch_the_bundle():
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["server"]["enableStaticServing"] is True
    # Streamlit serves <main script's folder>/static at app/static/
    assert BUNDLE.parent == ROOT / "dashboard" / "static"
    assert (ROOT / "dashboard" / "app.py").exists()
    assert charts.PLOTLY_URL == f"app/static/{charts.PLOTLY_JS}"


def _trace_classes_used() -> set[str]:
    """Every `go.<Trace>(` the app's code calls."""
    names = set()
    for folder in ("xai_core", "dashboard", "pages"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and isinstance(node.func.value, ast.Name) and node.func.value.id == "go"):
                    names.add(node.func.attr)
    return names


def test_every_trace_type_the_app_draws_is_in_the_bundle():
    registered = set(re.findall(r'moduleType:"trace",name:"([a-z0-9]+)"', _bundle_text()))
    assert {"bar", "heatmap", "image", "scatter"} <= registered
    used = {getattr(go, name)().type for name in _trace_classes_used()
            if hasattr(getattr(go, name), "type") and name not in ("Figure", "Frame")}
    assert used, "found no trace constructors: the scan is broken"
    assert used <= registered, f"not in the bundle: {used - registered}"


def test_message_carries_the_figure_the_library_url_and_whether_clicks_count():
    fig = go.Figure(go.Bar(x=[1, 2], y=[3, 4]), layout=dict(title="t", width=300))
    message = json.loads(charts.figure_message(fig, select=True))
    assert message["src"] == charts.PLOTLY_URL and message["select"] is True
    # the oracle: plotly's own JSON of the figure in the app's template, across the width
    expected = json.loads(go.Figure(fig).update_layout(
        template=charts.TEMPLATE, width=None, autosize=True).to_json())
    expected["layout"]["font"] = {**expected["layout"].get("font", {}), "size": 13}
    expected["layout"]["hoverlabel"] = {"font": {"size": 13}}
    assert message["figure"] == expected  # the figure, its text at the normal size
    assert message["figure"]["data"][0]["y"] == [3, 4]
    assert message["smallest"] == charts.NORMAL.smallest
    assert json.loads(charts.figure_message(fig, select=False))["select"] is False


def test_presentation_scales_every_text_of_a_figure_and_leaves_the_figure_alone():
    """One scale for every text a builder sized itself (title, subplot titles, axis titles
    and ticks, colour-bar title and ticks, legend, annotations, bar labels), the layout's
    font (what the rest inherits, hover labels included) at the presentation size, and no
    text under the smallest size; the figure (maybe shared by every session) unchanged."""
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("left", "right"))
    fig.add_trace(go.Heatmap(z=[[1, 2]], colorbar=dict(
        title=dict(text="scale", font=dict(size=11)), tickfont=dict(size=8))), row=1, col=1)
    fig.add_trace(go.Bar(x=[1], y=[2], text=["2"], textfont=dict(size=10)), row=1, col=2)
    fig.update_layout(title=dict(text="t", font=dict(size=16)), legend=dict(font=dict(size=9)),
                      xaxis=dict(title=dict(text="x", font=dict(size=12)),
                                 tickfont=dict(size=6)))
    fig.add_annotation(text="note", font=dict(size=11), x=0, y=0)
    before = fig.to_json()
    size = charts.PRESENTATION
    spec = json.loads(charts.figure_json(fig, size))
    layout = spec["layout"]
    scaled = lambda px: max(size.smallest, round(px * size.scale, 1))  # noqa: E731
    assert layout["font"]["size"] == layout["hoverlabel"]["font"]["size"] == size.base
    assert layout["title"]["font"]["size"] == scaled(16)
    assert [a["font"]["size"] for a in layout["annotations"]] == [scaled(16)] * 2 + [scaled(11)]
    assert layout["legend"]["font"]["size"] == scaled(9)
    assert layout["xaxis"]["title"]["font"]["size"] == scaled(12)
    assert layout["xaxis"]["tickfont"]["size"] == size.smallest  # 6 x 1.54 = 9.2: raised
    bar = spec["data"][1]
    assert spec["data"][0]["colorbar"]["title"]["font"]["size"] == scaled(11)
    assert spec["data"][0]["colorbar"]["tickfont"]["size"] == size.smallest
    assert bar["textfont"]["size"] == scaled(10)
    assert layout["uniformtext"] == {"minsize": 14, "mode": "show"}  # bar labels too
    assert layout["height"] == round(charts.DEFAULT_HEIGHT * size.taller)
    assert fig.to_json() == before
    assert json.loads(charts.figure_message(fig, True, size))["smallest"] == 14


def test_template_is_plotly_white_without_unused_parts_and_smaller():
    layout = charts.TEMPLATE.layout
    white = pio.templates["plotly_white"].layout
    assert layout.plot_bgcolor == white.plot_bgcolor == "white"
    assert layout.xaxis.gridcolor == white.xaxis.gridcolor
    assert layout.polar.bgcolor is None and layout.ternary.bgcolor is None
    assert layout.font.color == "#31333F"
    small = len(go.Figure(layout=dict(template=charts.TEMPLATE)).to_json())
    assert small < len(go.Figure().to_json()) / 2


def test_pages_with_charts_start_loading_the_library_from_the_sidebar():
    """The sidebar mounts the library's preload on a page with charts, not on the
    Explainer (it draws none); the preload names the same bundle and is not a chart."""
    from apptest_helpers import charts as chart_elements
    from apptest_helpers import open_app

    def preloads(app):
        return [element for element in app.get("bidi_component")
                if element.proto.component_name == "vit_lens.chart_library"]

    home = open_app()
    [preload] = preloads(home)
    assert json.loads(preload.proto.bytes) == {"preload": True, "src": charts.PLOTLY_URL}
    assert chart_elements(home) and preload not in chart_elements(home)
    explainer = open_app("0_vit_explainer.py")
    assert not explainer.exception and preloads(explainer) == []


def test_the_chart_is_small_modules_joined_by_the_one_linker():
    """dashboard/chart/: ES modules by concern (the library, events, the fits of labels and
    title, text measuring), none over 120 lines, every one loaded by the entry chart.js,
    and joined in the browser by the Explainer's linker, not a second one."""
    from dashboard import assets

    folder = ROOT / "dashboard" / "chart"
    modules = assets.packed_modules(folder, "chart.js")
    names = [module["name"] for module in modules]
    assert names[-1] == "chart.js" and sorted(names) == sorted(p.name for p in folder.glob("*.js"))
    assert len(names) >= 5
    for name in names:
        assert (folder / name).read_text().count("\n") <= 120, name
    code = charts.chart_js()
    assert code.startswith(assets.linker_js()) and code.count("createObjectURL") == 1
