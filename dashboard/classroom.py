"""Class mode in the app: start or join a class, follow the instructor, answer and reveal.

The class lives in the database (`xai_core.classroom.store`), not in any session, so every
replica serves it. The entry script calls:

- `start_run()` at the top of each full run: `?class=CODE` joins (any page), `?class=CODE&
  class_key=KEY` (the instructor's link) takes control; the key leaves the address at once
  (it would show on the projector) and lives in this session only;
- `sidebar()`: "Start a class" / the code box, or the class's code and QR code (instructor),
  or "Follow the instructor" and the poll that moves a following student (a fragment rerun
  every POLL_S seconds that reads one cached row);
- `panel(url_path)` at the top of the page: the instructor's questions, live answers, Reveal
  and the learning check; a student's question and own answer;
- `after_run(url_path)` at the end: the instructor's place (page, view, picture, model,
  tour step) is written when it changed.

Nothing anyone types reaches Markdown except through `literal`; the code shown is the
normalised one (letters and digits of `codes.ALPHABET`).
"""

from __future__ import annotations

import os
import re
import threading
import time
from contextlib import contextmanager
from urllib.parse import quote, urlsplit

import streamlit as st
from sqlalchemy.exc import SQLAlchemyError

from dashboard import class_wake, links, literal, state, ui
from dashboard.clicks import apply_chart_click
from dashboard.page_list import PAGES, existing_pages, url_path as page_url_path
from xai_core.classroom import checks, codes
from xai_core.classroom.report import report_csv
from xai_core.classroom.store import KINDS, ClassError, shared_store

# A following student's poll: a fragment that reads the class's row (cached PLACE_TTL_S per
# process) and moves the student. The browser reruns it every POLL_S only as a fallback: a
# rerun costs a replica about 2.5 ms of CPU, so at 1 s 100 idle students cost it 25 % of a
# core (bench/bench_class.py). Instead `class_wake` watches the class once per process and
# reruns the polls of its sessions when something changed. LIVE_S: the projector's live count.
POLL_ENV = "VIT_LENS_CLASS_POLL_S"
LIVE_S = 1.0


def _poll_period() -> float:
    try:
        return min(max(float(os.environ.get(POLL_ENV, "") or 10.0), 0.5), 60.0)
    except ValueError:
        return 10.0


POLL_S = _poll_period()
PLACE_TTL_S = 0.25
CODE, KEY, TOKEN = "class_code", "class_instructor_key", "class_token"
FOLLOW, SEEN, HERE, DRAWN, PUBLISHED = ("class_follow", "class_seen", "class_here",
                                        "class_drawn", "class_published")
PICKED, PICK_CHART = "class_picked", "class_pick"
FOLLOW_TOGGLE = "class_follow_toggle"
RUN_PLACE = "class_run_place"  # the place read at the top of this run
FOLLOWED = {"image_choice", "vit_model", "cnn_model", "iv_model"}  # and each page's view
VIEW_KEY = re.compile(r"^[a-z0-9]+_(view|part)$")
DB_TROUBLE = ("The class database cannot be reached right now; your page works as before. "
              "Try again in a moment.")


# --- the store, and the instructor's place cached per process ---------------------------

def _store():
    return shared_store()


@contextmanager
def refusals_in_words():
    """A refusal of the store as its sentence; the database unreachable as one sentence that
    names nothing of it (its URL may hold a password)."""
    try:
        yield
    except SQLAlchemyError:
        st.warning(DB_TROUBLE)
    except ClassError as error:
        st.warning(literal.text(error))


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
            found = (now, _store().place(code))
        except ClassError:
            found = (now, None)
        with _PLACES_LOCK:
            if len(_PLACES) > 256:
                _PLACES.clear()
            _PLACES[code] = found
    return fresher[1] if fresher and fresher[0] > found[0] else found[1]


def _forget_place(code: str) -> None:
    with _PLACES_LOCK:
        _PLACES.pop(code, None)


def role() -> str | None:
    """'instructor', 'student' or None."""
    if not st.session_state.get(CODE):
        return None
    return "instructor" if st.session_state.get(KEY) else "student"


def _leave() -> None:
    if st.session_state.get(CODE):
        class_wake.forget(st.session_state[CODE])
    for key in (CODE, KEY, SEEN, HERE, DRAWN, PUBLISHED, PICKED, RUN_PLACE):
        st.session_state.pop(key, None)


# --- joining ------------------------------------------------------------------------------

def _join(raw_code) -> bool:
    code = codes.normalise_code(raw_code)
    token = st.session_state.setdefault(TOKEN, codes.new_secret())
    try:
        if code is None:
            raise ClassError("A class code has six letters and digits, such as K7PX2M.")
        _store().join(code, token)
    except ClassError as error:
        st.warning(literal.text(error))
        return False
    _leave()
    st.session_state.update({CODE: code, FOLLOW: True, SEEN: None})
    return True


def start_run() -> None:
    """Read `?class=` (join) and `?class_key=` (the instructor's link) at the top of a run."""
    params = st.query_params
    try:
        if "class_key" in params:
            key, code = params.get("class_key"), codes.normalise_code(params.get("class"))
            del params["class_key"]  # never left in the address bar (or the projector)
            if code and _store().is_instructor(code, key):
                _leave()
                st.session_state.update({CODE: code, KEY: key})
            else:
                st.warning("This instructor link does not open a class here: the class may "
                           "have ended, or the link is not complete.")
        elif "class" in params and (codes.normalise_code(params.get("class")) is None or
                                    codes.normalise_code(params.get("class"))
                                    != st.session_state.get(CODE)):
            if not _join(params.get("class")):
                del params["class"]
        if role() == "student":  # what this run draws; the poll reruns the page on a change
            place = _store().place(st.session_state[CODE])
            st.session_state[RUN_PLACE] = (time.monotonic(), place)
            st.session_state[DRAWN] = _shown(place)
    except ClassError:
        _leave()
    except SQLAlchemyError:
        st.warning(DB_TROUBLE)


def _shown(place) -> tuple:
    """What of the class a student's page shows: the open question, its reveal, the check."""
    question = place.question
    return (question and question.id, question and question.revealed, place.check_phase)


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
    st.switch_page(page, query_params={**place.params, "class": st.session_state[CODE]})


def after_run(url_path: str) -> None:
    """End of a full run: the instructor's place is written when it changed; a student's
    is kept, to tell whether they wandered off."""
    if role() is None:
        return
    current = here(url_path)
    if role() == "student":
        st.session_state[HERE] = current
        return
    if st.session_state.get(PUBLISHED) == current:
        return
    try:
        _store().move(st.session_state[CODE], st.session_state[KEY], *current)
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


def _no_class_sidebar() -> None:
    with st.form("class_join", border=False, clear_on_submit=True):
        typed = st.text_input("Class code", max_chars=12, placeholder="e.g. K7PX2M",
                              help="The six letters and digits your instructor shows.")
        if st.form_submit_button("Join the class") and _join(typed):
            st.rerun()
    if st.button("Start a class", help="You lead: students join with the code and follow "
                                        "the pages you open."):
        made = _store().new_class()
        _leave()
        st.session_state.update({CODE: made.code, KEY: made.key})
        st.rerun()


def _instructor_sidebar() -> None:
    code = st.session_state[CODE]
    url = student_url(code)
    st.markdown(f"Your class: **{code}**")  # letters and digits of codes.ALPHABET only
    st.image(qr_svg(url), caption="Students: scan, or open the link", width=180)
    st.code(url, language=None)
    with st.expander("Your instructor link (private)"):
        st.caption("Opens this class with your controls on another device. Do not project it.")
        st.code(url + "&class_key=" + quote(st.session_state[KEY]), language=None)
    if st.button("End the class", help="Deletes the class and all its answers."):
        _store().end(code)
        _forget_place(code)
        _leave()
        st.rerun()


def _student_sidebar() -> None:
    st.caption(f"You are in class {st.session_state[CODE]}. Your answers are anonymous.")
    # drawn from FOLLOW, not keyed by it: a run the server starts (a page switch, a wake)
    # carries no widget states, and a keyed toggle would fall back to off
    st.toggle("Follow the instructor", value=st.session_state.get(FOLLOW, True),
              key=FOLLOW_TOGGLE, on_change=lambda: st.session_state.update(
                  {FOLLOW: st.session_state[FOLLOW_TOGGLE]}),
              help="Open the page, picture and step the instructor shows, as they move.")
    _poll()


@st.fragment(run_every=POLL_S)
def _poll() -> None:
    """A following student's poll: go where the instructor went; rerun the page when a
    question or the check opens or is revealed; otherwise offer "Catch up"."""
    with refusals_in_words():
        _poll_once()


def _wake_state(code: str):
    """What a student's page must be woken for: a move, a question or check opened or
    revealed (None once the class is gone)."""
    try:
        place = _store().place(code)
    except ClassError:
        return None
    return place.version, _shown(place)


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
    if place is not None and (moved(place) or _shown(place) != st.session_state.get(DRAWN)):
        _forget_place(code)  # a change: confirmed by a fresh read before acting on it
        place = cached_place(code, run_place)
    if place is None:
        _leave()
        st.rerun(scope="app")
    if moved(place):
        _go(place)
    if _shown(place) != st.session_state.get(DRAWN):
        st.rerun(scope="app")
    if place.version > 0 and st.session_state.get(HERE) != (place.page, place.params):
        if st.button("Catch up", help="Open what the instructor shows now."):
            _go(place)
    elif st.session_state.get(FOLLOW, True):
        st.caption("Following the instructor.")


# --- the class panel at the top of the page --------------------------------------------------

def panel(url_path: str) -> None:
    """The instructor's controls and the class's answers, or a student's open question."""
    with refusals_in_words():
        if role() == "instructor":
            _instructor_panel(url_path)
        elif role() == "student":
            _student_panel()


def _model_and_image(context: dict):
    model = state.load_model_or_explain(context["model"], context.get("random", False))
    return model, state._cached_sample(context["picture"])


def _question_context(kind: str, url_path: str) -> dict | str:
    """What a question of `kind` asked from this page records, or why it cannot be asked."""
    from xai_core.studies import cause_vs_claim as claims
    from xai_core.pipeline import predict, resolve_target

    chosen = state.selection()
    if chosen.image_choice == state.UPLOAD_CHOICE:
        return "Pick a gallery picture first: the students' phones cannot see your upload."
    family = st.session_state.get("iv_model", "vit") if kind == "patches" else "vit"
    model_id, random = ((chosen.vit_id, chosen.vit_random) if family == "vit"
                        else (chosen.cnn_id, chosen.cnn_random))
    context = {"picture": chosen.image_choice, "model": model_id, "random": random}
    model, image = _model_and_image(context)
    if model is None or model.head is None:
        return "This model gives no class score to ask about."
    if kind == "patches":
        target = resolve_target(model, None, image)
        return {**context, "k": int(st.session_state.get("iv_k", 4)), "target": target,
                "label": model.head.class_names[target], "patches": claims.num_patches(model),
                "grid": list(claims.patch_grid(model))}
    if kind == "head":
        block = int(st.session_state.get("class_block", len(model.module.blocks) - 1))
        return {**context, "block": block, "heads": model.module.blocks[0].attn.num_heads}
    top = predict(model, image, topk=4)
    options = sorted(([p.index, p.label] for p in top), key=lambda pair: pair[1].lower())
    return {**context, "options": options}


def _askable(url_path: str) -> list[str]:
    kinds = ["classes"]
    if url_path == "vit_explainer":
        kinds.insert(0, "head")
    if url_path == "interventions" and st.session_state.get("iv_view") == "predict":
        kinds.insert(0, "patches")
    return kinds


def _instructor_panel(url_path: str) -> None:
    code, key = st.session_state[CODE], st.session_state[KEY]
    place = _store().place(code)
    open_now = place.question is not None or place.check_phase is not None
    with st.expander(f"Class {code}: ask the class", expanded=open_now):
        if place.question is None:
            _ask_controls(code, key, url_path)
        else:
            _live_question(code, key)
        _check_controls(code, key, place.check_phase)
        report = _store().report(code)
        st.download_button("Download the class's answers (CSV)", report_csv(report),
                           file_name=f"class-{code}.csv", mime="text/csv")


def _ask_controls(code: str, key: str, url_path: str) -> None:
    kinds = _askable(url_path)
    if "head" in kinds:
        model = state.current_vit()
        if model is not None:
            blocks = len(model.module.blocks)
            st.number_input("Block for the head question", 0, blocks - 1, value=blocks - 1,
                            key="class_block")
    columns = st.columns(len(kinds))
    for column, kind in zip(columns, kinds):
        if column.button(f"Ask: {KINDS[kind]}?", key=f"class_ask_{kind}"):
            context = _question_context(kind, url_path)
            if isinstance(context, str):
                st.info(context)
                return
            st.session_state.pop(PICKED, None)
            _store().open_question(code, key, kind, context)
            _forget_place(code)
            st.rerun()
    if "patches" not in kinds:
        st.caption("The patch question is asked from page 9's view \"Predict, then reveal\".")


@st.fragment(run_every=LIVE_S)
def _live_question(code: str, key: str) -> None:
    """The open question on the projector: the live count, the class's answers, Reveal."""
    with refusals_in_words():
        _live_question_once(code, key)


def _live_question_once(code: str, key: str) -> None:
    store = _store()
    place = store.place(code)
    question = place.question
    if question is None:
        st.rerun(scope="app")
    students = store.report(code)["students"]
    answers = store.answers(code, question.id, key=key)
    st.markdown(f"**Question {question.number}: {_asks(question)}**")
    st.markdown(f"{ui.count(len(answers), 'answer')} from "
                f"{ui.count(students, 'student')} in the class.")
    _class_answers(question, answers)
    left, right = st.columns(2)
    if not question.revealed and left.button("Reveal", type="primary", key="class_reveal",
                                             disabled=not answers):
        with st.spinner("Measuring the model's answer..."):
            result = _model_answer(question, answers)
        store.reveal(code, key, result)
        _forget_place(code)
        st.rerun(scope="app")
    if question.revealed:
        _revealed(question, answers)
    if right.button("Close the question", key="class_close"):
        store.close_question(code, key)
        _forget_place(code)
        st.rerun(scope="app")


def _asks(question) -> str:
    context = question.context
    if question.kind == "patches":
        return (f"click the {context['k']} patches the model needs most for "
                f"{literal.text(context['label'])}")
    if question.kind == "head":
        return f"which head of block {context['block']} matters most for the answer?"
    return "what will the model answer?"


def _class_answers(question, answers: list) -> None:
    """The class's answers: clicks over the picture, or a bar per head or class."""
    from xai_core.classroom.reveal import click_grid
    from xai_core.figures import class_figures as figs
    from xai_core.pipeline import prepare

    context = question.context
    if not answers:
        return
    if question.kind == "patches":
        model, image = _model_and_image(context)
        if model is None:
            return
        grid = tuple(context["grid"])
        size = model.spec.input_size
        ui.show_figure(figs.clicks_figure(prepare(model, image).model_image,
                                          click_grid(answers, grid),
                                          (size[0] / grid[0], size[1] / grid[1])),
                       key=f"class_clicks_{question.id}")
        return
    labels, values = _choices(question)
    counts = [answers.count(value) for value in values]
    marked = None
    if question.revealed and question.result:
        marked = values.index(question.result["answer"])
    ui.show_figure(figs.answer_bars(labels, counts, marked), key=f"class_bars_{question.id}")


def _choices(question) -> tuple[list[str], list[int]]:
    if question.kind == "head":
        heads = range(question.context["heads"])
        return [f"head {h}" for h in heads], list(heads)
    options = question.context["options"]
    return [label for _, label in options], [index for index, _ in options]


def _model_answer(question, answers: list) -> dict:
    """The model's measured answer, computed once (the instructor's Reveal) and stored."""
    from xai_core.classroom.reveal import head_reveal, patch_reveal
    from xai_core.pipeline import predict

    context = question.context
    model, image = _model_and_image(context)
    if question.kind == "patches":
        found = patch_reveal(model, image, answers, context["k"], target=context["target"],
                             should_stop=ui.stop_check())
        return {"patches": found.patches, "rows": found.rows,
                "score_kind": found.test.score_kind,
                "sentences": {r: found.sentence(r) for r in found.test.removals}}
    if question.kind == "head":
        drops, grid = head_reveal(model, image, context["block"], should_stop=ui.stop_check())
        return {"drops": drops.tolist(), "answer": int(drops.argmax()),
                "score_kind": grid.score_kind, "label": grid.label}
    top = predict(model, image, topk=5)
    return {"top": [[p.index, p.label, p.probability] for p in top], "answer": top[0].index}


def _revealed(question, answers: list) -> None:
    """The model's answer beside the class's, in words and a figure."""
    from xai_core.figures import class_figures as figs

    result = question.result or {}
    if question.kind == "patches" and "rows" in result:
        patches = ", ".join(map(str, result["patches"]))
        st.markdown(f"The class's {len(result['patches'])} most-clicked patches: {patches}.")
        for removal, sentence in result["sentences"].items():
            st.markdown(literal.text(sentence))
            ui.show_figure(figs.class_reveal_figure(result["rows"], removal,
                                                    result["score_kind"]),
                           key=f"class_reveal_{question.id}_{removal}")
        st.caption("Drop: the score of the whole picture minus the score without those "
                   "patches (page 9's \"Predict, then reveal\"; random: the mean of 20 draws "
                   "of k patches with its 95% interval).")
    elif question.kind == "head" and "drops" in result:
        drops = result["drops"]
        chosen = [answers.count(h) for h in range(len(drops))]
        favourite = max(range(len(drops)), key=lambda h: (chosen[h], -h))
        st.markdown(f"Switching head {result['answer']} off cuts the "
                    f"{literal.text(result['label'])} score most (by "
                    f"{drops[result['answer']]:+.4f}); the class chose head {favourite} most "
                    f"often (switching it off: {drops[favourite]:+.4f}).")
        ui.show_figure(figs.answer_bars([f"head {h}" for h in range(len(drops))], drops,
                                        result["answer"], title="drop with the head off",
                                        axis=literal.figure(result["score_kind"])),
                       key=f"class_drops_{question.id}")
    elif "top" in result:
        index, label, probability = result["top"][0]
        st.markdown(f"The model answers **{literal.text(label)}** ({probability:.0%}).")


def _check_controls(code: str, key: str, phase: str | None) -> None:
    from xai_core.figures import class_figures as figs

    st.markdown("**Learning check** (the same questions before and after the tour)")
    columns = st.columns(3)
    for column, (wanted, label) in zip(columns, [("before", "Open: before the tour"),
                                                 ("after", "Open: after the tour"),
                                                 (None, "Close the check")]):
        if column.button(label, key=f"class_check_{wanted}", disabled=phase == wanted):
            _store().set_check_phase(code, key, wanted)
            _forget_place(code)
            st.rerun()
    shares = _store().report(code)["checks"]
    if any(item[p]["answers"] for item in shares for p in checks.PHASES):
        ui.show_figure(figs.check_figure(shares), key="class_check_shares")
        st.caption(" ".join(f"Q{item['item']}: {literal.text(item['question'])}"
                            for item in shares))


# --- a student's side -----------------------------------------------------------------------

def _student_panel() -> None:
    code, token = st.session_state[CODE], st.session_state[TOKEN]
    place = st.session_state[RUN_PLACE][1]
    question = place.question
    if question is None and place.check_phase is None:
        return
    with st.container(border=True):
        if question is not None:
            _answer_question(code, token, question)
        if place.check_phase is not None:
            _answer_check(code, token, place.check_phase)


@st.fragment  # a tap or Send reruns this part only, not the page under it
def _answer_question(code: str, token: str, question) -> None:
    with refusals_in_words():
        _question_form(code, token, question)


def _question_form(code: str, token: str, question) -> None:
    store = _store()
    mine = store.my_answer(code, token, question.id)
    st.markdown(f"**Question {question.number}: {_asks(question)}**")
    if question.revealed:
        if mine is not None:
            st.caption(f"Your answer: {_answer_words(question, mine)}.")
        answers = store.answers(code, question.id)
        _class_answers(question, answers)
        _revealed(question, answers)
        return
    value = (_pick_patches(question) if question.kind == "patches"
             else _pick_choice(question, mine))
    if st.button("Send my answer", type="primary", key="class_send",
                 disabled=value is None):
        try:
            store.answer(code, token, question.id, value)
            mine = value  # committed: only now is it acknowledged
            st.success("Received. You can change it until the instructor reveals.")
        except ClassError as error:
            st.warning(literal.text(error))
    if mine is not None:
        st.caption(f"Your answer: {_answer_words(question, mine)}. Only you see it until "
                   "the reveal.")


def _answer_words(question, value) -> str:
    if question.kind == "patches":
        return "patches " + ", ".join(map(str, sorted(value)))
    labels, values = _choices(question)
    return literal.text(labels[values.index(value)]) if value in values else "?"


def _toggle(patch: int, most: int) -> dict:
    chosen = list(st.session_state.get(PICKED, []))
    if patch in chosen:
        chosen.remove(patch)
    elif len(chosen) < most:
        chosen.append(patch)
    return {PICKED: chosen}


def _pick_patches(question):
    from xai_core.figures import intervention_figures as iv_figs
    from xai_core.pipeline import prepare

    context = question.context
    k = context["k"]
    apply_chart_click(PICK_CHART, lambda d: _toggle(int(d[0]), k))
    picked = st.session_state.setdefault(PICKED, [])
    model, image = _model_and_image(context)
    if model is None:
        return None
    grid = tuple(context["grid"])
    size = model.spec.input_size
    st.caption(f"Tap {k} patches; tap again to unpick. Picked: {len(picked)} of {k}.")
    ui.show_figure(iv_figs.pick_figure(prepare(model, image).model_image, grid,
                                       (size[0] / grid[0], size[1] / grid[1]), picked),
                   key=PICK_CHART, on_select="rerun", selection_mode="points")
    return sorted(picked) if len(picked) == k else None


def _pick_choice(question, mine):
    labels, values = _choices(question)
    index = values.index(mine) if mine in values else None
    picked = st.radio("Your answer", range(len(values)), index=index,
                      format_func=lambda i: literal.text(labels[i]),
                      key=f"class_choice_{question.id}", horizontal=question.kind == "head")
    return None if picked is None else values[picked]


@st.fragment
def _answer_check(code: str, token: str, phase: str) -> None:
    with refusals_in_words():
        _check_form(code, token, phase)


def _check_form(code: str, token: str, phase: str) -> None:
    store = _store()
    mine = store.my_checks(code, token, phase)
    st.markdown(f"**Learning check, {checks.PHASES[phase]}**")
    with st.form(f"class_check_{phase}"):
        chosen = {}
        for number, item in enumerate(checks.ITEMS):
            order = item.shown_order()
            shown = order.index(mine[number]) if number in mine else None
            pick = st.radio(f"{number + 1}. {item.question}", range(len(order)), index=shown,
                            format_func=lambda i, o=order, c=item.choices: c[o[i]],
                            key=f"class_check_{phase}_{number}")
            if pick is not None:
                chosen[number] = order[pick]
        sent = st.form_submit_button("Send my answers")
    if sent:
        try:
            for number, choice in chosen.items():
                store.answer_check(code, token, phase, number, choice)
            st.success(f"Received {ui.count(len(chosen), 'answer')}.")
        except ClassError as error:
            st.warning(literal.text(error))
