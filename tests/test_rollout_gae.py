"""Rollout and GAE against oracles written here from REFERENCE_CONVENTIONS.md, the
vit-explain source, and gradients taken independently of the capture engine."""

import json

import numpy as np
import pytest
import timm
import torch

from xai_core import pipeline
from xai_core.cli import main as cli
from xai_core.capture import run_capture
from xai_core.images import load_sample
from xai_core.methods import gae, rollout
from xai_core.models import get_model


@pytest.fixture(scope="module")
def chelsea():
    return load_sample("chelsea")


@pytest.fixture(scope="module")
def capture(dinov2, chelsea):
    return pipeline.vit_capture(dinov2, chelsea)


def attentions(capture):
    return [b.acts["attn"][0].double().numpy() for b in capture.blocks if b.kind == "self"]


def oracle_rollout(attns, fuse=np.mean):
    """Chefer's compute_rollout_attention: mean heads, (A + I) / rowsum keepdim, R = Â_L...Â_1
    (other head fusions plug in the same way)."""
    n = attns[0].shape[-1]
    result = np.eye(n)
    for attn in attns:
        a = fuse(attn, axis=0) + np.eye(n)
        a = a / a.sum(-1, keepdims=True)
        result = a @ result
    return result


def vit_explain_rollout(attns, discard_ratio, head_fusion):
    """jacobgildenblat/vit-explain `rollout`, transcribed as published (batch 1),
    returning the unnormalised mask row (its final `mask / max` is display only)."""
    result = torch.eye(attns[0].shape[-1], dtype=torch.float64)
    for attention in attns:
        attention = torch.from_numpy(attention).unsqueeze(0)
        if head_fusion == "mean":
            fused = attention.mean(axis=1)
        elif head_fusion == "max":
            fused = attention.max(axis=1)[0]
        else:
            fused = attention.min(axis=1)[0]
        flat = fused.view(fused.size(0), -1)
        _, indices = flat.topk(int(flat.size(-1) * discard_ratio), -1, False)
        indices = indices[indices != 0]
        flat[0, indices] = 0
        eye = torch.eye(fused.size(-1), dtype=torch.float64)
        a = (fused + 1.0 * eye) / 2
        a = a / a.sum(dim=-1)
        result = torch.matmul(a, result)
    return result[0, 0].numpy()


def test_rollout_equals_oracle_formula(capture):
    attns, prefix, grid = attentions(capture), 1, capture.layout.grid
    expected = oracle_rollout(attns)[0, prefix:].reshape(grid)
    got = rollout.attention_rollout(capture).query_row()[0]
    np.testing.assert_allclose(got, expected, atol=1e-6, rtol=0)
    # the seed's 0.5 A + 0.5 I is the same thing after the row normalisation
    half = np.eye(attns[0].shape[-1])
    for attn in attns:
        half = (0.5 * attn.mean(0) + 0.5 * np.eye(len(half))) @ half
    np.testing.assert_allclose(got, half[0, prefix:].reshape(grid), atol=1e-6, rtol=0)
    # rollout up to a block = the product over that sub-range only
    partial = rollout.attention_rollout(capture, start=3, end=7)
    np.testing.assert_allclose(partial.query_row()[0],
                               oracle_rollout(attns[3:8])[0, 1:].reshape(grid), atol=1e-6)
    np.testing.assert_allclose(partial.query_row(query=40)[0],
                               oracle_rollout(attns[3:8])[41, 1:].reshape(grid), atol=1e-6)
    np.testing.assert_allclose(rollout.attention_rollout(capture, fusion="min").query_row()[0],
                               oracle_rollout(attns, np.min)[0, 1:].reshape(grid), atol=1e-6)
    # oracle rows are distributions: the [CLS] row, prefix included, sums to one
    full_row = rollout.attention_rollout(capture).matrix[0]
    assert abs(full_row.sum() - 1) < 1e-9 and full_row.min() >= 0


def test_vit_explain_convention_matches_its_code_and_the_oracle_at_mean_discard_0(capture):
    attns, grid = attentions(capture), capture.layout.grid
    for fusion, discard in (("max", 0.5), ("mean", 0.9)):
        ours = rollout.attention_rollout(capture, fusion=fusion, discard=discard,
                                         convention="vit-explain").matrix[0]
        np.testing.assert_allclose(ours, vit_explain_rollout(attns, discard, fusion),
                                   atol=1e-6, rtol=0)
    same = rollout.attention_rollout(capture, convention="vit-explain").query_row()[0]
    oracle = oracle_rollout(attns)[0, 1:].reshape(grid)
    np.testing.assert_allclose(same, oracle, atol=1e-6, rtol=0)
    # with max fusion the missing keepdim changes the answer (the reason for the panel)
    bugged = rollout.attention_rollout(capture, fusion="max", convention="vit-explain")
    correct = rollout.attention_rollout(capture, fusion="max")
    assert np.abs(bugged.query_row()[0] - correct.query_row()[0]).max() > 1e-3


def test_discard_keeps_cls_to_cls(capture):
    rng = np.random.default_rng(0)
    fused = rng.uniform(0.1, 1.0, (9, 9))
    fused[0, 0] = 1e-6  # the smallest entry of all: still kept
    kept = rollout.discard_lowest(fused, 0.5)
    assert kept[0, 0] == 1e-6
    assert (kept == 0).sum() == int(81 * 0.5) - 1
    # on real attention: everything zeroed was no larger than anything kept
    real = rollout.fuse_heads(capture.blocks[5].acts["attn"][0].numpy(), "mean")
    out = rollout.discard_lowest(real, 0.9)
    zeroed = (out == 0) & (real != 0)
    zeroed[0, 0] = False
    survivors = out != 0
    survivors[0, 0] = False
    assert real[zeroed].max() <= real[survivors].min()
    assert out[0, 0] == real[0, 0]
    assert zeroed.sum() >= int(real.size * 0.9) - 1


def test_bad_rollout_options_raise(capture):
    with pytest.raises(ValueError, match="start"):
        rollout.attention_rollout(capture, start=5, end=2)
    with pytest.raises(ValueError, match="fusion"):
        rollout.attention_rollout(capture, fusion="median")


def gae_oracle(attns, grads, prefix):
    n = attns[0].shape[-1]
    relevance = np.eye(n)
    for a, g in zip(attns, grads):
        relevance = relevance + np.clip(g * a, 0, None).mean(0) @ relevance
    return relevance[0, prefix:]


@pytest.mark.numeric
def test_gae_equals_formula_with_independent_gradients():
    torch.manual_seed(0)
    model = timm.create_model("deit_small_distilled_patch16_224", pretrained=False,
                              depth=4).eval()
    pixels = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    target = 207
    ours = gae.gae_map(run_capture(model, pixels, lambda out: out[:, target].sum()))[0]
    # independent: retain_grad on every block's attention probabilities, plain backward
    kept = []

    def keep(_module, _inputs, out):
        out.retain_grad()
        kept.append(out)

    for block in model.blocks:
        block.attn.fused_attn = False
    hooks = [b.attn.attn_drop.register_forward_hook(keep) for b in model.blocks]
    try:
        model(pixels)[0, target].backward()
    finally:
        for hook in hooks:
            hook.remove()
    attns = [t[0].detach().double().numpy() for t in kept]
    grads = [t.grad[0].double().numpy() for t in kept]
    expected = gae_oracle(attns, grads, prefix=2).reshape(14, 14)
    assert expected.max() > 0
    np.testing.assert_allclose(ours, expected, rtol=1e-4, atol=1e-6 * expected.max())


def test_cait_rollout_uses_patch_blocks_and_gae_adds_class_blocks():
    torch.manual_seed(0)
    model = timm.create_model("cait_xxs24_224", pretrained=False, depth=2, depth_token_only=1,
                              embed_dim=96, num_heads=4).eval()
    pixels = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(2))
    captured = run_capture(model, pixels, lambda out: out[:, 5].sum())
    assert rollout.rollout_blocks(captured) == [0, 1]
    rolled = rollout.attention_rollout(captured)
    grid_map, prefix_values, what = rolled.query_row()
    patch_attns = attentions(captured)
    assert prefix_values.size == 0 and "mean" in what
    np.testing.assert_allclose(grid_map, oracle_rollout(patch_attns).mean(0).reshape(14, 14),
                               atol=1e-9)
    # GAE: patch blocks act on patches only, then the class block updates the [CLS] row
    patch_rel = np.eye(196)
    for block in captured.blocks[:2]:
        bar = np.clip(block.grads["attn"][0].double().numpy()
                      * block.acts["attn"][0].double().numpy(), 0, None).mean(0)
        patch_rel = patch_rel + bar @ patch_rel
    full = np.eye(197)
    full[1:, 1:] = patch_rel
    cls = captured.blocks[2]
    bar = np.clip(cls.grads["attn"][0, :, 0].double().numpy()
                  * cls.acts["attn"][0, :, 0].double().numpy(), 0, None).mean(0)
    cls_row = full[0] + bar @ full
    np.testing.assert_allclose(gae.gae_map(captured)[0], cls_row[1:].reshape(14, 14),
                               rtol=1e-6, atol=1e-12)


def test_cli_rollout_and_gae(tmp_path, capture, capsys):
    out = tmp_path / "roll.npz"
    code = cli.main(["explain", "--model", "dinov2-s14", "--image", "sample:chelsea",
                     "--method", "rollout", "--set", "fusion=max", "--set", "discard=0.5",
                     "--set", "start=0", "--out", str(out)])
    assert code == 0
    saved = np.load(out)
    expected = rollout.attention_rollout(capture, fusion="max", discard=0.5).query_row()[0]
    np.testing.assert_allclose(saved["map"], expected, rtol=1e-6)
    assert saved["map"].dtype == np.float32 and saved["per_block"].shape == (12, 16, 16)
    np.testing.assert_allclose(saved["per_block"][-1], saved["map"])
    meta = json.loads(str(saved["meta"]))
    assert meta["fusion"] == "max" and "Chefer" in meta["convention"]
    for bad in ("discard=1.5", "bogus=1", "fusion=median"):
        assert cli.main(["explain", "--model", "dinov2-s14", "--image", "sample:chelsea",
                         "--method", "rollout", "--set", bad, "--out", str(out)]) == 2
    assert "error:" in capsys.readouterr().err
    out = tmp_path / "gae.npz"
    assert cli.main(["explain", "--model", "dinov2-s14", "--image", "sample:chelsea",
                     "--method", "gae", "--target", "cat", "--out", str(out)]) == 0
    saved = np.load(out)
    meta = json.loads(str(saved["meta"]))
    assert meta["target_label"] == "cat" and saved["map"].shape == (16, 16)
    model = get_model("dinov2-s14")
    graded = pipeline.vit_capture(model, load_sample("chelsea"), target=meta["target"])
    np.testing.assert_allclose(saved["map"], gae.gae_map(graded)[0], rtol=1e-6)
