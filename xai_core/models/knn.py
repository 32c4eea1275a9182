"""A labelled memory bank of CLS features: classes for self-supervised ViTs.

DINO-style k-NN (see REFERENCE_CONVENTIONS.md): cosine similarity to every bank
entry, the k most similar vote with weight exp(sim / T). Gradient methods need
a differentiable class score instead of votes; ours is the mean cosine
similarity to the class's `CLASS_SCORE_NEIGHBOURS` nearest entries.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from ..images import SAMPLES, fit_to_model, load_sample, to_model_tensor
from . import disk_cache
from .settings import cache_dir

KNN_K = 20
KNN_TEMPERATURE = 0.07
CLASS_SCORE_NEIGHBOURS = 3
VIEWS_PER_IMAGE = 6
BANK_VERSION = 1


@dataclass(frozen=True)
class MemoryBank:
    """Immutable: adding examples returns a new bank, so a session's additions
    never reach another session."""

    features: torch.Tensor  # (M, D), rows L2-normalised
    labels: tuple[str, ...]
    sources: tuple[str, ...]  # which image (and view) each entry came from

    @property
    def class_names(self) -> list[str]:
        return list(dict.fromkeys(self.labels))

    def class_index(self, label: str) -> int:
        return self.class_names.index(label)

    def fingerprint(self) -> str:
        digest = hashlib.sha256(self.features.numpy().tobytes())
        digest.update(json.dumps([self.labels, self.sources]).encode())
        return digest.hexdigest()[:16]

    def with_examples(self, features: torch.Tensor, label: str, source: str) -> "MemoryBank":
        label = label.strip()
        if not label:
            raise ValueError("Give the new example a class label.")
        new = F.normalize(features.detach().float().cpu().reshape(-1, self.features.shape[1]), dim=1)
        count = new.shape[0]
        return MemoryBank(torch.cat([self.features, new]), self.labels + (label,) * count,
                          self.sources + tuple(f"{source}#{i}" for i in range(count)))


@dataclass(frozen=True)
class Neighbour:
    index: int
    label: str
    source: str
    similarity: float


def knn_vote(bank: MemoryBank, feature: torch.Tensor, k: int = KNN_K,
             temperature: float = KNN_TEMPERATURE) -> tuple[torch.Tensor, list[Neighbour]]:
    """Class probabilities (in `bank.class_names` order) and the voting neighbours."""
    query = F.normalize(feature.detach().float().cpu().reshape(1, -1), dim=1)[0]
    similarity = bank.features @ query
    top = similarity.topk(min(k, len(bank.labels)))
    names = bank.class_names
    votes = torch.zeros(len(names))
    for sim, index in zip(top.values.tolist(), top.indices.tolist()):
        votes[names.index(bank.labels[index])] += torch.exp(torch.tensor(sim / temperature))
    neighbours = [Neighbour(i, bank.labels[i], bank.sources[i], s)
                  for s, i in zip(top.values.tolist(), top.indices.tolist())]
    return votes / votes.sum(), neighbours


def class_score(bank: MemoryBank, features: torch.Tensor, class_index: int,
                neighbours: int = CLASS_SCORE_NEIGHBOURS) -> torch.Tensor:
    """Differentiable score of one class: mean cosine similarity to its nearest entries
    (summed over the batch, like a logit target)."""
    label = bank.class_names[class_index]
    rows = [i for i, l in enumerate(bank.labels) if l == label]
    members = bank.features[rows].to(features.device, features.dtype)
    similarity = F.normalize(features, dim=-1) @ members.T  # (B, members)
    return similarity.topk(min(neighbours, len(rows)), dim=-1).values.mean(-1).sum()


# --- building the default bank from the sample gallery ------------------------------------------

def _augmented_views(image, spec, views: int):
    """The model-sized original plus deterministic random crops/flips of it
    (a local RNG: the global torch/random state is shared between sessions)."""
    import random

    from PIL import ImageOps

    size = spec.input_size
    yield fit_to_model(image, size, spec.crop_pct, spec.interpolation)
    rng = random.Random(0)
    width, height = image.size
    for _ in range(views - 1):
        scale = rng.uniform(0.5, 1.0)
        crop_w, crop_h = int(width * scale), int(height * scale)
        left, top = rng.randint(0, width - crop_w), rng.randint(0, height - crop_h)
        view = image.crop((left, top, left + crop_w, top + crop_h))
        if rng.random() < 0.5:
            view = ImageOps.mirror(view)
        yield fit_to_model(view, size, 1.0, spec.interpolation)


@torch.no_grad()
def embed_images(model, images) -> torch.Tensor:
    """CLS features (model output) of model-sized PIL images, under the model's lock."""
    spec = model.spec
    batch = torch.cat([to_model_tensor(im, spec.mean, spec.std) for im in images])
    with model.lock:
        return model.module(batch.to(model.device)).float().cpu()


def build_gallery_bank(model, views: int = VIEWS_PER_IMAGE) -> MemoryBank:
    features, labels, sources = [], [], []
    for sample in SAMPLES.values():
        images = list(_augmented_views(load_sample(sample.id), model.spec, views))
        features.append(embed_images(model, images))
        labels += [sample.label] * len(images)
        sources += [f"{sample.id}#{i}" for i in range(len(images))]
    return MemoryBank(F.normalize(torch.cat(features), dim=1), tuple(labels), tuple(sources))


def _bank_file(model, kind: str = "knn-bank") -> Path:
    tag = "random" if model.random_weights else "pretrained"
    return cache_dir() / (f"{kind}-{model.spec.id}-{tag}-{weights_fingerprint(model.module)}"
                          f"-v{BANK_VERSION}.safetensors")


def weights_fingerprint(module: torch.nn.Module) -> str:
    """A short hash of the weights, so a bank is never reused across different weights."""
    digest = hashlib.sha256()
    for tensor in list(module.state_dict().values())[:4]:
        digest.update(tensor.detach().float().cpu().numpy().tobytes())
    return digest.hexdigest()[:12]


def load_or_build_bank(model) -> MemoryBank:
    """The gallery bank, built once and then read from the cache directory (kept in memory
    only when the cache cannot be written)."""
    return load_or_build_banks(model, "knn-bank", lambda: [build_gallery_bank(model)])[0]


def _tensor_name(index: int) -> str:
    return "features" if index == 0 else f"features.{index}"  # one bank: the old file's name


def load_or_build_banks(model, kind: str, build) -> list[MemoryBank]:
    """Banks of the same labelled views (`build()`: a list of them), built once and then read
    from the cache directory, so every replica and restart reads what one built. A random
    model's banks are never kept (its weights change with every seed)."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    path = _bank_file(model, kind)
    if not model.random_weights:
        try:
            with safe_open(str(path), "pt") as handle:
                meta = json.loads(handle.metadata()["bank"])
            tensors = load_file(str(path))
            return [MemoryBank(tensors[_tensor_name(i)], tuple(meta["labels"]),
                               tuple(meta["sources"])) for i in range(len(tensors))]
        except Exception:  # absent, unreadable, corrupt or old: build it
            pass
    banks = build()
    first = banks[0]
    if not model.random_weights and all(
            (b.labels, b.sources) == (first.labels, first.sources) for b in banks):
        metadata = {"bank": json.dumps({"labels": first.labels, "sources": first.sources})}
        tensors = {_tensor_name(i): b.features.contiguous() for i, b in enumerate(banks)}
        disk_cache.write_atomically(
            path, lambda name: save_file(tensors, name, metadata=metadata),
            f"the k-NN memory bank{'s' if len(banks) > 1 else ''} of "
            f"{model.spec.display_name}")
    return banks
