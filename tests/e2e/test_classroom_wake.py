"""A class's wake never cancels a student's answer (one replica, students as Streamlit-protocol
sessions that press "Send my answer" as a browser does: a run of the answer's fragment).

While the students answer, the instructor moves every MOVE_S seconds, so each student's page is
woken and switched again and again, and many presses land while their session is busy. Every
answer must be stored and acknowledged ("Received: head 3. ...", on a loaded machine perhaps
only once the instructor stops and the page settles), and the class's tally must be the answers
sent. What failed before (2-core development machine, load 10-14):
- the follow poll, drawn above the question, switched the page in the run that carried the
  press, which ended that run before the press was stored: 4 of 12 answers lost (now
  `class_questions.answer_pending` lets the press be stored first);
- a wake handled while a finished run's last messages still waited on the event loop made
  Streamlit drop them, "Received." among them (now `class_wake._request_when_idle`);
- a wake that asked for a run of the whole app stopped the run in progress."""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from itertools import cycle

from e2e_helpers import AppProcess, app_env

from bench.class_client import ClassSession
from dashboard.class_questions import RECEIVED
from dashboard.page_visit import run_in_thread
from xai_core.classroom.store import DB_ENV, ClassStore

STUDENTS = 12
HEADS = 6
MOVE_S = 0.3
ANSWER_S = 8.0  # the presses are spread over this long
PICTURES = ("coffee", "chelsea")


async def answered(student: ClassSession, question_id: int, head: int, delay: float) -> bool:
    """True when the app acknowledged this press, naming the head sent."""
    await asyncio.sleep(delay)
    started = time.perf_counter()
    said = f"{RECEIVED} head {head}."
    await student.set_and_press({f"class_choice_{question_id}": f"head {head}"}, "class_send",
                                timeout=120, until=(said,))
    return said in student.text_since(started)


async def a_class_answers_while_moving(base: str, store: ClassStore, code: str, key: str,
                                       question_id: int) -> list[bool]:
    students = []
    for _ in range(STUDENTS):
        student = ClassSession(base)
        await student.open("", f"class={code}", timeout=300)
        await student.wait_for(lambda s=student: "class_send" in s.seen.widgets, 120)
        students.append(student)

    async def move() -> int:
        """Move every MOVE_S while the class answers, and a little after."""
        moves, stop = 0, time.perf_counter() + ANSWER_S + 2
        for picture in cycle(PICTURES):
            if time.perf_counter() > stop:
                return moves
            await asyncio.to_thread(store.move, code, key, "", {"image_choice": picture})
            moves += 1
            await asyncio.sleep(MOVE_S)

    mover = asyncio.create_task(move())
    delays = random.Random(41).sample(range(int(ANSWER_S * 100)), STUDENTS)
    acknowledged = await asyncio.gather(*(answered(s, question_id, n % HEADS, delay / 100)
                                          for n, (s, delay) in enumerate(zip(students,
                                                                             delays))))
    assert await mover >= ANSWER_S / MOVE_S / 2  # the class was woken all along
    for student in students:
        await student.close()
    return list(acknowledged)


def test_every_answer_sent_while_the_instructor_moves_is_stored_and_acknowledged(tmp_path):
    url = f"sqlite:///{tmp_path / 'classes.sqlite'}"
    app = AppProcess(log_name="classroom-wake", env={**app_env(), DB_ENV: url})
    store = ClassStore(url)
    made = store.new_class()
    store.move(made.code, made.key, "", {"image_choice": PICTURES[-1]})
    question = store.open_question(made.code, made.key, "head", {"heads": HEADS, "block": 11})
    try:
        app.wait_healthy()
        acknowledged = run_in_thread(a_class_answers_while_moving(
            app.url, store, made.code, made.key, question.id))
        tally = store.report(made.code)["questions"][0]["tally"]
        assert acknowledged == [True] * STUDENTS
        assert {int(h): n for h, n in tally.items()} == Counter(n % HEADS
                                                               for n in range(STUDENTS))
        assert "Traceback" not in app.log()
    finally:
        app.stop()
        store.close()
