"""Tiny random-weight models wired exactly like the registry's LoadedModel (a small
supervised ViT, a small self-supervised ViT with a k-NN head built from the gallery, a small
CNN), and small random images: real model calls that are quick on two CPU cores."""

from __future__ import annotations

import numpy as np
import timm
import torch
from PIL import Image

from xai_core.capture import conv_layer_names
from xai_core.models.heads import ImageNetHead, KnnHead
from xai_core.models.knn import build_gallery_bank
from xai_core.models import LoadedModel, ModelSpec

SIZE = 64  # model input side: 4x4 patches of 16 px


def tiny_vit(model_id: str, knn: bool, patch: int = 16, depth: int = 3) -> LoadedModel:
    """`patch` 4 gives 16x16 = 256 patches, as many superpixels as DINOv2's grid."""
    torch.manual_seed(0)
    module = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=SIZE,
                               depth=depth, patch_size=patch,
                               num_classes=0 if knn else 10).eval()
    for parameter in module.parameters():
        parameter.requires_grad_(False)
    spec = ModelSpec(id=model_id, display_name=model_id, family="vit", source="hub",
                     timm_name="vit_tiny_patch16_224", input_size=(SIZE, SIZE), crop_pct=1.0,
                     head="knn" if knn else "imagenet")
    model = LoadedModel(spec, module, torch.device("cpu"), True, "random initialisation")
    if knn:
        model.head = KnnHead(build_gallery_bank(model, views=2))
    else:
        model.head = ImageNetHead([f"class {i}" for i in range(10)])
    model.class_names = model.head.class_names
    return model


def tiny_cnn() -> LoadedModel:
    torch.manual_seed(0)
    module = timm.create_model("resnet10t", pretrained=False, num_classes=10).eval()
    for parameter in module.parameters():
        parameter.requires_grad_(False)
    layer = [name for name in conv_layer_names(module) if name.startswith("layer4")][-1]
    spec = ModelSpec(id="test-tiny-cnn", display_name="test-tiny-cnn", family="cnn",
                     source="hub", timm_name="resnet10t", input_size=(SIZE, SIZE),
                     crop_pct=1.0, cnn_target_layer=layer)
    model = LoadedModel(spec, module, torch.device("cpu"), True, "random initialisation")
    model.head = ImageNetHead([f"class {i}" for i in range(10)])
    model.class_names = model.head.class_names
    return model


def images(count: int = 4) -> list[Image.Image]:
    rng = np.random.default_rng(7)
    return [Image.fromarray(rng.integers(0, 256, (40 + 8 * i, 56, 3), dtype=np.uint8))
            for i in range(count)]
