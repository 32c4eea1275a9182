"""The one road from (model, image, target) to predictions and captures.

Pages, the CLI and the benchmarks all call these functions, so every number in
the app comes from the same code path and the same bounded caches.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from PIL import Image

from .infra.cache import BoundedCache, cache_key
from .infra.faults import free_on_out_of_memory
from .capture import (Capture, CnnCapture, capture, capture_cnn, live_forward,
                      sharing_forwards)
from .images import fit_to_model, image_sha256, shared_image, to_model_tensor

# Each image's model input and plain output: small (0.6 MB, a few kB) and asked for by every
# page run. In the capture cache (24 entries) a class on the 8 gallery photos pushed them out
# of one another (and the captures out): every Home or Explainer visit resized its photo again
# and read the outputs back from the disk store. Emptied with the capture cache.
INPUT_CACHE = BoundedCache(max_entries=128, max_bytes=128 * 2**20, shared=True)
CAPTURE_CACHE = BoundedCache(
    max_entries=int(os.environ.get("VIT_LENS_CAPTURE_ENTRIES", 24)),
    max_bytes=int(os.environ.get("VIT_LENS_CAPTURE_MB", 1536)) * 2**20, shared=True,
    companions=(INPUT_CACHE,))
free_on_out_of_memory(CAPTURE_CACHE.clear)  # its companion, the input cache, empties with it


class TargetError(ValueError):
    """An unknown class name or an out-of-range class index (message in words)."""


@dataclass(frozen=True)
class PreparedInput:
    model_image: Image.Image  # exactly what the model sees, for overlays
    pixels: torch.Tensor  # (1, 3, H, W) normalised, on the CPU
    sha256: str  # of the ORIGINAL image: the cache key


def prepare(model, image: Image.Image) -> PreparedInput:
    """Resize/crop/normalise for `model`, cached: every page asks for it several times."""
    spec, sha = model.spec, image_sha256(image)

    def fit() -> PreparedInput:
        fitted = fit_to_model(image, spec.input_size, spec.crop_pct, spec.interpolation)
        # a cached value, read-only like every cached value: its digest is asked often
        return PreparedInput(shared_image(fitted), to_model_tensor(fitted, spec.mean, spec.std),
                             sha)

    key = cache_key("prepared", model, image=sha)
    return INPUT_CACHE.get_or_compute(key, fit)


@dataclass(frozen=True)
class Prediction:
    index: int
    label: str
    probability: float


def head_of(model, head=None):
    head = head or model.head
    if head is None:
        raise TargetError(f"{model.spec.display_name} has no classifier or k-NN head.")
    return head


def score_kind(model, head=None) -> str:
    head = head_of(model, head)
    if head.kind == "imagenet":
        return "softmax probability of the class"
    return "k-NN class score (mean cosine similarity to the class's nearest bank entries)"


def class_scorer(model, target: int, head=None) -> Callable[[torch.Tensor], np.ndarray]:
    """Model output (B, ...) -> the target class's score for every image, (B,) numpy."""
    head = head_of(model, head)
    if head.kind == "imagenet":
        return lambda output: output.float().softmax(-1)[:, target].numpy().astype(np.float64)
    score = head.score_fn(target)  # sums over its batch: call it per image
    return lambda output: np.array([float(score(output[i:i + 1])) for i in range(len(output))])


def default_batch_size(model) -> int:
    """Images per forward for batched methods (perturbation metrics, Score-CAM,
    Ablation-CAM): a GPU wants large batches. On a CPU a ViT gains little beyond 16, and
    a CNN's activations outgrow the caches beyond 4 (EfficientNet-Lite0: 0.12 s per
    21-image curve at batch 4, 0.24 s at 16); each batch is one turn of the model's lock
    that another session may be waiting behind."""
    if str(model.device).startswith("cuda"):
        return 64
    return 4 if model.spec.family == "cnn" else 16


def _plain_output(model, pixels: torch.Tensor) -> torch.Tensor:
    if model.spec.family == "vit" and sharing_forwards():
        # the forward the block's gradient methods will reuse (page 7 predicts, then runs
        # them): one pass instead of two
        live, _ = live_forward(model.module, pixels.to(model.device), model.lock)
        return live.output.detach().float().cpu()
    with model.lock, torch.inference_mode():
        return model.module(pixels.to(model.device)).float().cpu()


def model_output(model, image: Image.Image) -> torch.Tensor:
    """The model's raw output (logits, or CLS features) for one image, cached."""
    prepared = prepare(model, image)
    key = cache_key("output", model, image=prepared.sha256)
    return INPUT_CACHE.get_or_compute(key, lambda: _plain_output(model, prepared.pixels))


def predict(model, image: Image.Image, topk: int = 5, head=None) -> list[Prediction]:
    return predictions_of(head_of(model, head), model_output(model, image), topk)


def predictions_of(head, output: torch.Tensor, topk: int = 5) -> list[Prediction]:
    """The head's top classes for one model output (an intervention's too)."""
    probabilities = head.probabilities(output)
    top = probabilities.topk(min(topk, probabilities.numel()))
    return [Prediction(i, head.class_names[i], float(p))
            for p, i in zip(top.values.tolist(), top.indices.tolist())]


def resolve_target(model, target: int | str | None, image: Image.Image | None = None,
                   head=None) -> int:
    """A class index from an index, an exact or unique partial class name, or the
    top prediction (None)."""
    head = head_of(model, head)
    names = head.class_names
    if target is None:
        if image is None:
            raise TargetError("A target class or an image to predict is needed.")
        return predict(model, image, topk=1, head=head)[0].index
    if isinstance(target, str) and target.strip().lstrip("-").isdigit():
        target = int(target)
    if isinstance(target, int):
        if not 0 <= target < len(names):
            raise TargetError(f"Class index {target} is out of range (0-{len(names) - 1}).")
        return target
    return _class_by_name(names, target)


def _class_by_name(names: list[str], wanted: str) -> int:
    wanted = wanted.strip().lower()
    for i, name in enumerate(names):
        if wanted in [part.strip().lower() for part in name.split(",")] or name.lower() == wanted:
            return i
    partial = [i for i, name in enumerate(names) if wanted and wanted in name.lower()]
    if len(partial) == 1:
        return partial[0]
    if partial:
        examples = "; ".join(names[i] for i in partial[:5])
        raise TargetError(f"'{wanted}' matches several classes ({examples}...). Be more specific.")
    raise TargetError(f"No class is called '{wanted}'.")


# forward-only capture key -> the key of the latest capture with a backward of that image
# (its forward is the same pass, so it answers forward-only requests too); shared by every
# session's thread
GRADED_OF = BoundedCache(max_entries=64, max_bytes=2**20)


def vit_capture(model, image: Image.Image, target: int | None = None, head=None) -> Capture:
    """One forward (+ one backward for a target class index) of a ViT, cached. A request
    without a target is answered by a cached capture of the same image with a target when
    there is one: its activations come from the same forward pass, so the attention
    methods that run after a gradient method cost no pass of their own."""
    prepared = prepare(model, image)
    plain_key = cache_key("vit", model, None, image=prepared.sha256, head=None)
    if target is None:
        graded = CAPTURE_CACHE.peek(GRADED_OF.peek(plain_key))
        if graded is not None:
            return graded
        return CAPTURE_CACHE.get_or_compute(plain_key,
                                            lambda: capture(model, prepared.pixels, None))
    head = head_of(model, head)  # only a backward pass depends on the head
    key = cache_key("vit", model, target, image=prepared.sha256, head=head)
    found = CAPTURE_CACHE.get_or_compute(
        key, lambda: capture(model, prepared.pixels, head.score_fn(target)))
    GRADED_OF.put(plain_key, key)
    return found


def cnn_capture(model, image: Image.Image, target: int, layer: str | None = None) -> CnnCapture:
    prepared = prepare(model, image)
    layer = layer or model.spec.cnn_target_layer
    head = head_of(model)
    key = cache_key("cnn", model, target, layer, image=prepared.sha256, head=head)
    score_fn = head.score_fn(target)
    return CAPTURE_CACHE.get_or_compute(
        key, lambda: capture_cnn(model, prepared.pixels, layer, score_fn))
