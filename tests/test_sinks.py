"""Attention sinks, rollout's start=auto and the high-norm rule, against recomputations
written here from the captured tensors (never from xai_core.analysis.attention_sinks itself)."""

import json

import numpy as np
import pytest
import timm
import torch

from xai_core import pipeline
from xai_core.capture import BlockRecord, Capture, TokenLayout, run_capture
from xai_core.cli import main as cli
from xai_core.images import SAMPLES, load_sample
from xai_core.methods import METHODS, rollout
from xai_core.analysis.attention_sinks import SINK_THRESHOLD, analyse_sinks
from xai_core.analysis.token_marks import HIGH_NORM_GAP, HIGH_NORM_RATIO, high_norm_tokens
from xai_core.analysis.tokens import prefix_token_names


@pytest.fixture(scope="module")
def captures(dinov2):
    return {name: pipeline.vit_capture(dinov2, load_sample(name)) for name in SAMPLES}


def independent_sinks(capture):
    """(scores, keys, entropy) per self-attention block and head, in plain torch loops."""
    blocks = [b for b in capture.blocks if b.kind == "self"]
    heads = blocks[0].acts["attn"].shape[1]
    scores, keys, entropy = (np.zeros((len(blocks), heads)) for _ in range(3))
    for i, block in enumerate(blocks):
        for h in range(heads):
            attn = block.acts["attn"][0, h].double()
            column_means = attn.sum(0) / attn.shape[0]
            keys[i, h] = int(torch.argmax(column_means))
            scores[i, h] = float(column_means.max())
            entropy[i, h] = float(torch.special.entr(attn).sum(-1).mean())  # -x ln x, nats
    return scores, keys.astype(int), entropy


def patch_share(grid_map):
    return float(grid_map.max() / grid_map.sum())


def test_sink_score_key_and_entropy_match_recomputation(captures):
    capture = captures["chelsea"]
    scores, keys, entropy = independent_sinks(capture)
    analysis = analyse_sinks(capture, ["[CLS]"])
    np.testing.assert_allclose(analysis.scores, scores, rtol=1e-9)
    np.testing.assert_array_equal(analysis.keys, keys)
    np.testing.assert_allclose(analysis.entropy, entropy, rtol=1e-9)
    uniform = np.log(capture.blocks[0].acts["attn"].shape[-1])
    assert (analysis.entropy >= 0).all() and (analysis.entropy <= uniform + 1e-9).all()
    # On chelsea block 0 has the strongest sink: one head sends nearly all of every
    # query's attention to one background patch, named by its grid position.
    per_block = scores.max(1)
    assert per_block.argmax() == 0 and per_block[0] > 0.99
    head = int(scores[0].argmax())
    patch = keys[0, head] - 1
    strongest = analysis.strongest()
    assert (strongest.block, strongest.head, strongest.key) == (0, head, keys[0, head])
    assert strongest.on_patch and strongest.key_name == \
        f"patch {patch} (row {patch // 16}, col {patch % 16})"
    assert entropy[0, head] < 0.05  # one key: almost no uncertainty


def test_cli_sinks_writes_scores_key_entropy_and_meta(tmp_path, captures):
    out = tmp_path / "sinks.npz"
    assert cli.main(["explain", "--model", "dinov2-s14", "--image", "sample:chelsea",
                     "--method", "sinks", "--out", str(out)]) == 0
    saved = np.load(out)
    scores, keys, entropy = independent_sinks(captures["chelsea"])
    assert saved["scores"].shape == saved["key"].shape == saved["entropy"].shape == (12, 6)
    np.testing.assert_allclose(saved["scores"], scores, rtol=1e-6)
    np.testing.assert_array_equal(saved["key"], keys)
    np.testing.assert_allclose(saved["entropy"], entropy, rtol=1e-5)
    received = np.stack([b.acts["attn"][0].double().mean(1).numpy()
                         for b in captures["chelsea"].blocks])
    np.testing.assert_allclose(saved["map"], received[..., 1:].max((0, 1)).reshape(16, 16),
                               rtol=1e-6)
    meta = json.loads(str(saved["meta"]))
    assert "mean over all queries" in meta["convention"] and "nats" in meta["entropy"]
    assert meta["threshold"] == SINK_THRESHOLD and meta["prefix_tokens"] == ["[CLS]"]
    assert meta["sink_heads"][0]["block"] == 0 and meta["sink_dominated_blocks"] == [0]
    assert meta["key_names"][0][int(scores[0].argmax())].startswith("patch ")


def auto_start_here(capture):
    """start=auto from the stated rule: one past the last block in the first half whose
    head sends >= 0.5 of its mean attention to a patch key (prefix keys do not count)."""
    scores, keys, _ = independent_sinks(capture)
    prefix = capture.blocks[0].num_prefix_tokens
    dominated = [b for b in range(len(scores))
                 if ((scores[b] >= SINK_THRESHOLD) & (keys[b] >= prefix)).any()]
    early = [b for b in dominated if b < len(scores) // 2]
    return early[-1] + 1 if early else 0


@pytest.mark.parametrize("name", list(SAMPLES))
def test_auto_rollout_is_object_shaped_on_every_sample(dinov2, captures, name):
    capture = captures[name]
    result = METHODS["rollout"](dinov2, load_sample(name))
    assert result.meta["start"] == auto_start_here(capture) == 1
    assert result.meta["left_out"][0]["block"] == 0
    scores, keys, _ = independent_sinks(capture)
    sink_head = result.meta["left_out"][0]["sink_heads"][0]
    assert sink_head["score"] == pytest.approx(scores[0, sink_head["head"]], abs=1e-4)
    assert sink_head["key_index"] == keys[0, sink_head["head"]]
    np.testing.assert_allclose(result.map, rollout.attention_rollout(capture, 1).query_row()[0],
                               rtol=1e-6)
    assert patch_share(result.map) < 0.04  # object-shaped: no patch dominates
    from_block_0 = rollout.attention_rollout(capture, 0).query_row()[0]
    assert patch_share(from_block_0) > 0.06  # the sink patch, as the issue measured
    assert int(from_block_0.argmax()) == sink_head["key_index"] - 1


def test_rollout_start_option_and_errors(tmp_path, captures, capsys):
    out = tmp_path / "roll.npz"
    base = ["explain", "--model", "dinov2-s14", "--image", "sample:chelsea", "--method",
            "rollout", "--out", str(out)]
    assert cli.main(base + ["--set", "start=auto"]) == 0
    meta = json.loads(str(np.load(out)["meta"]))
    assert meta["start"] == 1 and "start=auto" in meta["start_rule"]
    assert np.load(out)["per_block"].shape == (11, 16, 16)
    assert cli.main(base + ["--set", "start=0"]) == 0
    saved = np.load(out)
    np.testing.assert_allclose(saved["map"], rollout.attention_rollout(
        captures["chelsea"], 0).query_row()[0], rtol=1e-6)
    assert json.loads(str(saved["meta"]))["start_rule"] == "chosen by the user"
    capsys.readouterr()
    assert cli.main(base + ["--set", "start=soon"]) == 2
    assert "'auto'" in capsys.readouterr().err
    assert cli.main(base + ["--set", "end=0"]) == 2  # before the automatic start
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "start=auto chose block 1" in error


def planted(capture, block, head, key, share=0.9):
    """Make one head send `share` of every query's attention to `key` (rows still sum to 1)."""
    attn = capture.blocks[block].acts["attn"][0, head]
    attn.mul_(1 - share)
    attn[:, key] += share


def test_registers_are_prefix_keys_that_can_be_sinks():
    torch.manual_seed(0)
    module = timm.create_model("vit_small_patch14_reg4_dinov2", pretrained=False,
                               img_size=224).eval()
    pixels = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(3))
    capture = run_capture(module, pixels)
    names = prefix_token_names(module)
    assert names == ["[CLS]", "[REG1]", "[REG2]", "[REG3]", "[REG4]"]
    planted(capture, 2, 1, key=3)  # [REG3]
    planted(capture, 0, 4, key=5 + 17)  # patch 17: row 1, col 1 of the 16x16 grid
    planted(capture, 9, 0, key=5 + 40)  # a patch sink in the second half
    analysis = analyse_sinks(capture, names)
    scores, keys, entropy = independent_sinks(capture)
    np.testing.assert_allclose(analysis.scores, scores, rtol=1e-9)
    np.testing.assert_allclose(analysis.entropy, entropy, rtol=1e-9)
    found = {(s.block, s.head): s for s in analysis.sink_heads()}
    assert set(found) == {(2, 1), (0, 4), (9, 0)}
    assert found[2, 1].key_name == "[REG3]" and not found[2, 1].on_patch
    assert found[0, 4].key_name == "patch 17 (row 1, col 1)"
    # start=auto: the register sink never counts; the block-9 patch sink is in the second
    # half, so it is kept (and reported), and rollout starts after block 0.
    auto = rollout.auto_start(analysis)
    assert auto.start == 1 == auto_start_here(capture)
    assert [b["block"] for b in auto.left_out] == [0]
    assert [b["block"] for b in auto.kept] == [9]


def test_cait_sinks_use_patch_blocks_only():
    torch.manual_seed(0)
    module = timm.create_model("cait_xxs24_224", pretrained=False, depth=2, depth_token_only=1,
                               embed_dim=96, num_heads=4).eval()
    capture = run_capture(module, torch.randn(1, 3, 224, 224))
    analysis = analyse_sinks(capture, prefix_token_names(module))
    assert analysis.blocks == [0, 1] and analysis.num_prefix_tokens == 0
    assert analysis.key_name(0) == "patch 0 (row 0, col 0)"
    np.testing.assert_allclose(analysis.scores, independent_sinks(capture)[0], rtol=1e-9)


# --- high-norm marks ---------------------------------------------------------------------------

def synthetic_capture(patch_norms_per_block, grid=(4, 5), width=16):
    """A capture whose block outputs have the given patch norms ([CLS] first, norm 50)."""
    generator = torch.Generator().manual_seed(0)
    blocks = []
    for index, norms in enumerate(patch_norms_per_block):
        norms = torch.tensor([50.0, *norms])
        directions = torch.randn(len(norms), width, generator=generator)
        out = directions / directions.norm(dim=-1, keepdim=True) * norms[:, None]
        blocks.append(BlockRecord(index=index, kind="self", num_prefix_tokens=1,
                                  acts={"out": out[None]}))
    layout = TokenLayout(1, grid, (14, 14), (grid[0] * 14, grid[1] * 14))
    return Capture(layout=layout, blocks=blocks, output=torch.zeros(1, 1))


def spread(count=20, seed=1):
    return np.random.default_rng(seed).uniform(0.8, 1.2, count)


def test_one_token_at_ten_times_the_median_is_flagged():
    norms = spread()
    high = norms.copy()
    high[7] = 10 * np.median(norms)
    marks = high_norm_tokens(synthetic_capture([norms, norms, high, norms]))
    assert [(t.patch, t.row, t.col, t.block) for t in marks] == [(7, 1, 2, 2)]
    assert marks[0].ratio == pytest.approx(high[7] / np.median(high), rel=1e-6)
    others = np.delete(high, 7)
    assert marks[0].gap == pytest.approx(high[7] / others.max(), rel=1e-6)


def test_high_norm_rule_needs_ratio_and_gap():
    median = np.median(spread())

    def flagged(values):
        norms = spread()
        for patch, times in values.items():
            norms[patch] = times * median
        return sorted(t.patch for t in high_norm_tokens(synthetic_capture([norms] * 2)))

    assert HIGH_NORM_RATIO == 3 and HIGH_NORM_GAP == 2
    assert flagged({3: 2.9}) == []  # a gap, but under 3x the median
    assert flagged({3: 3.5, 4: 2.5}) == []  # 3.5x, but only 1.4x above the next
    assert flagged({3: 10, 4: 8}) == [3, 4]  # one high mode of two tokens
    assert flagged({3: 10, 4: 4, 5: 1.5}) == [3, 4]  # 4x: >= 3x and 2.67x above 1.5x


def test_no_high_norm_marks_on_the_samples(captures):
    for name, capture in captures.items():
        marks = high_norm_tokens(capture)
        expected = set()
        for block in capture.blocks[6:]:  # the rule, from the middle of the network on
            norms = block.acts["out"][0, 1:].double().norm(dim=-1).numpy()
            ranked = np.sort(norms)[::-1]
            for k in range(1, len(ranked)):
                if ranked[k - 1] >= 3 * np.median(norms) and ranked[k - 1] >= 2 * ranked[k]:
                    expected |= set(np.flatnonzero(norms >= ranked[k - 1]).tolist())
            # measured: no patch reaches 3x its block's median on DINOv2 ViT-S/14
            assert norms.max() / np.median(norms) < HIGH_NORM_RATIO, name
        assert {t.patch for t in marks} == expected == set(), name


def test_methods_doc_table_names_the_sink_convention():
    from pathlib import Path

    methods_doc = (Path(__file__).resolve().parent.parent / "docs" / "methods.md").read_text()
    rows = {}
    for line in methods_doc.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`") and cells[1] in ("ViT", "CNN", "any"):
            rows[cells[0].strip("`")] = cells
    assert set(rows) == set(METHODS)  # every registered method is documented, no other
    assert "`auto`, the default" in rows["rollout"][2]
    assert "`start=auto` starts after the sink-dominated blocks" in rows["rollout"][3]
    assert f"score ≥ {SINK_THRESHOLD:g}" in rows["sinks"][3]
    assert "mean over all queries of A[q, j*]" in rows["sinks"][3] and "nats" in rows["sinks"][3]
