"""LeGrad: our implementation on a timm ViT against torchcam 0.5's `LeGrad` on the same
network built in torchvision (weights copied across), and its class sensitivity on the
cat + coffee collage with the real DINOv2."""

import numpy as np
import pytest
import torch

from tolerance import assert_close, network_tolerance
from xai_core import pipeline
from xai_core.images import load_sample
from xai_core.infra.errors import OptionError
from xai_core.methods import METHODS
from xai_core.methods.legrad import run_legrad
from xai_core.models import get_model

SIZE, PATCH, WIDTH, DEPTH, HEADS, CLASSES = 32, 8, 32, 3, 2, 10


def twin_vits():
    """A random torchvision ViT and a timm ViT holding the same weights."""
    import timm
    from torchvision.models.vision_transformer import VisionTransformer

    torch.manual_seed(0)
    reference = VisionTransformer(image_size=SIZE, patch_size=PATCH, num_layers=DEPTH,
                                  num_heads=HEADS, hidden_dim=WIDTH, mlp_dim=2 * WIDTH,
                                  num_classes=CLASSES).eval()
    with torch.no_grad():  # torchvision zero-initialises the head: make it informative
        reference.heads.head.weight.normal_(0, 0.5)
    ours = timm.models.vision_transformer.VisionTransformer(
        img_size=SIZE, patch_size=PATCH, embed_dim=WIDTH, depth=DEPTH, num_heads=HEADS,
        mlp_ratio=2.0, qkv_bias=True, num_classes=CLASSES, global_pool="token").eval()
    source = reference.state_dict()
    state = {"cls_token": source["class_token"], "pos_embed": source["encoder.pos_embedding"],
             "patch_embed.proj.weight": source["conv_proj.weight"],
             "patch_embed.proj.bias": source["conv_proj.bias"],
             "norm.weight": source["encoder.ln.weight"], "norm.bias": source["encoder.ln.bias"],
             "head.weight": source["heads.head.weight"], "head.bias": source["heads.head.bias"]}
    for i in range(DEPTH):
        tv, tm = f"encoder.layers.encoder_layer_{i}.", f"blocks.{i}."
        pairs = {"norm1": "ln_1", "norm2": "ln_2", "attn.qkv": "self_attention.in_proj",
                 "attn.proj": "self_attention.out_proj", "mlp.fc1": "mlp.0", "mlp.fc2": "mlp.3"}
        for ours_name, their_name in pairs.items():
            for kind in ("weight", "bias"):
                suffix = "_" + kind if their_name.endswith("in_proj") else "." + kind
                state[f"{tm}{ours_name}.{kind}"] = source[f"{tv}{their_name}{suffix}"]
    ours.load_state_dict(state)
    for parameter in ours.parameters():
        parameter.requires_grad_(False)
    return reference, ours


@pytest.mark.numeric
def test_equals_torchcam_legrad_on_the_same_network():
    from torchcam.methods import LeGrad

    reference, ours = twin_vits()
    pixels = torch.randn(1, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():  # two libraries' kernels: the same sums in other orders
        expected = reference(pixels)
        assert_close(ours(pixels), expected, network_tolerance(ours, expected))
    for start, blocks in ((0, list(reference.encoder.layers)),
                          (-2, list(reference.encoder.layers)[-2:])):
        for target in (3, 7):
            with LeGrad(reference, blocks) as extractor:
                reference(pixels)
                expected = extractor(target, normalized=False)[0][0].numpy()
            result = run_legrad(ours, pixels, lambda out, t=target: out[:, t].sum(), start)
            assert result.map.shape == (SIZE // PATCH, SIZE // PATCH)
            assert_close(result.map, expected, network_tolerance(ours, expected, passes=2))
            assert result.backward_passes == len(blocks)


def test_class_sensitive_on_the_collage():
    """Cat on the left half, coffee cup on the right: each class's LeGrad map puts more of
    its mass on its own half than the other class's map does."""
    model = get_model("dinov2-s14")
    image = load_sample("collage")
    cat = pipeline.resolve_target(model, "cat", image)
    cup = pipeline.resolve_target(model, "coffee cup", image)
    maps = {t: METHODS["legrad"](model, image, target=t).map for t in (cat, cup)}
    half = maps[cat].shape[1] // 2

    def left_share(values):
        return values[:, :half].sum() / values.sum()

    assert left_share(maps[cat]) > left_share(maps[cup]) + 0.05
    assert (maps[cat] >= 0).all() and maps[cat].sum() > 0  # ReLU'd gradients


def test_registered_method_options_and_cost():
    model, image = get_model("dinov2-s14"), load_sample("chelsea")
    target = pipeline.resolve_target(model, None, image)
    result = METHODS["legrad"](model, image, target=target, start="-3")
    blocks = len(model.module.blocks)
    assert result.meta["blocks"] == [blocks - 3, blocks - 2, blocks - 1]
    assert result.meta["partial_backward_passes"] == 3
    np.testing.assert_allclose(result.map, result.arrays["per_block"].mean(axis=0), rtol=1e-6)
    with pytest.raises(OptionError):
        METHODS["legrad"](model, image, target=target, start="40")
