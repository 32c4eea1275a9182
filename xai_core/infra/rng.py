"""Torch's default random generator, shared by the whole process, used one block at a time.

Some library code draws from it with no way to pass a generator of its own: timm's weight
initialisation (random-weight models), Captum's SmoothGrad noise and KernelSHAP coalitions,
ROAD's imputation noise. Two threads seeding and drawing at once would interleave their
streams, so every seeded block takes one process-wide lock. A seeded block may take a
model's lock inside it, never the other way round (no two threads can then wait for each
other).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

import torch

_GLOBAL_RNG = threading.Lock()  # torch's default generator is one per process
_holder = threading.local()


def held_here() -> bool:
    """Whether this thread is inside a seeded block (others may be waiting for it)."""
    return getattr(_holder, "depth", 0) > 0


@contextmanager
def seeded(device: torch.device, seed: int | None):
    """For the length of the block torch's default generator starts from `seed` and is
    afterwards put back as it was; one seeded block at a time in the process. No seed:
    nothing changes."""
    if seed is None:
        yield
        return
    devices = [device.index or 0] if device.type == "cuda" else []
    with _GLOBAL_RNG, torch.random.fork_rng(devices=devices):
        _holder.depth = getattr(_holder, "depth", 0) + 1
        try:
            torch.manual_seed(seed)
            yield
        finally:
            _holder.depth -= 1
