"""The class's reveal: the most-clicked patches, the clicks per patch, and the numbers shown on
Reveal, which are page 9's "Predict, then reveal" core for the same patches (and, for the
tokens dropped, timm's forward on the hand-shortened sequence)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from test_cause_vs_claim import hand_score
from xai_core.studies import cause_vs_claim as claims
from xai_core.lessons import interventions_lab as lab
from xai_core.classroom.reveal import click_grid, drop_words, most_clicked, patch_reveal
from xai_core.classroom.report import report_csv

METHODS = ("attention", "rollout")
ANSWERS = [[40, 41], [41, 56], [56, 40], [41, 90]]  # 41: three clicks; 40 and 56: two each


def test_most_clicked_and_ties():
    assert most_clicked(ANSWERS, 1) == [41]
    assert most_clicked(ANSWERS, 2) == [40, 41]  # 40 and 56 tie: the lower number goes first
    assert most_clicked(ANSWERS, 3) == [40, 41, 56]
    assert most_clicked([], 2) == []


def test_clicks_per_patch():
    grid = click_grid(ANSWERS, (10, 10))
    expected = np.zeros(100)
    for answer in ANSWERS:
        for patch in answer:
            expected[patch] += 1
    assert np.array_equal(grid.ravel(), expected) and grid.shape == (10, 10)


def test_drop_words_say_the_sign():
    assert drop_words("the class's patches", 0.2149, "the cat score") == \
        "the class's patches cut the cat score by 0.21"
    assert drop_words("x", -0.0018, "it") == "x raised it by 0.00"


@pytest.fixture(scope="module")
def revealed(dinov2, image):
    claims.RESULTS.clear()
    return patch_reveal(dinov2, image, ANSWERS, 2, methods=METHODS)


def test_the_class_reveal_is_page_9s_core_for_the_same_patches(dinov2, image, revealed):
    claims.RESULTS.clear()  # page 9's call, computed again
    page9 = claims.cause_vs_claim(dinov2, image, ks=(2,), removals=("tokens", "pixels"),
                                  learner=[40, 41], methods=METHODS)
    assert revealed.patches == [40, 41]
    expected = [{**row, "chooser": "the class" if row["chooser"] == "you" else row["chooser"]}
                for row in lab.reveal_rows(page9)]
    assert len(revealed.rows) == len(expected)
    for got, want in zip(revealed.rows, expected):
        assert got.keys() == want.keys()
        for name, value in want.items():
            if isinstance(value, float):
                assert got[name] == pytest.approx(value, abs=1e-6, nan_ok=True), name
            else:
                assert got[name] == value
    hand = page9.score - hand_score(dinov2, image, page9.target, tokens_out=[40, 41])
    assert revealed.test.removals["tokens"].learner == pytest.approx(hand, abs=1e-5)


def test_the_sentence_quotes_the_rows(revealed):
    for removal in ("tokens", "pixels"):
        sentence = revealed.sentence(removal)
        numbers = [float(n) for n in re.findall(r"by (\d+\.\d\d)", sentence)]
        rows = [row for row in revealed.rows if row["removal"] == removal]
        mine = next(row["drop"] for row in rows if row["chooser"] == "the class")
        best = max(row["drop"] for row in rows if row["chooser"] in METHODS)
        random = next(row["drop"] for row in rows if row["chooser"].startswith("random"))
        assert numbers == [round(abs(v), 2) for v in (mine, best, random)]
        assert sentence.startswith(claims.REMOVALS[removal].capitalize())


def test_report_csv_rows():
    report = {"code": "K7PX2M", "students": 3,
              "questions": [{"id": 1, "asks": "which head", "answers": 3,
                             "tally": {"0": 1, "2": 2}}],
              "checks": [{"item": 1, "question": "What, \"quoted\"?",
                          "before": {"answers": 4, "correct": 1, "share": 0.25},
                          "after": {"answers": 0, "correct": 0, "share": None}}]}
    import csv
    import io

    rows = list(csv.reader(io.StringIO(report_csv(report))))
    assert rows[1] == ["class", "K7PX2M", "students who joined", "", "3", "", ""]
    assert rows[2:4] == [["question", "1", "which head", "0", "1", "3", "0.3333"],
                         ["question", "1", "which head", "2", "2", "3", "0.6667"]]
    assert rows[4] == ["check before", "1", "What, \"quoted\"?", "correct", "1", "4", "0.2500"]
    assert rows[5][-1] == ""
