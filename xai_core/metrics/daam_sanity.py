"""DAAM's sanity check (seed 001 section 4.4): cascading randomisation. Randomise the
attention linears from the top block down, on a private copy of the model, and compare the
final DAAM map with the trained model's by rank correlation."""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from ..infra.cache import cache_key
from ..capture import run_capture, separate_forwards, transformer_blocks
from .agreement import spearman
from ..pipeline import CAPTURE_CACHE, head_of, prepare
from ..methods.base import METHODS
from ..methods.daam import daam_from_capture, result_score_fn


def sanity_steps(num_blocks: int, count: int = 4) -> list[int]:
    """The first randomised block (0-based) of each step, top down, ending with full (0).

    12 blocks: [11, 8, 5, 2, 0] (the paper's blocks 12, 9, 6, 3 counted from 1, plus full
    randomisation)."""
    step = max(1, num_blocks // count)
    firsts = [num_blocks - 1 - i * step for i in range(count) if num_blocks - 1 - i * step >= 0]
    return list(dict.fromkeys(firsts + [0]))


def attention_linears(block: torch.nn.Module) -> list[torch.nn.Linear]:
    return [m for m in block.attn.modules() if isinstance(m, torch.nn.Linear)]


@torch.no_grad()
def randomise_attention(block: torch.nn.Module, seed: int) -> None:
    """Scale-preserving Gaussian re-initialisation of the attention's linear layers
    (each tensor gets N(0, its own std)); a local generator, never the global RNG."""
    generator = torch.Generator().manual_seed(seed)
    for layer in attention_linears(block):
        for parameter in (layer.weight, layer.bias):
            if parameter is None:
                continue
            std = float(parameter.float().std()) if parameter.numel() > 1 else 0.02
            fresh = torch.randn(parameter.shape, generator=generator) * (std or 0.02)
            parameter.copy_(fresh.to(parameter.device, parameter.dtype))


@dataclass
class SanityResult:
    original: np.ndarray  # final accumulated map D_B of the trained model
    maps: list[np.ndarray]  # final D_B after each step
    first_randomised: list[int]  # block (0-based) from which everything up to the top is random
    num_blocks: int
    rho: list[float]  # Spearman(original, step map)
    seconds: float


def private_copy(model) -> torch.nn.Module:
    """A deep copy of the shared module, taken under its lock (hooks and flags are
    shared state), so randomising it never touches what other sessions use."""
    with model.lock:
        return copy.deepcopy(model.module)


def randomised_copies(module: torch.nn.Module, steps: list[int],
                      seed: int = 0) -> Iterator[tuple[int, torch.nn.Module]]:
    """Randomise `module` IN PLACE (pass a private copy), top down and cumulatively:
    after the step for k, the attention linears of blocks k..B-1 (0-based) are random.
    Block i always gets seed*1000 + i, so a state does not depend on the path to it."""
    blocks = [block for _, block in transformer_blocks(module)]
    randomised = len(blocks)  # blocks from this index on are random
    for first in sorted(set(steps), reverse=True):
        for index in range(first, randomised):
            randomise_attention(blocks[index], seed * 1000 + index)
        randomised = min(randomised, first)
        yield first, module


def cascading_randomisation(model, image, target: int, head=None, formula: str = "official",
                            channel_relu: str = "auto", steps: list[int] | None = None,
                            seed: int = 0) -> SanityResult:
    """Randomise attention linears from the top block down to block k (cumulative), and
    compare the final DAAM map with the trained model's by rank correlation. Cached."""
    head = head_of(model, head)
    original = METHODS["daam"](model, image, target=target, head=head, knn_weights=formula,
                               channel_relu=channel_relu).detail
    module_blocks = transformer_blocks(model.module)
    steps = sorted(set(steps or sanity_steps(len(module_blocks))), reverse=True)
    if any(not 0 <= k < len(module_blocks) for k in steps):
        raise ValueError(f"Sanity steps must lie in 0-{len(module_blocks) - 1}.")
    prepared = prepare(model, image)
    key = cache_key("daam-sanity", model, target, formula, original.channel_relu, tuple(steps),
                    seed, image=prepared.sha256, head=head)

    def compute() -> SanityResult:

        started = time.perf_counter()
        score_fn = result_score_fn(original, head)
        maps = []
        with separate_forwards():  # the copy's weights change between its captures
            for _, clone in randomised_copies(private_copy(model), steps, seed):
                capture = run_capture(clone, prepared.pixels.to(model.device), score_fn)
                maps.append(daam_from_capture(capture, original.channel_relu)["D"][-1])
        final = original.D[-1]
        return SanityResult(final, maps, list(steps), len(module_blocks),
                            [spearman(final, m) for m in maps], time.perf_counter() - started)
    return CAPTURE_CACHE.get_or_compute(key, compute)
