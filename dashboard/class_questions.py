"""The class's questions on the page: the instructor asks, watches the answers come in and
reveals the model's measured answer; a student answers and, after the reveal, sees both.

The instructor's panel "Ask the class" sits under the class line (`classroom.top`); a student's
open question sits right under the class bar, at the top of the page, above the page's own
content. Nothing anyone types reaches Markdown except through `literal`.
"""

from __future__ import annotations

import streamlit as st

from dashboard import literal, state, ui
from dashboard.class_state import (CODE, KEY, PICKED, RUN_PLACE, TOKEN, forget_place,
                                   refusals_in_words, store)
from dashboard.clicks import apply_chart_click
from dashboard.explainer.component import shown_block
from xai_core.classroom import checks
from xai_core.classroom.report import report_csv
from xai_core.classroom.store import KINDS, ClassError

LIVE_S = 1.0  # the projector's live count and answers
RECEIVED = "Received:"  # a student's answer is stored: "Received: head 3. ..."
PICK_CHART = "class_pick"
SEND, CHECK_SEND = "class_send", "class_check_send"  # a student's buttons that store answers


def answer_pending() -> bool:
    """Whether this run carries a press of "Send my answer(s)" (its widget value is there
    before the button is drawn): the follow poll above it must not switch or rerun the page
    first, which would end this run before the press is stored, and lose it."""
    return any(st.session_state.get(key) is True for key in (SEND, CHECK_SEND))


# --- the instructor's side ------------------------------------------------------------------

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
        last, shown = len(model.module.blocks) - 1, shown_block()  # the chips on screen
        block = shown if shown is not None and 0 <= shown <= last else last
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


def ask_panel(url_path: str) -> None:
    """The instructor's questions of this page, the open one live, and the learning check."""
    with refusals_in_words():
        _ask_panel(url_path)


def _ask_panel(url_path: str) -> None:
    code, key = st.session_state[CODE], st.session_state[KEY]
    place = store().place(code)
    open_now = place.question is not None or place.check_phase is not None
    with st.expander("Ask the class", expanded=open_now, icon=":material/quiz:"):
        if place.question is None:
            _ask_controls(code, key, url_path)
        else:
            _live_question(code, key)
        _check_controls(code, key, place.check_phase)
        report = store().report(code)
        st.download_button("Download the class's answers (CSV)", report_csv(report),
                           file_name=f"class-{code}.csv", mime="text/csv")


def _ask_controls(code: str, key: str, url_path: str) -> None:
    kinds = _askable(url_path)
    if "head" in kinds:
        st.caption("The head question asks about the block open in the Explainer below (its "
                   "head chips): open the block first.")
    columns = st.columns(len(kinds))
    for column, kind in zip(columns, kinds):
        if column.button(f"Ask: {KINDS[kind]}?", key=f"class_ask_{kind}"):
            context = _question_context(kind, url_path)
            if isinstance(context, str):
                st.info(context)
                return
            st.session_state.pop(PICKED, None)
            store().open_question(code, key, kind, context)
            forget_place(code)
            st.rerun()
    if "patches" not in kinds:
        st.caption("The patch question is asked from page 9's view \"Predict, then reveal\".")


@st.fragment(run_every=LIVE_S)
def _live_question(code: str, key: str) -> None:
    """The open question on the projector: the live count, the class's answers, Reveal."""
    with refusals_in_words():
        _live_question_once(code, key)


def _live_question_once(code: str, key: str) -> None:
    db = store()
    place = db.place(code)
    question = place.question
    if question is None:
        st.rerun(scope="app")
    students = db.live(code)[0]
    answers = db.answers(code, question.id, key=key)
    st.markdown(f"**Question {question.number}: {_asks(question)}**")
    st.markdown(f"{ui.count(len(answers), 'answer')} from "
                f"{ui.count(students, 'student')} in the class.")
    _class_answers(question, answers)
    left, right = st.columns(2)
    if not question.revealed and left.button("Reveal", type="primary", key="class_reveal",
                                             disabled=not answers):
        with st.spinner("Measuring the model's answer..."):
            result = _model_answer(question, answers)
        db.reveal(code, key, result)
        forget_place(code)
        st.rerun(scope="app")
    if question.revealed:
        _revealed(question, answers)
    if right.button("Close the question", key="class_close"):
        db.close_question(code, key)
        forget_place(code)
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
    from xai_core.classroom.reveal import classes_answer, head_answer, patch_reveal

    context = question.context
    model, image = _model_and_image(context)
    if question.kind == "patches":
        found = patch_reveal(model, image, answers, context["k"], target=context["target"],
                             should_stop=ui.stop_check())
        return {"patches": found.patches, "rows": found.rows,
                "score_kind": found.test.score_kind,
                "sentences": {r: found.sentence(r) for r in found.test.removals}}
    if question.kind == "head":
        return head_answer(model, image, context["block"], should_stop=ui.stop_check())
    return classes_answer(model, image)


def _revealed(question, answers: list) -> None:
    """The model's answer beside the class's, in words and a figure."""
    from xai_core.classroom.reveal import classes_sentence, head_sentence
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
        st.markdown(literal.text(head_sentence(result, answers)))
        ui.show_figure(figs.answer_bars([f"head {h}" for h in range(len(drops))], drops,
                                        result["answer"], title="drop with the head off",
                                        axis=literal.figure(result["score_kind"])),
                       key=f"class_drops_{question.id}")
    elif "top" in result:
        st.markdown(literal.text(classes_sentence(result, answers,
                                                  question.context["options"])))


def _check_controls(code: str, key: str, phase: str | None) -> None:
    from xai_core.figures import class_figures as figs

    st.markdown("**Learning check** (the same questions before and after the tour)")
    columns = st.columns(3)
    for column, (wanted, label) in zip(columns, [("before", "Open: before the tour"),
                                                 ("after", "Open: after the tour"),
                                                 (None, "Close the check")]):
        if column.button(label, key=f"class_check_{wanted}", disabled=phase == wanted):
            store().set_check_phase(code, key, wanted)
            forget_place(code)
            st.rerun()
    shares = store().report(code)["checks"]
    if any(item[p]["answers"] for item in shares for p in checks.PHASES):
        ui.show_figure(figs.check_figure(shares), key="class_check_shares")
        st.caption(" ".join(f"Q{item['item']}: {literal.text(item['question'])}"
                            for item in shares))


# --- a student's side -----------------------------------------------------------------------

def student_panel() -> None:
    """A student's open question and check, at the top of the page (nothing when none)."""
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
    db = store()
    mine = db.my_answer(code, token, question.id)
    st.markdown(f"**Question {question.number}: {_asks(question)}**")
    if question.revealed:
        if mine is not None:
            st.caption(f"Your answer: {_answer_words(question, mine)}.")
        answers = db.answers(code, question.id)
        _class_answers(question, answers)
        _revealed(question, answers)
        return
    value = (_pick_patches(question) if question.kind == "patches"
             else _pick_choice(question, mine))
    if st.button("Send my answer", type="primary", key=SEND,
                 disabled=value is None) and value is not None:
        try:
            db.answer(code, token, question.id, value)
            mine = value  # committed: only now is it acknowledged
        except ClassError as error:
            st.warning(literal.text(error))
    if mine is not None:
        # what the database holds, in every run, not in the press's run only: that run may
        # be cut short by the next (a page switch as the instructor moves) before it is shown
        st.success(f"{RECEIVED} {_answer_words(question, mine)}. You can change it until the "
                   "instructor reveals; only you see it.")


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
    db = store()
    mine = db.my_checks(code, token, phase)
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
        sent = st.form_submit_button("Send my answers", key=CHECK_SEND)
    if sent:
        try:
            for number, choice in chosen.items():
                db.answer_check(code, token, phase, number, choice)
            st.success(f"Received {ui.count(len(chosen), 'answer')}.")
        except ClassError as error:
            st.warning(literal.text(error))
