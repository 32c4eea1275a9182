"""The statistics a benchmark summary prints, as plain numpy/scipy functions.

- The interval of a mean over images is Student's t interval. A coverage simulation
  (`coverage_simulation`; `bench/bench_intervals.py` prints it) compared it with scipy's BCa
  bootstrap and a studentised bootstrap (`SIMULATED_COVERAGE`): only the t interval holds
  its 95 % for normal data at every n from 3 to 20 (BCa covers 72 % at n = 3, the
  studentised bootstrap 84 %). For skewed (lognormal) data every interval falls short; the
  t interval by most at n >= 5 (83-87 %, the studentised bootstrap 89-91 %).
- "Better than random" means better on more images than not: an exact one-sided sign test
  (binomial, p = 1/2) of the paired differences (method - floor, turned so that positive is
  better), ties left out. Its null - an image is as likely to favour the floor as the method
  - holds for any shape of the differences, skewed ones included; a test of the mean (the
  sign-flip permutation test used before) assumes differences symmetric about 0: simulated
  at n = 8 with left-skewed differences of mean 0 (a lognormal, sigma 1, turned round), it
  declared "better" in 35 % (3 methods) to 45 % (11 methods) of runs after Holm - where
  about 69 % of images do favour the method, which is what the sign test's words claim.
  The p-values of the methods compared on one (model, metric) are adjusted with Holm's
  step-down correction.
- A test over n images cannot give a p-value below 1 / 2^n, and Holm multiplies the
  smallest by the number of methods m; below the n where m / 2^n <= alpha no verdict is
  possible, and the summary says so instead of giving one.
- Mean ranks get a percentile bootstrap interval over images; a ranking marks the methods
  whose rank intervals overlap, so it never shows an order the data cannot support.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

CONFIDENCE = 0.95
ALPHA = 0.05  # family-wise error rate of the "better than random" verdicts (after Holm)
RANK_RESAMPLES = 2000
INTERVAL_METHODS = ("t", "bca", "studentised")
INTERVAL_WORDS = {"t": "Student's t interval of the mean",
                  "bca": "BCa bootstrap (scipy.stats.bootstrap, 999 resamples)",
                  "studentised": "studentised (bootstrap-t) bootstrap, 999 resamples, "
                                 "resamples of identical values left out"}
CHOSEN_INTERVAL = "t"
FLOOR_TEST = ("exact one-sided sign test of the paired differences to the random floor "
              "(turned so that positive = better; ties left out): better than random means "
              "better on more images than not, whatever the shape of the differences; "
              f"Holm-Bonferroni across the methods compared on one model and metric, "
              f"family-wise alpha {ALPHA}")

# Coverage of the true mean by each 95 % interval, from `coverage_simulation()` at its
# defaults (2000 draws per cell, seed 0); tests/test_statistics.py recomputes every cell.
SIMULATED_COVERAGE = {
    "t": {"normal": {3: 0.9435, 5: 0.9565, 8: 0.943, 20: 0.953},
          "lognormal": {3: 0.85, 5: 0.8265, 8: 0.831, 20: 0.87}},
    "bca": {"normal": {3: 0.72, 5: 0.843, 8: 0.872, 20: 0.9275},
            "lognormal": {3: 0.65, 5: 0.73, 8: 0.7985, 20: 0.867}},
    "studentised": {"normal": {3: 0.8435, 5: 0.952, 8: 0.94, 20: 0.9455},
                    "lognormal": {3: 0.8045, 5: 0.8935, 8: 0.901, 20: 0.914}},
}


# --- the interval of a mean ------------------------------------------------------------------

def t_interval(values, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Student's t interval of the mean of `values` (NaN with fewer than two values)."""
    from scipy.stats import t

    values = np.asarray(values, dtype=np.float64)
    if values.size < 2:
        return math.nan, math.nan
    mean = values.mean()
    half = t.ppf((1 + confidence) / 2, values.size - 1) * values.std(ddof=1) / math.sqrt(
        values.size)
    return float(mean - half), float(mean + half)


def _t_intervals(samples: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """t intervals of every row of `samples` (draws, n) at once."""
    from scipy.stats import t

    n = samples.shape[1]
    half = t.ppf((1 + confidence) / 2, n - 1) * samples.std(axis=1, ddof=1) / math.sqrt(n)
    mean = samples.mean(axis=1)
    return mean - half, mean + half


def _bca_intervals(samples: np.ndarray, confidence: float, rng) -> tuple[np.ndarray, np.ndarray]:
    from scipy.stats import bootstrap

    result = bootstrap((samples,), np.mean, axis=1, confidence_level=confidence,
                       n_resamples=999, method="BCa", random_state=rng)
    return result.confidence_interval.low, result.confidence_interval.high


def _studentised_intervals(samples: np.ndarray, confidence: float, rng,
                           resamples: int = 999) -> tuple[np.ndarray, np.ndarray]:
    """Bootstrap-t: quantiles of t* = (mean* - mean) / se* over resamples of each row.
    Resamples of identical values (se* = 0, t* undefined) are left out, as is usual."""
    draws, n = samples.shape
    mean = samples.mean(axis=1)
    se = samples.std(axis=1, ddof=1) / math.sqrt(n)
    tail = (1 - confidence) / 2
    low, high = np.empty(draws), np.empty(draws)
    for start in range(0, draws, 100):  # bounded memory: (100, resamples, n) at a time
        rows = np.arange(start, min(start + 100, draws))
        again = samples[rows[:, None, None], rng.integers(0, n, size=(len(rows), resamples, n))]
        spread = again.std(axis=2, ddof=1) / math.sqrt(n)
        with np.errstate(divide="ignore", invalid="ignore"):
            t_star = np.where(spread > 0, (again.mean(axis=2) - mean[rows, None]) / spread,
                              np.nan)
        upper_q, lower_q = np.nanquantile(t_star, [1 - tail, tail], axis=1)
        low[rows], high[rows] = mean[rows] - upper_q * se[rows], mean[rows] - lower_q * se[rows]
    return low, high


def coverage_simulation(methods=INTERVAL_METHODS, sizes=(3, 5, 8, 20), draws: int = 2000,
                        seed: int = 0, confidence: float = CONFIDENCE) -> dict:
    """{method: {population: {n: share of draws whose interval holds the true mean}}} for
    samples of n from a standard normal (mean 0) and a lognormal (sigma 1, mean e^0.5)."""
    populations = {"normal": (lambda rng, shape: rng.normal(size=shape), 0.0),
                   "lognormal": (lambda rng, shape: rng.lognormal(size=shape), math.exp(0.5))}
    found: dict = {}
    for method in methods:
        for index, (name, (draw, true_mean)) in enumerate(populations.items()):
            for n in sizes:
                rng = np.random.default_rng([seed, n, index])  # the same samples per method
                samples = draw(rng, (draws, n))
                if method == "t":
                    low, high = _t_intervals(samples, confidence)
                elif method == "bca":
                    low, high = _bca_intervals(samples, confidence, rng)
                else:
                    low, high = _studentised_intervals(samples, confidence, rng)
                covered = (low <= true_mean) & (true_mean <= high)
                found.setdefault(method, {}).setdefault(name, {})[n] = round(
                    float(covered.mean()), 4)
    return found


# --- the sign test and Holm -------------------------------------------------------------------

def sign_test_p(differences) -> np.ndarray | float:
    """One-sided exact sign test that an image favours the method (difference > 0) more
    often than not (rows of a 2-D array are tested separately): with w of the n' non-zero
    differences positive, p = P(Binomial(n', 1/2) >= w). Zero differences (ties) are left
    out; NaN when every difference is zero or there are none."""
    from scipy.stats import binom

    values = np.asarray(differences, dtype=np.float64)
    rows = np.atleast_2d(values)
    wins, losses = (rows > 0).sum(axis=1), (rows < 0).sum(axis=1)
    untied = wins + losses
    with np.errstate(invalid="ignore"):
        p = np.where(untied > 0, binom.sf(wins - 1, untied, 0.5), math.nan)
    return float(p[0]) if values.ndim == 1 else p


def holm(p_values) -> np.ndarray:
    """Holm's step-down adjusted p-values: the i-th smallest times (m - i + 1), made
    non-decreasing in that order, capped at 1. NaN (no test) stays NaN and does not count."""
    p = np.asarray(p_values, dtype=np.float64)
    adjusted = np.full(p.shape, math.nan)
    tested = np.flatnonzero(~np.isnan(p))
    order = tested[np.argsort(p[tested], kind="stable")]
    m = len(order)
    running = 0.0
    for i, index in enumerate(order):
        running = max(running, min(1.0, (m - i) * p[index]))
        adjusted[index] = running
    return adjusted


def min_images_for_verdict(methods: int, alpha: float = ALPHA) -> int:
    """The fewest images at which the sign test can reach p <= alpha for the first
    method after Holm's correction for `methods` methods: m / 2^n <= alpha."""
    return max(1, math.ceil(math.log2(max(1, methods) / alpha) - 1e-12))


def better_than_random(p_holm, images, methods: int, alpha: float = ALPHA):
    """The verdict's claim (array-friendly): enough images for a verdict at all, and the
    Holm-adjusted p at most alpha."""
    return (np.asarray(images) >= min_images_for_verdict(methods, alpha)) & (
        np.asarray(p_holm) <= alpha)


# --- rank intervals --------------------------------------------------------------------------

def rank_intervals(ranks: np.ndarray, seed: int, resamples: int = RANK_RESAMPLES,
                   confidence: float = CONFIDENCE) -> np.ndarray:
    """ranks (images, methods), NaN where a method has no value on an image ->
    (methods, 2): percentile bootstrap interval over images of each method's mean rank."""
    ranks = np.asarray(ranks, dtype=np.float64)
    images = ranks.shape[0]
    if images == 0:
        return np.full((ranks.shape[1], 2), math.nan)
    picks = np.random.default_rng(seed).integers(0, images, size=(resamples, images))
    tail = (1 - confidence) / 2
    with warnings.catch_warnings():  # a resample may miss every image of a method: NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        means = np.nanmean(ranks[picks], axis=1)  # (resamples, methods)
        return np.nanquantile(means, [tail, 1 - tail], axis=0).T


def overlapping(intervals: dict[str, tuple[float, float]]) -> dict[str, list[str]]:
    """For each name, the other names whose interval overlaps its own."""
    out = {}
    for name, (low, high) in intervals.items():
        out[name] = [other for other, (o_low, o_high) in intervals.items()
                     if other != name and math.isfinite(low) and math.isfinite(o_low)
                     and o_low <= high and low <= o_high]
    return out
