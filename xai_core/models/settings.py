"""Where models come from on this machine: cache and weights folders, device, hub access,
and the words for a model that cannot load. No model code here, so the loaders, the
bundled models and the k-NN bank can all read it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

CACHE_ENV = "VIT_LENS_CACHE_DIR"
WEIGHTS_ENV = "VIT_LENS_WEIGHTS_DIR"
DEVICE_ENV = "VIT_LENS_DEVICE"


class ModelUnavailableError(RuntimeError):
    """A model whose weights cannot be had here; the message says why in words."""


@dataclass(frozen=True)
class Availability:
    available: bool
    reason: str


def cache_dir() -> Path:
    """Where converted weights and memory banks live (XDG cache unless overridden). It is
    created by the first write (models/disk_cache.py), which may fail without harm."""
    base = os.environ.get(CACHE_ENV)
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        base = str(Path(xdg) / "vit-lens")
    return Path(base)


def default_device() -> torch.device:
    wanted = os.environ.get(DEVICE_ENV)
    if wanted:
        return torch.device(wanted)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in {"1", "true", "yes"}
