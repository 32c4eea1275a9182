"""Interventions against forwards written by hand: a loop over the timm blocks with the
change made in the loop (q, k, v from attn.qkv, the softmax, the heads' outputs before W_O),
on the real DINOv2 and on random-weight DeiT-distilled (2 prefix tokens) and DINOv2-reg4
layouts; the CLI's bad specs answered with one line before the model loads."""

from __future__ import annotations

import json

import numpy as np
import pytest
import timm
import torch

from hook_helpers import hooked_modules
from tolerance import assert_close, class_score_tolerance, network_tolerance
from xai_core.studies import interventions as I
from xai_core.cli.main import main
from xai_core.infra.errors import OptionError
from xai_core.images import load_sample
from xai_core.methods.attribution import reference_pixels
from xai_core.models import LoadedModel, ModelSpec, get_model
from xai_core.models.heads import ImageNetHead
from xai_core.pipeline import model_output, prepare



def random_layout(timm_name: str, size: int, classes: int = 0) -> LoadedModel:
    """A 3-block random-weight model of a registry layout, small enough to run in a test. It
    outputs the final [CLS] features, and its layer scales are 1 (timm starts DINOv2's at
    1e-5, which would leave the blocks, and so every intervention, almost without effect)."""
    torch.manual_seed(0)
    module = timm.create_model(timm_name, pretrained=False, img_size=size, depth=3,
                               num_classes=classes).eval()
    for name, parameter in module.named_parameters():
        parameter.requires_grad_(False)
        if name.endswith("gamma"):
            parameter.fill_(1.0)
    spec = ModelSpec(id=f"test-{timm_name}-{classes}", display_name=timm_name, family="vit",
                     source="hub", timm_name=timm_name, input_size=(size, size), crop_pct=1.0)
    model = LoadedModel(spec, module, torch.device("cpu"), True, "random initialisation")
    if classes:
        model.head = ImageNetHead([f"class {i}" for i in range(classes)])
        model.class_names = model.head.class_names
    return model


@pytest.fixture(scope="module", params=["dinov2", "deit-distilled", "reg4"])
def model(request, dinov2):
    if request.param == "dinov2":
        return dinov2
    if request.param == "deit-distilled":
        built = random_layout("deit_small_distilled_patch16_224", 64)
        assert built.module.num_prefix_tokens == 2
        return built
    built = random_layout("vit_small_patch14_reg4_dinov2", 56)
    assert built.module.num_prefix_tokens == 5 and built.module.num_reg_tokens == 4
    return built


def pixels_of(model, image):
    return prepare(model, image).pixels


def assert_matches(got, expected, model):
    """Equal up to float32 rounding: fused SDPA (the plain path) and the written-out softmax
    add in different orders (tests/tolerance.py)."""
    assert_close(got, expected, network_tolerance(model.module, expected))


def assert_caught(got, wrong, model):
    """A wrong computation (a head left on, another permutation) lands far outside the
    float32 tolerance, so `assert_matches` would fail on it: the tolerance hides rounding,
    not bugs."""
    difference = float((got - wrong).abs().max())
    assert difference > 10 * network_tolerance(model.module, wrong), difference


def assert_changed(got, plain, fraction=1e-3):
    """The intervention moved the output by more than `fraction` of its size."""
    assert (got - plain).abs().max() > fraction * plain.abs().max()


# --- the oracle -------------------------------------------------------------------------------

def hand_sequence(module, pixels):
    """The token sequence entering the blocks: timm's patch embedding and position step."""
    return module.norm_pre(module._pos_embed(module.patch_embed(pixels)))


def hand_forward(module, tokens, heads_off=(), fill="zero", sink_keys=None, sink_blocks=(),
                 uniform=(), skip_key=None):
    """Every block written out, with the intervention made inside the loop."""
    x = tokens
    for index, block in enumerate(module.blocks):
        attn_module = block.attn
        h = block.norm1(x)
        batch, n, width = h.shape
        heads = attn_module.num_heads
        qkv = attn_module.qkv(h).reshape(batch, n, 3, heads, width // heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        q, k = attn_module.q_norm(q), attn_module.k_norm(k)
        attn = ((q * attn_module.scale) @ k.transpose(-2, -1)).softmax(-1)
        if index in uniform:
            attn = torch.full_like(attn, 1.0 / n)
        if index in sink_blocks:
            attn = attn.clone()
            for head in range(heads):
                if sink_keys[index][head] != skip_key:  # a dropped sink: nothing to zero
                    attn[:, head, :, int(sink_keys[index][head])] = 0.0
            attn = attn / attn.sum(-1, keepdim=True)
        context = attn @ v  # (B, H, N, d)
        for block_index, head in heads_off:
            if block_index == index:
                context[:, head] = (0.0 if fill == "zero"
                                    else context[:, head].mean(1, keepdim=True))
        context = context.transpose(1, 2).reshape(batch, n, width)
        x = x + block.ls1(attn_module.proj(context))
        x = x + block.ls2(block.mlp(block.norm2(x)))
    return module.forward_head(module.norm(x))


def hand_sink_keys(module, tokens):
    """Per block and head: the key with the largest attention averaged over queries."""
    keys, x = [], tokens
    for block in module.blocks:
        h = block.norm1(x)
        batch, n, width = h.shape
        heads = block.attn.num_heads
        q, k, _ = block.attn.qkv(h).reshape(batch, n, 3, heads, -1).permute(2, 0, 3, 1, 4)
        attn = ((q * block.attn.scale) @ k.transpose(-2, -1)).softmax(-1)
        keys.append(attn[0].mean(1).argmax(-1).numpy())
        x = block(x)
    return np.stack(keys)


def under(model, image, sink_keys=None, **given):
    values = I.resolve(model, given)
    pixels = I.masked_pixels(model, pixels_of(model, image), values["patches_mask"],
                             values["mask_baseline"])
    return I.output_under(model, pixels, values, sink_keys)


# --- the tests --------------------------------------------------------------------------------

@pytest.mark.numeric
def test_no_intervention_is_the_plain_forward_bit_for_bit(model, image):
    plain = model_output(model, image)
    assert torch.equal(under(model, image), plain)
    with torch.inference_mode():
        assert torch.equal(model.module(pixels_of(model, image)), plain)


@pytest.mark.numeric
@pytest.mark.parametrize("fill", ["zero", "mean"])
def test_heads_off_equals_the_hand_forward(model, image, fill):
    pairs = ((0, 1), (0, 5), (2, 3))
    got = under(model, image, heads_off="0.1,0.5,2.3", heads_fill=fill)
    with torch.inference_mode():
        tokens = hand_sequence(model.module, pixels_of(model, image))
        expected = hand_forward(model.module, tokens, heads_off=pairs, fill=fill)
        plain = hand_forward(model.module, tokens)
        one_left_on = hand_forward(model.module, tokens, heads_off=pairs[:-1], fill=fill)
    assert_matches(got, expected, model)
    assert_changed(got, plain)  # the heads mattered
    assert_caught(got, one_left_on, model)


@pytest.mark.numeric
def test_uniform_equals_the_hand_forward(model, image):
    got = under(model, image, uniform="1")
    with torch.inference_mode():
        tokens = hand_sequence(model.module, pixels_of(model, image))
        expected = hand_forward(model.module, tokens, uniform=(1,))
    assert_matches(got, expected, model)
    assert_changed(got, model_output(model, image))


@pytest.mark.numeric
def test_sink_off_uses_the_measured_sink_keys_and_equals_the_hand_forward(model, image):
    from xai_core.pipeline import vit_capture
    from xai_core.analysis.attention_sinks import analyse_sinks

    with torch.inference_mode():
        tokens = hand_sequence(model.module, pixels_of(model, image))
        keys = hand_sink_keys(model.module, tokens)
    measured = analyse_sinks(vit_capture(model, image)).keys
    np.testing.assert_array_equal(measured, keys)
    got = under(model, image, sink_keys=measured, sink_off="0,2")
    with torch.inference_mode():
        expected = hand_forward(model.module, tokens, sink_keys=keys, sink_blocks=(0, 2))
    assert_matches(got, expected, model)
    assert_changed(got, model_output(model, image), 1e-4)


@pytest.mark.numeric
def test_sink_off_with_dropped_tokens_follows_each_sink_key_to_its_new_place(dinov2, image):
    module = dinov2.module
    keys = I.sink_keys_of(dinov2, image)
    blocks = [b for b in range(12) if (keys[b] > 0).any()][:2]  # blocks with patch sinks
    assert len(blocks) == 2
    first_sink_patch = int(keys[blocks[0]][keys[blocks[0]] > 0][0]) - 1
    dropped = [0, 1, first_sink_patch]  # one head's sink goes; the other keys move
    keep = [0] + [1 + p for p in range(256) if p not in dropped]
    remapped = np.array([[keep.index(k) if k in keep else -1 for k in row] for row in keys])
    assert (remapped[blocks[0]] == -1).sum() >= 1
    got = under(dinov2, image, sink_keys=keys, sink_off=",".join(map(str, blocks)),
                tokens_drop=",".join(map(str, dropped)))
    with torch.inference_mode():
        full = module._pos_embed(module.patch_embed(pixels_of(dinov2, image)))
        short = module.norm_pre(full[:, keep])
        expected = hand_forward(module, short, sink_keys=remapped, sink_blocks=blocks,
                                skip_key=-1)
    assert_matches(got, expected, dinov2)


@pytest.mark.numeric
def test_tokens_drop_equals_timm_on_the_shortened_sequence(model, image):
    module = model.module
    prefix, patches = module.num_prefix_tokens, module.patch_embed.num_patches
    dropped = [0, 3, 4, 5, patches - 1]
    got = under(model, image, tokens_drop="0,3-5," + str(patches - 1))
    with torch.inference_mode():
        full = module._pos_embed(module.patch_embed(pixels_of(model, image)))
        keep = list(range(prefix)) + [prefix + p for p in range(patches) if p not in dropped]
        short = module.norm_pre(full[:, keep])
        assert short.shape[1] == prefix + patches - 5
        expected = module.forward_head(module.norm(module.blocks(short)))
    assert_matches(got, expected, model)


@pytest.mark.numeric
def test_registers_off_removes_the_four_registers():
    model = random_layout("vit_small_patch14_reg4_dinov2", 56)
    image = load_sample("chelsea")
    module = model.module
    got = under(model, image, registers_off="yes")
    with torch.inference_mode():
        full = module._pos_embed(module.patch_embed(pixels_of(model, image)))
        short = module.norm_pre(torch.cat([full[:, :1], full[:, 5:]], dim=1))
        expected = module.forward_head(module.norm(module.blocks(short)))
    assert_matches(got, expected, model)


@pytest.mark.numeric
def test_positions_shuffle_is_reproducible_and_equals_permuted_embeddings(dinov2, image):
    module = dinov2.module
    first = under(dinov2, image, positions="shuffle", seed=3)
    assert torch.equal(first, under(dinov2, image, positions="shuffle", seed=3))
    assert_caught(first, under(dinov2, image, positions="shuffle", seed=4), dinov2)
    order = I.position_order(module.patch_embed.num_patches, 3)
    assert sorted(order.tolist()) == list(range(module.patch_embed.num_patches))
    assert torch.equal(order, I.position_order(module.patch_embed.num_patches, 3))
    with torch.inference_mode():  # DINOv2: [CLS] + patches, one table with [CLS]'s row first
        patches = module.patch_embed(pixels_of(dinov2, image))
        table = module.pos_embed[0]
        cls = module.cls_token[:, 0] + table[0]
        shuffled = patches + table[1:][order]
        zeroed = patches
        expected = [hand_forward(module, module.norm_pre(torch.cat([cls[:, None], p], dim=1)))
                    for p in (shuffled, zeroed)]
    assert_matches(first, expected[0], dinov2)
    assert_matches(under(dinov2, image, positions="zero"), expected[1], dinov2)


def hand_masked(pixels, reference, cells, *, columns: int, size: int):
    """`pixels` with each square cell (numbered row by row, `columns` a row, `size` px)
    copied from `reference`: the oracle of patches_mask."""
    masked = pixels.clone()
    for cell in cells:
        row, col = divmod(cell, columns)
        window = (..., slice(row * size, (row + 1) * size), slice(col * size, (col + 1) * size))
        masked[window] = reference[window]
    return masked


@pytest.mark.numeric
def test_patches_mask_equals_the_forward_on_hand_masked_pixels(dinov2, image):
    pixels = pixels_of(dinov2, image)
    reference = reference_pixels(dinov2, pixels, "black")
    masked = hand_masked(pixels, reference, (0, 17, 255), columns=16, size=14)  # 14 px patches
    with torch.inference_mode():
        expected = dinov2.module(masked)
    got = under(dinov2, image, patches_mask="0,17,255", mask_baseline="black")
    assert_matches(got, expected, dinov2)


def test_hooks_are_removed_and_attention_refused_even_on_error(dinov2):
    module = dinov2.module
    values = I.resolve(dinov2, {"uniform": "0", "heads_off": "1.1", "tokens_drop": "3"})
    with pytest.raises(RuntimeError):
        with I.applied(module, values):
            assert module.blocks[0].attn.attn_drop._forward_hooks
            assert not module.blocks[0].attn.fused_attn
            raise RuntimeError("stop")
    assert hooked_modules(module) == []
    assert module.blocks[0].attn.fused_attn == module.blocks[1].attn.fused_attn


def test_intervene_reports_before_after_and_maps(dinov2, image):
    outcome = I.intervene(dinov2, image, uniform="0-11")
    payload = outcome.as_dict()
    assert [p["label"] for p in payload["before"]["top"]][0] == "cat"
    before = {p["index"]: p["probability"] for p in payload["before"]["top"]}
    from xai_core.pipeline import predict
    assert before == {p.index: p.probability for p in predict(dinov2, image)}
    target = outcome.target
    assert target["drop"] == pytest.approx(target["before"] - target["after"])
    assert target["after"] < target["before"] - 0.05  # uniform attention everywhere hurts
    assert set(outcome.maps) == {"attention", "rollout", "gae", "vit-gradcam"}
    np.testing.assert_allclose(outcome.maps["attention"], 1.0 / 257, rtol=1e-5)  # uniform
    assert payload["intervention"]["values"] == {"uniform": list(range(12))}


@pytest.mark.parametrize("given, words", [
    ({"heads_off": "99.0"}, "out of range (blocks 0-11, heads 0-5"),
    ({"heads_off": "0.-1"}, "out of range"),
    ({"heads_off": "0.6"}, "heads 0-5"),
    ({"heads_off": "0.5;3.2"}, "block.head pairs"),
    ({"tokens_drop": "0-255"}, "every patch"),
    ({"tokens_drop": "3,x"}, "numbers or ranges"),
    ({"sink_off": "12"}, "out of range (0-11"),
    ({"registers_off": "yes"}, "no register tokens"),
    ({"positions": "flip"}, "not one of"),
    ({"volume": "11"}, "Unknown intervention"),
])
def test_bad_specs_are_refused_before_the_weights_load(given, words):
    with pytest.raises(OptionError, match=None) as refused:
        I.check_before_load("dinov2-s14", given)
    assert words in str(refused.value)


def test_the_reg4_shell_knows_its_registers_before_loading():
    values = I.check_before_load("dinov2-s14-reg4", {"registers_off": "yes"})
    assert values["registers_off"] == "yes"


@pytest.mark.parametrize("sets, words", [
    (["heads_off=99.0"], "out of range"),
    (["heads_off=0.-1"], "out of range"),
    (["tokens_drop=0-255"], "every patch"),
    (["colour=red"], "Unknown intervention"),
    (["heads_off=0.5,,3.2"], "block.head pairs"),
    (["heads_off"], "key=value"),
])
def test_cli_bad_specs_exit_2_with_one_line_before_loading(sets, words, capsys, monkeypatch):
    def no_load(_args):
        raise AssertionError("the model was loaded")
    monkeypatch.setattr("xai_core.cli.studies.load_model", no_load)
    argv = ["intervene", "--model", "dinov2-s14", "--image", "sample:chelsea"]
    for item in sets:
        argv += ["--set", item]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0]


def test_cli_intervene_json_and_maps(capsys, tmp_path, dinov2, image):
    out = tmp_path / "maps"
    assert main(["intervene", "--model", "dinov2-s14", "--image", "sample:chelsea",
                 "--set", "heads_off=0.5,3.2", "--set", "heads_fill=mean", "--json",
                 "--out", str(out)]) == 0
    payload = json.loads(capsys.readouterr().out)
    expected = I.intervene(dinov2, image, heads_off="0.5,3.2", heads_fill="mean")
    assert payload["after"]["top"][0]["probability"] == expected.after[0].probability
    assert payload["target"]["after"] == expected.target["after"]
    assert payload["intervention"]["values"] == {"heads_off": [[0, 5], [3, 2]],
                                                 "heads_fill": "mean"}
    data = np.load(out / "intervention.npz")
    np.testing.assert_array_equal(data["rollout"], expected.maps["rollout"])


def test_cli_lists_the_interventions(capsys):
    assert main(["interventions", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["interventions"]
    assert [entry["name"] for entry in listed] == [option.name for option in I.INTERVENTIONS]
    assert next(e for e in listed if e["name"] == "heads_fill")["choices"] == ["zero", "mean"]


# --- head importance --------------------------------------------------------------------------

@pytest.mark.numeric
def test_output_of_runs_the_last_mlp_on_the_prefix_tokens_and_equals_timms_forward(model,
                                                                                   image):
    """[CLS] on DINOv2 and reg4, [CLS] and [DIST] on the distilled DeiT: the same output as
    the whole forward, with the last block's MLP fed the prefix tokens alone, one image at a
    time (an image's output the same in a batch of 1 and of 2, up to float32 rounding: a
    matrix product of 2 rows may take another kernel than one of 1)."""
    module = model.module
    pixels = torch.cat([pixels_of(model, image), pixels_of(model, image.rotate(90))])
    seen = []
    handle = module.blocks[-1].mlp.register_forward_pre_hook(
        lambda _m, args: seen.append(tuple(args[0].shape)))
    try:
        with torch.inference_mode():
            got, whole = I.output_of(module, pixels), module(pixels)
            alone = I.output_of(module, pixels[1:])
    finally:
        handle.remove()
    assert I.head_reads_prefix_only(module)
    assert seen[:3] == [(1, module.num_prefix_tokens, module.embed_dim)] * 2 + [
        (2, module.num_prefix_tokens + module.patch_embed.num_patches, module.embed_dim)]
    assert_matches(got, whole, model)
    assert_matches(alone, got[1:], model)


def test_output_of_runs_the_whole_forward_when_the_head_pools_the_patches(image):
    torch.manual_seed(0)
    module = timm.create_model("vit_small_patch16_224", pretrained=False, img_size=32,
                               depth=2, num_classes=0, global_pool="avg").eval()
    pixels = torch.randn(2, 3, 32, 32)
    with torch.inference_mode():
        got, whole = I.output_of(module, pixels), module(pixels)
    assert not I.head_reads_prefix_only(module)
    torch.testing.assert_close(got, whole, atol=0, rtol=0)


@pytest.mark.numeric
@pytest.mark.parametrize("fill", ["zero", "mean"])
def test_head_importance_equals_switching_each_head_off_alone(dinov2, image, fill):
    from xai_core.pipeline import class_scorer

    grid = I.head_importance(dinov2, image, fill=fill)
    assert grid.drops.shape == (12, 6)
    scorer = class_scorer(dinov2, grid.target, dinov2.head)
    plain = model_output(dinov2, image)
    assert_close(grid.score, float(scorer(plain)[0]),
                 class_score_tolerance(dinov2, grid.target, plain))
    for block, head in ((0, 0), (3, 4), (5, 2), (9, 1), (11, 5)):
        alone = under(dinov2, image, heads_off=f"{block}.{head}", heads_fill=fill)
        expected = grid.score - float(scorer(alone)[0])
        # the grid runs the switched-off copies in one batch from block b on: other orders
        tolerance = (class_score_tolerance(dinov2, grid.target, plain) +
                     class_score_tolerance(dinov2, grid.target, alone))
        assert_close(grid.drops[block, head], expected, tolerance)
        # one sign convention: `intervene` reports the same drop for the same head
        same = I.intervene(dinov2, image, maps=False, heads_off=f"{block}.{head}",
                           heads_fill=fill).target["drop"]
        assert_close(same, grid.drops[block, head], tolerance)
    assert np.abs(grid.drops).max() > 0.01


def test_drop_words_say_which_way_the_score_went():
    assert I.drop_words(0.0067) == "fell by 0.0067"
    assert I.drop_words(-0.0018) == "rose by 0.0018"
    assert I.drop_words(4e-5) == "did not move"  # 0.0000 at four decimals
    assert I.drop_words(-0.125, digits=2) == "rose by 0.12"


def test_head_importance_correlations_are_spearman_of_the_stories(dinov2, image):
    from scipy.stats import rankdata

    grid = I.head_importance(dinov2, image)
    for story, values in (("sink_score", grid.sink_scores), ("entropy", grid.entropy)):
        a, b = rankdata(grid.drops.ravel()), rankdata(values.ravel())
        pearson_of_ranks = np.corrcoef(a, b)[0, 1]
        assert grid.correlations[story] == pytest.approx(pearson_of_ranks, abs=1e-9)


def test_cli_head_importance_json_and_npz(capsys, tmp_path, dinov2, image):
    out = tmp_path / "grid.npz"
    assert main(["head-importance", "--model", "dinov2-s14", "--image", "sample:chelsea",
                 "--json", "--out", str(out)]) == 0
    payload = json.loads(capsys.readouterr().out)
    grid = I.head_importance(dinov2, image)
    np.testing.assert_array_equal(np.array(payload["drops"]), grid.drops)
    np.testing.assert_array_equal(np.load(out)["drops"], grid.drops.astype(np.float32))


def test_cli_head_importance_refuses_a_cnn_before_loading(capsys, monkeypatch):
    monkeypatch.setattr("xai_core.cli.studies.load_model", lambda _a: 1 / 0)
    assert main(["head-importance", "--model", "efficientnet-lite0", "--image",
                 "sample:chelsea"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ViT" in err[0]


# --- read-out (logit lens) --------------------------------------------------------------------

def test_readout_at_the_last_block_is_dinov2s_prediction(dinov2, image):
    from xai_core.pipeline import class_scorer
    from xai_core.pipeline import predict
    from xai_core.studies.readout import block_heads, readout

    result = readout(dinov2, image)
    assert result.top[-1] == predict(dinov2, image)
    scorer = class_scorer(dinov2, result.target, dinov2.head)
    assert result.target_scores[-1] == float(scorer(model_output(dinov2, image))[0])
    heads, _ = block_heads(dinov2, dinov2.head)
    assert torch.equal(heads[-1].bank.features, dinov2.head.bank.features)
    assert len(heads) == 12 and result.patch_scores.shape == (12, 16, 16)
    # what compares across blocks: at the last block, every class's score from the model's
    # own output gives the answer's rank and its margin over the runner-up
    output = model_output(dinov2, image)
    every = np.array([class_scorer(dinov2, c, dinov2.head)(output)[0]
                      for c in range(len(dinov2.head.class_names))])
    others = np.delete(every, result.target)
    assert result.ranks[-1] == 1 + (others > every[result.target]).sum() == 1
    assert result.margins[-1] == pytest.approx(every[result.target] - others.max(), abs=1e-9)
    assert result.spreads[-1] == pytest.approx(every.max() - every.min(), abs=1e-9)
    # the score alone misleads: block 0 scores the cat higher than the last block does, but
    # there every class scores alike (flagged) and the margin is far smaller
    assert result.target_scores[0] > result.target_scores[-1]
    assert result.alike[0] and not result.alike[-1]
    assert result.margins[0] < result.margins[-1] / 5
    assert ((result.margins > 0) == (result.ranks == 1)).all()


@pytest.mark.numeric
def test_readout_equals_the_hand_logit_lens_on_deit_distilled(image):
    from xai_core.pipeline import predict
    from xai_core.studies.readout import readout

    model = random_layout("deit_small_distilled_patch16_224", 64, classes=10)
    module = model.module
    result = readout(model, image, target=3)
    assert [p.index for p in result.top[-1]] == [p.index for p in predict(model, image)]
    with torch.inference_mode():
        x = hand_sequence(module, pixels_of(model, image))
        for block_index, block in enumerate(module.blocks):
            x = block(x)
            normed = module.norm(x)[0]
            logits = (module.head(normed[0]) + module.head_dist(normed[1])) / 2
            probabilities = logits.softmax(-1)
            assert result.target_scores[block_index] == pytest.approx(
                float(probabilities[3]), abs=1e-6)
            others = torch.cat([probabilities[:3], probabilities[4:]])
            assert result.ranks[block_index] == 1 + int((others > probabilities[3]).sum())
            assert result.margins[block_index] == pytest.approx(
                float(probabilities[3] - others.max()), abs=1e-6)
            per_patch = ((module.head(normed[2:]) + module.head_dist(normed[2:])) / 2
                         ).softmax(-1)[:, 3].reshape(4, 4).numpy()
            np.testing.assert_allclose(result.patch_scores[block_index], per_patch, atol=1e-6)


def test_cli_readout_json(capsys, dinov2, image):
    from xai_core.studies.readout import readout

    assert main(["readout", "--model", "dinov2-s14", "--image", "sample:chelsea",
                 "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert [row["block"] for row in payload["blocks"]] == list(range(12))
    assert payload["blocks"][-1]["top"][0]["label"] == "cat"
    found = readout(dinov2, image)
    assert payload["blocks"][5]["target_score"] == found.target_scores[5]
    assert payload["blocks"][0]["classes_alike"] and payload["blocks"][0]["rank"] == found.ranks[0]
    assert "margin over the runner-up" in payload["compare"]


def test_hooks_go_on_only_while_the_models_lock_is_held(dinov2, image):
    """Another session holding the lock sees the model unhooked, and the intervention waits."""
    import threading

    done = threading.Event()
    dinov2.lock.acquire()
    try:
        worker = threading.Thread(target=lambda: (
            under(dinov2, image, heads_off="0.1", positions="shuffle"), done.set()))
        worker.start()
        assert not done.wait(1.0)
        assert hooked_modules(dinov2.module) == []
    finally:
        dinov2.lock.release()
    worker.join(120)
    assert done.is_set()


def test_cli_intervene_on_a_random_deit_distilled(capsys):
    assert main(["intervene", "--model", "deit-s16-distilled", "--random-weights", "--image",
                 "sample:coffee", "--set", "heads_off=0.1,11.5", "--set", "uniform=2",
                 "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["random_weights"] and payload["model"] == "deit-s16-distilled"
    assert len(payload["before"]["top"]) == len(payload["after"]["top"]) == 5
    assert payload["target"]["after"] != payload["target"]["before"]


@pytest.mark.numeric
def test_maps_without_an_intervention_are_the_methods_own(dinov2, image):
    from xai_core.methods import METHODS
    from xai_core.methods.rollout import attention_rollout
    from xai_core.pipeline import vit_capture

    outcome = I.intervene(dinov2, image)
    target = outcome.target["index"]
    for name in ("gae", "vit-gradcam"):
        np.testing.assert_allclose(outcome.maps[name],
                                   METHODS[name](dinov2, image, target=target).map, atol=1e-6)
    np.testing.assert_allclose(outcome.maps["rollout"],
                               attention_rollout(vit_capture(dinov2, image)).query_row()[0],
                               atol=1e-6)


def test_methods_doc_numbers_are_recomputed(dinov2, image):
    from pathlib import Path

    from xai_core.pipeline import vit_capture
    from xai_core.analysis.attention_sinks import analyse_sinks

    doc = (Path(__file__).resolve().parent.parent / "docs" / "methods.md").read_text()
    methods_doc = " ".join(doc.split())
    sink = analyse_sinks(vit_capture(dinov2, image)).strongest()
    off = I.intervene(dinov2, image, maps=False, heads_off=f"{sink.block}.{sink.head}").target
    every = I.intervene(dinov2, image, maps=False, sink_off="0-11")
    grid = I.head_importance(dinov2, image)
    block, head = np.unravel_index(int(grid.drops.argmax()), grid.drops.shape)
    assert every.after[0].label == "cat" and off["label"] == "cat"
    for words in (
            f"target cat, k-NN class score {off['before']:.4f}",
            f"(block {sink.block}, head {sink.head}, sink score {sink.score:.2f}, its key "
            f"patch {sink.key - 1}) moves the score to {off['after']:.4f} "
            f"(drop {off['drop']:+.4f}: it {'rose' if off['drop'] < 0 else 'fell'})",
            f"moves it to {every.target['after']:.4f} (drop {every.target['drop']:+.4f})",
            f"block {block}, head {head} (drop {grid.drops[block, head]:+.4f})",
            f"sink score is {grid.correlations['sink_score']:+.2f} and with the entropy "
            f"{grid.correlations['entropy']:+.2f}"):
        assert words.replace("+-", "-") in methods_doc, words


@pytest.mark.parametrize("given, words", [
    ({"uniform": "3"}, "talking heads"),
    ({"tokens_drop": "3"}, "timm VisionTransformer"),
    ({"positions": "zero"}, "timm VisionTransformer"),
])
def test_cait_refuses_what_its_layout_cannot_take_before_loading(given, words):
    with pytest.raises(OptionError) as refused:
        I.check_before_load("cait-s24", given)
    assert words in str(refused.value)


@pytest.mark.numeric
def test_a_cnn_takes_masked_pixels_in_16_pixel_cells():
    cnn, image = get_model("efficientnet-lite0"), load_sample("coffee")
    pixels = pixels_of(cnn, image)
    reference = reference_pixels(cnn, pixels, "mean")
    masked = hand_masked(pixels, reference, (0, 20, 195), columns=14, size=16)  # 16 px cells
    with torch.inference_mode():
        expected = cnn.module(masked)
    got = under(cnn, image, patches_mask="0,20,195", mask_baseline="mean")
    assert_matches(got, expected, cnn)
    outcome = I.intervene(cnn, image, patches_mask="0-97", mask_baseline="black")
    assert outcome.before[0].label == "espresso" and outcome.maps == {}
    assert outcome.target["after"] < outcome.target["before"]


@pytest.mark.parametrize("given, words", [
    ({"heads_off": "0.1"}, "heads_off: acts on a ViT"),
    ({"patches_mask": "196"}, "patch 196 is out of range (0-195"),
])
def test_a_cnn_refuses_token_interventions_before_loading(given, words):
    with pytest.raises(OptionError) as refused:
        I.check_before_load("efficientnet-lite0", given)
    assert words in str(refused.value)


@pytest.mark.numeric
def test_positions_on_reg4_move_only_the_patches_embeddings(image):
    model = random_layout("vit_small_patch14_reg4_dinov2", 56)
    module = model.module
    order = I.position_order(module.patch_embed.num_patches, 9)
    with torch.inference_mode():  # reg4: the table covers the patches only
        patches = module.patch_embed(pixels_of(model, image))
        prefix = torch.cat([module.cls_token, module.reg_token], dim=1)
        expected = {
            how: hand_forward(module, module.norm_pre(torch.cat([prefix, p], dim=1)))
            for how, p in (("shuffle", patches + module.pos_embed[:, order]),
                           ("zero", patches))}
    for how in ("shuffle", "zero"):
        assert_matches(under(model, image, positions=how, seed=9), expected[how], model)


@pytest.mark.numeric
def test_head_importance_on_deit_distilled_spot_checks(image):
    from xai_core.pipeline import class_scorer

    model = random_layout("deit_small_distilled_patch16_224", 64, classes=10)
    grid = I.head_importance(model, image, target=2)
    scorer = class_scorer(model, 2, model.head)
    plain = model_output(model, image)
    for block, head in ((0, 3), (1, 0), (2, 5)):
        alone = under(model, image, heads_off=f"{block}.{head}")
        assert_close(grid.drops[block, head], grid.score - float(scorer(alone)[0]),
                     class_score_tolerance(model, 2, plain) +
                     class_score_tolerance(model, 2, alone))
    assert np.abs(grid.drops).max() > 1e-3  # the heads matter far beyond the tolerance
