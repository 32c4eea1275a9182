"""The Explainer's Export lesson on a live server, as a class uses it: the file is still there
when its download is asked for after other sessions' runs have ended in the same process (a
deferred download's file, which no session references, was deleted by any two of them: 2 of
20 students exporting at once got HTTP 404 in `make bench`)."""

from __future__ import annotations

from urllib.parse import quote

from e2e_helpers import running_apps

from bench.load_mixes import export_lesson
from dashboard.page_visit import open_page, run_in_thread


def test_the_lesson_file_outlives_other_sessions_runs():
    with running_apps(1, log_name="lesson-download") as [app]:
        others = []

        async def two_other_students() -> None:
            for _ in range(2):
                others.append(await open_page(app.url, "", "", timeout=240))

        seconds, size, error = run_in_thread(export_lesson(
            app.url, "image_choice=" + quote("Chelsea the cat"), timeout=300,
            meanwhile=two_other_students))
        assert error == "" and size > 1_000_000, (error, size)
        assert len(others) == 2 and all(run.error == "" for run in others), others
