"""A class's report as CSV (the instructor's download): one row per answer counted, anonymous."""

from __future__ import annotations

import csv
import io

COLUMNS = ("section", "number", "asks", "answer", "count", "answers", "share")


def report_csv(report: dict) -> str:
    """Rows: each question's tally (an answer and how many chose it; for patches, how many
    clicked each patch) and each check item's correct answers before and after the tour."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    writer.writerow(("class", report["code"], "students who joined", "", report["students"],
                     "", ""))
    for question in report["questions"]:
        for answer, count in question["tally"].items():
            writer.writerow(("question", question["id"], question["asks"], answer, count,
                             question["answers"], f"{count / question['answers']:.4f}"))
    for item in report["checks"]:
        for phase in ("before", "after"):
            found = item[phase]
            share = "" if found["share"] is None else f"{found['share']:.4f}"
            writer.writerow((f"check {phase}", item["item"], item["question"], "correct",
                             found["correct"], found["answers"], share))
    return out.getvalue()
