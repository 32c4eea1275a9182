"""`python -m xai_core class new|report|end`: the links, the report's counts, and one line with
exit status 2 for a code that names no class."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlsplit

import pytest

from xai_core.classroom.codes import normalise_code
from xai_core.classroom.store import DB_ENV, shared_store
from xai_core.cli.main import main


@pytest.fixture
def database(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'classes.sqlite'}"
    monkeypatch.setenv(DB_ENV, url)
    return url


def run(capsys, *argv) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_new_report_end(database, capsys):
    status, out, _ = run(capsys, "class", "new", "--json", "--url", "http://lab.test/vit-lens")
    made = json.loads(out)
    assert status == 0 and set(made) == {"code", "teacher_url", "student_url", "expires"}
    student, teacher = urlsplit(made["student_url"]), urlsplit(made["teacher_url"])
    assert (student.netloc, student.path) == ("lab.test", "/vit-lens/")
    assert parse_qs(student.query) == {"class": [made["code"]]}  # no key in a student's link
    key = parse_qs(teacher.query)["class_key"][0]
    store = shared_store(database)
    assert store.is_instructor(made["code"], key)
    store.join(made["code"], "a" * 20)
    store.join(made["code"], "b" * 20)
    question = store.open_question(made["code"], key, "head", {"heads": 6, "block": 3})
    store.answer(made["code"], "a" * 20, question.id, 2)
    status, out, _ = run(capsys, "class", "report", made["code"].lower(), "--json")
    report = json.loads(out)
    assert status == 0 and report["code"] == made["code"] and report["students"] == 2
    assert [(q["id"], q["kind"], q["answers"], q["tally"]) for q in report["questions"]] == [
        (1, "head", 1, {"2": 1})]
    assert len(report["checks"]) >= 3
    status, out, _ = run(capsys, "class", "end", made["code"])
    assert status == 0 and made["code"] in out
    status, out, err = run(capsys, "class", "report", made["code"])
    assert (status, out) == (2, "") and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("code", ["ZZZZZZ", "O0O0O0", "<b>x</b>", "'; DROP TABLE classes;--"])
def test_bad_codes_exit_2_with_one_line(database, capsys, code):
    for command in ("report", "end"):
        status, out, err = run(capsys, "class", command, code)
        assert (status, out) == (2, "")
        assert err.startswith("error: There is no class") and len(err.splitlines()) == 1
        if normalise_code(code) is None:  # what cannot be a code is never repeated
            assert code not in err


def test_bad_hours(database, capsys):
    status, _, err = run(capsys, "class", "new", "--hours", "-1")
    assert status == 2 and err.count("\n") == 1
