"""The first tables of class mode: classes, students, questions, answers, check answers.

Revision ID: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _owner(table: str) -> sa.Column:
    return sa.Column(f"{table[:-1] if table != 'classes' else 'class'}_id", sa.Integer,
                     sa.ForeignKey(f"{table}.id", ondelete="CASCADE"), nullable=False,
                     index=True)


def upgrade() -> None:
    op.create_table(
        "classes",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("code", sa.String(16), nullable=False, unique=True),
        sa.Column("key_digest", sa.String(64), nullable=False),
        sa.Column("created", sa.Double, nullable=False),
        sa.Column("expires", sa.Double, nullable=False, index=True),
        sa.Column("page", sa.String(64), nullable=False),
        sa.Column("params", sa.Text, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("moved", sa.Double, nullable=False),
        sa.Column("question_id", sa.Integer, nullable=True),
        sa.Column("check_phase", sa.String(8), nullable=True))
    op.create_table(
        "students",
        sa.Column("id", sa.Integer, primary_key=True),
        _owner("classes"),
        sa.Column("token_digest", sa.String(64), nullable=False),
        sa.Column("joined", sa.Double, nullable=False),
        sa.Column("window_start", sa.Double, nullable=False),
        sa.Column("window_count", sa.Integer, nullable=False),
        sa.UniqueConstraint("class_id", "token_digest"))
    op.create_table(
        "questions",
        sa.Column("id", sa.Integer, primary_key=True),
        _owner("classes"),
        sa.Column("number", sa.Integer, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("context", sa.Text, nullable=False),
        sa.Column("opened", sa.Double, nullable=False),
        sa.Column("revealed", sa.Boolean, nullable=False),
        sa.Column("result", sa.Text, nullable=True))
    op.create_table(
        "answers",
        sa.Column("id", sa.Integer, primary_key=True),
        _owner("questions"),
        _owner("students"),
        sa.Column("value", sa.Text, nullable=False),
        sa.Column("answered", sa.Double, nullable=False),
        sa.UniqueConstraint("question_id", "student_id"))
    op.create_table(
        "check_answers",
        sa.Column("id", sa.Integer, primary_key=True),
        _owner("classes"),
        _owner("students"),
        sa.Column("phase", sa.String(8), nullable=False),
        sa.Column("item", sa.Integer, nullable=False),
        sa.Column("choice", sa.Integer, nullable=False),
        sa.Column("answered", sa.Double, nullable=False),
        sa.UniqueConstraint("student_id", "phase", "item"))


def downgrade() -> None:
    for table in ("check_answers", "answers", "questions", "students", "classes"):
        op.drop_table(table)
