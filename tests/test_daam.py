"""DAAM (seed 001, eqs. 6-14, section 4.4) against identities, hand computations and an
independent re-implementation of the official code's steps."""

import copy
import json
import math

import numpy as np
import pytest
import timm
import torch
from timm.models.cait import Cait

from xai_core.capture import run_capture, transformer_blocks
from xai_core.cli.main import main as cli_main
from xai_core.images import load_sample
from xai_core.models.knn import MemoryBank
from xai_core.methods import METHODS, daam, daam_knn
from xai_core.metrics import daam_sanity
from xai_core.models import get_model


# --- the real DINOv2 with its k-NN bank (one capture for the module) --------------------------

@pytest.fixture(scope="module")
def dinov2():
    model = get_model("dinov2-s14")
    image = load_sample("chelsea")
    target = model.head.class_names.index("cat")
    result = METHODS["daam"](model, image, target=target).detail
    return model, image, target, result


def test_identity_sum_of_decomposition_is_cls_context_dinov2(dinov2):
    model, image, _, result = dinov2
    weights, capture = daam_knn.knn_capture(model, image, result.target)
    assert weights is result.knn
    blocks = daam.flow_blocks(capture)
    assert len(blocks) == 12
    for record in blocks:
        S = daam.decompose(record)
        assert S.shape == (257, 384)
        torch.testing.assert_close(S.sum(0), daam.cls_context(record), atol=1e-5, rtol=0)


def test_accumulation_is_monotone_and_sums_the_blocks(dinov2):
    *_, result = dinov2
    L, D = result.L, result.D
    assert L.shape == D.shape == (12, 16, 16)
    assert (L >= 0).all() and L.sum() > 0
    assert (np.diff(D, axis=0) >= 0).all()  # pixel-wise non-decreasing in b
    np.testing.assert_allclose(D[-1], L.sum(0), rtol=1e-5, atol=1e-7)


def test_knn_backward_starts_from_the_eq13_weights(dinov2):
    model, image, _, result = dinov2
    weights, capture = daam_knn.knn_capture(model, image, result.target)
    assert weights is result.knn
    feature = capture.output[0].double()
    w = torch.as_tensor(result.knn.weights).double()
    assert capture.score == pytest.approx(float(feature @ w), rel=1e-5)
    assert result.variant == "knn" and result.channel_relu is False  # official: no clipping
    assert result.knn.class_label == "cat" and result.knn.voters
    assert all(v.label == "cat" for v in result.knn.voters)
    assert w.min() == 0 and w.max() == pytest.approx(1.0)  # official min-max


def test_cascading_randomisation_breaks_the_map_and_spares_the_shared_model(dinov2):
    model, image, target, result = dinov2
    before = [layer.weight.clone() for _, block in transformer_blocks(model.module)
              for layer in daam_sanity.attention_linears(block)]
    check = daam_sanity.cascading_randomisation(model, image, target, steps=[0])
    assert check.first_randomised == [0] and check.num_blocks == 12
    assert check.rho[0] < 0.5  # fully randomised attention: the map is gone
    after = [layer.weight for _, block in transformer_blocks(model.module)
             for layer in daam_sanity.attention_linears(block)]
    assert all(torch.equal(a, b) for a, b in zip(before, after))
    np.testing.assert_array_equal(check.original, result.D[-1])


def test_cli_writes_raw_L_and_D(dinov2, tmp_path, capsys):
    out = tmp_path / "daam.npz"
    code = cli_main(["explain", "--model", "dinov2-s14", "--image", "sample:chelsea",
                     "--method", "daam", "--target", "cat", "--out", str(out)])
    assert code == 0
    saved = np.load(out)
    *_, result = dinov2
    np.testing.assert_allclose(saved["L"], result.L)
    np.testing.assert_allclose(saved["D"], np.cumsum(saved["L"], axis=0), rtol=1e-5)
    np.testing.assert_allclose(saved["map"], saved["D"][-1])
    meta = json.loads(str(saved["meta"]))
    assert meta["variant"] == "knn" and meta["knn"]["class"] == "cat"
    assert meta["blocks"][0] == "block 0" and meta["prefix_tokens"] == [1] * 12
    bad = cli_main(["explain", "--model", "dinov2-s14", "--image", "sample:chelsea",
                    "--method", "daam", "--set", "knn_weights=bogus", "--out", str(out)])
    assert bad == 2 and "knn_weights" in capsys.readouterr().err


# --- independent re-implementation of the official code's steps --------------------------------

def official_daam(module, pixels, class_index):
    """The released code's steps (utils/DAAM.py), written again here: a forward hook on
    each block's `attn` recomputes q, k, v from its input and keeps
    (CLS attention row) * V; a hook on `attn.proj` registers a tensor hook that keeps
    the gradient at the [CLS] position of proj's input; ReLU(grad) * features summed
    over channels, ReLU. One change: all prefix tokens are dropped, not only token 0."""
    features, gradients, handles = [], [], []

    def on_attn(attn, inputs, _output):
        x = inputs[0]
        batch, tokens, width = x.shape
        qkv = attn.qkv(x).reshape(batch, tokens, 3, attn.num_heads, width // attn.num_heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        weights = ((q @ k.transpose(-2, -1)) * attn.scale).softmax(dim=-1)
        focus = weights[:, :, 0].unsqueeze(-1)
        features.append((focus * v).transpose(1, 2).reshape(batch, tokens, width).detach())

    def on_proj(_proj, inputs, _output):
        inputs[0].register_hook(lambda g: gradients.insert(0, g[:, 0, :].detach()))

    for block in module.blocks:
        handles.append(block.attn.register_forward_hook(on_attn))
        handles.append(block.attn.proj.register_forward_hook(on_proj))
    try:
        x = pixels.clone().requires_grad_(True)
        module(x)[0, class_index].backward()
    finally:
        for handle in handles:
            handle.remove()
    prefix = module.num_prefix_tokens
    side = int(math.isqrt(features[0].shape[1] - prefix))
    cams = []
    for feature, gradient in zip(features, gradients):
        weight = np.maximum(gradient.numpy(), 0)[:, None, :]
        cam = np.maximum((weight * feature.numpy()).sum(-1), 0)[0, prefix:]
        cams.append(cam.reshape(side, side))
    return np.stack(cams)


@pytest.mark.parametrize("name, kwargs, prefix", [
    ("vit_tiny_patch16_224", {}, 1),
    ("vit_tiny_patch16_224", {"reg_tokens": 4}, 5),
    ("deit_tiny_distilled_patch16_224", {}, 2),
])
def test_equals_official_steps_on_random_timm_vit(name, kwargs, prefix):
    torch.manual_seed(0)
    module = timm.create_model(name, pretrained=False, img_size=112, depth=4, **kwargs).eval()
    pixels = torch.randn(1, 3, 112, 112, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = module(pixels)
    class_index = int(logits.argmax())
    reference = official_daam(module, pixels, class_index)
    capture = run_capture(module, pixels, lambda out: out[:, class_index].sum())
    ours = daam.daam_from_capture(capture, channel_relu=True)
    assert ours["prefix_tokens"] == [prefix] * 4 and ours["grid"] == (7, 7)
    assert reference.max() > 0
    np.testing.assert_allclose(ours["L"], reference, rtol=1e-4, atol=1e-5 * reference.max())
    for record in daam.flow_blocks(capture):
        torch.testing.assert_close(daam.decompose(record).sum(0), daam.cls_context(record),
                                   atol=1e-5, rtol=0)


def test_cait_flow_runs_over_class_attention_blocks():
    torch.manual_seed(0)
    module = Cait(img_size=64, patch_size=16, embed_dim=48, depth=3, num_heads=3,
                  depth_token_only=2, num_classes=10).eval()
    pixels = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(2))
    capture = run_capture(module, pixels, lambda out: out[:, 3].sum())
    ours = daam.daam_from_capture(capture)
    assert ours["block_indices"] == [3, 4]  # after the 3 patch blocks
    assert ours["block_labels"][0] == "class block 3 (after 3 patch blocks)"
    assert ours["L"].shape == (2, 4, 4) and ours["prefix_tokens"] == [1, 1]
    for record in daam.flow_blocks(capture):
        torch.testing.assert_close(daam.decompose(record).sum(0), daam.cls_context(record),
                                   atol=1e-5, rtol=0)
        # L_b by hand from the raw captured tensors.
        a0 = record.acts["attn"][0, :, 0, 1:]  # (H, patches)
        v = record.acts["v"][0, :, 1:]  # (H, patches, d)
        g = record.grads["context"][0, 0].clamp(min=0).reshape(3, 16)
        by_hand = (a0 * (v * g[:, None, :]).sum(-1)).sum(0).clamp(min=0).reshape(4, 4)
        frame = ours["block_indices"].index(record.index)
        np.testing.assert_allclose(ours["L"][frame], by_hand.numpy(), rtol=1e-5, atol=1e-7)


# --- eq. 13 on a hand-made bank ------------------------------------------------------------------

def hand_bank() -> MemoryBank:
    rows = [[1, 0, 0], [0.6, 0.8, 0], [0, 0, 1], [0, 0.6, 0.8]]
    return MemoryBank(torch.tensor(rows, dtype=torch.float32), ("a", "a", "b", "b"),
                      ("s0#0", "s1#0", "s2#0", "s3#0"))


FEATURE = [3.0, 1.0, 2.0]  # cosines: 0.802, 0.695, 0.535, 0.588


def eq13_by_hand(feature, members, formula):
    norm = math.sqrt(sum(f * f for f in feature))
    x = [f / norm for f in feature]
    K, D = len(members), len(x)
    if formula == "official":
        mean = [sum(x[d] * z[d] for z in members) / K for d in range(D)]
        total = abs(sum(mean))
        raw = [m / total for m in mean]
        low, high = min(raw), max(raw)
        return [(r - low) / (high - low) for r in raw], raw
    cosines = [sum(x[d] * z[d] for d in range(D)) for z in members]
    raw = [sum(x[d] * z[d] / abs(c) for z, c in zip(members, cosines)) / K for d in range(D)]
    return [max(r, 0.0) for r in raw], raw


@pytest.mark.parametrize("formula", daam_knn.KNN_FORMULAS)
def test_eq13_weights_on_hand_made_bank(formula):
    bank = hand_bank()
    # k = 3: the nearest are rows 0 (a), 1 (a), 3 (b); class "a" votes with rows 0 and 1.
    weights = daam_knn.knn_weights(bank, torch.tensor(FEATURE), 0, formula, k=3)
    assert [n.index for n in weights.neighbours] == [0, 1, 3]
    assert [v.index for v in weights.voters] == [0, 1] and not weights.fallback
    expected, raw = eq13_by_hand(FEATURE, [[1, 0, 0], [0.6, 0.8, 0]], formula)
    np.testing.assert_allclose(weights.weights, expected, atol=1e-6)
    np.testing.assert_allclose(weights.raw, raw, atol=1e-6)
    # Class "b" has one voter (row 3) among the 3 nearest.
    single = daam_knn.knn_weights(bank, torch.tensor(FEATURE), 1, formula, k=3)
    assert [v.index for v in single.voters] == [3]
    np.testing.assert_allclose(single.weights, eq13_by_hand(FEATURE, [[0, 0.6, 0.8]],
                                                            formula)[0], atol=1e-6)


def test_eq13_formulas_differ_and_fallback_uses_the_class_nearest():
    bank = hand_bank()
    official = daam_knn.knn_weights(bank, torch.tensor(FEATURE), 0, "official", k=3)
    paper = daam_knn.knn_weights(bank, torch.tensor(FEATURE), 0, "paper", k=3)
    assert np.abs(official.raw - paper.raw).max() > 0.01  # two voters, different cosines
    # k = 2: no "b" among the nearest (rows 0, 1): use b's own nearest, row 3 then row 2.
    fallback = daam_knn.knn_weights(bank, torch.tensor(FEATURE), 1, "official", k=2)
    assert fallback.fallback and [v.index for v in fallback.voters] == [3, 2]
    np.testing.assert_allclose(fallback.weights, eq13_by_hand(
        FEATURE, [[0, 0.6, 0.8], [0, 0, 1]], "official")[0], atol=1e-6)
    rows = daam_knn.voter_rows(fallback)
    assert [r["used for w"] for r in rows] == ["", "", "yes (outside the vote)",
                                               "yes (outside the vote)"]


def test_weighted_score_gradient_is_the_weights():
    w = np.array([0.0, 0.5, 1.0], dtype=np.float32)
    output = torch.randn(1, 3, requires_grad=True)
    (grad,) = torch.autograd.grad(daam_knn.weighted_output_score(w)(output), output)
    np.testing.assert_allclose(grad[0].numpy(), w)


# --- display normalisations and the randomisation cascade --------------------------------------

def test_display_normalisations_by_hand():
    frames = np.array([[[0.0, 1.0, 2.0]], [[1.0, 2.0, 4.0]]])
    sig = [[1 / (1 + math.exp(-5 * v / 4.0)) - 0.5 for v in row[0]] for row in frames]
    expected = [[(s - min(r)) / (max(r) - min(r)) for s in r] for r in sig]
    np.testing.assert_allclose(daam.display_frames(frames, "official")[:, 0], expected)
    np.testing.assert_allclose(daam.display_frames(frames, "shared")[:, 0],
                               [[0, 0.25, 0.5], [0.25, 0.5, 1.0]])
    np.testing.assert_allclose(daam.display_frames(frames, "frame")[:, 0],
                               [[0, 0.5, 1.0], [0, 1 / 3, 1.0]])
    assert not daam.display_frames(np.zeros((2, 2, 2)), "official").any()
    with pytest.raises(ValueError):
        daam.display_frames(frames, "bogus")


def test_randomised_copies_cascade_top_down():
    torch.manual_seed(0)
    original = timm.create_model("vit_tiny_patch16_224", pretrained=False, depth=4,
                                 img_size=32).eval()
    module = copy.deepcopy(original)
    state = lambda m: {k: v.clone() for k, v in m.state_dict().items()}  # noqa: E731
    reference = state(original)
    seen = []
    for first, randomised in daam_sanity.randomised_copies(module, [1, 3], seed=0):
        now = state(randomised)
        changed = {int(k.split(".")[1]) for k in now  # blocks.<index>.attn...
                   if not torch.equal(now[k], reference[k])}
        kinds = {k.split(".")[2] for k in now if not torch.equal(now[k], reference[k])}
        seen.append((first, changed, kinds))
    assert seen == [(3, {3}, {"attn"}), (1, {1, 2, 3}, {"attn"})]
    assert daam_sanity.sanity_steps(12) == [11, 8, 5, 2, 0]
    assert daam_sanity.sanity_steps(2) == [1, 0]
