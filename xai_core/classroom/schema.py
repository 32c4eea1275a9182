"""The tables of class mode (SQLAlchemy 2 declarative). Times are Unix seconds (one
portable type for SQLite and PostgreSQL); JSON fields are text written by the store. The
migrations in `migrations/versions/` create exactly these (tests/test_classroom_store.py
compares them)."""

from __future__ import annotations

from sqlalchemy import Boolean, Double, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


def _owner(table: str) -> Mapped[int]:
    return mapped_column(ForeignKey(f"{table}.id", ondelete="CASCADE"), index=True)


class ClassRow(Base):
    """One class: its code, the digest of the instructor's key, when it ends, and what the
    instructor has set (the place students follow, the open question, the check)."""

    __tablename__ = "classes"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    code: Mapped[str] = mapped_column(String(16), unique=True)
    key_digest: Mapped[str] = mapped_column(String(64))
    created: Mapped[float] = mapped_column(Double)
    expires: Mapped[float] = mapped_column(Double, index=True)
    page: Mapped[str] = mapped_column(String(64), default="")
    params: Mapped[str] = mapped_column(Text, default="{}")  # JSON: view, picture, model, step
    version: Mapped[int] = mapped_column(Integer, default=0)  # +1 per move of the instructor
    moved: Mapped[float] = mapped_column(Double, default=0.0)
    question_id: Mapped[int | None] = mapped_column(Integer, nullable=True)  # the open one
    check_phase: Mapped[str | None] = mapped_column(String(8), nullable=True)


class StudentRow(Base):
    """A joined browser session: only the digest of its random token, and its answer rate."""

    __tablename__ = "students"
    __table_args__ = (UniqueConstraint("class_id", "token_digest"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    class_id: Mapped[int] = _owner("classes")
    token_digest: Mapped[str] = mapped_column(String(64))
    joined: Mapped[float] = mapped_column(Double)
    window_start: Mapped[float] = mapped_column(Double, default=0.0)
    window_count: Mapped[int] = mapped_column(Integer, default=0)


class QuestionRow(Base):
    __tablename__ = "questions"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    class_id: Mapped[int] = _owner("classes")
    number: Mapped[int] = mapped_column(Integer)  # 1, 2, ... within the class
    kind: Mapped[str] = mapped_column(String(16))
    context: Mapped[str] = mapped_column(Text)  # JSON: picture, model, k, block, options...
    opened: Mapped[float] = mapped_column(Double)
    revealed: Mapped[bool] = mapped_column(Boolean, default=False)
    result: Mapped[str | None] = mapped_column(Text, nullable=True)  # JSON: the model's answer


class AnswerRow(Base):
    """One answer per student and question: a second one replaces the first."""

    __tablename__ = "answers"
    __table_args__ = (UniqueConstraint("question_id", "student_id"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    question_id: Mapped[int] = _owner("questions")
    student_id: Mapped[int] = _owner("students")
    value: Mapped[str] = mapped_column(Text)  # JSON
    answered: Mapped[float] = mapped_column(Double)


class CheckAnswerRow(Base):
    """A learning-check answer: one per student, phase (before/after) and item."""

    __tablename__ = "check_answers"
    __table_args__ = (UniqueConstraint("student_id", "phase", "item"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    class_id: Mapped[int] = _owner("classes")
    student_id: Mapped[int] = _owner("students")
    phase: Mapped[str] = mapped_column(String(8))
    item: Mapped[int] = mapped_column(Integer)
    choice: Mapped[int] = mapped_column(Integer)
    answered: Mapped[float] = mapped_column(Double)
