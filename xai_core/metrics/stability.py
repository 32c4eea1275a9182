"""How much a map depends on its random draws: the mean pairwise Spearman rank correlation
between the maps a method gives at three seeds (its own seed and the next two), everything
else equal. 1 = the seed changes nothing (a method without random draws); near 0 = the map
mostly reflects its random samples. Computed only when asked: it costs two more runs of a
seeded method."""

from __future__ import annotations

import itertools

import numpy as np

from .agreement import spearman

STABILITY_SEEDS = 3
UNSTABLE_BELOW = 0.5  # below this the comparison page greys the map out
SEED_OPTION = "seed"


def is_seeded(method) -> bool:
    return any(option.name == SEED_OPTION for option in method.options)


def stability_seeds(first: int, high: int = 2**31 - 1) -> list[int]:
    """The map's own seed and the next ones (wrapping within the option's range)."""
    return [(first + k) % (high + 1) for k in range(STABILITY_SEEDS)]


def mean_pairwise_spearman(maps: list[np.ndarray]) -> float:
    """Mean Spearman over every pair of maps (NaN when a map is constant)."""
    return float(np.mean([spearman(a, b) for a, b in itertools.combinations(maps, 2)]))


def seed_stability(method, model, image, *, target=None, head=None, should_stop=None,
                   **options) -> dict:
    """{"stability": mean pairwise Spearman, "seeds": [...]} of `method` (a declared
    Method) at its options with the seed set to each of `stability_seeds`; a method
    without a seed option runs three times at its one setting (results are cached, so
    this is free, and its stability is 1 unless its map is constant)."""
    values = method.resolve(model, options)
    if is_seeded(method):
        seeds = stability_seeds(values[SEED_OPTION], method.option(SEED_OPTION).high)
    else:
        seeds = [None] * STABILITY_SEEDS
    maps = []
    for seed in seeds:
        chosen = values if seed is None else {**values, SEED_OPTION: seed}
        maps.append(method(model, image, target=target, head=head, should_stop=should_stop,
                           **chosen).map)
    stability = mean_pairwise_spearman(maps)
    return {"stability": stability if np.isfinite(stability) else None,
            "seeds": [s for s in seeds if s is not None]}
