"""The head question in Chromium, asked from the Explainer's head chips.

The instructor (the teacher's link) opens the ViT Explainer and block 3 there (its head chips);
a student on a 390x844 touch phone joins on Home and follows there; the instructor's "Ask the
class" asks "which head matters most in this block?" about the block on screen; the
student picks head 2 and sends it ("Received: head 2."); the projector counts one answer; Reveal
shows, on both screens, each head's drop when it alone is switched off, as xai_core computes it
(`classroom.reveal.head_answer`, itself checked against a forward written out in
tests/test_classroom_reveal.py), and the class's choice beside the model's."""

from __future__ import annotations

import re

from e2e_helpers import ARTIFACTS, AppProcess, app_env, wait_app_idle, watched_tab
from explainer_driver import PAGE_PATH, ROOT, open_explainer, wait_for_state

from dashboard.class_questions import RECEIVED
from dashboard.state import DEFAULT_IMAGE
from xai_core.classroom.reveal import HEAD_DIGITS, head_answer
from xai_core.classroom.store import DB_ENV, KINDS, ClassStore
from xai_core.images import load_sample
from xai_core.models import DEFAULT_VIT, get_model
from xai_core.studies.interventions import drop_words

BLOCK = 3
CHOSEN = 2
FOLLOW_S = 120  # the test's bound; the load bench measures the real latency


def wait_text(page, text: str, timeout_s: float = 240) -> None:
    page.wait_for_function(
        "t => document.querySelector(\"[data-testid='stApp']\").innerText.includes(t)",
        arg=text, timeout=timeout_s * 1000)


def main_text(page) -> str:
    return page.locator("[data-testid='stMain']").inner_text()


def test_the_head_question_from_the_explainers_chips(tmp_path, browser):
    url = f"sqlite:///{tmp_path / 'classes.sqlite'}"
    app = AppProcess(log_name="classroom-heads", env={**app_env(), DB_ENV: url})
    store = ClassStore(url)
    made = store.new_class()
    tabs = [watched_tab(browser, 1500, 1400),
            watched_tab(browser, 390, 844, is_mobile=True, has_touch=True,
                        device_scale_factor=2)]
    teacher, student = tabs[0][1], tabs[1][1]
    try:
        app.wait_healthy()
        open_explainer(teacher, app.url, f"?class={made.code}&class_key={made.key}")
        teacher.locator(f"{ROOT} .vx-block[data-block='{BLOCK}']").click()  # its head chips
        wait_for_state(teacher, "block", str(BLOCK))
        wait_app_idle(teacher)

        student.goto(app.url + f"?class={made.code}")
        student.wait_for_url(re.compile(f"/{PAGE_PATH}"), timeout=FOLLOW_S * 1000)
        wait_app_idle(student)

        teacher.get_by_text("Ask the class").first.click()  # the expander
        wait_text(teacher, "asks about the block open in the Explainer")
        teacher.get_by_role("button", name=f"Ask: {KINDS['head']}?").click()
        wait_text(teacher, "0 answers from 1 student")

        wait_text(student, f"Question 1: which head of block {BLOCK} matters most")
        wait_app_idle(student)
        student.get_by_text(f"head {CHOSEN}", exact=True).tap()
        wait_app_idle(student)
        student.get_by_role("button", name="Send my answer").tap()
        wait_text(student, f"{RECEIVED} head {CHOSEN}.")
        assert "Switching head" not in main_text(student)  # the model's answer: at the reveal
        wait_text(teacher, "1 answer from 1 student", timeout_s=FOLLOW_S)

        teacher.get_by_role("button", name="Reveal").click()
        result = head_answer(get_model(DEFAULT_VIT), load_sample(DEFAULT_IMAGE), BLOCK)
        best, drops = result["answer"], result["drops"]
        for page in (teacher, student):
            wait_text(page, f"Switching head {best} off cut the ", timeout_s=FOLLOW_S + 240)
            text = main_text(page)
            assert f"most: by {drops[best]:.{HEAD_DIGITS}f}." in text
            if best == CHOSEN:
                assert f"The class chose head {CHOSEN} most often too." in text
            else:
                assert (f"The class chose head {CHOSEN} most often: with it off, the score "
                        f"{drop_words(drops[CHOSEN], HEAD_DIGITS)}.") in text
        question = store.report(made.code)["questions"][0]
        assert question["kind"] == "head" and question["context"]["block"] == BLOCK
        assert question["tally"] == {str(CHOSEN): 1} and question["revealed"]
        for _, _, errors in tabs:
            assert errors == [], errors
    except Exception:
        for number, (_, page, _) in enumerate(tabs):
            page.screenshot(path=str(ARTIFACTS / f"classroom-heads-tab{number}.png"),
                            full_page=True)
        raise
    finally:
        for context, _, _ in tabs:
            context.close()
        app.stop()
        store.close()
