"""The class store on both databases it supports: an SQLite file and a real PostgreSQL server
(Debian's package, started for these tests: tests/postgres_server.py). Codes, keys, one answer
per student, the rate limit, expiry, `end`, the report's counts and hostile input."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import MetaData, text

from postgres_server import postgres_server
from xai_core.classroom import checks, codes
from xai_core.classroom.store import (RATE_LIMIT, RATE_WINDOW_S, BadAnswer, ClassError,
                                      ClassStore, NotInstructor, RateLimited, UnknownClass)

ROOT = Path(__file__).resolve().parents[1]
TABLES = ("classes", "students", "questions", "answers", "check_answers")
PATCHES = {"k": 3, "patches": 256, "picture": "chelsea", "model": "dinov2-s14"}


class Clock:
    """Time that moves only when a test moves it (from now)."""

    def __init__(self):
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def postgres_url():
    with postgres_server() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'classes.sqlite'}"
    return request.getfixturevalue("postgres_url")


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def store(url, clock):
    opened = ClassStore(url, clock=clock)
    yield opened
    opened.close()


def rows_of(store, table: str, code: str | None = None) -> int:
    with store.engine.connect() as connection:
        return connection.execute(text(f"SELECT count(*) FROM {table}")).scalar()


def everything_stored(store) -> str:
    """Every value of every table, as text: what a database dump would show."""
    with store.engine.connect() as connection:
        return " ".join(str(row) for table in TABLES
                        for row in connection.execute(text(f"SELECT * FROM {table}")))


def test_migrations_make_the_declared_schema(store):
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from xai_core.classroom.schema import Base

    with store.engine.connect() as connection:
        differences = compare_metadata(MigrationContext.configure(connection), Base.metadata)
        version = connection.execute(text("SELECT version_num FROM alembic_version")).scalar()
    assert differences == []
    assert version == "0001"


def test_replicas_opening_a_fresh_database_at_once(url, clock):
    """Replicas (processes) start together on an empty database: each opens the store, the
    tables are made once, and a class made by one is seen by the others."""
    opener = ("import sys; from xai_core.classroom.store import ClassStore; "
              "print(ClassStore(sys.argv[1]).new_class().code)")
    started = [subprocess.Popen([sys.executable, "-c", opener, url], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(3)]
    results = [process.communicate(timeout=120) for process in started]
    assert [process.returncode for process in started] == [0, 0, 0], results
    store = ClassStore(url, clock=clock)
    assert all(store.exists(out.strip()) for out, _ in results)
    store.close()


def test_codes_are_unambiguous():
    assert not set("0O1IL") & set(codes.ALPHABET)
    made = {codes.new_code() for _ in range(2000)}
    assert all(len(code) == 6 and set(code) <= set(codes.ALPHABET) for code in made)
    assert len(made) > 1990  # 31^6 codes: repeats are rare
    assert codes.normalise_code(" ab c2 3d ") == "ABC23D"
    assert codes.normalise_code("ABC10D") is None  # 1 and 0 are never in a code
    assert codes.normalise_code("ABCDE") is None


def test_only_the_key_controls_the_class(store):
    made, other = store.new_class(), store.new_class()
    store.join(made.code, "student-token-0123456789")
    for wrong in ("", None, made.code, "student-token-0123456789", other.key, made.key[:-1],
                  made.key + "x", codes.digest(made.key)):
        assert not store.is_instructor(made.code, wrong)
        with pytest.raises(NotInstructor):
            store.move(made.code, wrong, "vit_explainer", {})
        with pytest.raises(NotInstructor):
            store.open_question(made.code, wrong, "head", {"heads": 6})
    assert store.is_instructor(made.code, made.key)
    assert store.move(made.code, made.key, "vit_explainer", {"tour": "10"}) == 1
    assert store.move(made.code, made.key, "vit_explainer", {"tour": "10"}) == 1  # no move
    assert store.move(made.code, made.key, "vit_explainer", {"tour": "11"}) == 2
    dump = everything_stored(store)
    assert made.key not in dump and "student-token-0123456789" not in dump
    assert codes.digest(made.key) in dump  # kept as a digest only


def test_one_answer_per_student_and_question(store):
    made = store.new_class()
    for token in ("a" * 20, "b" * 20):
        store.join(made.code, token)
    store.join(made.code, "a" * 20)  # joining again is nothing new
    question = store.open_question(made.code, made.key, "patches", PATCHES)
    store.answer(made.code, "a" * 20, question.id, [5, 1, 2])
    store.answer(made.code, "a" * 20, question.id, [7, 1, 2])  # replaces the first
    store.answer(made.code, "b" * 20, question.id, [7, 9, 2])
    assert store.count(made.code, question.id) == 2
    assert store.my_answer(made.code, "a" * 20, question.id) == [1, 2, 7]
    report = store.report(made.code)
    assert report["students"] == 2
    assert report["questions"][0]["answers"] == 2
    assert report["questions"][0]["tally"] == {"1": 1, "2": 2, "7": 2, "9": 1}


def test_students_see_only_their_own_answer_before_the_reveal(store):
    made = store.new_class()
    store.join(made.code, "a" * 20)
    question = store.open_question(made.code, made.key, "head", {"heads": 6, "block": 3})
    store.answer(made.code, "a" * 20, question.id, 4)
    with pytest.raises(NotInstructor):
        store.answers(made.code, question.id)
    assert store.answers(made.code, question.id, key=made.key) == [4]
    store.reveal(made.code, made.key)
    assert store.answers(made.code, question.id) == [4]
    with pytest.raises(BadAnswer):  # revealed: the answer is out
        store.answer(made.code, "a" * 20, question.id, 2)


@pytest.mark.parametrize("bad", [[1, 2], [1, 2, 2], [1, 2, 256], [1, 2, -1], [1, 2, "3"],
                                 [1, 2, True], "1,2,3", None, {"k": 3}, [1.0, 2.0, 3.0]])
def test_malformed_patch_answers_are_refused(store, bad):
    made = store.new_class()
    store.join(made.code, "a" * 20)
    question = store.open_question(made.code, made.key, "patches", PATCHES)
    with pytest.raises(BadAnswer):
        store.answer(made.code, "a" * 20, question.id, bad)
    assert store.count(made.code, question.id) == 0


def test_choices_and_closed_questions(store):
    made = store.new_class()
    store.join(made.code, "a" * 20)
    first = store.open_question(made.code, made.key, "classes",
                                {"options": [[281, "tabby"], [285, "Egyptian cat"]]})
    for bad in (0, 282, "281", 281.0, None):
        with pytest.raises(BadAnswer):
            store.answer(made.code, "a" * 20, first.id, bad)
    store.answer(made.code, "a" * 20, first.id, 285)
    second = store.open_question(made.code, made.key, "head", {"heads": 6, "block": 0})
    assert (second.number, store.place(made.code).question.id) == (2, second.id)
    with pytest.raises(BadAnswer):  # the first question closed when the second opened
        store.answer(made.code, "a" * 20, first.id, 281)
    with pytest.raises(ClassError):  # never joined
        store.answer(made.code, "z" * 20, second.id, 1)


def test_a_flood_from_one_session_is_rate_limited(store, clock):
    made = store.new_class()
    store.join(made.code, "a" * 20)
    store.join(made.code, "b" * 20)
    question = store.open_question(made.code, made.key, "head", {"heads": 6})
    for number in range(RATE_LIMIT):
        store.answer(made.code, "a" * 20, question.id, number % 6)
    with pytest.raises(RateLimited):
        store.answer(made.code, "a" * 20, question.id, 1)
    store.answer(made.code, "b" * 20, question.id, 1)  # another student is not held back
    assert store.my_answer(made.code, "a" * 20, question.id) == (RATE_LIMIT - 1) % 6
    clock.now += RATE_WINDOW_S
    store.answer(made.code, "a" * 20, question.id, 5)
    assert store.my_answer(made.code, "a" * 20, question.id) == 5


def fill(store, made) -> None:
    store.join(made.code, "a" * 20)
    question = store.open_question(made.code, made.key, "head", {"heads": 6})
    store.answer(made.code, "a" * 20, question.id, 1)
    store.set_check_phase(made.code, made.key, "before")
    store.answer_check(made.code, "a" * 20, "before", 0, 0)


def counts(store) -> list[int]:
    """Rows per table (the PostgreSQL database holds the module's earlier tests' classes)."""
    return [rows_of(store, table) for table in TABLES]


def test_expiry_ends_a_class_and_deletes_its_rows(store, clock):
    start = counts(store)
    made = store.new_class(hours=2)
    fill(store, made)
    clock.now += 2 * 3600 - 1
    assert store.exists(made.code)
    clock.now += 1
    with pytest.raises(UnknownClass):
        store.report(made.code)
    assert store.purge_expired() == 1
    assert counts(store) == start


def test_end_deletes_every_row_of_the_class_only(store):
    start = counts(store)
    ended, kept = store.new_class(), store.new_class()
    fill(store, ended)
    fill(store, kept)
    before = counts(store)
    store.end(ended.code)
    assert counts(store) == [s + (b - s) // 2 for s, b in zip(start, before)]
    with pytest.raises(UnknownClass):
        store.end(ended.code)
    assert store.report(kept.code)["questions"][0]["answers"] == 1


def test_learning_check_shares(store):
    made = store.new_class()
    tokens = [f"student-{n:02d}-token-xxxx" for n in range(5)]
    for token in tokens:
        store.join(made.code, token)
    with pytest.raises(BadAnswer):  # not open yet
        store.answer_check(made.code, tokens[0], "before", 0, 0)
    store.set_check_phase(made.code, made.key, "before")
    before = [0, 1, 2, 0, 3]  # item 0: two of five correct
    for token, choice in zip(tokens, before):
        store.answer_check(made.code, token, "before", 0, choice)
    store.answer_check(made.code, tokens[0], "before", 0, 2)  # changed their mind
    store.set_check_phase(made.code, made.key, "after")
    for token in tokens[:4]:
        store.answer_check(made.code, token, "after", 0, 0)
    with pytest.raises(BadAnswer):
        store.answer_check(made.code, tokens[0], "after", len(checks.ITEMS), 0)
    with pytest.raises(BadAnswer):
        store.answer_check(made.code, tokens[0], "after", 0, 4)
    first = store.report(made.code)["checks"][0]
    assert first["before"] == {"answers": 5, "correct": 1, "share": 0.2}
    assert first["after"] == {"answers": 4, "correct": 4, "share": 1.0}
    assert store.my_checks(made.code, tokens[0], "before") == {0: 2}


@pytest.mark.parametrize("hostile", ["'; DROP TABLE classes; --", "<script>alert(1)</script>",
                                     "**bold** [x](http://a.b)", "\x00\u202e", "A" * 10_000])
def test_hostile_codes_and_text(store, hostile):
    made = store.new_class()
    with pytest.raises(UnknownClass) as refused:
        store.join(hostile, "a" * 20)
    assert hostile not in str(refused.value)  # the sentence never repeats what was typed
    store.move(made.code, made.key, "vit_explainer", {"image_choice": hostile[:500]})
    assert store.place(made.code).params == {"image_choice": hostile[:500]}  # kept as text
    assert rows_of(store, "classes") >= 1


def test_many_students_answer_at_once(store):
    made = store.new_class()
    tokens = [f"student-{n:03d}-token-xxxx" for n in range(24)]
    for token in tokens:
        store.join(made.code, token)
    question = store.open_question(made.code, made.key, "head", {"heads": 6})
    failures = []

    def answer(index, token):
        try:
            store.answer(made.code, token, question.id, index % 6)
        except Exception as error:  # noqa: BLE001
            failures.append(error)
    threads = [threading.Thread(target=answer, args=pair) for pair in enumerate(tokens)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert store.report(made.code)["questions"][0]["tally"] == {str(h): 4 for h in range(6)}
