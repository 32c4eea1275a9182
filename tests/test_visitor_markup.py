"""Nothing a visitor types becomes markup (issue 29, item 4): a link's values, the tour value,
k-NN labels and what a page quotes from them are shown as the characters typed, on every page.

The oracle is a real CommonMark parser (markdown-it-py, with GitHub's tables and
strikethrough, raw HTML on) plus the rules Streamlit 1.67 adds (read from its frontend
bundle, StreamlitMarkdown.*.js): after parsing, on the text where a backslash no longer
counts, bare URLs and e-mail addresses become links and `:material_x:`, `:streamlit:` and
emoji shortcodes become pictures; before it, `:name[...]` directives and `$` maths.
"""

from __future__ import annotations

import ast
import html
import json
import re
from pathlib import Path

import pytest
from apptest_helpers import ENTRY, chart_specs
from hostile_corpus import MARKER, MARKUP_LABELS, MARKUP_PAYLOADS
from markdown_it import MarkdownIt
from single_thread import one_torch_thread
from streamlit.testing.v1 import AppTest

from dashboard import literal
from dashboard.page_list import PAGE_LIST
from xai_core import pipeline
from xai_core.images import load_sample
from xai_core.models import get_model

ROOT = Path(__file__).resolve().parent.parent
PARSER = MarkdownIt("commonmark").enable(["table", "strikethrough"])
# the same, with each backslash escape kept as a token of its own (not joined to the text)
ESCAPES_APART = MarkdownIt("commonmark").enable(["table", "strikethrough"]).disable("text_join")
JOINER = "\u2060"
EVIL = "evil.example"

# Streamlit's rules on parsed text (StreamlitMarkdown: the GFM autolink transform, the icon,
# logo and emoji plugins); its source rewrite ":material/" -> ":material_" comes first.
AFTER_PARSE = {
    "bare link": re.compile(r"(https?://|www(?=\.))[-.\w]+", re.I),
    "e-mail link": re.compile(r"[-.\w+]+@[-\w]+(?:\.[-\w]+)+"),
    "icon": re.compile(r":material_\w+:"),
    "logo": re.compile(r":streamlit:"),
    "emoji": re.compile(r":[\w+-][\w+-]*:"),
}
# ... and its rules while parsing, where a backslash escape still counts
DIRECTIVE = re.compile(r":[A-Za-z][\w-]*\[")
_CODE_OR_ESCAPE = re.compile(r"(?:^|(?<=\n)) {0,3}(`{3,}|~{3,})[\s\S]*?(?:\n[ \t]*\1|$)"
                             r"|(?<!`)(`+)[^`\n]+\2(?!`)|\\[\\$`]")
_DISPLAY_MATH = re.compile(r"(?<!\$)\$\$+(?!\$)[\s\S]*?\$\$")
_INLINE_MATH = re.compile(r"(?<!\$)\$(?![\s$])[^$\n]*?[^\s$]\$(?!\d)")
# where a block's text may sit without a heading, list, quote or code block around it
PLAIN_BLOCKS = {"paragraph_open", "table_open", "thead_open", "tbody_open", "tr_open",
                "th_open", "td_open"}
# tags Plotly follows in text, but for <br>: the app's own hover texts break lines with it
PLOTLY_TAG = re.compile(r"<\s*/?\s*(a|img|b|i|em|span|sup|sub|s|u)\b", re.I)


@pytest.fixture(scope="module", autouse=True)
def single_thread():
    with one_torch_thread():
        yield


def streamlit_source(body: str) -> str:
    return body.replace(":material/", ":material_")


def needs_math(body: str) -> bool:
    """Streamlit's own test for loading its maths plugin (code spans and escapes removed)."""
    if "$" not in body:
        return False
    rest = _CODE_OR_ESCAPE.sub("_", body)
    return bool(_DISPLAY_MATH.search(rest) or _INLINE_MATH.search(rest))


def markup_made(body: str, hostile=lambda text: MARKER in text or EVIL in text) -> list[str]:
    """What `body` would turn visitor text (by default: anything naming MARKER or
    evil.example) into, besides plain text and code: [] when nothing."""
    found = []
    if hostile(body) and needs_math(body):
        found.append("maths")
    if any(DIRECTIVE.search(child.content)
           for token in ESCAPES_APART.parse(streamlit_source(body))
           for child in token.children or () if child.type == "text" and hostile(child.content)):
        found.append("directive")
    opened = []
    for token in PARSER.parse(streamlit_source(body)):
        if token.nesting == 1:
            opened.append(token.type)
        elif token.nesting == -1:
            opened.pop()
        elif token.type in ("fence", "code_block", "html_block") and hostile(token.content):
            found.append(token.type)
        elif token.type == "inline" and hostile(token.content):
            found += [f"inside {kind}" for kind in opened if kind not in PLAIN_BLOCKS]
        for child in token.children or ():
            found += _inline_markup(child, hostile)
    return found


def _inline_markup(token, hostile) -> list[str]:
    address = str(token.attrGet("href") or token.attrGet("src") or "")
    if token.type in ("link_open", "image") and (hostile(address) or hostile(token.content)):
        return [f"{token.type} {address}"]
    if token.type == "html_inline":
        return [f"html {token.content}"]
    if token.type == "text" and hostile(token.content):
        return [f"{name}: {token.content!r}" for name, rule in AFTER_PARSE.items()
                if rule.search(token.content)]
    return []


def anything(text: str) -> bool:
    return True


def shown_text(body: str) -> str:
    """The characters a reader sees (text and code, line breaks as spaces)."""
    parts = []
    for token in PARSER.parse(streamlit_source(body)):
        for child in token.children or ():
            if child.type in ("text", "code_inline"):
                parts.append(child.content)
            elif child.type in ("softbreak", "hardbreak"):
                parts.append(" ")
        if token.type == "inline":
            parts.append(" ")
    return " ".join("".join(parts).replace(JOINER, "").split())


def one_line(text: str) -> str:
    return " ".join(text.split())


# --- the helper itself --------------------------------------------------------------------

ORDINARY = ("tiger_cat", "5 * 3", "tabby, tabby cat", "potter's wheel", "St. Bernard",
            "1. first", "a | b", "x < y & z > w", "C# and F#", "~50 %", "ratio 3:2",
            "a -> b", "12:30", "file_name.png", "[draft]", "$5 and $6", "back`tick",
            "3.5 (max)", "- dash first", "+1", "> quoted", "== x", "#1 fan", "a@b.org",
            "www.example.org", "http://x.org", ":smile:", ":streamlit:", "A & B")


@pytest.mark.parametrize("value", ORDINARY + MARKUP_PAYLOADS + MARKUP_LABELS)
def test_text_and_code_show_exactly_the_characters(value):
    for render in (literal.text, literal.code):
        body = render(value)
        assert markup_made(body, hostile=anything) == [], (render.__name__, body)
        assert shown_text(body) == one_line(value), (render.__name__, body)
        assert not needs_math(body)


def test_ordinary_words_are_left_as_they_are():
    """Letters, digits, spaces and everyday punctuation need no escape: a label's source
    stays readable (and the app's own tests can still look for it)."""
    for value in ("tabby, tabby cat", "potter's wheel", "my cat 2", "coffee mug?",
                  "Use 64 steps or fewer (the limit is 400 passes).", "St. Bernard",
                  "Second sentence: the text is empty.", "a @ b"):
        assert literal.text(value) == value


def test_a_code_span_holds_any_run_of_backticks():
    for value in ("`", "``x", "a```b", "x`` [y](https://evil.example)"):
        tokens = PARSER.parseInline(literal.code(value))[0].children
        assert [t.type for t in tokens] == ["code_inline"], value
        assert tokens[0].content == value


def test_plotly_text_shows_tags_as_characters():
    for value in MARKUP_PAYLOADS + MARKUP_LABELS:
        shown = literal.figure(value)
        assert not PLOTLY_TAG.search(shown) and "<" not in shown, shown
        assert html.unescape(shown) == one_line(value)


def test_streamlit_still_has_the_rules_this_test_models():
    """The rules above are copied from Streamlit's frontend; a new Streamlit must be read
    again."""
    import streamlit

    folder = Path(streamlit.__file__).parent / "static" / "static" / "js"
    bundle = "".join(path.read_text(encoding="utf-8")
                     for path in folder.glob("StreamlitMarkdown.*.js"))
    for rule in (r"/:material_(\w+):/g", r"/:streamlit:/g", "replaceAll(`:material/`",
                 r"/(https?:\/\/|www(?=\.))([-.\w]+)([^ \t\r\n]*)/gi",
                 r"/:(?!material\/|streamlit:)[\w+-][\w_+-]*:/",
                 "`textDirective`", r"(?<!\$)\$(?![\s$])[^$\n]*?[^\s$]\$(?!\d)"):
        assert rule in bundle, rule


# --- every query parameter the app reads ----------------------------------------------------

# Every function that touches `st.query_params`. Values are shown only by links._follow
# (every linked widget: fed below through the keys the pages draw), linked_view (vx_*) and
# component_data (tour), both fed on page 0; ui._asked_options hands a method option's raw
# value only to the method's own parser (typed values or the defaults come back); the
# others only test, write or delete keys. Class mode's start_run shows nothing of `class` or
# `class_key` (a refusal repeats neither: fed payloads in tests/test_classroom_app.py) and
# `here` passes `tour` on to followers, where component_data reads it.
ADDRESS_USERS = {("dashboard/links.py", "_follow"), ("dashboard/links.py", "_publish"),
                 ("dashboard/ui.py", "_asked_options"), ("dashboard/ui.py", "method_options"),
                 ("dashboard/comparison_parts.py", "ask_for_steps"),
                 ("dashboard/links.py", "prune"), ("dashboard/ui.py", "view_picker"),
                 ("dashboard/ui.py", "panel_switch"),
                 ("dashboard/explainer/component.py", "linked_view"),
                 ("dashboard/explainer/component.py", "component_data"),
                 ("dashboard/explainer/component.py", "_on_view"),
                 ("dashboard/app.py", "_sidebar_start"),  # reads `presentation`, shows nothing
                 ("dashboard/classroom.py", "start_run"), ("dashboard/classroom.py", "here")}


def address_users() -> set[tuple[str, str]]:
    """(file, innermost function or "<module>") of every use of `query_params`."""
    found = set()

    def visit(node, where):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            where = getattr(node, "name", "<lambda>")
        if isinstance(node, ast.Attribute) and node.attr == "query_params":
            found.add((path, where))
        for child in ast.iter_child_nodes(node):
            visit(child, where)

    for file in sorted(ROOT.glob("dashboard/**/*.py")) + sorted(ROOT.glob("pages/*.py")):
        path = str(file.relative_to(ROOT))
        visit(ast.parse(file.read_text(encoding="utf-8")), "<module>")
    return found


def test_every_use_of_the_address_is_one_this_test_knows():
    """A new place that reads the URL must be added here and fed payloads below."""
    assert address_users() == ADDRESS_USERS


def payload_for(index: int) -> str:
    return MARKUP_PAYLOADS[index % len(MARKUP_PAYLOADS)]


def every_markdown(app: AppTest):
    """(kind, Markdown source) of every element of the last run: bodies of markdown,
    captions, headings, alerts and toasts; labels and tooltips of widgets."""
    for node in app._tree:
        proto = getattr(node, "proto", None)
        if proto is None or not hasattr(proto, "ListFields"):
            continue
        for field, value in proto.ListFields():
            if field.name in ("body", "label", "help", "caption") and isinstance(value, str):
                yield node.type, value


def assert_no_markup(app: AppTest, where: str) -> list[str]:
    """No element turns visitor text into markup and no figure holds a tag from it; returns
    the text shown by every element."""
    assert not app.exception, (where, [e.value for e in app.exception])
    shown = []
    for kind, body in every_markdown(app):
        assert markup_made(body) == [], (where, kind, body, markup_made(body))
        shown.append(shown_text(body))
    for spec in chart_specs(app):
        for text in _strings(spec):
            if MARKER in text or EVIL in text:
                assert not PLOTLY_TAG.search(text), (where, text)
                shown.append(one_line(html.unescape(text)))
    return shown


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def drawn_links(page: str) -> set[str]:
    """The linked keys a page's default view draws (links records them), sidebar included."""
    app = AppTest.from_file(ENTRY, default_timeout=300)
    app.run()
    app.switch_page(f"../pages/{page}").run()
    assert not app.exception, (page, app.exception)
    return set(app.session_state["_links_drawn"])


PAGES = [name for name, _, _ in PAGE_LIST]
DIRECT = {"0_vit_explainer.py": ("tour", "vx_block", "vx_head", "vx_patch", "vx_map")}


@pytest.mark.parametrize("page", PAGES)
def test_a_link_cannot_put_markup_on_any_page(page):
    """Every query parameter the page reads gets a Markdown/HTML payload: each is refused in
    words that show it as typed, and nothing on the page (sidebar included) becomes a link,
    an image, a heading, HTML, maths, a colour or an icon."""
    keys = sorted(drawn_links(page)) + list(DIRECT.get(page, ()))
    assert {"image_choice", "vit_model", "presentation"} <= set(keys)
    sent = {key: payload_for(i) for i, key in enumerate(keys)}
    app = AppTest.from_file(ENTRY, default_timeout=300)
    for key, value in sent.items():
        app.query_params[key] = value
    app.run()
    shown = assert_no_markup(app, "home")
    warned = [shown_text(w.value) for w in app.warning]
    app.switch_page(f"../pages/{page}").run()
    shown += assert_no_markup(app, page)
    warned += [shown_text(w.value) for w in app.warning]
    for key, value in sent.items():
        assert any(one_line(value) in text for text in warned), (key, value, warned)


# --- k-NN labels ---------------------------------------------------------------------------

def knn_top(app: AppTest) -> str:
    model = get_model("dinov2-s14")
    head = app.session_state["knn_banks"][(model.spec.id, False)]
    return pipeline.predict(model, load_sample("chelsea"), topk=1, head=head)[0].label


def teach(app: AppTest, label: str) -> AppTest:
    app.text_input(key="knn_new_label").input(label)
    app.button(key="knn_add").click().run()
    assert not app.exception, app.exception
    return app


# the views that quote the target class or the neighbours' labels (linked by their ids)
LABEL_VIEWS = {"home.py": {}, "1_tokenization.py": {"tok_view": "prediction"},
               "4_rollout_heads.py": {}, "5_gradcam.py": {"gc_part": "vit"},
               "6_daam_flow.py": {}, "6_daam_flow.py#vote": {"daam_view": "vote"},
               "7_comparison.py": {}, "0_vit_explainer.py": {}}


def test_knn_labels_stay_plain_text_everywhere_they_are_shown():
    app = AppTest.from_file(ENTRY, default_timeout=300)
    app.run()
    for label in MARKUP_LABELS:
        teach(app, label)
        assert_no_markup(app, f"after teaching {label!r}")
        said = [shown_text(s.value) for s in app.success]
        assert said == [f"Added one example of “{one_line(label)}”."], said
    for _ in range(4):  # more examples of the first label (this very image) until it wins
        if knn_top(app) == MARKUP_LABELS[0]:
            break
        teach(app, MARKUP_LABELS[0])
    assert knn_top(app) == MARKUP_LABELS[0]
    seen = {}
    for name, params in LABEL_VIEWS.items():
        for key in list(app.query_params):
            del app.query_params[key]
        for key, value in params.items():
            app.query_params[key] = value
        app.switch_page(f"../pages/{name.split('#')[0]}").run()
        seen[name] = " ".join(assert_no_markup(app, name))
    # the learner sees what they typed: the target class (the figure titles of pages 4 and 7
    # cut it to 28 and 24 characters), and the neighbours on page 1
    first = one_line(MARKUP_LABELS[0])
    for name in ("home.py", "1_tokenization.py", "5_gradcam.py", "6_daam_flow.py",
                 "6_daam_flow.py#vote"):
        assert first in seen[name], (name, seen[name])
    assert first[:28] in seen["4_rollout_heads.py"] and first[:24] in seen["7_comparison.py"]
    assert all(one_line(label) in seen["1_tokenization.py"] for label in MARKUP_LABELS)


def test_the_oracle_sees_each_payload_when_it_is_not_made_literal():
    """Pasted into a sentence as the pages did before (quotes, or the code span a value
    can close), every payload makes markup this test finds."""
    for value in MARKUP_PAYLOADS + MARKUP_LABELS:
        assert markup_made(f"of '{value}'.") or markup_made(f"asks for `{value}`, which"), value


def test_every_payload_as_a_tour_value():
    from dashboard.explainer.tour import step_from_query

    for value in MARKUP_PAYLOADS:
        step, problem = step_from_query(value)
        assert step is None and markup_made(problem) == [], problem
        assert one_line(f"tour={value}") in shown_text(problem)


# --- files: an upload's name, a results.json's content ------------------------------------

def hostile_results(metric: str = "deletion") -> bytes:
    """A results.json whose model, methods, images and settings are payloads."""
    from xai_core.metrics.faithfulness import fractions_for

    rows = [dict(image=image, model=MARKUP_PAYLOADS[2], method=method, metric=kind,
                 value=0.1 * (i + 1) + 0.2 * (method == "random"),
                 scores=[0.5] * len(fractions_for(kind, 3)))
            for i, image in enumerate((MARKUP_PAYLOADS[4], "coffee", "chelsea"))
            for method in (MARKUP_PAYLOADS[0], MARKUP_PAYLOADS[6], "random")
            for kind in (metric, "insertion")]
    settings = {"models": [MARKUP_PAYLOADS[2]], "images": MARKUP_PAYLOADS[5],
                "methods": [MARKUP_PAYLOADS[0]], "metrics": [metric, "insertion"], "steps": 3,
                "baseline": MARKUP_PAYLOADS[7]}
    return json.dumps({"settings": settings, "rows": rows}).encode()


def test_a_results_file_cannot_put_markup_on_page_7():
    app = AppTest.from_file(ENTRY, default_timeout=300)
    for key, value in dict(image_choice="coffee", cmp_methods_vit=["attention"],
                           cmp_methods_cnn=["gradcam"], cmp_view="dataset",
                           cmp_bench_source="load").items():
        app.session_state[key] = value
    app.run()
    app.switch_page("../pages/7_comparison.py").run()
    app.get("file_uploader")[0].set_value(("results.json", hostile_results(),
                                           "application/json")).run()
    assert not app.error, [e.value for e in app.error]
    shown = " ".join(assert_no_markup(app, "results.json"))
    assert len(chart_specs(app)) >= 3  # the rankings, the curves, the metric agreement
    for value in (MARKUP_PAYLOADS[0], MARKUP_PAYLOADS[2], MARKUP_PAYLOADS[6]):
        assert one_line(value) in shown, value
    # a file the summary refuses: the message quotes it, as text
    bad = hostile_results(metric=MARKUP_PAYLOADS[1])
    app.get("file_uploader")[0].set_value(("results.json", bad, "application/json")).run()
    assert_no_markup(app, "refused results.json")
    said = " ".join(shown_text(e.value) for e in app.error)
    assert "not a benchmark results.json" in said and one_line(MARKUP_PAYLOADS[1]) in said


def test_an_upload_named_with_markup_is_only_a_picture():
    """The sidebar never shows an upload's name; whatever it is called, nothing becomes
    markup, and a refused upload's message does not quote it either."""
    from hostile_corpus import corpus

    good = next(case for case in corpus() if case.name == "BMP")
    bad = next(case for case in corpus() if case.name == "HTML")
    app = AppTest.from_file(ENTRY, default_timeout=300)
    app.session_state["image_choice"] = "upload"
    app.run()
    for value in MARKUP_PAYLOADS:
        for case in (good, bad):
            app.sidebar.get("file_uploader")[0].set_value(
                (f"{value}.png", case.data, "image/png")).run()
            assert_no_markup(app, value)
            assert (app.session_state["upload_image"] is None) == case.refused


def test_a_typed_sentence_is_shown_as_its_tokens_on_page_8():
    """Page 8 shows the sentence a visitor types as word pieces: code spans in Markdown,
    tick labels and hover text in the figures. None of it becomes a tag or a link."""
    from xai_core.analysis import text_attention as text_core

    sentence = " ".join(MARKUP_PAYLOADS[:4]) + " `a` ``b`` &lt;i&gt;"
    app = AppTest.from_file(ENTRY, default_timeout=300)
    app.session_state["text_input"] = sentence
    app.run()
    app.switch_page("../pages/8_text_attention.py").run()
    assert not app.exception and app.session_state["text_input"] == sentence
    tokens = text_core.text_capture(get_model("minilm-l6"), sentence).tokens
    assert "<" in tokens and "`" in tokens  # the pieces that would make tags and code
    chips = [m.value for m in app.markdown if m.value.startswith(literal.code(tokens[0]))]
    assert len(chips) == 1
    pieces = [child for child in PARSER.parseInline(chips[0])[0].children
              if child.type != "text" or child.content.strip()]
    assert [p.type for p in pieces] == ["code_inline"] * len(tokens)
    assert [p.content.replace(JOINER, "") for p in pieces] == list(tokens)
    specs = chart_specs(app)
    assert specs and not any(PLOTLY_TAG.search(s) for spec in specs for s in _strings(spec))
