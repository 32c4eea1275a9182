"""Provenance: what a saved result was computed with (model, weights, image digest, input
size, device, library versions), written beside every file the CLI and the comparison
export save."""

from __future__ import annotations


def run_meta(model, image, extra: dict | None = None) -> dict:
    import timm
    import torch

    from .. import __version__
    from ..images import image_sha256

    meta = {"model": model.spec.id, "model_label": model.label,
            "random_weights": model.random_weights, "random_weights_seed": model.seed,
            "weights_source": model.weights_source,
            "image_sha256": image_sha256(image), "image_size": list(image.size),
            "input_size": list(model.spec.input_size), "device": str(model.device),
            "versions": {"vit_lens": __version__, "torch": torch.__version__,
                         "timm": timm.__version__}}
    meta.update(extra or {})
    return meta
