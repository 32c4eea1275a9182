"""What class mode keeps in a session, and its road to the store, shared by the class's parts
(`classroom`: joining, following, the class line; `class_questions`: asking and answering).

The class itself lives in the database (`xai_core.classroom.store`), never in a session, so
every replica serves it; a session keeps only its role in it: the code, the instructor's key or
the student's token, and what this tab last saw.
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager

import streamlit as st
from sqlalchemy.exc import SQLAlchemyError

from dashboard import literal
from xai_core.classroom.store import ClassError, shared_store

CODE, KEY, TOKEN = "class_code", "class_instructor_key", "class_token"
FOLLOW, SEEN, HERE, DRAWN, PUBLISHED = ("class_follow", "class_seen", "class_here",
                                        "class_drawn", "class_published")
PICKED, JOIN_SHOWN = "class_picked", "class_join_shown"
RUN_PLACE = "class_run_place"  # (when, the place) read at the top of this run
DB_TROUBLE = ("The class database cannot be reached right now; your page works as before. "
              "Try again in a moment.")
PLACE_TTL_S = 0.25
_LOG = logging.getLogger(__name__)  # a database error by its type only: no URL


def store():
    return shared_store()


def role() -> str | None:
    """'instructor', 'student' or None."""
    if not st.session_state.get(CODE):
        return None
    return "instructor" if st.session_state.get(KEY) else "student"


@contextmanager
def refusals_in_words():
    """A refusal of the store as its sentence; the database unreachable as one sentence that
    names nothing of it (its URL may hold a password)."""
    try:
        yield
    except SQLAlchemyError as error:
        _LOG.warning("class database: %s", type(error).__name__)
        st.warning(DB_TROUBLE)
    except ClassError as error:
        st.warning(literal.text(error))


# --- the instructor's place, read at most every PLACE_TTL_S per process -----------------------

_PLACES: dict[str, tuple[float, object]] = {}
_PLACES_LOCK = threading.Lock()


def cached_place(code: str, fresher: tuple[float, object] | None = None):
    """The class's place (None: the class is gone), read at most every PLACE_TTL_S seconds
    per process however many students poll; `fresher`: (when, place) this session read
    itself, used when it is the newer read."""
    now = time.monotonic()
    with _PLACES_LOCK:
        found = _PLACES.get(code)
    if not (found and now - found[0] < PLACE_TTL_S):
        try:
            found = (now, store().place(code))
        except ClassError:
            found = (now, None)
        with _PLACES_LOCK:
            if len(_PLACES) > 256:
                _PLACES.clear()
            _PLACES[code] = found
    return fresher[1] if fresher and fresher[0] > found[0] else found[1]


def forget_place(code: str) -> None:
    with _PLACES_LOCK:
        _PLACES.pop(code, None)


def shown(place) -> tuple:
    """What of the class a student's page shows: the open question, its reveal, the check."""
    question = place.question
    return (question and question.id, question and question.revealed, place.check_phase)

