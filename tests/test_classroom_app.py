"""Class mode in the app (AppTest): the instructor's link takes control and its key leaves the
address; the instructor's place reaches the database; `?class=CODE` joins a student; a code
that is not one, typed or linked, is refused in words that repeat nothing of it; the class line
and the join view; a reload (a new session with the browser's cookies) keeps the instructor's
controls and is the same student, and a cookie that does not open a class opens nothing.

AppTest cannot send cookies: `class_memory.browser_cookies`, the one reader of
`st.context.cookies`, is replaced by what the browser would send (the cookies themselves,
written by the browser, are tested in Chromium: tests/e2e/test_classroom_browser.py)."""

from __future__ import annotations

import json

import pytest
from apptest_helpers import ENTRY
from streamlit.testing.v1 import AppTest

from dashboard import class_memory
from xai_core.classroom.store import DB_ENV, ClassStore

HOSTILE = ["<img src=x onerror=alert(1)>", "**bold** [a](http://x.test)", "`x`", ":smile:"]


@pytest.fixture
def store(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'classes.sqlite'}"
    monkeypatch.setenv(DB_ENV, url)
    opened = ClassStore(url)
    yield opened
    opened.close()


@pytest.fixture
def cookies(monkeypatch) -> dict:
    """What the browser sends when a session opens (empty: a new browser)."""
    sent: dict[str, str] = {}
    monkeypatch.setattr(class_memory, "browser_cookies", lambda: dict(sent))
    return sent


def open_link(**params) -> AppTest:
    app = AppTest.from_file(ENTRY, default_timeout=300)
    for key, value in params.items():
        app.query_params[key] = value
    return app.run()


def shown_text(app: AppTest) -> str:
    return " ".join(str(e.value) for kind in ("markdown", "warning", "caption", "info",
                                              "success")
                    for e in app.get(kind))


def written_cookies(app: AppTest) -> dict | None:
    """What the last run asked the browser to store (None: nothing)."""
    found = [element for element in app.get("bidi_component")
             if element.proto.component_name.endswith("vit_lens_class_memory")]
    return json.loads(found[0].proto.json)["cookies"] if found else None


def test_the_instructor_link_takes_control_and_the_key_leaves_the_address(store, cookies):
    made = store.new_class()
    app = open_link(**{"class": made.code, "class_key": made.key, "image_choice": "coffee"})
    assert not app.exception, app.exception
    assert "class_key" not in app.query_params
    assert app.session_state["class_instructor_key"] == made.key
    place = store.place(made.code)
    assert (place.version, place.page) == (1, "")
    assert place.params["image_choice"] == "coffee"
    assert made.key not in str(place.params)
    assert f"Class **{made.code}** · 0 joined" in shown_text(app)
    assert made.key not in shown_text(app)  # only in the private link's code box
    assert written_cookies(app) == {class_memory.TEACHER: f"{made.code}.{made.key}"}


def test_a_wrong_key_gives_no_control(store, cookies):
    made = store.new_class()
    app = open_link(**{"class": made.code, "class_key": made.key[:-2] + "xx"})
    assert "class_key" not in app.query_params
    assert "class_instructor_key" not in app.session_state
    assert "does not open a class" in shown_text(app)
    assert store.place(made.code).version == 0
    assert written_cookies(app) is None


def test_a_student_link_joins(store, cookies):
    made = store.new_class()
    app = open_link(**{"class": made.code.lower()})
    assert not app.exception, app.exception
    assert store.report(made.code)["students"] == 1
    assert app.toggle(key="class_follow_toggle").value is True
    assert f"Class **{made.code}**" in shown_text(app)
    assert store.place(made.code).version == 0  # a student moves nothing
    token = app.session_state["class_token"]
    assert written_cookies(app) == {class_memory.STUDENT: f"{made.code}.{token}"}


def test_the_class_line_and_the_join_view_count_the_students(store, cookies):
    made = store.new_class()
    for _ in range(2):
        open_link(**{"class": made.code})
    app = open_link(**{"class": made.code, "class_key": made.key})
    assert f"Class **{made.code}** · 2 joined" in shown_text(app)
    assert not app.get("image")  # the join view is hidden until asked for
    app.button(key="class_join_toggle").click().run()
    assert not app.exception, app.exception
    text = shown_text(app)
    assert f"?class={made.code}" in text and "2 students joined" in text
    assert made.code in [m.value for m in app.markdown]  # the code alone, in large letters
    assert len(app.get("image")) == 1  # the QR code
    store.join(made.code, "a-third-student-token-0123456789")
    app.button(key="class_join_toggle").click().run()  # hides it; the count is read anew
    assert f"Class **{made.code}** · 3 joined" in shown_text(app)
    assert not app.get("image")


def test_a_reload_keeps_the_instructors_controls(store, cookies):
    """The address bar after the key left it (`?class=CODE`), and the browser's cookie."""
    made = store.new_class()
    cookies[class_memory.TEACHER] = f"{made.code}.{made.key}"
    app = open_link(**{"class": made.code})
    assert not app.exception, app.exception
    assert app.session_state["class_instructor_key"] == made.key
    assert store.report(made.code)["students"] == 0  # not joined as a student
    assert f"Class **{made.code}** · 0 joined" in shown_text(app)
    assert written_cookies(app) is None  # the browser already holds it
    second_tab = open_link()  # a new tab of the app: no class in its address
    assert second_tab.session_state["class_instructor_key"] == made.key


def test_a_student_reload_is_the_same_student(store, cookies):
    made = store.new_class()
    first = open_link(**{"class": made.code})
    cookies.update(written_cookies(first))
    for params in ({"class": made.code}, {}):  # the link again, or the app's address
        again = open_link(**params)
        assert not again.exception, again.exception
        assert again.session_state["class_code"] == made.code
        assert again.session_state["class_token"] == first.session_state["class_token"]
    assert store.report(made.code)["students"] == 1


def test_cookies_that_open_no_class_open_nothing_and_are_deleted(store, cookies):
    made = store.new_class()
    other = store.new_class()
    cookies[class_memory.TEACHER] = f"{made.code}.{other.key}"  # another class's key
    cookies[class_memory.STUDENT] = f"{made.code}.{'x' * 43}"
    store.end(made.code)
    app = open_link()
    assert not app.exception, app.exception
    assert "class_code" not in app.session_state
    assert written_cookies(app) == {class_memory.TEACHER: "", class_memory.STUDENT: ""}
    assert store.report(other.code)["students"] == 0


@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_cookies_are_ignored_without_being_shown(store, cookies, hostile):
    made = store.new_class()
    cookies[class_memory.TEACHER] = f"{made.code}.{hostile}"
    cookies[class_memory.STUDENT] = f"{hostile}.{'y' * 43}"
    app = open_link()
    assert not app.exception, app.exception
    assert "class_code" not in app.session_state
    assert hostile not in shown_text(app)
    assert store.report(made.code)["students"] == 0


@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_codes_are_refused_without_being_repeated(store, cookies, hostile):
    app = open_link(**{"class": hostile})
    assert not app.exception, app.exception
    warnings = [w.value for w in app.warning]
    assert any("A class code has six letters" in w for w in warnings)
    assert not any(hostile in w for w in warnings)
    assert "class" not in app.query_params
    app.sidebar.text_input[0].input(hostile)
    app.sidebar.button[0].click().run()  # the form's Join button
    assert not any(hostile in w.value for w in app.warning)
    assert "class_code" not in app.session_state


def test_a_student_leaves_and_the_browser_forgets_the_class(store, cookies):
    made = store.new_class()
    app = open_link(**{"class": made.code})
    next(b for b in app.sidebar.button if b.label == "Leave the class").click().run()
    assert "class_code" not in app.session_state
    assert written_cookies(app) == {class_memory.STUDENT: ""}  # deleted
    assert "class" not in app.query_params or app.query_params["class"] != made.code


def test_a_student_answers_the_learning_check(store, cookies):
    from xai_core.classroom import checks

    made = store.new_class()
    store.set_check_phase(made.code, made.key, "before")
    app = open_link(**{"class": made.code})
    assert not app.exception, app.exception
    for number, item in enumerate(checks.ITEMS):  # the right answer, wherever it is shown
        radio = app.radio(key=f"class_check_before_{number}")
        shown = item.shown_order().index(checks.CORRECT if number % 2 else 1)
        radio.set_value(shown)
    next(b for b in app.button if b.label == "Send my answers").click().run()
    assert not app.exception, app.exception
    assert any("Received 4 answers" in s.value for s in app.success)
    shares = store.report(made.code)["checks"]
    assert [item["before"]["correct"] for item in shares] == [0, 1, 0, 1]
    assert [item["after"]["answers"] for item in shares] == [0] * 4
