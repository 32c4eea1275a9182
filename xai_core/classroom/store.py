"""The class store: every class's rows in one SQL database, through SQLAlchemy.

- Where: `VIT_LENS_CLASS_DB` (a SQLAlchemy URL, e.g. `postgresql+psycopg://user@host/db`), by
  default the SQLite file `classes.sqlite` in the cache folder, which every replica of one
  server shares. SQLite runs in WAL mode (readers never wait for the writer) with a busy
  timeout, each pooled connection used by one thread at a time, and every write in
  `BEGIN IMMEDIATE` (it takes the write lock first, so two replicas' writes queue instead of
  failing half-way).
- The tables are made and kept up to date by Alembic's migrations, run when a store opens.
- Durable: a call that writes returns only after its transaction has committed, so what the
  app acknowledges survives a replica that dies the next instant.
- Secrets: the instructor's key and the students' tokens are kept as SHA-256 digests and
  compared in constant time (`codes.matches`); no row names a person.
- A class ends by `end` or by its expiry (`VIT_LENS_CLASS_HOURS`, 12 by default): its rows are
  deleted (the foreign keys cascade).

Every method takes the class code as typed; an unknown or expired code raises `UnknownClass`,
a wrong key `NotInstructor`, a flood of answers `RateLimited`, a malformed answer `BadAnswer`,
each with a sentence to show.
"""

from __future__ import annotations

import json
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Engine, create_engine, delete, event, func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from . import checks, codes
from .schema import AnswerRow, CheckAnswerRow, ClassRow, QuestionRow, StudentRow

DB_ENV = "VIT_LENS_CLASS_DB"
HOURS_ENV = "VIT_LENS_CLASS_HOURS"
DEFAULT_HOURS = 12.0
BUSY_TIMEOUT_MS = 10_000
RATE_LIMIT = 30  # answers (questions and check items together) per student ...
RATE_WINDOW_S = 60.0  # ... per this many seconds
KINDS = {"patches": "click the patches the model needs most",
         "head": "which head matters most in this block",
         "classes": "what will the model answer"}
MAX_PARAMS_CHARS = 2000  # a place's query values: what links carry, never more


class ClassError(Exception):
    """A class request refused, with a sentence to show."""


class UnknownClass(ClassError):
    pass


class NotInstructor(ClassError):
    pass


class RateLimited(ClassError):
    pass


class BadAnswer(ClassError):
    pass


@dataclass(frozen=True)
class NewClass:
    code: str
    key: str  # the instructor's secret: shown once, kept only as a digest
    expires: float


@dataclass(frozen=True)
class Question:
    id: int
    number: int
    kind: str
    context: dict
    revealed: bool
    result: dict | None = None  # the model's answer, stored at the reveal


@dataclass(frozen=True)
class Place:
    """What a following student polls: where the instructor is, and what is open."""

    version: int
    page: str
    params: dict
    question: Question | None
    check_phase: str | None


def database_url() -> str:
    url = os.environ.get(DB_ENV, "").strip()
    if url:
        return url
    from ..models.settings import cache_dir

    return f"sqlite:///{cache_dir() / 'classes.sqlite'}"


def class_hours() -> float:
    raw = os.environ.get(HOURS_ENV, "").strip()
    try:
        hours = float(raw) if raw else DEFAULT_HOURS
    except ValueError:
        raise ClassError(f"{HOURS_ENV} takes a number of hours, such as 12; got '{raw}'.") \
            from None
    if not 0 < hours <= 24 * 30:
        raise ClassError(f"{HOURS_ENV} takes hours from above 0 to 720; got '{raw}'.")
    return hours


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": BUSY_TIMEOUT_MS / 1000,
                                                  "check_same_thread": False})

        @event.listens_for(engine, "connect")
        def _connect(connection, _record) -> None:
            connection.isolation_level = None  # the "begin" listener below says BEGIN
            cursor = connection.cursor()
            for pragma in ("journal_mode=WAL", f"busy_timeout={BUSY_TIMEOUT_MS}",
                           "foreign_keys=ON", "synchronous=FULL"):
                cursor.execute(f"PRAGMA {pragma}")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _begin(connection) -> None:
            write = connection.get_execution_options().get("write", False)
            connection.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")
        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=10)


_MIGRATING = threading.Lock()


def upgrade(engine: Engine) -> None:
    """Bring the database's tables to the newest migration (nothing when they are)."""
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
    # Alembic's `context` is one module-wide object: one migration at a time per process
    # (other processes, the other replicas, wait for the database's lock in env.py)
    with _MIGRATING, engine.connect() as connection:
        config.attributes["connection"] = connection.execution_options(write=True)
        command.upgrade(config, "head")


def _insert(dialect: str):
    return postgresql.insert if dialect == "postgresql" else sqlite.insert


def _json(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


class ClassStore:
    """One database of classes. Thread-safe: each call checks a connection out of the pool."""

    def __init__(self, url: str | None = None, clock=time.time):
        self.url = url or database_url()
        self.engine = make_engine(self.url)
        self.clock = clock
        upgrade(self.engine)
        self.purge_expired()

    def close(self) -> None:
        self.engine.dispose()

    @contextmanager
    def _read(self):
        with self.engine.connect() as connection, connection.begin(), \
                Session(bind=connection) as session:
            yield session

    @contextmanager
    def _write(self):
        """A transaction that takes the write lock first (SQLite: BEGIN IMMEDIATE) and has
        committed when the block ends."""
        with self.engine.connect() as connection:
            connection = connection.execution_options(write=True)
            with connection.begin(), Session(bind=connection) as session:
                yield session

    # --- classes --------------------------------------------------------------------------

    def new_class(self, hours: float | None = None) -> NewClass:
        hours = class_hours() if hours is None else float(hours)
        if not 0 < hours <= 24 * 30:
            raise ClassError(f"A class lasts from above 0 to 720 hours; got {hours:g}.")
        self.purge_expired()
        key, now = codes.new_secret(), self.clock()
        with self._write() as db:
            taken = set(db.scalars(select(ClassRow.code)))
            code = codes.new_code()
            while code in taken:  # 31^6 codes: a clash is rare, and never served twice
                code = codes.new_code()
            db.execute(ClassRow.__table__.insert().values(
                code=code, key_digest=codes.digest(key), created=now, expires=now + hours * 3600,
                page="", params="{}", version=0, moved=now, question_id=None, check_phase=None))
        return NewClass(code, key, now + hours * 3600)

    def purge_expired(self) -> int:
        """Delete every expired class with its rows; the number of classes deleted."""
        with self._write() as db:
            return db.execute(delete(ClassRow).where(ClassRow.expires <= self.clock())).rowcount

    def end(self, code) -> None:
        """Delete the class and every row of it (students, questions, answers, checks)."""
        with self._write() as db:
            row = self._class(db, code)
            db.execute(delete(ClassRow).where(ClassRow.id == row.id))

    def _class(self, db, code, lock: bool = False) -> ClassRow:
        wanted = codes.normalise_code(code)
        query = select(ClassRow).where(ClassRow.code == (wanted or ""))
        row = db.execute(query.with_for_update() if lock else query).scalar_one_or_none()
        if row is None or row.expires <= self.clock():
            shown = f"class {wanted}" if wanted else "class with that code"
            raise UnknownClass(f"There is no {shown} on this server (a class ends after "
                               "its hours, or when the instructor ends it).")
        return row

    def _instructor(self, db, code, key) -> ClassRow:
        row = self._class(db, code, lock=True)
        if not codes.matches(key, row.key_digest):
            raise NotInstructor("Only the instructor's link can change the class.")
        return row

    def is_instructor(self, code, key) -> bool:
        with self._read() as db:
            try:
                self._instructor(db, code, key)
            except ClassError:
                return False
        return True

    def exists(self, code) -> bool:
        with self._read() as db:
            try:
                self._class(db, code)
            except UnknownClass:
                return False
        return True

    # --- students -------------------------------------------------------------------------

    def join(self, code, token: str) -> None:
        """Record a browser session as a student of the class (again: nothing new)."""
        if not isinstance(token, str) or len(token) < 16:
            raise ClassError("A student's session token is missing.")
        with self._write() as db:
            row = self._class(db, code)
            db.execute(_insert(db.get_bind().dialect.name)(StudentRow).values(
                class_id=row.id, token_digest=codes.digest(token), joined=self.clock(),
                window_start=0.0, window_count=0).on_conflict_do_nothing(
                index_elements=["class_id", "token_digest"]))

    def _student(self, db, class_row: ClassRow, token) -> StudentRow:
        student = db.execute(select(StudentRow).where(
            StudentRow.class_id == class_row.id,
            StudentRow.token_digest == codes.digest(token or "")).with_for_update()
        ).scalar_one_or_none()
        if student is None:
            raise ClassError("Join the class first (its code, or the link the instructor "
                             "shows).")
        return student

    def _count_answer(self, db, student: StudentRow) -> None:
        """One more answer in the student's window, or RateLimited."""
        now = self.clock()
        if now - student.window_start >= RATE_WINDOW_S:
            start, count = now, 1
        elif student.window_count >= RATE_LIMIT:
            wait = RATE_WINDOW_S - (now - student.window_start)
            raise RateLimited(f"Too many answers at once: wait {wait:.0f} s, then try again.")
        else:
            start, count = student.window_start, student.window_count + 1
        db.execute(update(StudentRow).where(StudentRow.id == student.id)
                   .values(window_start=start, window_count=count))

    # --- the instructor's place -----------------------------------------------------------

    def move(self, code, key, page: str, params: dict) -> int:
        """Set where following students go (a page and its query values); the new version.
        The same place again changes nothing."""
        params = {str(k): str(v) for k, v in params.items()}
        if len(page) > 64 or len(_json(params)) > MAX_PARAMS_CHARS:
            raise ClassError("That place is too long to share with the class.")
        with self._write() as db:
            row = self._instructor(db, code, key)
            if row.page == page and row.params == _json(params):
                return row.version
            version = row.version + 1
            db.execute(update(ClassRow).where(ClassRow.id == row.id).values(
                page=page, params=_json(params), version=version, moved=self.clock()))
            return version

    def place(self, code) -> Place:
        """One read: the instructor's place, the open question and the check's phase."""
        with self._read() as db:
            row = self._class(db, code)
            question = None
            if row.question_id is not None:
                question = _question(db.get(QuestionRow, row.question_id))
            return Place(row.version, row.page, json.loads(row.params), question,
                         row.check_phase)

    # --- questions ------------------------------------------------------------------------

    def open_question(self, code, key, kind: str, context: dict) -> Question:
        if kind not in KINDS:
            raise ClassError(f"A question is one of: {', '.join(KINDS)}; not '{kind}'.")
        with self._write() as db:
            row = self._instructor(db, code, key)
            number = 1 + (db.scalar(select(func.max(QuestionRow.number))
                                    .where(QuestionRow.class_id == row.id)) or 0)
            result = db.execute(QuestionRow.__table__.insert().values(
                class_id=row.id, number=number, kind=kind, context=_json(context),
                opened=self.clock(), revealed=False))
            question_id = result.inserted_primary_key[0]
            db.execute(update(ClassRow).where(ClassRow.id == row.id)
                       .values(question_id=question_id))
        return Question(question_id, number, kind, json.loads(_json(context)), False)

    def reveal(self, code, key, result: dict | None = None) -> None:
        """Reveal the open question: students now see the class's answers and the model's
        (`result`, computed once by the instructor's session, read by every student's)."""
        with self._write() as db:
            row = self._instructor(db, code, key)
            if row.question_id is None:
                raise ClassError("No question is open.")
            db.execute(update(QuestionRow).where(QuestionRow.id == row.question_id)
                       .values(revealed=True, result=None if result is None else _json(result)))

    def close_question(self, code, key) -> None:
        with self._write() as db:
            row = self._instructor(db, code, key)
            db.execute(update(ClassRow).where(ClassRow.id == row.id).values(question_id=None))

    def answer(self, code, token, question_id: int, value) -> None:
        """Store the student's answer to the open question (replacing their earlier one).
        Returns once committed: only then may the app say it was received."""
        with self._write() as db:
            row = self._class(db, code)
            student = self._student(db, row, token)
            if row.question_id != question_id:
                raise BadAnswer("That question is closed; the instructor has moved on.")
            question = _question(db.get(QuestionRow, question_id))
            if question.revealed:
                raise BadAnswer("The answer has been revealed: this question takes no more "
                                "answers.")
            value = check_value(question, value)
            self._count_answer(db, student)
            values = {"question_id": question_id, "student_id": student.id,
                      "value": _json(value), "answered": self.clock()}
            db.execute(_insert(db.get_bind().dialect.name)(AnswerRow).values(**values).on_conflict_do_update(
                index_elements=["question_id", "student_id"],
                set_={"value": values["value"], "answered": values["answered"]}))

    def my_answer(self, code, token, question_id: int):
        """The student's own answer to a question (None when they have not answered)."""
        with self._read() as db:
            row = self._class(db, code)
            value = db.scalar(select(AnswerRow.value).join(StudentRow).where(
                StudentRow.class_id == row.id, AnswerRow.question_id == question_id,
                StudentRow.token_digest == codes.digest(token or "")))
            return None if value is None else json.loads(value)

    def answers(self, code, question_id: int, key=None) -> list:
        """Every answer to a question of the class: the instructor's (with the key) at any
        time, anyone's once revealed (students see only their own before)."""
        with self._read() as db:
            row = self._class(db, code)
            question = db.get(QuestionRow, question_id)
            if question is None or question.class_id != row.id:
                raise ClassError("That question is not one of this class's.")
            if not question.revealed and not codes.matches(key, row.key_digest):
                raise NotInstructor("The class's answers are shown after the reveal.")
            return [json.loads(v) for v in db.scalars(
                select(AnswerRow.value).where(AnswerRow.question_id == question_id)
                .order_by(AnswerRow.id))]

    def live(self, code) -> tuple[int, int | None]:
        """What the projector's class line shows every second, in one short read: the
        students who joined, and the answers to the open question (None: none is open)."""
        with self._read() as db:
            row = self._class(db, code)
            students = db.scalar(select(func.count()).select_from(StudentRow)
                                 .where(StudentRow.class_id == row.id))
            answers = None if row.question_id is None else db.scalar(
                select(func.count()).select_from(AnswerRow)
                .where(AnswerRow.question_id == row.question_id))
            return students or 0, answers

    def count(self, code, question_id: int) -> int:
        with self._read() as db:
            self._class(db, code)
            return db.scalar(select(func.count()).select_from(AnswerRow)
                             .where(AnswerRow.question_id == question_id)) or 0

    # --- the learning check ---------------------------------------------------------------

    def set_check_phase(self, code, key, phase: str | None) -> None:
        if phase is not None and phase not in checks.PHASES:
            raise ClassError(f"The check runs {' or '.join(checks.PHASES)} the tour.")
        with self._write() as db:
            row = self._instructor(db, code, key)
            db.execute(update(ClassRow).where(ClassRow.id == row.id).values(check_phase=phase))

    def answer_check(self, code, token, phase: str, item: int, choice: int) -> None:
        with self._write() as db:
            row = self._class(db, code)
            student = self._student(db, row, token)
            if row.check_phase != phase:
                raise BadAnswer("That check is closed.")
            if not (_whole(item) and 0 <= item < len(checks.ITEMS) and _whole(choice)
                    and 0 <= choice < len(checks.ITEMS[item].choices)):
                raise BadAnswer("That is not one of the check's choices.")
            self._count_answer(db, student)
            values = {"class_id": row.id, "student_id": student.id, "phase": phase,
                      "item": item, "choice": choice, "answered": self.clock()}
            db.execute(_insert(db.get_bind().dialect.name)(CheckAnswerRow).values(**values)
                       .on_conflict_do_update(index_elements=["student_id", "phase", "item"],
                                              set_={"choice": choice,
                                                    "answered": values["answered"]}))

    def my_checks(self, code, token, phase: str) -> dict[int, int]:
        with self._read() as db:
            row = self._class(db, code)
            return dict(db.execute(select(CheckAnswerRow.item, CheckAnswerRow.choice)
                                   .join(StudentRow).where(
                StudentRow.class_id == row.id, CheckAnswerRow.phase == phase,
                StudentRow.token_digest == codes.digest(token or ""))).all())

    # --- the report -----------------------------------------------------------------------

    def report(self, code) -> dict:
        """The class's anonymous counts: students, each question's answers, the check."""
        with self._read() as db:
            row = self._class(db, code)
            students = db.scalar(select(func.count()).select_from(StudentRow)
                                 .where(StudentRow.class_id == row.id))
            questions = []
            for question in db.scalars(select(QuestionRow).where(
                    QuestionRow.class_id == row.id).order_by(QuestionRow.number)):
                values = [json.loads(v) for v in db.scalars(select(AnswerRow.value).where(
                    AnswerRow.question_id == question.id).order_by(AnswerRow.id))]
                questions.append({"id": question.number, "kind": question.kind,
                                  "asks": KINDS[question.kind], "answers": len(values),
                                  "revealed": question.revealed,
                                  "context": json.loads(question.context),
                                  "model": None if question.result is None
                                  else json.loads(question.result),
                                  "tally": tally(question.kind, values)})
            check_rows = db.execute(select(CheckAnswerRow.phase, CheckAnswerRow.item,
                                           CheckAnswerRow.choice)
                                    .where(CheckAnswerRow.class_id == row.id)).all()
        return {"code": row.code, "students": students, "questions": questions,
                "checks": check_shares(check_rows)}


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _question(row: QuestionRow) -> Question:
    return Question(row.id, row.number, row.kind, json.loads(row.context), bool(row.revealed),
                    None if row.result is None else json.loads(row.result))


def check_value(question: Question, value):
    """The answer as stored, or BadAnswer: k distinct patches of the picture, a head of the
    block, one of the offered classes."""
    context = question.context
    if question.kind == "patches":
        if not isinstance(value, (list, tuple)) or not all(map(_whole, value)):
            raise BadAnswer("An answer is a list of patch numbers.")
        patches = sorted(set(value))
        if len(patches) != context["k"] or not all(0 <= p < context["patches"]
                                                   for p in patches):
            raise BadAnswer(f"Pick exactly {context['k']} different patches of the picture.")
        return patches
    allowed = (range(context["heads"]) if question.kind == "head"
               else [index for index, _ in context["options"]])
    if not _whole(value) or value not in allowed:
        raise BadAnswer("That is not one of the question's choices.")
    return value


def tally(kind: str, values: list) -> dict[str, int]:
    """How many chose each answer (for patches: how many clicked each patch), by key text."""
    counts: dict[str, int] = {}
    for value in values:
        for item in (value if kind == "patches" else [value]):
            counts[str(item)] = counts.get(str(item), 0) + 1
    return dict(sorted(counts.items(), key=lambda pair: int(pair[0])))


def check_shares(rows) -> list[dict]:
    """Per item of the check and phase: answers, correct answers and the share correct."""
    found = []
    for item, entry in enumerate(checks.ITEMS):
        phases = {}
        for phase in checks.PHASES:
            choices = [choice for p, i, choice in rows if p == phase and i == item]
            correct = sum(choice == checks.CORRECT for choice in choices)
            phases[phase] = {"answers": len(choices), "correct": correct,
                             "share": correct / len(choices) if choices else None}
        found.append({"item": item + 1, "question": entry.question, **phases})
    return found


_SHARED: dict[str, ClassStore] = {}
_SHARED_LOCK = threading.Lock()


def shared_store(url: str | None = None) -> ClassStore:
    """One store (engine and connection pool) per database per process."""
    url = url or database_url()
    with _SHARED_LOCK:
        if url not in _SHARED:
            _SHARED[url] = ClassStore(url)
        return _SHARED[url]
