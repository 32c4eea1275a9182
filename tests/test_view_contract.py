"""The view contract (`xai_core/lessons/views/`): every page's views declared once - deep-link
id, title, typed options with defaults and ranges, the computation its default runs, its
figure builder and its cost - and read by the pages, the deep-link docs, `python -m xai_core
views` and `warmup --gallery`.

Checked here against the pages' own source (ast): every page of the menu is declared, every
picker reads its views from the declaration, every declared control's key is drawn by its
page and every linked control a page draws is declared, every default lies in its range, no
default or title list is typed again outside the declarations, the docs name every linked
key, each view's default fits the server's budget and runs no more passes than it declares;
and after `warmup` on the default picture, opening every declared view runs no pass at all."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from source_scan import ROOT, python_files, typed_defaults
from xai_core.infra import budget
from xai_core.lessons.views import PAGES, Target, check_default, every_view
from xai_core.studies.cause_vs_claim import BASELINE as MASK_BASELINE

PAGES_DIR = ROOT / "pages"
LINKING = {("links", "choice"), ("links", "choices"), ("links", "number"), ("links", "flag"),
           ("ui", "target_picker"), ("ui", "panel_switch")}


# --- reading a page's source -----------------------------------------------------------------

def module_strings(tree: ast.Module) -> dict[str, str]:
    """Module-level names bound to a string (`TOP_K = "cmp_topk"`, `A, B = "a", "b"`)."""
    found = {}
    for node in tree.body:
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            names = target.elts if isinstance(target, ast.Tuple) else [target]
            values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            for name, value in zip(names, values):
                if isinstance(name, ast.Name) and isinstance(value, ast.Constant) \
                        and isinstance(value.value, str):
                    found[name.id] = value.value
    return found


def key_text(node: ast.AST, names: dict[str, str]) -> str | None:
    """A key as the source writes it: a string, a module constant's string, or an f-string
    with `{}` for each placeholder (None for a key built some other way, or one that starts
    with a placeholder: a shared helper's `f"{key}_{name}"`)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.JoinedStr) and isinstance(node.values[0], ast.Constant):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return None


def matches(key: str, written: str) -> bool:
    """Whether a declared key is one the source writes (an f-string stands for any text)."""
    pattern = "".join(".+" if part == "{}" else re.escape(part)
                      for part in re.split(r"(\{\})", written))
    return re.fullmatch(pattern, key) is not None


def call_name(node: ast.Call) -> tuple[str, str] | None:
    func = node.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return func.value.id, func.attr
    return None


def keyword(node: ast.Call, name: str):
    return next((k.value for k in node.keywords if k.arg == name), None)


def helpers_of(tree: ast.Module) -> list[Path]:
    """The dashboard modules a page imports that draw its controls (not the shared ones)."""
    names = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "dashboard":
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dashboard."):
            names.add(node.module.split(".")[1])
    return [path for name in sorted(names)
            if (path := ROOT / "dashboard" / f"{name}.py").exists()]


class PageSource:
    """What a page and the dashboard modules it imports write: every widget key, the linked
    ones, the method-option prefixes and the pickers it asks the declaration for."""

    def __init__(self, file: str):
        page_tree = ast.parse((PAGES_DIR / file).read_text())
        self.keys, self.linked, self.prefixes, self.pickers = set(), set(), set(), set()
        for path in [PAGES_DIR / file, *helpers_of(page_tree)]:
            tree = ast.parse(path.read_text())
            names = module_strings(tree)
            for node in ast.walk(tree):
                if isinstance(node, ast.Call):
                    self._read(node, names)

    def _read(self, node: ast.Call, names) -> None:
        called = call_name(node)
        key = keyword(node, "key")
        written = key_text(key, names) if key is not None else None
        if written:
            self.keys.add(written)
            if called in LINKING:
                self.linked.add(written)
        if called and called[1] == "method_options":
            prefix = node.args[2] if len(node.args) > 2 else key
            if (text := key_text(prefix, names)) is not None:
                self.prefixes.add(text)
        if called and called[1] == "picker_args" and node.args:
            self.pickers.add(key_text(node.args[0], names))


def linked_keys(page) -> set[str]:
    return {o.name for o in page.options} | {o.name for v in page.views for o in v.options}


def unlinked_keys(page) -> set[str]:
    return {o.name for o in page.settings} | {o.name for v in page.views for o in v.settings}


def prefixes(page) -> set[str]:
    pairs = [*page.method_options, *(p for v in page.views for p in v.method_options)]
    return {re.sub(r"\{[^}]*\}", "{}", prefix) for _method, prefix in pairs}


# --- the pages and their declarations --------------------------------------------------------

def test_every_page_of_the_menu_is_declared_in_menu_order():
    from dashboard.page_list import existing_pages

    assert list(PAGES) == [entry[0] for entry in existing_pages()]
    for page in PAGES.values():
        assert page.views, page.file
        assert bool(page.pickers) == (len(page.views) > 1), page.file  # one view: no picker


@pytest.mark.parametrize("file", list(PAGES))
def test_a_page_draws_what_its_declaration_declares(file):
    """Its pickers read the declaration; every declared control is drawn (by its key); every
    control it links is declared; its method options sit under the declared prefixes."""
    page, source = PAGES[file], PageSource(file)
    assert source.pickers == {picker.key for picker in page.pickers}
    for key in sorted(linked_keys(page) | unlinked_keys(page)):
        assert any(matches(key, written) for written in source.keys), f"{key} is not drawn"
    declared = linked_keys(page)
    for written in sorted(source.linked):
        assert any(matches(key, written) for key in declared), f"{written} is not declared"
    assert source.prefixes == prefixes(page)


def test_the_source_reading_sees_keys_constants_and_patterns(tmp_path):
    tree = ast.parse('TOP = "cmp_topk"\n'
                     'links.number(st.slider, "k", 1, 2, key=TOP)\n'
                     'links.choices(st.multiselect, "m", [], key=f"cmp_methods_{family}")\n'
                     'ui.method_options(METHODS[n], model, key=f"cmp_opt_{family}_{n}")\n'
                     'st.radio("r", [1], key=f"{key}_{name}")\n')
    source = PageSource.__new__(PageSource)
    source.keys, source.linked, source.prefixes, source.pickers = set(), set(), set(), set()
    names = module_strings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            source._read(node, names)
    assert source.linked == {"cmp_topk", "cmp_methods_{}"}
    assert source.prefixes == {"cmp_opt_{}_{}"}
    assert matches("cmp_methods_vit", "cmp_methods_{}") and not matches("cmp_topk", "cmp_t")


def test_every_view_picker_is_drawn_from_a_declaration():
    """No page or dashboard module passes `ui.view_picker` a literal list of views."""
    found = []
    for path in [*sorted(PAGES_DIR.glob("*.py")), *sorted((ROOT / "dashboard").rglob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and call_name(node) == ("ui", "view_picker"):
                if node.args or any(k.arg is not None for k in node.keywords):
                    found.append(f"{path.name}:{node.lineno}")
    assert found == []


@pytest.fixture(scope="module")
def tiny():
    from tiny_models import tiny_cnn, tiny_vit
    from xai_core.images import DEFAULT_SAMPLE, load_sample

    return {"vit": tiny_vit("test-tiny-view-vit", knn=True), "cnn": tiny_cnn()}, load_sample(
        DEFAULT_SAMPLE)


@pytest.fixture(scope="module")
def text_model():
    from xai_core.lessons.views.p8_text_attention import TEXT
    from xai_core.models import get_model

    return get_model(TEXT.default("text_model"))


def test_every_default_lies_in_its_range(tiny, text_model):
    """A fixed default against its own bounds or choices; one the model or the picture sets,
    read on each model its view runs on and checked against what that model allows."""
    models, image = tiny
    models = {**models, "text": text_model}
    checked = 0
    for declared in every_view():
        for name in set(declared.models) | set(declared.page.models):
            for option in declared.scope():
                check_default(option, models[name], image)
                checked += 1
        for option in declared.scope():
            if isinstance(option.default, (int, str, bool, tuple)) and not isinstance(
                    option, Target):
                check_default(option)
    assert checked > 200


def test_the_views_command_lists_every_view_with_its_options(capsys):
    from xai_core.cli.main import main

    assert main(["views", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["pages"]
    assert [p["page"] for p in listed] == list(PAGES)
    by_link = {(p["page"], v["id"]): v for p in listed for v in p["views"]}
    assert len(by_link) == len(every_view()) == 44
    lab = by_link[("9_interventions.py", "predict")]
    assert lab["link"] == "iv_view=predict"
    assert lab["options"] == [{"name": "iv_k", "type": "int", "default": 4, "low": 1,
                               "high": 16, "help": "How many patches the learner picks."}]
    heads = by_link[("9_interventions.py", "heads")]
    assert heads["options"][0]["default"] == "the strongest sink head"
    assert heads["computes"] == "xai_core.lessons.views.p9_interventions.heads"
    assert heads["figure"] == "xai_core.figures.intervention_figures.before_after_bars"
    faith = by_link[("7_comparison.py", "faith")]
    assert {s["name"]: s["default"] for s in faith["settings"]} == {
        "cmp_baseline": "zeros", "cmp_steps": 20, "cmp_perturb": True}
    assert main(["views"]) == 0
    assert "iv_view=claims" in capsys.readouterr().out


# --- one home for each default -----------------------------------------------------------------

def literal_at_declared_keys(tree: ast.AST, keys: set[str]) -> list[str]:
    """A widget call drawn with a declared key that types a default (default=, value=,
    index=), a range (a number widget's low and high) or a list of choices itself."""
    names = module_strings(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or keyword(node, "key") is None:
            continue
        key = key_text(keyword(node, "key"), names)
        if key not in keys:
            continue
        called = call_name(node) or ("", getattr(node.func, "attr", ""))
        linking = called in LINKING
        args = node.args[2:] if linking else node.args[1:]  # after (draw,) label
        typed = [keyword(node, k) for k in ("default", "value", "index", "min_value",
                                             "max_value")]
        numeric = called[1] == "number" or called[1] in ("slider", "number_input")
        typed += args[:3] if numeric else args[:1]  # a range (and value), or the choices
        if any(literal(value) for value in typed if value is not None):
            found.append(f"line {node.lineno}: {key}")
    return found


def literal(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return node.value is not None
    return isinstance(node, (ast.List, ast.Tuple)) and node.elts != [] and all(
        isinstance(e, ast.Constant) for e in node.elts)


def title_lists(tree: ast.AST) -> list[str]:
    """A literal dict of a picker's view ids (two or more) to words, one of them a view's
    declared title: the titles typed again."""
    titles = [picker.titles() for page in PAGES.values() for picker in page.pickers]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict) and len(node.keys) >= 2 and all(
                isinstance(k, ast.Constant) for k in node.keys) and all(
                isinstance(v, ast.Constant) for v in node.values):
            typed = {k.value: v.value for k, v in zip(node.keys, node.values)}
            if any(set(typed) <= set(declared) and any(
                    declared[view] == title for view, title in typed.items())
                   for declared in titles):
                found.append(f"line {node.lineno}: {sorted(typed)}")
    return found


def test_the_scans_find_a_typed_default_a_range_and_a_title_list():
    page = ('VIEWS = {"heads": "Switch heads off", "tokens": "Drop tokens"}\n'
            'k = links.number(st.slider, "k", 1, 16, key="iv_k", default=LAB.default("iv_k"))\n'
            'how = links.choice(st.radio, "How", ["shuffle", "zero"], key="iv_positions")\n'
            'seed = links.number(c.number_input, "Seed", *LAB.bounds("iv_seed"), key="iv_seed",'
            ' default=0)\n'
            'b = links.choice(st.selectbox, "B", BASELINES, key="iv_baseline", default="blur")\n'
            'ok = links.choice(st.selectbox, "B", BASELINES, key="iv_baseline", default=b)\n'
            'baseline = "blur"\n')
    tree = ast.parse(page)
    keys = linked_keys(PAGES["9_interventions.py"])
    assert literal_at_declared_keys(tree, keys) == [
        "line 2: iv_k", "line 3: iv_positions", "line 4: iv_seed", "line 5: iv_baseline"]
    assert title_lists(tree) == ["line 1: ['heads', 'tokens']"]
    assert typed_defaults(tree, (MASK_BASELINE,)) == ["line 7: baseline = 'blur'"]


def test_no_view_default_title_or_masking_default_is_typed_outside_the_declarations():
    """Pages, the dashboard and the core read a view's defaults, ranges, choices and titles
    from its declaration, and page 9's masking default (blur) from the intervention's."""
    declarations = ROOT / "xai_core" / "lessons" / "views"
    keys = {key for page in PAGES.values() for key in linked_keys(page) | unlinked_keys(page)}
    found = {}
    for path in python_files():
        if path.is_relative_to(declarations):
            continue
        tree = ast.parse(path.read_text())
        hits = literal_at_declared_keys(tree, keys) + title_lists(tree) + [
            hit for hit in typed_defaults(tree, (MASK_BASELINE,))
            if not path.name == "interventions.py"]
        if hits:
            found[str(path.relative_to(ROOT))] = hits
    assert found == {}


def test_the_deep_link_docs_name_every_picker_view_and_linked_control():
    docs = "\n".join((ROOT / "docs" / name).read_text()
                     for name in ("deep-links.md", "interventions.md"))
    named = set(re.findall(r"`([a-z0-9_<>]+)(?:=[^`]*)?`", docs))
    missing = []
    for page in PAGES.values():
        for picker in page.pickers:
            missing += [f"{picker.key}={v.id}" for v in picker.views
                        if picker.key not in named or v.id not in named]
        missing += sorted(key for key in linked_keys(page) if key not in named)
    assert missing == []


# --- what a view costs -------------------------------------------------------------------------

def first_layer(model):
    """The first module every forward pass runs (the patch embedding, a CNN's stem)."""
    return next(m for m in model.module.modules() if next(m.children(), None) is None)


class ImageCount:
    """Images through the first layer of each model while open (every pass starts there,
    also a pass that skips the model's own forward, such as head importance's)."""

    def __init__(self, *models):
        self.models, self.images = [m for m in models if m is not None], []

    def __enter__(self):
        self.handles = [first_layer(m).register_forward_hook(
            lambda _m, args, _out: self.images.append(int(args[0].shape[0])))
            for m in self.models]
        return self

    def __exit__(self, *exc):
        for handle in self.handles:
            handle.remove()

    @property
    def total(self) -> int:
        return sum(self.images)


def test_each_view_fits_the_budget_and_runs_no_more_passes_than_it_declares(tiny):
    """On cold caches (the model's one-off work - its open-set threshold and per-block
    banks - done first, as after the model's warm-up), each view's own computation sends no
    more images forward than its declared cost, nor the page's computation than the page's;
    and each default asks for less than the server's default budget."""
    import gc

    from xai_core.capture import shared_forwards
    from xai_core.infra.cache import BoundedCache
    from xai_core.images import load_sample
    from xai_core.lessons.views.answers import answer
    from xai_core.studies import readout
    from xai_core.studies.open_set import THRESHOLD_CACHE

    models, image = tiny
    for model in models.values():
        answer(model, load_sample("coffee"))
        readout.warm_block_banks(model)
    over = []
    for declared in every_view():
        if declared.page.models == ("text",):
            continue
        for found in gc.get_objects():
            if type(found) is BoundedCache and found not in (THRESHOLD_CACHE, readout.BANKS):
                found.clear()
        steps = [(declared.page, declared.page.compute, declared.page.models,
                  declared.page.cost), *((v, v.compute, v.models, v.cost)
                                         for v in declared.chain())]
        with shared_forwards():
            for owner, compute, names, cost in steps:
                for name in names:
                    model = models[name]
                    values = declared.defaults(model, image)
                    with ImageCount(model) as count:
                        if compute is not None:
                            compute(model, image, values)
                    allowed = 0 if cost is None else cost.forwards(values, model)
                    if count.total > allowed:
                        over.append(f"{declared.page.file} {declared.id} "
                                    f"({getattr(owner, 'id', 'page')}): {count.total} images "
                                    f"> {allowed} declared")
        for name in declared.models:
            assert declared.passes(models[name], image) <= budget.DEFAULT.passes
    assert over == []


# --- after the warm-up, nothing ---------------------------------------------------------------

def test_after_warmup_opening_every_declared_view_runs_no_pass(tiny, text_model, monkeypatch,
                                                             capsys):
    """`warmup --gallery` on the default picture (tiny ViT and CNN standing in for the
    default ones, the bundled text model), then every declared view opened in the real app
    (AppTest, its picker clicked as a learner would): no image goes through any model."""
    from apptest_helpers import ENTRY
    from streamlit.testing.v1 import AppTest

    from dashboard import state
    from xai_core import images, models as model_package
    from xai_core.cli.main import main as cli_main

    models, _image = tiny
    by_id = {model_package.DEFAULT_VIT: models["vit"], model_package.DEFAULT_CNN: models["cnn"],
             text_model.spec.id: text_model}
    monkeypatch.setattr(model_package, "get_model", lambda model_id, *a, **k: by_id[model_id])
    monkeypatch.setattr(state, "get_model", lambda model_id, *a, **k: by_id[model_id])
    for model in models.values():  # known by id, as the benchmark's data-set view asks
        monkeypatch.setitem(model_package.MODEL_SPECS, model.spec.id, model.spec)
    monkeypatch.setattr(images, "sample_ids", lambda: [images.DEFAULT_SAMPLE])
    assert cli_main(["warmup", "--models", *by_id, "--gallery", "--json"]) == 0
    warmed = json.loads(capsys.readouterr().out)
    assert [row["failures"] for row in warmed["gallery"]["images"]] == [[]]
    assert tour_switch_passes(models["vit"], *by_id.values()) == {}
    opened, ran = 0, {}
    for page in PAGES.values():
        app = AppTest.from_file(ENTRY, default_timeout=300)
        for at, declared in enumerate(page.views):
            with ImageCount(*by_id.values()) as count:
                if at == 0:  # a visitor arrives on the home page, then opens the page
                    app.run()
                    if page.file != "home.py":
                        app.switch_page(f"../pages/{page.file}").run()
                else:
                    for outer in declared.chain():
                        app.segmented_control(key=outer.picker.key).set_value(outer.id)
                    app.run()
            assert not app.exception, (page.file, declared.id, app.exception)
            opened += 1
            if count.total:
                ran[f"{page.file} {declared.deep_link or declared.id}"] = count.total
    assert opened == len(every_view())
    assert ran == {}


def tour_switch_passes(vit, *models) -> dict:
    """{each head the tour switches off on the gallery picture: the images its switch sends
    through the models}, for those that send any: each switching step of the tour, opened
    as the page opens it (its own switch, then the step's words with both results)."""
    from dashboard.explainer.tour import TOUR, resolve_steps, switcher
    from xai_core.images import DEFAULT_SAMPLE, load_sample
    from xai_core.lessons import explainer
    from xai_core.lessons.tour_choices import switched_heads

    image = load_sample(DEFAULT_SAMPLE)
    overview = explainer.overview_payload(vit, image, vit.head)
    chosen = switched_heads(overview)
    assert set(chosen) == {step.id for step in TOUR if step.switch_off} and chosen
    switch, passes = switcher(vit, image, vit.head), {}
    for step_id, pair in chosen.items():
        with ImageCount(*models) as count:
            switch(*pair)
        if count.total:
            passes[f"{step_id} {pair}"] = count.total
    with ImageCount(*models) as count:
        steps = resolve_steps(overview, switch)
    assert [step["switch"] for step in steps if step["switch"]]  # the steps carry the results
    return {**passes, **({"resolve_steps": count.total} if count.total else {})}
