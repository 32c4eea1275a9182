"""How much a map depends on its random draws: the mean pairwise Spearman rank correlation
between the maps a method gives at three seeds (its own seed and the next two), everything
else equal. 1 = the seed changes nothing (a method without random draws); near 0 = the map
mostly reflects its random samples. Computed only when asked: it costs two more runs of a
seeded method."""

from __future__ import annotations

import functools
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
    Method) at its options with the seed set to each of `stability_seeds`. A method
    without a seed option draws nothing at random: its stability is 1 by definition
    (None when its map is constant), without the rounding of a rank correlation of a
    map with itself (0.9999999999999999 there)."""
    values = method.resolve(model, options)
    run = functools.partial(method, model, image, target=target, head=head,
                            should_stop=should_stop)
    if not is_seeded(method):
        constant = np.ptp(np.asarray(run(**values).map, dtype=float)) == 0
        return {"stability": None if constant else 1.0, "seeds": []}
    seeds = stability_seeds(values[SEED_OPTION], method.option(SEED_OPTION).high)
    stability = mean_pairwise_spearman(
        [run(**{**values, SEED_OPTION: seed}).map for seed in seeds])
    return {"stability": stability if np.isfinite(stability) else None,
            "seeds": [s for s in seeds if s is not None]}
