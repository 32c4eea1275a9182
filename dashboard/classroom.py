"""Class mode in the app: start or join a class, the class line at the top of every page, follow
the instructor.

The class lives in the database (`xai_core.classroom.store`), not in any session, so every
replica serves it. The entry script calls:

- `start_run()` at the top of each full run: on a session's first run the browser's cookies
  (`class_memory`: a reload, a second tab or a failover keeps the class); then the address:
  `?class=CODE` joins (any page), `?class=CODE&class_key=KEY` (the instructor's link) takes
  control, and the key leaves the address at once (it would show on the projector);
- `sidebar()`: "Join the class" / "Start a class", or the instructor's private link and "End
  the class", or a student's "Leave the class"; the cookie writer and the class's styles;
- `top(url_path)` at the top of the page: the instructor's class line (code, students joined,
  answers to the open question, "Show how to join": the join view, readable from the back of
  a lecture hall) and "Ask the class" (`class_questions`); a student's class bar (code, follow,
  "Catch up") with the poll that moves a following student, then the open question;
- `after_run(url_path)` at the end: the instructor's place (page, view, picture, model, tour
  step) is written when it changed.

Nothing anyone types reaches Markdown except through `literal`; the code shown is the
normalised one (letters and digits of `codes.ALPHABET`).
"""

from __future__ import annotations

import os
import re
import time
from urllib.parse import quote, urlsplit

import streamlit as st
from sqlalchemy.exc import SQLAlchemyError

from dashboard import class_memory, class_questions, class_wake, links, literal, state, ui
from dashboard.class_state import (CODE, DB_TROUBLE, DRAWN, FOLLOW, HERE, JOIN_SHOWN, KEY,
                                   PICKED, PUBLISHED, RUN_PLACE, SEEN, TOKEN, cached_place,
                                   forget_place, refusals_in_words, role, shown, store)
from dashboard.page_list import PAGES, existing_pages, url_path as page_url_path
from xai_core.classroom import codes
from xai_core.classroom.store import DEFAULT_HOURS, ClassError, class_hours

# A following student's poll: a fragment that reads the class's row (cached PLACE_TTL_S per
# process) and moves the student. The browser reruns it every POLL_S only as a fallback: a
# rerun costs a replica about 2.5 ms of CPU, so at 1 s 100 idle students cost it 25 % of a
# core (bench/bench_class.py). Instead `class_wake` watches the class once per process and
# asks for a run of the polls of its sessions when something changed.
POLL_ENV = "VIT_LENS_CLASS_POLL_S"
# only a safety net (the wake moves the class): at 10 s, 100 idle students cost each replica
# 6-7.6 % of a core on the loaded 2-core machine (bench_class, 2026-12-06), over the 5 % aim
POLL_DEFAULT_S = 30.0


def _poll_period() -> float:
    try:
        return min(max(float(os.environ.get(POLL_ENV, "") or POLL_DEFAULT_S), 0.5), 60.0)
    except ValueError:
        return POLL_DEFAULT_S


POLL_S = _poll_period()
FOLLOW_TOGGLE = "class_follow_toggle"
BAR_WANDERED = "class_bar_wandered"  # whether the bar last drawn offered "Catch up"
REMEMBERED = "class_remembered"  # the browser's cookies were read (a session's first run)
FORGET = "class_forget"  # cookies to delete: the class this browser left or ended
LEFT = "class_left"  # the class this tab's student just left
GOING = "class_going"  # a follow switch was asked for: the next full run is its landing
LANDING = "class_landing"  # this full run is a follow switch's landing
FOLLOWED = {"image_choice", "vit_model", "cnn_model", "iv_model"}  # and each page's view
VIEW_KEY = re.compile(r"^[a-z0-9]+_(view|part)$")
# The join view is read from the back of a lecture hall: the code about 1/6 of a 720-pixel
# projector's height; the class line and the student's bar stay one short line.
CLASS_CSS = (
    ".st-key-class_join_code {container-type: inline-size;} "
    ".st-key-class_join_code p {font-size: min(8.5rem, 20cqw) !important; font-weight: 700; "
    "letter-spacing: 0.1em; line-height: 1.05; margin: 0; white-space: nowrap; "
    "font-family: 'Source Code Pro', monospace;} "
    ".st-key-class_join_link p {font-size: clamp(1.2rem, 2.4vw, 2.1rem) !important; "
    "overflow-wrap: anywhere; margin: 0;} "
    ".st-key-class_join_count p {font-size: clamp(1.4rem, 3vw, 2.6rem) !important; "
    "font-weight: 700; margin: 0;} "
    ".st-key-class_join_intro p {font-size: clamp(1.1rem, 2vw, 1.7rem) !important; margin: 0;} "
    ".st-key-class_join img {max-height: 60vh; object-fit: contain;} "
    ".st-key-class_line, .st-key-class_bar {border-bottom: 1px solid rgba(49, 51, 63, 0.2); "
    "padding-bottom: 0.25rem;} "
    ".st-key-class_line p, .st-key-class_bar p {margin: 0;} "
    # Streamlit pulls a markdown block up by 1rem (its paragraph's margin): in a row, or with
    # that margin gone, the block's box would be 1rem short of its text and sit off-centre
    ":is(.st-key-class_line, .st-key-class_bar, .st-key-class_join) "
    "[data-testid='stMarkdownContainer'] {margin-bottom: 0 !important;}")


def _leave() -> None:
    if st.session_state.get(CODE):
        class_wake.forget(st.session_state[CODE])
    for key in (CODE, KEY, SEEN, HERE, DRAWN, PUBLISHED, PICKED, RUN_PLACE, JOIN_SHOWN,
                BAR_WANDERED):
        st.session_state.pop(key, None)


def _take_control(code: str, key: str) -> None:
    _leave()
    st.session_state.update({CODE: code, KEY: key})


def _forget_cookie(name: str) -> None:
    st.session_state.setdefault(FORGET, set()).add(name)


# --- joining ------------------------------------------------------------------------------

def _join(raw_code, quiet: bool = False) -> bool:
    code = codes.normalise_code(raw_code)
    token = st.session_state.setdefault(TOKEN, codes.new_secret())
    try:
        if code is None:
            raise ClassError("A class code has six letters and digits, such as K7PX2M.")
        store().join(code, token)
    except ClassError as error:
        if not quiet:
            st.warning(literal.text(error))
        return False
    _leave()
    st.session_state.update({CODE: code, FOLLOW: True, SEEN: None})
    st.session_state.get(FORGET, set()).discard(class_memory.STUDENT)
    return True


def _from_cookies(params) -> None:
    """A session's first run: the class this browser was in (a reload, a second tab, a
    failover). The token first, so a link's join below is the same anonymous student."""
    if st.session_state.get(REMEMBERED):
        return
    st.session_state[REMEMBERED] = True
    student = class_memory.saved(class_memory.STUDENT)
    if student:
        st.session_state[TOKEN] = student[1]
    teacher = class_memory.saved(class_memory.TEACHER)
    if teacher and "class_key" not in params:
        if store().is_instructor(*teacher):
            _take_control(*teacher)
            return
        _forget_cookie(class_memory.TEACHER)  # the class ended
    if student and "class" not in params and not _join(student[0], quiet=True):
        _forget_cookie(class_memory.STUDENT)


def _from_link(params) -> None:
    left = st.session_state.pop(LEFT, None)
    if left and codes.normalise_code(params.get("class")) == left:
        del params["class"]  # the class this tab just left
    if "class_key" in params:
        key, code = params.get("class_key"), codes.normalise_code(params.get("class"))
        del params["class_key"]  # never left in the address bar (or the projector)
        if code and store().is_instructor(code, key):
            _take_control(code, key)
        else:
            st.warning("This instructor link does not open a class here: the class may "
                       "have ended, or the link is not complete.")
    elif "class" in params and (codes.normalise_code(params.get("class")) is None or
                                codes.normalise_code(params.get("class"))
                                != st.session_state.get(CODE)):
        if not _join(params.get("class")):
            del params["class"]


def start_run() -> None:
    """The session's class, from the browser's cookies (first run) and the address."""
    params = st.query_params
    try:
        _from_cookies(params)
        _from_link(params)
        st.session_state[LANDING] = st.session_state.pop(GOING, False)
        if role() == "student":  # what this run draws; the poll reruns the page on a change
            place = store().place(st.session_state[CODE])
            st.session_state[RUN_PLACE] = (time.monotonic(), place)
            st.session_state[DRAWN] = shown(place)
    except ClassError:
        _leave()
    except SQLAlchemyError:
        st.warning(DB_TROUBLE)


# --- where a page is ------------------------------------------------------------------------

def here(url_path: str) -> tuple[str, dict]:
    """This run's place: the page and the followed choices drawn on it, as link ids. An
    uploaded picture is not shared (a student's own upload stays theirs)."""
    params = {}
    for key in sorted(links.drawn_keys()):
        if key in FOLLOWED or VIEW_KEY.match(key):
            value = st.session_state.get(key)
            if value is not None and not (key == "image_choice"
                                          and value == state.UPLOAD_CHOICE):
                params[key] = str(value)
    if "tour" in st.query_params:
        params["tour"] = st.query_params["tour"]
    return url_path, params


def _pages() -> dict:
    return {page_url_path(name): st.Page(PAGES / name, title=title, icon=icon,
                                         default=(name == "home.py"))
            for name, title, icon in existing_pages()}


def _go(place) -> None:
    """Open the instructor's place (its page and choices), staying in the class."""
    st.session_state[SEEN] = place.version
    page = _pages().get(place.page)
    if page is None:
        return
    st.session_state[HERE] = (place.page, place.params)  # where the switch lands
    st.session_state[GOING] = True
    st.switch_page(page, query_params={**place.params, "class": st.session_state[CODE]})


def after_run(url_path: str) -> None:
    """End of a full run: the instructor's place is written when it changed; a student's
    is kept, to tell whether they wandered off."""
    st.session_state.pop(LANDING, None)
    if role() is None:
        return
    current = here(url_path)
    if role() == "student":
        st.session_state[HERE] = current
        if st.session_state.get(BAR_WANDERED, False) != _wandered():
            class_wake.rerun_poll()  # "Catch up" appears (or goes) once this run is done
        return
    if st.session_state.get(PUBLISHED) == current:
        return
    try:
        store().move(st.session_state[CODE], st.session_state[KEY], *current)
        st.session_state[PUBLISHED] = current
    except ClassError:
        _leave()
    except SQLAlchemyError:
        pass  # tried again after the next run


# --- the sidebar ----------------------------------------------------------------------------

def student_url(code: str) -> str:
    """The link students open: this server's address (as the browser sees it) and the code."""
    seen = urlsplit(st.context.url or "")
    base = (st.get_option("server.baseUrlPath") or "").strip("/")
    root = f"{seen.scheme or 'http'}://{seen.netloc or 'localhost'}/"
    return f"{root}{base + '/' if base else ''}?class={quote(code)}"


@st.cache_data(max_entries=64, show_spinner=False)
def qr_svg(url: str) -> str:
    """The link as a QR code (segno, an SVG of dark squares: no text, no script)."""
    import segno

    return segno.make(url, error="m").svg_inline(scale=6, dark="#000", light="#fff")


def sidebar() -> None:
    with st.sidebar:
        st.markdown("#### Class")
        try:
            {"instructor": _instructor_sidebar, "student": _student_sidebar,
             None: _no_class_sidebar}[role()]()
        except SQLAlchemyError:
            st.caption(DB_TROUBLE)
        _remember()


def _remember() -> None:
    """The browser's cookies say what this session is in (read by the next session)."""
    wanted = {name: "" for name in st.session_state.get(FORGET, ())}
    if role() == "instructor":
        wanted[class_memory.TEACHER] = f"{st.session_state[CODE]}.{st.session_state[KEY]}"
    elif role() == "student":
        wanted[class_memory.STUDENT] = f"{st.session_state[CODE]}.{st.session_state[TOKEN]}"
    try:
        hours = class_hours()
    except ClassError:
        hours = DEFAULT_HOURS
    class_memory.write(wanted, hours)
    if role() is not None:  # constant rules, nothing typed: the join view's large letters
        st.markdown(f"<style>{CLASS_CSS}</style>", unsafe_allow_html=True)


def _no_class_sidebar() -> None:
    with st.form("class_join", border=False, clear_on_submit=True):
        typed = st.text_input("Class code", max_chars=12, placeholder="e.g. K7PX2M",
                              help="The six letters and digits your instructor shows.")
        if st.form_submit_button("Join the class") and _join(typed):
            st.rerun()
    if st.button("Start a class", help="You lead: students join with the code and follow "
                                        "the pages you open."):
        made = store().new_class()
        _take_control(made.code, made.key)
        st.session_state[JOIN_SHOWN] = True  # the class's first need: students joining
        st.session_state.get(FORGET, set()).discard(class_memory.TEACHER)
        st.rerun()


def _instructor_sidebar() -> None:
    code = st.session_state[CODE]
    st.caption(f"You lead class {code}.")
    with st.expander("Your instructor link (private)"):
        st.caption("Opens this class with your controls on another device. Do not project "
                   "it. This browser keeps the controls when you reload or open a new tab.")
        st.code(student_url(code) + "&class_key=" + quote(st.session_state[KEY]),
                language=None)
    if st.button("End the class", help="Deletes the class and all its answers."):
        store().end(code)
        forget_place(code)
        _leave()
        _forget_cookie(class_memory.TEACHER)
        st.rerun()


def _student_sidebar() -> None:
    st.caption(f"You are in class {st.session_state[CODE]}. Your answers are anonymous.")
    if st.button("Leave the class", help="Stop following; this browser forgets the class."):
        st.session_state[LEFT] = st.session_state[CODE]  # the address's ?class= goes too
        _leave()
        _forget_cookie(class_memory.STUDENT)
        st.rerun()


# --- the top of the page ---------------------------------------------------------------------

def top(url_path: str) -> None:
    """The class line and "Ask the class" (instructor), or the class bar and the open
    question (student), above the page's own content."""
    if role() == "instructor":
        _class_line()
        class_questions.ask_panel(url_path)
    elif role() == "student":
        _student_bar()
        with refusals_in_words():
            class_questions.student_panel()


@st.fragment(run_every=class_questions.LIVE_S)
def _class_line() -> None:
    """The instructor's class line, live: code, students joined, answers to the open
    question; "Show how to join" opens the join view under it."""
    with refusals_in_words():
        code = st.session_state.get(CODE)
        if role() != "instructor":
            return
        students, answers = store().live(code)
        shown_now = st.session_state.get(JOIN_SHOWN, False)
        with st.container(horizontal=True, vertical_alignment="center", key="class_line"):
            words = f"Class **{code}** · {students} joined"
            if answers is not None:
                words += f" · {answers} answered"
            st.markdown(words)
            st.button("Hide how to join" if shown_now else "Show how to join",
                      key="class_join_toggle", icon=":material/qr_code_2:",
                      on_click=lambda: st.session_state.update({JOIN_SHOWN: not shown_now}))
        if shown_now:
            _join_view(code, students)


def _join_view(code: str, students: int) -> None:
    """What the projector shows while students join: the code, the QR code of the student
    link, the link itself, short, and how many have joined."""
    url = student_url(code)
    with st.container(border=True, key="class_join"):
        words, picture = st.columns([3, 2], vertical_alignment="center")
        with words:
            with st.container(key="class_join_intro"):
                st.markdown("**Join the class**: scan the square with your phone, or open")
            with st.container(key="class_join_link"):
                st.markdown(literal.text(url.split("://", 1)[-1]))
            with st.container(key="class_join_code"):
                st.markdown(code)  # letters and digits of codes.ALPHABET only
            with st.container(key="class_join_count"):
                st.markdown(f"{ui.count(students, 'student')} joined")
        picture.image(qr_svg(url), width="stretch")


@st.fragment(run_every=POLL_S)
def _student_bar() -> None:
    """A student's class bar: the code, "Follow the instructor", "Catch up" when they
    wandered off. It is also the poll: it goes where the instructor went, and reruns the
    page when a question or the check opens or is revealed."""
    with refusals_in_words():
        _poll_once()


def _wake_state(code: str):
    """What a student's page must be woken for: a move, a question or check opened or
    revealed (None once the class is gone)."""
    forget_place(code)  # read afresh into the process's cache: the polls woken for a change
    place = cached_place(code)  # must find it there, not a place up to PLACE_TTL_S old
    return None if place is None else (place.version, shown(place))


def _wandered(place=None) -> bool:
    """Whether the student's page is not the instructor's (default: the place read at the
    top of this run)."""
    if place is None:
        place = (st.session_state.get(RUN_PLACE) or (0, None))[1]
    return bool(place and place.version > 0
                and st.session_state.get(HERE) != (place.page, place.params))


def _poll_once() -> None:
    code = st.session_state.get(CODE)
    if not code or role() != "student":
        return
    class_wake.register(code, _wake_state)
    following = st.session_state.get(FOLLOW, True)

    def moved(place) -> bool:
        return following and 0 < place.version != st.session_state.get(SEEN)

    run_place = st.session_state.get(RUN_PLACE)  # read at the top of the last full run
    place = cached_place(code, run_place)
    if place is not None and (moved(place) or shown(place) != st.session_state.get(DRAWN)):
        forget_place(code)  # a change: confirmed by a fresh read before acting on it
        place = cached_place(code, run_place)
    if place is None:
        _leave()
        st.rerun(scope="app")
    if class_questions.answer_pending() or (st.session_state.get(LANDING) and (
            moved(place) or shown(place) != st.session_state.get(DRAWN))):
        # a press is stored first, below; a page a switch opened is drawn to its end (else
        # an instructor moving faster than a page runs would restart it for ever): this
        # poll runs again once this run is over
        class_wake.rerun_poll()
    elif moved(place):
        _go(place)
    elif shown(place) != st.session_state.get(DRAWN):
        st.rerun(scope="app")
    wandered = st.session_state[BAR_WANDERED] = _wandered(place)
    with st.container(horizontal=True, vertical_alignment="center", key="class_bar"):
        st.markdown(f"Class **{code}**")
        # drawn from FOLLOW, not keyed by it: a run the server starts (a page switch, a
        # wake) carries no widget states, and a keyed toggle would fall back to off
        st.toggle("Follow the instructor", value=following, key=FOLLOW_TOGGLE,
                  on_change=lambda: st.session_state.update(
                      {FOLLOW: st.session_state[FOLLOW_TOGGLE]}),
                  help="Open the page, picture and step the instructor shows, as they move.")
        if wandered and st.button("Catch up", icon=":material/directions_run:",
                                  help="Open what the instructor shows now."):
            _go(place)
