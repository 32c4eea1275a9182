"""The benchmark's statistics against independent oracles: a coverage simulation of the
mean interval, the floor test's error rate under skewed and symmetric nulls, brute-force
enumeration of the sign test, scipy's binomial test, Holm by hand, and summaries built from
rows."""

import itertools
import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from xai_core.metrics import statistics as stats
from xai_core.benchmark.plan import Settings
from xai_core.benchmark.summary import format_ranking, summarise

SIZES = (3, 5, 8, 20)


def test_the_t_interval_covers_the_mean_of_normal_data_at_every_n():
    found = stats.coverage_simulation(methods=("t",), sizes=SIZES, draws=2000, seed=0)
    for n in SIZES:
        assert found["t"]["normal"][n] >= 0.93, (n, found["t"]["normal"][n])
    assert found["t"] == stats.SIMULATED_COVERAGE["t"]  # the figures the summary records


def test_the_recorded_bootstrap_coverages_are_what_the_simulation_gives():
    """At the small n that decide the choice (n = 8 and 20 are slower: the bench script
    prints every cell): both bootstraps miss 93 % for normal data at n = 3."""
    found = stats.coverage_simulation(methods=("bca", "studentised"), sizes=(3, 5),
                                      draws=2000, seed=0)
    for method in ("bca", "studentised"):
        for population, cells in found[method].items():
            recorded = stats.SIMULATED_COVERAGE[method][population]
            assert cells == {n: recorded[n] for n in (3, 5)}, (method, population)
        assert found[method]["normal"][3] < 0.93


def test_the_t_interval_equals_scipys():
    values = np.array([0.2, 0.5, 0.1, 0.9])
    expected = scipy_stats.t.interval(0.95, df=3, loc=values.mean(),
                                      scale=scipy_stats.sem(values))
    assert stats.t_interval(values) == pytest.approx(expected, abs=1e-12)
    assert stats.t_interval(np.array([0.3, 0.3, 0.3])) == (0.3, 0.3)
    assert all(math.isnan(v) for v in stats.t_interval(np.array([1.0])))


def brute_force_p(differences) -> float:
    """Share of the 2^n' equally likely win/loss patterns of the untied differences with at
    least as many wins as observed."""
    untied = [d for d in differences if d != 0]
    wins = sum(d > 0 for d in untied)
    hits = sum(sum(pattern) >= wins for pattern in itertools.product((0, 1), repeat=len(untied)))
    return hits / 2 ** len(untied)


@pytest.mark.parametrize("differences", [
    [3, 1, 2], [1, -1, 2, 0, 5], [-2, -1, -3, -4], [1, 1, 1, 1, 1, 1],
    [0.31, -0.07, 0.12, 0.05, -0.02, 0.4, 0.11], [2, -2, 2, -2, 2, -2, 2, -2, 1]])
def test_sign_test_p_equals_brute_force_enumeration(differences):
    assert stats.sign_test_p(np.array(differences, dtype=float)) == pytest.approx(
        brute_force_p(differences), abs=1e-15)


def test_sign_test_p_equals_scipys_binomial_test():
    rng = np.random.default_rng(3)
    differences = rng.normal(0.3, 1, (40, 9)).round(1)  # some ties at 0.0
    found = stats.sign_test_p(differences)
    for row, p in zip(differences, found):
        wins, untied = int((row > 0).sum()), int((row != 0).sum())
        assert p == pytest.approx(scipy_stats.binomtest(wins, untied, 0.5,
                                                        alternative="greater").pvalue)
    assert math.isnan(stats.sign_test_p(np.zeros(4)))  # every image level: no test


def test_holm_equals_a_hand_computation():
    # sorted 0.005, 0.01, 0.03, 0.04 -> x4 = 0.02, x3 = 0.03, x2 = 0.06, x1 = 0.04 -> 0.06
    adjusted = stats.holm([0.01, 0.04, 0.03, 0.005])
    np.testing.assert_allclose(adjusted, [0.03, 0.06, 0.06, 0.02], atol=1e-15)
    # a NaN (no test) is not counted among the m tests
    np.testing.assert_allclose(stats.holm([0.02, math.nan, 0.5]), [0.04, math.nan, 0.5])
    assert stats.holm([0.6, 0.7])[1] == 1.0  # capped (0.6 x 2 = 1.2)


@pytest.mark.parametrize("methods", [1, 2, 6, 11, 40])
def test_min_images_is_the_first_n_where_holm_can_reach_alpha(methods):
    n = next(n for n in range(1, 40) if methods / 2 ** n <= stats.ALPHA)
    assert stats.min_images_for_verdict(methods) == n


# Null populations of the paired differences: each image as likely to favour the floor as
# the method (median 0), symmetric or skewed either way; the two skewed ones have a mean far
# from 0, which a test of the mean would take for a difference.
NULLS = {
    "normal": lambda rng, shape: rng.normal(size=shape),
    "right-skewed": lambda rng, shape: rng.lognormal(sigma=1.5, size=shape) - 1.0,
    "left-skewed": lambda rng, shape: 1.0 - rng.lognormal(sigma=1.5, size=shape),
    "ties": lambda rng, shape: rng.choice([-0.3, 0.0, 0.0, 0.3, 2.0, -2.0], size=shape),
}


@pytest.mark.parametrize("methods", [3, 11])
def test_under_skewed_nulls_few_false_better_than_random_verdicts(methods):
    """2000 simulated benchmarks per n and null, `methods` methods each no better than the
    floor on more images than not: a false "better than random" for any of them in at most
    5 % of the benchmarks (the family-wise rate the verdict's words promise)."""
    draws = 2000
    for n in SIZES:
        for index, (name, draw) in enumerate(NULLS.items()):
            rng = np.random.default_rng([n, index, methods])
            p = stats.sign_test_p(draw(rng, (draws * methods, n))).reshape(draws, methods)
            adjusted = np.array([stats.holm(row) for row in p])
            claims = stats.better_than_random(adjusted, n, methods)
            rate = claims.any(axis=1).mean()
            assert rate <= 0.05, (n, name, rate)


def test_a_method_better_on_every_image_is_found_whatever_the_skew():
    """The other side: differences positive on every one of 8 images (however skewed) give
    the smallest p the test has, 1/256, and a verdict after Holm over 11 methods."""
    rng = np.random.default_rng(5)
    better = rng.lognormal(sigma=2.0, size=8) * 1e-3
    assert stats.sign_test_p(better) == pytest.approx(1 / 256)
    adjusted = stats.holm([stats.sign_test_p(better)] + [1.0] * 10)
    assert stats.better_than_random(adjusted[0], 8, 11)


def rows_for(values: dict[str, list[float]], metric="insertion") -> list[dict]:
    return [{"image": f"i{k}", "model": "m", "method": method, "metric": metric, "value": v}
            for method, vs in values.items() for k, v in enumerate(vs)]


def test_three_images_are_too_few_for_a_verdict():
    rows = rows_for({"good": [0.9, 0.8, 0.95], "random": [0.1, 0.2, 0.15]})
    table = summarise(rows, Settings(), 6, 6)["tables"][0]
    good = next(e for e in table["methods"] if e["method"] == "good")
    assert good["vs_random"]["verdict"] == "too few images for a verdict (n = 3; 5 needed)"
    assert good["vs_random"]["p"] == pytest.approx(1 / 8)  # 3 of 3 better
    assert not good["vs_random"]["better_than_random"]


def test_eight_images_give_a_verdict_with_the_holm_p_named():
    floor = [0.1, 0.2, 0.15, 0.3, 0.2, 0.1, 0.25, 0.2]
    good = [v + 0.5 for v in floor]  # better on all 8 images: p = 1/256
    mixed = [v + d for v, d in zip(floor, [0.3, -0.2, 0.1, -0.1, 0.2, -0.3, 0.05, -0.05])]
    rows = rows_for({"good": good, "mixed": mixed, "random": floor})
    table = summarise(rows, Settings(), 24, 24)["tables"][0]
    by = {e["method"]: e for e in table["methods"]}
    mixed_p = brute_force_p([0.3, -0.2, 0.1, -0.1, 0.2, -0.3, 0.05, -0.05])
    # Holm over 2: the smaller p times 2, the larger times 1 (not below the first)
    assert by["good"]["vs_random"]["p_holm"] == pytest.approx(2 / 256)
    assert by["mixed"]["vs_random"]["p_holm"] == pytest.approx(max(mixed_p, 2 / 256))
    assert by["good"]["vs_random"]["verdict"] == (
        "better than random on more images than not (better on 8 of 8 images, worse on 0; "
        "sign test, Holm p = 0.00781 over 2 methods)")
    assert by["mixed"]["vs_random"]["verdict"] == (
        "not shown better than random on more images than not (better on 4 of 8 images, "
        "worse on 4; sign test, Holm p = 0.637 over 2 methods)")
    # deletion: lower is better, so the same differences count the other way
    table = summarise(rows_for({"good": floor, "random": good}, "deletion"), Settings(), 16,
                      16)["tables"][0]
    assert next(e for e in table["methods"] if e["method"] == "good")["vs_random"][
        "p_holm"] == pytest.approx(1 / 256)


def test_rank_intervals_and_the_overlaps_they_imply():
    # "best" ranks 1 on every image: its interval is [1, 1]; a and b swap places
    rows = rows_for({"best": [9, 9, 9, 9, 9], "a": [2, 1, 2, 1, 2], "b": [1, 2, 1, 2, 1]})
    table = summarise(rows, Settings(), 15, 15)["tables"][0]
    by = {e["method"]: e for e in table["methods"]}
    assert by["best"]["rank_interval"] == [1.0, 1.0] and by["best"]["rank_overlaps"] == []
    assert by["a"]["mean_rank"] == pytest.approx(2.4) and by["b"]["mean_rank"] == pytest.approx(2.6)
    low, high = by["a"]["rank_interval"]
    assert 2.0 <= low < 2.4 < high <= 3.0
    assert by["a"]["rank_overlaps"] == ["b"] and by["b"]["rank_overlaps"] == ["a"]
    # the same bootstrap by hand: resample the images, average each method's ranks
    ranks = np.array([[1, 2.5 - 0.5 * s, 2.5 + 0.5 * s] for s in (1, -1, 1, -1, 1)])
    bounds = stats.rank_intervals(ranks, seed=7)
    picks = np.random.default_rng(7).integers(0, 5, size=(stats.RANK_RESAMPLES, 5))
    means = np.array([[ranks[p, j].mean() for j in range(3)] for p in picks])
    np.testing.assert_allclose(bounds, np.quantile(means, [0.025, 0.975], axis=0).T)


def test_an_interval_past_the_metrics_range_is_flagged_in_words():
    """Deletion areas of a softmax score lie in [0, 1]; a mean near 0 with a wide spread gets
    a t interval that reaches below 0 (scipy's says so too), and the summary says so."""
    values = [0.002, 0.004, 0.15, 0.003]
    low = scipy_stats.t.interval(0.95, df=3, loc=np.mean(values),
                                 scale=scipy_stats.sem(values))[0]
    assert low < 0
    rows = [{**row, "model": "efficientnet-lite0"}
            for row in rows_for({"saliency": values, "random": [0.3, 0.2, 0.25, 0.3]},
                                "deletion")]
    found = summarise(rows, Settings(), 8, 8)
    table = found["tables"][0]
    by = {e["method"]: e for e in table["methods"]}
    assert table["range"] == [0.0, 1.0]
    assert by["saliency"]["interval"][0] == pytest.approx(low)
    assert by["saliency"]["interval_past_range"].startswith("the t interval reaches past")
    assert by["random"]["interval_past_range"] is None
    assert "* the t interval reaches past what deletion can take (0 to 1)" in format_ranking(
        found)
    # a model this code does not know (a results.json from elsewhere): no range claimed
    unknown = summarise(rows_for({"saliency": values, "random": [0.3] * 4}, "deletion"),
                        Settings(), 8, 8)["tables"][0]
    assert unknown["range"] is None
    assert all(e["interval_past_range"] is None for e in unknown["methods"])
