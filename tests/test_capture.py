"""The capture engine against plain PyTorch: layouts, probabilities, gradients, hygiene."""

import pytest
import timm
import torch

from tolerance import assert_close, network_tolerance, tolerance
from xai_core.capture import (CaptureError, run_capture, run_cnn_capture, shared_forwards,
                              shared_outputs, transformer_blocks)

LAYOUTS = [  # (timm name, create kwargs, input (H, W), prefix tokens, grid)
    ("deit_small_distilled_patch16_224", {}, (224, 224), 2, (14, 14)),
    ("vit_small_patch14_reg4_dinov2", {"img_size": 224}, (224, 224), 5, (16, 16)),
    ("cait_xxs24_224", {}, (224, 224), 1, (14, 14)),
    ("vit_small_patch16_224", {"img_size": (160, 224)}, (160, 224), 1, (10, 14)),
]


def frozen(name, **kwargs):
    torch.manual_seed(0)
    module = timm.create_model(name, pretrained=False, **kwargs).eval()
    for parameter in module.parameters():
        parameter.requires_grad_(False)
    return module


@pytest.fixture(scope="module", params=LAYOUTS, ids=[row[0] for row in LAYOUTS])
def captured(request):
    name, kwargs, size, prefix, grid = request.param
    module = frozen(name, **kwargs)
    pixels = torch.randn(1, 3, *size, generator=torch.Generator().manual_seed(1))
    result = run_capture(module, pixels, lambda out: out[:, 7].sum())
    return module, pixels, result, prefix, grid


def test_layout_read_from_model(captured):
    module, _, result, prefix, grid = captured
    assert result.layout.num_prefix_tokens == prefix
    assert result.layout.grid == grid
    self_blocks = result.self_attention_blocks()
    expected_keys = grid[0] * grid[1] + (0 if "cait" in type(module).__name__.lower() else prefix)
    assert all(b.acts["attn"].shape[-1] == expected_keys for b in self_blocks)


def test_attention_rows_are_probabilities(captured):
    _, _, result, _, _ = captured
    for block in result.blocks:
        attn = block.acts["attn"]
        assert attn.min() >= 0
        torch.testing.assert_close(attn.sum(-1), torch.ones(attn.shape[:-1]), atol=1e-5, rtol=0)


def test_cait_class_attention_blocks_have_one_cls_query(captured):
    module, _, result, _, grid = captured
    class_blocks = [b for b in result.blocks if b.kind == "class"]
    if not hasattr(module, "blocks_token_only"):
        assert class_blocks == []
        return
    assert len(class_blocks) == len(module.blocks_token_only)
    for block in class_blocks:
        assert block.acts["attn"].shape[2:] == (1, 1 + grid[0] * grid[1])
        assert block.num_prefix_tokens == 1


def plain_gradients(module, pixels, class_index):
    """Independent oracle: our own hooks on a plain forward, then autograd.grad."""
    kept = {}
    hooks = []
    for i, block in enumerate(module.blocks):
        hooks.append(block.norm1.register_forward_hook(
            lambda m, a, out, i=i: kept.__setitem__(("ln1", i), out)))
        hooks.append(block.register_forward_hook(
            lambda m, a, out, i=i: kept.__setitem__(("out", i), out)))
        hooks.append(block.mlp.register_forward_hook(
            lambda m, a, out, i=i: kept.__setitem__(("mlp", i), out)))
    x = pixels.clone().requires_grad_(True)
    try:
        score = module(x)[:, class_index].sum()
    finally:
        for hook in hooks:
            hook.remove()
    keys = sorted(kept, key=lambda k: (k[1], k[0]))
    grads = torch.autograd.grad(score, [kept[k] for k in keys] + [x], allow_unused=True)
    return float(score.detach()), dict(zip(keys, grads[:-1])), grads[-1]


@pytest.mark.numeric
def test_gradients_equal_plain_autograd(captured):
    """The capture writes the attention out; the plain forward runs timm's fused kernel: the
    same numbers added in other orders, forward and back (tests/tolerance.py)."""
    module, pixels, result, _, _ = captured
    score, grads, input_grad = plain_gradients(module, pixels, 7)
    assert_close(result.score, score, network_tolerance(module, score), "score")
    assert_close(result.input_grad, input_grad, network_tolerance(module, input_grad, passes=2),
                 "input gradient")
    for (name, index), expected in grads.items():
        got = result.blocks[index].grads[name]
        if expected is None:  # no path to the score: exactly zero
            assert not got.any(), (name, index)
            continue
        assert_close(got, expected, network_tolerance(module, expected, passes=2),
                     f"{name} {index}")


@pytest.mark.numeric
def test_attention_gradient_matches_recomputed_softmax():
    """The F2 gradient equals the gradient of an explicitly recomputed softmax(qk^T/sqrt(d))."""
    module = frozen("vit_tiny_patch16_224")
    pixels = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(2))
    result = run_capture(module, pixels, lambda out: out[:, 3].sum())
    block = module.blocks[5]
    kept = {}

    def recompute_attention(attn_module, args, out):
        x = args[0]
        B, N, C = x.shape
        qkv = attn_module.qkv(x).reshape(B, N, 3, attn_module.num_heads, -1).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        attn = ((q * attn_module.scale) @ k.transpose(-2, -1)).softmax(-1)
        kept["attn"] = attn
        context = (attn @ v).transpose(1, 2).reshape(B, N, C)
        return attn_module.proj(context)

    handle = block.attn.register_forward_hook(recompute_attention)
    try:
        x = pixels.clone().requires_grad_(True)
        score = module(x)[:, 3].sum()
    finally:
        handle.remove()
    (expected,) = torch.autograd.grad(score, [kept["attn"]])
    attention = kept["attn"].detach()
    assert_close(result.blocks[5].acts["attn"], attention, network_tolerance(module, attention))
    assert_close(result.blocks[5].grads["attn"], expected,
                 network_tolerance(module, expected, passes=2))


def test_no_state_left_on_the_model(captured):
    module, *_ = captured
    assert all(p.grad is None for p in module.parameters())
    for _, submodule in module.named_modules():
        assert not submodule._forward_hooks and not submodule._forward_pre_hooks
        assert getattr(submodule, "fused_attn", True) in (True, False)
    fused = [m.fused_attn for m in module.modules() if hasattr(m, "fused_attn")]
    assert fused == [timm.layers.use_fused_attn()] * len(fused)


def test_forward_only_capture_has_no_gradients():
    module = frozen("vit_tiny_patch16_224")
    result = run_capture(module, torch.randn(1, 3, 224, 224))
    assert not result.has_gradients and result.blocks[0].grads is None
    assert result.passes == {"forward": 1, "backward": 0}
    with pytest.raises(CaptureError):
        result.stacked("attn", grads=True)


def test_inside_shared_forwards_every_capture_of_the_pixels_is_one_forward():
    """A forward-only capture made inside `shared_forwards()` runs the pass that the
    captures with a backward then reuse: one forward in all, and each capture holds what a
    capture of its own holds."""
    module = frozen("vit_tiny_patch16_224", depth=3)
    pixels = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(4))
    forwards = []
    handle = module.register_forward_hook(lambda *_: forwards.append(1))
    try:
        with shared_forwards():
            plain = run_capture(module, pixels)
            first = run_capture(module, pixels, lambda out: out[:, 3].sum())
            second = run_capture(module, pixels, lambda out: out[:, 5].sum())
            assert len(shared_outputs()) == 1
        scores = (None, lambda out: out[:, 3].sum(), lambda out: out[:, 5].sum())
        alone = [run_capture(module, pixels, score) for score in scores]
    finally:
        handle.remove()
    assert len(forwards) == 1 + 3 and shared_outputs() == []
    assert plain.passes == {"forward": 1, "backward": 0} and not plain.has_gradients
    assert first.passes == second.passes == {"forward": 0, "backward": 1}
    for shared, own in zip((plain, first, second), alone):
        torch.testing.assert_close(shared.output, own.output)
        for mine, theirs in zip(shared.blocks, own.blocks):
            torch.testing.assert_close(mine.acts["attn"], theirs.acts["attn"])
            if own.has_gradients:
                torch.testing.assert_close(mine.grads["attn"], theirs.grads["attn"])
    assert not torch.equal(first.blocks[0].grads["attn"], second.blocks[0].grads["attn"])


def test_a_weight_changed_in_place_inside_shared_forwards_gets_a_new_forward():
    """The kept pass is keyed by the module's weight versions too: after an in-place change
    (the DAAM sanity check's randomisation) a capture runs a new forward of the changed
    weights, and its backward does not meet the old pass's stale tensors."""
    module = frozen("vit_tiny_patch16_224", depth=2)
    pixels = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(5))
    score = lambda out: out[:, 2].sum()  # noqa: E731
    with shared_forwards():
        before = run_capture(module, pixels, score)
        with torch.no_grad():
            module.blocks[1].attn.qkv.weight.mul_(0.5)
        after = run_capture(module, pixels, score)
        assert after.passes == {"forward": 1, "backward": 1}
    fresh = run_capture(module, pixels, score)
    torch.testing.assert_close(after.output, fresh.output)
    torch.testing.assert_close(after.blocks[1].grads["attn"], fresh.blocks[1].grads["attn"])
    assert not torch.allclose(before.output, after.output)


@pytest.mark.numeric
def test_context_is_attention_times_values():
    module = frozen("vit_tiny_patch16_224")
    result = run_capture(module, torch.randn(1, 3, 224, 224))
    for block in result.blocks:
        attn, v = block.acts["attn"], block.acts["v"]
        heads = (attn @ v)  # (B, H, N, d): one product over the N tokens, maybe blocked apart
        expected = heads.transpose(1, 2).reshape(block.acts["context"].shape)
        assert_close(block.acts["context"], expected,
                     tolerance(expected, reduction=attn.shape[-1]))


def test_wrong_input_size_is_a_clear_error():
    module = frozen("vit_tiny_patch16_224")
    with pytest.raises(Exception) as error:
        run_capture(module, torch.randn(1, 3, 160, 160))
    assert not isinstance(error.value, (KeyError, IndexError))


def test_non_vit_is_refused_in_words():
    with pytest.raises(CaptureError, match="not a ViT"):
        transformer_blocks(torch.nn.Sequential(torch.nn.Linear(2, 2)))


@pytest.mark.numeric
def test_cnn_capture_matches_plain_autograd():
    module = frozen("resnet18")
    pixels = torch.randn(1, 3, 96, 96, generator=torch.Generator().manual_seed(3))
    result = run_cnn_capture(module, pixels, "layer4", lambda out: out[:, 5].sum())
    kept = {}
    handle = module.layer4.register_forward_hook(lambda m, a, out: kept.__setitem__("a", out))
    x = pixels.clone().requires_grad_(True)
    score = module(x)[:, 5].sum()
    handle.remove()
    (expected,) = torch.autograd.grad(score, [kept["a"]])
    assert result.activations.shape == (1, 512, 3, 3)
    torch.testing.assert_close(result.gradients, expected, atol=1e-7, rtol=1e-4)
    with pytest.raises(CaptureError, match="no layer named"):
        run_cnn_capture(module, pixels, "layer9")
