"""The Explainer's head switch, read-out and the tour steps that use them (issue 32, item 6),
checked against forwards written here: a hook that zeroes one head's slice of the attention
output before W_O, and the model's own head on each block's normed output."""

from __future__ import annotations

import pytest
import torch

from dashboard.explainer import tour
from dashboard.explainer.glossary import plain
from dashboard.explainer.component import MAX_HEADS_OFF, switched_off
from xai_core.lessons import explainer
from xai_core.models import knn
from xai_core.pipeline import predictions_of, prepare
from xai_core.studies.interventions import drop_words
from xai_core.studies.readout import readout


def output_with_head_zeroed(model, image, block: int, head: int) -> torch.Tensor:
    """The model's output with one head's output set to 0 as it enters the projection."""
    module = model.module
    width = module.blocks[block].attn.head_dim

    def zero(_module, args):
        context = args[0].clone()
        context[..., head * width:(head + 1) * width] = 0
        return (context,)

    handle = module.blocks[block].attn.proj.register_forward_pre_hook(zero)
    try:
        with torch.inference_mode():
            output = module(prepare(model, image).pixels)
    finally:
        handle.remove()
    return output


def answer_with_head_zeroed(model, image, block: int, head: int):
    """Top-5 of the model with one head's output set to 0 as it enters the projection."""
    return predictions_of(model.head, output_with_head_zeroed(model, image, block, head), 5)


@pytest.mark.parametrize("block, head", [(0, 5), (6, 2), (11, 0)])
def test_head_switch_equals_a_forward_with_the_head_zeroed(dinov2, image, block, head):
    result = explainer.head_switch(dinov2, image, None, [(block, head)])
    expected = answer_with_head_zeroed(dinov2, image, block, head)
    assert [t["label"] for t in result["after"]] == [p.label for p in expected]
    for shown, p in zip(result["after"], expected):
        assert shown["share"] == pytest.approx(p.probability, abs=5e-5)  # rounded to 4 places
    plain = predictions_of(dinov2.head, dinov2.module(prepare(dinov2, image).pixels), 5)
    assert [t["label"] for t in result["before"]] == [p.label for p in plain]
    assert result["off"] == [[block, head]] and "W_O" in result["convention"]
    # the drop: the answer's k-NN class score before minus after (interventions.DROP), in words
    bank, top = dinov2.head.bank, dinov2.head.class_names.index(plain[0].label)
    with torch.inference_mode():
        scores = [float(knn.class_score(bank, output, top)) for output in (
            dinov2.module(prepare(dinov2, image).pixels),
            output_with_head_zeroed(dinov2, image, block, head))]
    drop = scores[0] - scores[1]
    assert result["target"]["drop"] == pytest.approx(drop, abs=5e-5 + 1e-6)  # 4 places
    assert result["target"]["words"] == drop_words(result["target"]["drop"])
    assert result["target"]["words"].startswith("fell" if drop > 0 else "rose")


def test_head_switch_names_a_head_the_model_lacks(dinov2, image):
    result = explainer.head_switch(dinov2, image, None, [(0, 6)])
    assert result["off"] == [[0, 6]] and "heads 0-5" in result["error"]
    assert "after" not in result


def test_the_browser_reports_heads_as_pairs_and_nothing_else_gets_through():
    assert switched_off([[6, 2], [0, 5], [6, 2]]) == [(0, 5), (6, 2)]
    assert switched_off([[1, 2, 3], ["1", 2], [True, 2], [1.0, 2], "0.5", None]) == []
    assert switched_off("0.5") == [] and switched_off(None) == []
    many = [[b, h] for b in range(20) for h in range(6)]
    assert len(switched_off(many)) == MAX_HEADS_OFF


def test_switching_steps_carry_their_result_and_quote_its_numbers(dinov2, image):
    overview = explainer.overview_payload(dinov2, image)
    steps = tour.resolve_steps(overview, tour.switcher(dinov2, image, None))
    switching = [s for s in steps if s["switch"]]
    assert [s["title"] for s in switching] == ["Switch that head off", "Test a claim"]
    for step in switching:
        expected = explainer.head_switch(dinov2, image, None, [(step["block"], step["head"])])
        assert step["switch"] == expected
        target = expected["target"]
        assert f"from {target['before']:.3f} to {target['after']:.3f}" in step["text"]
    sink = overview["sinks"]["strongest"]
    assert (switching[0]["block"], switching[0]["head"]) == (sink["block"], sink["head"])
    # one sign convention (issue 40): drop = before - after, in drop_words' words
    changes = [s["switch"]["target"]["before"] - s["switch"]["target"]["after"]
               for s in switching]
    assert [s["switch"]["target"]["drop"] for s in switching] == [round(c, 4) for c in changes]
    claim = plain(switching[1]["text"])
    assert (f"sink head of step 11 off, the score {drop_words(changes[0])}; with this focused "
            f"head off, it {drop_words(changes[1])}.") in claim
    assert f"it {drop_words(changes[0])}." in plain(switching[0]["text"])
    # chelsea: a drop of -0.001 and +0.014 of 0.967, both under 5 % of the score
    before = switching[1]["switch"]["target"]["before"]
    assert max(map(abs, changes)) / before < 0.05
    assert f"under 5% of the score itself ({before:.3f})" in claim
    assert all(s["switch"] is None for s in steps if s not in switching)


def test_each_switched_head_runs_once_and_the_offline_words_claim_no_switch(dinov2, image):
    """The facts and the steps ask for the same two heads: each is computed once. In an
    offline lesson nothing runs again: the steps say the result was made with the file."""
    overview = explainer.overview_payload(dinov2, image)
    real, asked = tour.switcher(dinov2, image, None), []
    steps = {live: tour.resolve_steps(overview, lambda b, h: asked.append((b, h)) or real(b, h),
                                      live=live) for live in (True, False)}
    assert len(asked) == 2 * len(set(asked)) == 4  # two heads, once per resolve
    for step_id in ("switch_sink", "test_claim"):
        live, offline = (next(s for s in steps[m] if s["id"] == step_id) for m in (True, False))
        assert live["switch"] == offline["switch"] is not None
        assert "power switch" in live["text"] and "In the app" not in live["text"]
        assert "In the app" in offline["text"]
        assert "in its corner" not in offline["text"]
        assert "yourself with the power switch" not in offline["text"]
    assert "this file cannot run the model" in next(
        s["text"] for s in steps[False] if s["id"] == "switch_sink")


def test_a_drop_is_never_printed_as_minus_zero():
    assert drop_words(-0.00004) == drop_words(0.00004) == "did not move"
    assert drop_words(-0.0141) == "rose by 0.0141" and drop_words(0.0012) == "fell by 0.0012"


def test_overview_read_out_is_the_core_read_out(dinov2, image):
    found = readout(dinov2, image)
    facts = explainer.overview_payload(dinov2, image)["readout"]
    assert facts["label"] == found.label and facts["first_block"] == found.first_block
    assert len(facts["blocks"]) == len(dinov2.module.blocks)
    for k, row in enumerate(facts["blocks"]):
        assert row["label"] == found.top[k][0].label
        assert row["share"] == pytest.approx(found.top[k][0].probability, abs=5e-5)
        assert row["target_score"] == pytest.approx(found.target_scores[k], abs=5e-5)
    # the last block's read-out is the model's own answer
    assert facts["blocks"][-1]["label"] == explainer.overview_payload(
        dinov2, image)["prediction"]["top"][0]["label"]


def test_read_out_step_says_when_the_bank_holds_the_picture(dinov2, image):
    overview = explainer.overview_payload(dinov2, image)
    assert overview["prediction"]["neighbours"][0]["similarity"] > 0.999  # chelsea is in it
    step = {s["title"]: s for s in tour.resolve_steps(
        overview, tour.switcher(dinov2, image, None))}["What each block would answer"]
    assert "tests nothing" in step["text"] and "**cat**" in step["text"]


def test_block_banks_are_kept_on_disk_and_rebuilt_when_corrupt(dinov2, tmp_path, monkeypatch):
    monkeypatch.setenv("VIT_LENS_CACHE_DIR", str(tmp_path))
    features = [torch.nn.functional.normalize(torch.randn(4, 8), dim=1) for _ in range(3)]
    built = []

    def build():
        built.append(1)
        return [knn.MemoryBank(f, ("a", "a", "b", "b"), ("x#0", "x#1", "y#0", "y#1"))
                for f in features]

    first = knn.load_or_build_banks(dinov2, "test-banks", build)
    again = knn.load_or_build_banks(dinov2, "test-banks", build)
    assert len(built) == 1 and len(again) == 3
    for bank, expected in zip(again, features):
        assert torch.equal(bank.features, expected) and bank.labels == ("a", "a", "b", "b")
    assert [b.fingerprint() for b in first] == [b.fingerprint() for b in again]
    (path,) = tmp_path.rglob("test-banks-*.safetensors")
    path.write_bytes(b"not a safetensors file")
    knn.load_or_build_banks(dinov2, "test-banks", build)
    assert len(built) == 2


def test_the_docs_quote_the_switches_as_measured(dinov2, image):
    """docs/explainer.md's numbers for DINOv2 on chelsea, recomputed."""
    from pathlib import Path

    text = " ".join((Path(__file__).parent.parent / "docs" / "explainer.md").read_text().split())
    sink, sharp, other = (explainer.head_switch(dinov2, image, None, [pair])["target"]
                          for pair in [(0, 5), (6, 3), (6, 2)])
    assert (f"block 0 head 5 (a sink, over 99.9 % of the attention to one patch) moves the "
            f"cat's k-NN class score from {sink['before']:.3f} to {sink['after']:.3f}") in text
    for found, head in ((sharp, 3), (other, 2)):
        change = found["after"] - found["before"]
        assert f"block 6 head {head}" in text
        assert f"to {found['after']:.3f} ({change:.3f})" in text, (head, found)
    overview = explainer.overview_payload(dinov2, image)
    strongest = overview["sinks"]["strongest"]
    assert (strongest["block"], strongest["head"]) == (0, 5) and strongest["score"] > 0.999
    steps = tour.resolve_steps(overview, tour.switcher(dinov2, image, None))
    assert (steps[20]["block"], steps[20]["head"]) == (6, 3)  # the sharpest head of block 6


def test_a_session_bank_gets_no_read_out_and_says_why(dinov2, image):
    """Examples a learner added (Home) change the k-NN classes; the per-block banks hold the
    gallery's only, so the read-out is refused in words rather than scored against the wrong
    classes."""
    from xai_core.infra.errors import OptionError
    from xai_core.models.heads import KnnHead

    feature = dinov2.module(prepare(dinov2, image).pixels)
    head = KnnHead(dinov2.head.bank.with_examples(feature, "my cat", "upload"))
    with pytest.raises(OptionError, match="added in this session"):
        readout(dinov2, image, head=head)
    found = explainer.overview_payload(dinov2, image, head)["readout"]
    assert "added in this session" in found["unavailable"]
    steps = tour.resolve_steps(explainer.overview_payload(dinov2, image, head),
                               tour.switcher(dinov2, image, head))
    text = {s["title"]: s["text"] for s in steps}["What each block would answer"]
    assert "Not here: The read-out compares" in text
