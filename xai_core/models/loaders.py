"""Load models once per process: bundled weights offline, hub weights when reachable."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..infra import fair_share
from ..infra.budget import activation_elements
from ..infra.faults import ModelLock, raise_if_out_of_memory
from ..infra.locks import FairLock
from ..infra.result_store import remember_weights
from ..infra.rng import seeded
from . import bundled
from .heads import ImageNetHead, KnnHead
from .knn import load_or_build_bank
from .registry import ModelSpec, get_spec
from .settings import (WEIGHTS_ENV, Availability, ModelUnavailableError, default_device,
                       hub_offline)


@dataclass
class LoadedModel:
    """A ready-to-run model plus what every caller needs beside it.

    `lock` guards every use of `module` (hooks and flags are shared state); it also turns
    running out of memory inside into `ModelOutOfMemory` (xai_core/faults.py).
    """

    spec: ModelSpec
    module: torch.nn.Module
    device: torch.device
    random_weights: bool
    weights_source: str
    class_names: list[str] = field(default_factory=list)
    head: object | None = None  # ImageNetHead / KnnHead; None for text models
    lock: FairLock = field(default_factory=ModelLock)
    extras: dict = field(default_factory=dict)
    seed: int | None = None  # of a random initialisation (random_weights_seed)
    _parameters: int | None = field(default=None, repr=False, compare=False)

    @property
    def label(self) -> str:
        """The name to show wherever this model's results appear."""
        name = self.spec.display_name
        if not self.random_weights:
            return name
        seed = "" if self.seed is None else f", seed {self.seed}"
        return f"{name} [RANDOM WEIGHTS{seed} - shapes only]"

    def num_parameters(self) -> int:
        """Counted once (1 ms, on every run of Home's model card): a model's shapes never
        change, only its values do (the sanity checks' randomised copies)."""
        if self._parameters is None:
            self._parameters = sum(p.numel() for p in self.module.parameters())
        return self._parameters


def _local_weights_file(spec: ModelSpec) -> Path | None:
    """`<id>.safetensors` for timm models; a `<id>/` Hugging Face folder for text models."""
    folder = os.environ.get(WEIGHTS_ENV)
    if not folder:
        return None
    if spec.family == "text":
        candidate = Path(folder) / spec.id
        return candidate if (candidate / "config.json").is_file() else None
    for name in (spec.id, spec.timm_name or ""):
        candidate = Path(folder) / f"{name}.safetensors"
        if name and candidate.is_file():
            return candidate
    return None


def _hub_cached_file(spec: ModelSpec) -> str | None:
    from huggingface_hub import try_to_load_from_cache
    from timm.models import get_pretrained_cfg

    hub_id = spec.hf_name if spec.family == "text" else get_pretrained_cfg(spec.timm_name).hf_hub_id
    for filename in ("model.safetensors", "pytorch_model.bin"):
        found = try_to_load_from_cache(hub_id, filename)
        if isinstance(found, str):
            return found
    return None


_load_failures: dict[str, str] = {}
# The sidebar labels every model on every run of every page: ~100 file look-ups (installed
# packages, the hub's cache), several ms on a busy server when a class of 100 moves at once.
# Each answer is kept a while, keyed by what it depends on in this process's environment; a
# download by another process shows within AVAILABILITY_TTL_S.
AVAILABILITY_TTL_S = 30.0
_availability: dict[tuple, tuple[float, Availability]] = {}
_clock = time.monotonic


def availability(model_id: str) -> Availability:
    """Whether `model_id` can load here, and in words why or why not."""
    spec = get_spec(model_id)
    if model_id in _load_failures:
        return Availability(False, _load_failures[model_id])
    key = (model_id, os.environ.get(WEIGHTS_ENV), hub_offline(), os.environ.get("HF_HOME"),
           os.environ.get("HF_HUB_CACHE"))
    now = _clock()
    known = _availability.get(key)
    if known is None or now - known[0] > AVAILABILITY_TTL_S:
        known = _availability[key] = (now, _look_up_availability(spec))
    return known[1]


def _look_up_availability(spec: ModelSpec) -> Availability:
    if spec.is_bundled:
        return bundled.availability(spec)
    if local := _local_weights_file(spec):
        return Availability(True, f"Weights from the local copy {local}.")
    if _hub_cached_file(spec):
        return Availability(True, "Weights already downloaded to the Hugging Face cache.")
    if hub_offline():
        return Availability(
            False,
            f"{spec.display_name} needs weights from the Hugging Face hub, which is switched "
            f"off here (HF_HUB_OFFLINE=1) and nothing is cached. Put {spec.id}.safetensors in "
            f"${WEIGHTS_ENV} or start once with network access.",
        )
    return Availability(True, "Will download from the Hugging Face hub on first use.")


def _create_text_model(spec: ModelSpec) -> torch.nn.Module:
    from transformers import AutoModel

    source = _local_weights_file(spec) or spec.hf_name
    return AutoModel.from_pretrained(str(source), attn_implementation="eager")


def _create_timm_model(spec: ModelSpec) -> torch.nn.Module:
    import timm

    overlay = {}
    if local := _local_weights_file(spec):
        overlay = {"file": str(local)}
    return timm.create_model(spec.timm_name, pretrained=True, pretrained_cfg_overlay=overlay,
                             **_size_args(spec))


def _size_args(spec: ModelSpec) -> dict:
    """ViTs are built for the spec's input size (DINOv2's native 518 px becomes 224 px, its
    position table resampled by timm); CNNs take any size as they are."""
    return {"img_size": spec.input_size} if spec.is_vit else {}


def random_weights_seed(model_id: str) -> int:
    """The seed of a model's random initialisation, from its id: every replica, every
    run and every rerun of a command builds the same "random" model."""
    return int.from_bytes(hashlib.sha256(model_id.encode()).digest()[:4], "big")


def _create_random_model(spec: ModelSpec) -> tuple[torch.nn.Module, str]:
    import timm

    if spec.family == "text":  # its tokenizer comes from the hub too
        raise ModelUnavailableError(f"{spec.display_name} has no random-weight mode: its "
                                    "tokenizer also comes from the hub.")
    seed = random_weights_seed(spec.id)
    with seeded(torch.device("cpu"), seed):  # timm initialises from torch's default generator
        module = timm.create_model(spec.timm_name, pretrained=False, **_size_args(spec))
    return module, f"random initialisation, seed {seed} (from the model id)"


def _create_hub_model(spec: ModelSpec, random_weights: bool) -> tuple[torch.nn.Module, str]:
    if random_weights:
        return _create_random_model(spec)
    status = availability(spec.id)
    if not status.available:
        raise ModelUnavailableError(status.reason)
    try:
        module = (_create_text_model if spec.family == "text" else _create_timm_model)(spec)
    except Exception as error:  # network, missing file, corrupt download: say which
        reason = (f"{spec.display_name} could not be loaded from the hub: "
                  f"{type(error).__name__}: {str(error).splitlines()[0][:200]}")
        _load_failures[spec.id] = reason
        raise ModelUnavailableError(reason) from error
    return module, status.reason


def _imagenet_class_names() -> list[str]:
    from timm.data import ImageNetInfo

    info = ImageNetInfo()
    return [info.index_to_description(i) for i in range(info.num_classes())]


def _prepare(module: torch.nn.Module, device: torch.device, family: str) -> torch.nn.Module:
    module.eval().to(device)
    if family == "cnn" and device.type == "cpu":
        # oneDNN's convolutions run faster on channels-last weights, most at small batches
        # (EfficientNet-Lite0, one 21-image curve: 0.195 s vs 0.22 s at batch 1, 0.12 s vs
        # 0.26 s at batch 4); the values agree with the default layout to float rounding
        module.to(memory_format=torch.channels_last)
    for parameter in module.parameters():
        parameter.requires_grad_(False)  # gradients flow to activations only
    return module


def _build(model_id: str, random_weights: bool, device: torch.device) -> LoadedModel:
    spec = get_spec(model_id)
    if spec.is_bundled:
        if random_weights:
            raise ModelUnavailableError(f"{spec.display_name} is bundled; it has real weights.")
        module, source = bundled.create(spec)
    else:
        module, source = _create_hub_model(spec, random_weights)
    loaded = LoadedModel(spec=spec, module=_prepare(module, device, spec.family), device=device,
                         random_weights=random_weights, weights_source=source,
                         seed=random_weights_seed(spec.id) if random_weights else None)
    if spec.head == "imagenet":
        loaded.head = ImageNetHead(_imagenet_class_names())
        loaded.class_names = loaded.head.class_names
    elif spec.head == "knn":
        attach_default_bank(loaded)
    remember_weights(loaded)  # its results may now be shared on disk
    return loaded


def attach_default_bank(model) -> None:
    """Give a self-supervised model its class list and k-NN head."""
    model.head = KnnHead(load_or_build_bank(model))
    model.class_names = model.head.class_names


_models: dict[tuple[str, bool, str], LoadedModel] = {}
_models_lock = threading.Lock()


def loaded_model(model_id: str, random_weights: bool = False,
                 device: torch.device | None = None) -> LoadedModel | None:
    """The process-wide instance if it is already loaded, else None (nothing is loaded)."""
    return _models.get((model_id, random_weights, str(device or default_device())))


def get_model(model_id: str, random_weights: bool = False,
              device: torch.device | None = None) -> LoadedModel:
    """The process-wide instance of a model, loaded on first use.

    Raises `ModelUnavailableError` (with the reason in words) or `UnknownModelError`.
    """
    device = device or default_device()
    key = (model_id, random_weights, str(device))
    with _models_lock:  # one load at a time: loads are rare and memory-heavy
        if key not in _models:
            try:
                with fair_share.exempt():  # every session shares the load: nobody's share
                    loaded = _build(model_id, random_weights, device)
                    if loaded.spec.family in ("vit", "cnn"):  # its memory estimate, once:
                        activation_elements(loaded)  # a request over budget waits for none
                fair_share.count_passes(loaded.module)  # from now on, against the visitor
                _models[key] = loaded
            except Exception as error:
                raise_if_out_of_memory(error)
                raise
        return _models[key]
