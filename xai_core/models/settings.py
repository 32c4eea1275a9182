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
RESULTS_ENV = "VIT_LENS_RESULTS_DIR"  # a folder, or "off" for results in memory only
RESULTS_MB_ENV = "VIT_LENS_RESULTS_MB"  # the visitors' area
WARM_RESULTS_MB_ENV = "VIT_LENS_RESULTS_WARM_MB"  # the warm-ups' area
DEFAULT_RESULTS_MB = 4096


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


def results_dir() -> Path | None:
    """Where computed results are shared by every replica (None: off)."""
    wanted = os.environ.get(RESULTS_ENV, "").strip()
    if wanted.lower() == "off":
        return None
    return Path(wanted) if wanted else cache_dir() / "results"


def results_max_bytes(env: str = RESULTS_MB_ENV) -> int:
    """The bound of the result store's visitors' area (`WARM_RESULTS_MB_ENV`: its warm-ups'
    area); a value that is not a positive number of MB is the default."""
    try:
        megabytes = float(os.environ.get(env, DEFAULT_RESULTS_MB))
    except ValueError:
        megabytes = DEFAULT_RESULTS_MB
    return int((megabytes if megabytes > 0 else DEFAULT_RESULTS_MB) * 2**20)


def default_device() -> torch.device:
    wanted = os.environ.get(DEVICE_ENV)
    if wanted:
        return torch.device(wanted)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in {"1", "true", "yes"}
