"""Class mode in the app (AppTest): the instructor's link takes control and its key leaves the
address; the instructor's place reaches the database; `?class=CODE` joins a student; a code
that is not one, typed or linked, is refused in words that repeat nothing of it."""

from __future__ import annotations

import pytest
from apptest_helpers import ENTRY
from streamlit.testing.v1 import AppTest

from xai_core.classroom.store import DB_ENV, ClassStore

HOSTILE = ["<img src=x onerror=alert(1)>", "**bold** [a](http://x.test)", "`x`", ":smile:"]


@pytest.fixture
def store(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'classes.sqlite'}"
    monkeypatch.setenv(DB_ENV, url)
    opened = ClassStore(url)
    yield opened
    opened.close()


def open_link(**params) -> AppTest:
    app = AppTest.from_file(ENTRY, default_timeout=300)
    for key, value in params.items():
        app.query_params[key] = value
    return app.run()


def shown_text(app: AppTest) -> str:
    return " ".join(str(e.value) for kind in ("markdown", "warning", "caption", "info")
                    for e in app.get(kind))


def test_the_instructor_link_takes_control_and_the_key_leaves_the_address(store):
    made = store.new_class()
    app = open_link(**{"class": made.code, "class_key": made.key, "image_choice": "coffee"})
    assert not app.exception, app.exception
    assert "class_key" not in app.query_params
    assert app.session_state["class_instructor_key"] == made.key
    place = store.place(made.code)
    assert (place.version, place.page) == (1, "")
    assert place.params["image_choice"] == "coffee"
    assert made.key not in str(place.params)
    assert f"Your class: **{made.code}**" in shown_text(app)


def test_a_wrong_key_gives_no_control(store):
    made = store.new_class()
    app = open_link(**{"class": made.code, "class_key": made.key[:-2] + "xx"})
    assert "class_key" not in app.query_params
    assert "class_instructor_key" not in app.session_state
    assert "does not open a class" in shown_text(app)
    assert store.place(made.code).version == 0


def test_a_student_link_joins(store):
    made = store.new_class()
    app = open_link(**{"class": made.code.lower()})
    assert not app.exception, app.exception
    assert store.report(made.code)["students"] == 1
    assert app.toggle(key="class_follow_toggle").value is True
    assert f"You are in class {made.code}" in shown_text(app)
    assert store.place(made.code).version == 0  # a student moves nothing


@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_codes_are_refused_without_being_repeated(store, hostile):
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


def test_a_student_answers_the_learning_check(store):
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
