"""A class through the recipe's nginx and two replicas (tests/e2e/proxy_helpers.py), students
as Streamlit-protocol sessions (bench/class_client.py: what a tab sends and receives):

- a replica is killed (SIGKILL) while the class answers: every answer the app acknowledged
  ("Received: ...") is in the database afterwards;
- both replicas are killed and started again: the class's report is the same before and after
  (`python -m xai_core class report CODE --json`), and a student who joins after the restart
  gets the open question."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections import Counter

from e2e_helpers import ROOT, AppProcess, app_env
from proxy_helpers import PREFIX, nginx_in_front

from bench.class_client import ClassSession
from dashboard.page_visit import run_in_thread
from xai_core.classroom.store import DB_ENV, ClassStore

STUDENTS = 16
HEADS = 6
RECEIVED = "Received:"


async def join(base: str, code: str) -> ClassSession:
    student = ClassSession(base)
    await student.open("", f"class={code}", timeout=300)
    return student


async def answer(student: ClassSession, question_id: int, head: int, delay: float) -> bool:
    """True when the app acknowledged the answer."""
    await asyncio.sleep(delay)
    try:
        started = time.perf_counter()
        await student.set_and_press({f"class_choice_{question_id}": f"head {head}"},
                                    "class_send", timeout=120)
        return RECEIVED in student.text_since(started - 1)
    except (ConnectionError, TimeoutError, KeyError):
        return False


def cli_report(code: str, url: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "xai_core", "class", "report", code, "--json"],
                          cwd=ROOT, env={**app_env(), DB_ENV: url}, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_kill_and_restart_keep_every_acknowledged_answer(tmp_path):
    url = f"sqlite:///{tmp_path / 'classes.sqlite'}"
    env = {**app_env(), DB_ENV: url}
    apps = [AppProcess(PREFIX, "classroom-proxy", env=env) for _ in range(2)]
    store = ClassStore(url)
    made = store.new_class()
    question = store.open_question(made.code, made.key, "head", {"heads": HEADS, "block": 11})
    try:
        for app in apps:
            app.wait_healthy()
        with nginx_in_front(apps, log_name="classroom-proxy-nginx") as proxy:
            async def class_answers():
                students = await asyncio.gather(*(join(proxy.url, made.code)
                                                  for _ in range(STUDENTS)))
                for student in students:
                    assert f"class_choice_{question.id}" in student.seen.widgets
                answers = asyncio.gather(*(answer(s, question.id, n % HEADS, 0.4 * n)
                                           for n, s in enumerate(students)))
                await asyncio.sleep(0.4 * STUDENTS / 2)
                apps[0].kill()  # half the class has answered
                acknowledged = await answers
                for student in students:
                    await student.close()
                return acknowledged

            acknowledged = run_in_thread(class_answers())
            report = store.report(made.code)
            stored = {int(head): count for head, count
                      in report["questions"][0]["tally"].items()}
            expected = Counter(n % HEADS for n, ok in enumerate(acknowledged) if ok)
            assert sum(acknowledged) >= STUDENTS // 3, acknowledged  # the survivor answered
            assert all(stored.get(head, 0) >= count for head, count in expected.items()), \
                (stored, expected)
            assert report["students"] == STUDENTS

            before = cli_report(made.code, url)
            for app in apps:
                app.kill()
                app.stop()
            apps[:] = [AppProcess(PREFIX, "classroom-proxy", env=env, port=app.port)
                       for app in apps]
            for app in apps:
                app.wait_healthy()
            assert cli_report(made.code, url) == before
            async def late_student() -> set[str]:
                student = await join(proxy.url, made.code)
                await student.close()
                return set(student.seen.widgets)

            assert f"class_choice_{question.id}" in run_in_thread(late_student())
    finally:
        for app in apps:
            app.stop()
        store.close()
