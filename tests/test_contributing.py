"""docs/contributing.md: each recipe's list of files is the list below, and the code's
registries keep to it - every method, metric, view, page, tour step and browser module sits
where its recipe puts it and is named where its recipe says (so a recipe that stops being
true, or a thing added without it, fails here)."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "contributing.md"
RECIPES = {
    "Add a method": {"xai_core/methods/<name>.py", "tests/test_<name>.py", "docs/methods.md"},
    "Add a metric": {"xai_core/metrics/<module>.py", "xai_core/metrics/__init__.py",
                     "tests/test_metrics.py", "docs/benchmarks.md"},
    "Add a view": {"xai_core/lessons/views/p<N>_<page>.py", "pages/<N>_<page>.py",
                   "docs/deep-links.md", "docs/interventions.md"},
    "Add a page": {"pages/<N>_<page>.py", "dashboard/page_list.py",
                   "xai_core/lessons/views/p<N>_<page>.py", "docs/deep-links.md",
                   "tests/test_<page>_page.py"},
    "Add a tour step": {"dashboard/explainer/tour.py", "xai_core/lessons/tour_choices.py",
                        "docs/explainer.md", "docs/deep-links.md"},
    "Add a JS part": {"dashboard/static/explainer/component/<part>.js",
                      "dashboard/static/explainer/component/app.js",
                      "dashboard/static/explainer/component/explainer.css", "DEVELOPERS.md",
                      "tests/e2e/test_explainer_browser.py"},
}
PATH = re.compile(r"^[A-Za-z0-9_./<>-]+\.(py|md|js|css)$")


def recipe_files(text: str) -> dict[str, set[str]]:
    """Section title -> the paths its numbered steps name on their first line."""
    found, section = {}, None
    for line in text.splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
            found[section] = set()
        elif section and re.match(r"^\d+\. ", line):
            found[section] |= {token for token in re.findall(r"`([^`]+)`", line)
                               if PATH.match(token)}
    return found


def test_each_recipe_names_the_files_it_touches():
    assert recipe_files(DOC.read_text()) == RECIPES
    for files in RECIPES.values():  # a fixed path exists; a template's folder does
        for name in files:
            path = ROOT / name
            assert (path if "<" not in name else path.parent).exists(), name


def test_the_recipe_reader_takes_paths_from_numbered_steps_only():
    text = ("## Add a thing\n\n1. `a/<b>.py`: `call(x=1)` and `c.md`\n   `d/e.py` later\n"
            "2. `f.js`\n")
    assert recipe_files(text) == {"Add a thing": {"a/<b>.py", "c.md", "f.js"}}


def named_in_tests(name: str) -> bool:
    return any(f'"{name}"' in path.read_text() for path in (ROOT / "tests").glob("test_*.py"))


def test_every_method_is_one_file_of_the_methods_package_with_its_row_and_a_test():
    from xai_core.methods import METHODS

    table = (ROOT / "docs" / "methods.md").read_text()
    for name, declared in METHODS.items():
        assert Path(inspect.getfile(declared.compute)).parent == ROOT / "xai_core" / "methods"
        assert f"`{name}`" in table, name
        assert named_in_tests(name), name


def test_every_metric_registers_from_the_metrics_package_and_is_listed():
    from xai_core.metrics import METRICS

    package = ROOT / "xai_core" / "metrics"
    imported = {alias.name for node in ast.walk(ast.parse((package / "__init__.py").read_text()))
                if isinstance(node, ast.ImportFrom) and node.level == 1 and not node.module
                for alias in node.names}
    listed = (ROOT / "docs" / "benchmarks.md").read_text()
    for name, declared in METRICS.items():
        module = Path(inspect.getfile(declared.compute))
        assert module.parent == package and module.stem in imported, name
        assert name in listed and named_in_tests(name), name


def declaration_module(page_file: str) -> str:
    """The views module of a page: `p<N>_<page>` after the page's file (`home` for home)."""
    stem = page_file.removesuffix(".py")
    return stem if not stem[0].isdigit() else f"p{stem}"


def test_every_page_of_the_menu_has_its_file_declaration_section_and_test():
    from dashboard.page_list import PAGE_LIST
    from xai_core.lessons.views import PAGES

    links = (ROOT / "docs" / "deep-links.md").read_text()
    tests = [path.read_text() for path in (ROOT / "tests").glob("test_*page*.py")] + [
        (ROOT / "tests" / "test_links.py").read_text()]
    for file, title, _icon in PAGE_LIST:
        assert (ROOT / "pages" / file).exists(), file
        module = declaration_module(file)
        assert (ROOT / "xai_core" / "lessons" / "views" / f"{module}.py").exists(), module
        page = PAGES[file]
        assert all(v.compute is None or v.compute.__module__.endswith(f".{module}")
                   for v in page.views), file
        assert file == "home.py" or f"## Page {file.split('_')[0]} · " in links, file
        assert any(file in text for text in tests), file


def test_every_view_is_declared_in_its_pages_module():
    from xai_core.lessons.views import every_view

    for declared in every_view():
        module = declaration_module(declared.page.file)
        where = declared.compute or declared.page.compute
        assert where is None or where.__module__.endswith(f".{module}"), declared.id
        assert (ROOT / "pages" / declared.page.file).exists()


def test_the_tour_has_the_length_the_docs_give_and_points_at_real_pages():
    from dashboard.explainer.tour import TOUR
    from dashboard.page_list import PAGE_LIST

    steps = len(TOUR)
    explainer = (ROOT / "docs" / "explainer.md").read_text()
    links = (ROOT / "docs" / "deep-links.md").read_text()
    assert f"{steps} steps" in explainer
    quoted = re.findall(r"guided tour, `1`-`(\d+)`", explainer + links)
    assert quoted and set(quoted) == {str(steps)}
    assert {step.page for step in TOUR} <= {entry[0] for entry in PAGE_LIST}


def test_every_browser_module_is_loaded_wired_and_listed():
    from dashboard import assets

    folder = assets.STATIC / assets.COMPONENT
    files = {path.name for path in folder.glob("*.js")}
    assert set(assets.module_order(assets.COMPONENT)) == files  # none left out of the load
    developers = (ROOT / "DEVELOPERS.md").read_text()
    for name in sorted(files):
        assert f"`{name}`" in developers, name
