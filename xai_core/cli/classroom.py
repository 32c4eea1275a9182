"""`python -m xai_core class new|report|end`: a class from the command line.

`class new --json` prints `{"code", "teacher_url", "student_url", "expires"}` (the teacher's
link carries the instructor's key: keep it private); `class report CODE --json` the class's
anonymous counts; `class end CODE` deletes the class and every answer. A code that names no
class on this server is one line and exit status 2. The database is the app's
(`VIT_LENS_CLASS_DB`, else the cache folder's SQLite file).
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from urllib.parse import quote

from .common import CliError, emit

URL_ENV = "VIT_LENS_URL"
DEFAULT_URL = "http://localhost:8501/"


def class_links(base: str, code: str, key: str) -> tuple[str, str]:
    """(teacher's link, student's link) of a class on the app at `base`."""
    base = base if base.endswith("/") else base + "/"
    student = f"{base}?class={quote(code)}"
    return f"{student}&class_key={quote(key)}", student


def _store():
    from ..classroom.store import ClassError, shared_store

    try:
        return shared_store()
    except ClassError as error:
        raise CliError(str(error)) from None


def _refused(call):
    from ..classroom.store import ClassError

    try:
        return call()
    except ClassError as error:
        raise CliError(str(error)) from None


def cmd_new(args) -> None:
    made = _refused(lambda: _store().new_class(args.hours))
    teacher, student = class_links(args.url or os.environ.get(URL_ENV) or DEFAULT_URL,
                                   made.code, made.key)
    expires = datetime.fromtimestamp(made.expires, timezone.utc).isoformat(timespec="seconds")
    emit(args, {"code": made.code, "teacher_url": teacher, "student_url": student,
                "expires": expires},
         f"class {made.code} (until {expires})\nstudents: {student}\n"
         f"instructor (keep private): {teacher}")


def cmd_report(args) -> None:
    report = _refused(lambda: _store().report(args.code))
    lines = [f"class {report['code']}: {report['students']} students"]
    lines += [f"question {q['id']} ({q['asks']}): {q['answers']} answers" for q in
              report["questions"]]
    for item in report["checks"]:
        shares = [f"{phase} {item[phase]['correct']}/{item[phase]['answers']}"
                  for phase in ("before", "after")]
        lines.append(f"check {item['item']}: {', '.join(shares)} correct")
    emit(args, report, "\n".join(lines))


def cmd_end(args) -> None:
    store = _store()
    code = _refused(lambda: store.report(args.code))["code"]
    _refused(lambda: store.end(code))
    emit(args, {"code": code, "ended": True}, f"class {code} ended: its answers are deleted")


def add_class_command(add) -> None:
    group = add("class", None, "run a class: new, report CODE, end CODE", image=False)
    actions = group.add_subparsers(dest="class_command", required=True)
    new = actions.add_parser("new", help="start a class; prints its code and links")
    new.add_argument("--hours", type=float, help="how long the class lasts (default "
                     "VIT_LENS_CLASS_HOURS, else 12)")
    new.add_argument("--url", help=f"the app's address for the links (default ${URL_ENV}, "
                                   f"else {DEFAULT_URL})")
    new.set_defaults(function=cmd_new)
    for name, function, help_text in (("report", cmd_report, "the class's anonymous counts"),
                                      ("end", cmd_end, "end the class: delete its answers")):
        sub = actions.add_parser(name, help=help_text)
        sub.add_argument("code", help="the class code")
        sub.set_defaults(function=function)
    for sub in (new, *actions.choices.values()):
        if not any(action.dest == "json" for action in sub._actions):
            sub.add_argument("--json", action="store_true", help="print JSON")
