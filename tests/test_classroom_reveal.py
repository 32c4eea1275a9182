"""The class's reveal: the most-clicked patches, the clicks per patch, and the numbers shown on
Reveal, which are page 9's "Predict, then reveal" core for the same patches (and, for the
tokens dropped, timm's forward on the hand-shortened sequence)."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from test_cause_vs_claim import hand_score
from tolerance import assert_close, class_score_tolerance
from xai_core.studies import cause_vs_claim as claims
from xai_core.lessons import interventions_lab as lab
from xai_core.classroom.reveal import (classes_answer, classes_sentence, click_grid,
                                       removed_words, head_answer, head_sentence, most_clicked,
                                       patch_reveal)
from xai_core.models import knn
from xai_core.pipeline import prepare
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


def test_removed_words_say_which_way_the_score_went():
    assert removed_words("the class's patches", 0.2149, "the cat score") == \
        "with the class's patches out, the cat score fell by 0.21"
    assert removed_words("x", -0.018, "it") == "with x out, it rose by 0.02"
    assert removed_words("x", -0.0018, "it") == "with x out, it did not move"  # 0.00


def said_drops(sentence: str, digits: int) -> list[float]:
    """The drops a sentence quotes, signed back from its words (fell: +, rose: -)."""
    found = re.findall(rf"(fell|rose) by (\d+\.\d{{{digits}}})|(did not move)", sentence)
    return [0.0 if still else float(n) * (1 if verb == "fell" else -1)
            for verb, n, still in found]


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
        rows = [row for row in revealed.rows if row["removal"] == removal]
        mine = next(row["drop"] for row in rows if row["chooser"] == "the class")
        best = max(row["drop"] for row in rows if row["chooser"] in METHODS)
        random = next(row["drop"] for row in rows if row["chooser"].startswith("random"))
        assert said_drops(sentence, 2) == [round(v, 2) + 0.0 for v in (mine, best, random)]
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


# --- the head and classes questions: the stored answer against a forward written out -------

BLOCK = 11
HEAD_ANSWERS = [2, 2, 5, 2, 0, 5]  # the class's favourite: head 2 (three of six)


def hand_features(model, image, block=None, head_off=None) -> torch.Tensor:
    """timm's plain forward (CLS features); with `head_off`, that head's slice of what enters
    block `block`'s W_O (`attn.proj`: the heads' outputs side by side) set to zero."""
    module = model.module
    pixels = prepare(model, image).pixels
    handles = []
    if head_off is not None:
        width = module.embed_dim // module.blocks[block].attn.num_heads

        def zero_head(_module, args):
            context = args[0].clone()
            context[..., head_off * width:(head_off + 1) * width] = 0
            return (context, *args[1:])
        handles.append(module.blocks[block].attn.proj.register_forward_pre_hook(zero_head))
    try:
        with model.lock, torch.inference_mode():
            return module(pixels).float()
    finally:
        for handle in handles:
            handle.remove()


def hand_class_score(model, features: torch.Tensor, target: int) -> float:
    """The k-NN head's class score written out: the mean cosine of the features with the
    class's CLASS_SCORE_NEIGHBOURS most similar bank entries."""
    bank = model.head.bank
    query = features[0].double().numpy()
    query = query / np.linalg.norm(query)
    name = bank.class_names[target]
    members = np.array([bank.features[i].double().numpy() for i, label in
                        enumerate(bank.labels) if label == name])
    cosines = np.sort(members @ query)[::-1][:knn.CLASS_SCORE_NEIGHBOURS]
    return float(cosines.mean())


def hand_vote(model, features: torch.Tensor) -> np.ndarray:
    """The k-NN head's class probabilities written out: the KNN_K most similar bank entries
    vote exp(cosine / temperature) for their class."""
    bank = model.head.bank
    query = features[0].double().numpy()
    query = query / np.linalg.norm(query)
    cosines = bank.features.double().numpy() @ query
    votes = np.zeros(len(bank.class_names))
    for entry in np.argsort(-cosines, kind="stable")[:knn.KNN_K]:
        votes[bank.class_names.index(bank.labels[entry])] += np.exp(
            cosines[entry] / knn.KNN_TEMPERATURE)
    return votes / votes.sum()


@pytest.fixture(scope="module")
def head_found(dinov2, image):
    plain = hand_features(dinov2, image)
    target = int(np.argmax(hand_vote(dinov2, plain)))
    base = hand_class_score(dinov2, plain, target)
    heads = dinov2.module.blocks[BLOCK].attn.num_heads
    offs = [hand_features(dinov2, image, BLOCK, h) for h in range(heads)]
    drops = [base - hand_class_score(dinov2, off, target) for off in offs]
    tolerances = [class_score_tolerance(dinov2, target, plain) +
                  class_score_tolerance(dinov2, target, off) for off in offs]
    return target, np.array(drops), np.array(tolerances)


@pytest.mark.numeric
def test_the_head_reveal_is_each_heads_measured_drop(dinov2, image, head_found):
    target, drops, tolerances = head_found
    result = head_answer(dinov2, image, BLOCK)
    assert result["label"] == dinov2.head.class_names[target]
    assert result["block"] == BLOCK and len(result["drops"]) == len(drops)
    for head, (got, want, atol) in enumerate(zip(result["drops"], drops, tolerances)):
        assert_close(got, want, atol, f"head {head}")
    # the head that matters most is the largest written-out drop (within the tolerance)
    assert drops[result["answer"]] >= drops.max() - tolerances.max()
    assert np.abs(drops).max() > 0.01  # switching a head off does something
    # the class's favourite (head 2) against the model's: both quoted from the stored drops
    sentence = head_sentence(result, HEAD_ANSWERS)
    numbers = re.findall(r"by (\d+\.\d{3})", sentence)
    best = result["answer"]
    assert sentence.startswith(f"Switching head {best} off cut the "
                               f"{result['label']} score most: by ")
    if best == 2:
        assert sentence.endswith("The class chose head 2 most often too.")
        assert numbers == [f"{result['drops'][2]:.3f}"]
    else:
        assert "The class chose head 2 most often: with it off, the score " in sentence
        assert numbers[:1] == [f"{result['drops'][best]:.3f}"]
        assert said_drops(sentence, 3)[-1] == round(result["drops"][2], 3) + 0.0
        assert abs(said_drops(sentence, 3)[-1] - drops[2]) <= 0.0005 + tolerances[2]


def test_the_head_sentence_for_every_case():
    result = {"drops": [0.012, 0.2134, -0.004], "answer": 1, "label": "tabby, tabby cat"}
    assert head_sentence(result, [2, 2, 0]) == (
        "Switching head 1 off cut the tabby, tabby cat score most: by 0.213. The class chose "
        "head 2 most often: with it off, the score rose by 0.004.")
    assert head_sentence(result, [1, 0]) == (  # a tie goes to the lower head
        "Switching head 1 off cut the tabby, tabby cat score most: by 0.213. The class chose "
        "head 0 most often: with it off, the score fell by 0.012.")
    assert head_sentence(result, [1]).endswith("The class chose head 1 most often too.")
    assert head_sentence(result, []) == ("Switching head 1 off cut the tabby, tabby cat "
                                         "score most: by 0.213.")
    rising = {"drops": [-0.02, -0.005], "answer": 1, "label": "cat"}
    assert head_sentence(rising, []) == ("No head's switch-off cut the cat score; head 1's "
                                         "raised it least: by 0.005.")


@pytest.mark.numeric
def test_the_classes_reveal_is_the_models_top_classes(dinov2, image):
    result = classes_answer(dinov2, image)
    probabilities = hand_vote(dinov2, hand_features(dinov2, image))
    order = np.argsort(-probabilities, kind="stable")[:5]
    voted = order[probabilities[order] > 0]  # classes no neighbour voted for tie at 0
    assert len(voted) >= 2
    assert [index for index, _, _ in result["top"][:len(voted)]] == voted.tolist()
    assert [label for _, label, _ in result["top"]] == [dinov2.head.class_names[i]
                                                        for i, _, _ in result["top"]]
    assert [p for _, _, p in result["top"]] == pytest.approx(
        probabilities[[i for i, _, _ in result["top"]]], abs=1e-5)
    assert result["answer"] == order[0]
    assert probabilities[order[0]] > probabilities[order[1]] + 1e-3  # one clear answer
    options = sorted(([i, dinov2.head.class_names[i]] for i in order[:4]),
                     key=lambda pair: pair[1].lower())  # the question's choices
    top, other = int(order[0]), int(order[1])
    label, share = dinov2.head.class_names[top], f"{probabilities[top]:.0%}"
    assert classes_sentence(result, [other, other, top], options) == (
        f"The model answers {label} ({share}). The class's most common answer: "
        f"{dinov2.head.class_names[other]} (2 of 3).")
    assert classes_sentence(result, [top, other, top], options) == (
        f"The model answers {label} ({share}). The class's most common answer was that too "
        f"(2 of 3).")
    assert classes_sentence(result, [], options) == f"The model answers {label} ({share})."
