"""A benchmark's summary: per model and metric, each method's mean with a 95 % interval, its
mean rank over images with a bootstrap interval, and whether it beats the random floor.

- Interval: Student's t interval of the mean over images (`statistics.py` says why: a
  coverage simulation; the summary's `statistics` block records it).
- Mean rank: within each (image, model, metric) the methods with a value are ranked, 1 =
  best (lowest for deletion-like metrics, highest for the others), ties averaged; its
  interval is a percentile bootstrap over images, seeded from the run's seed and the
  (model, metric) names, and each method lists those whose rank intervals overlap its own.
- Floor: the paired differences method - random over the images both have, tested with an
  exact one-sided sign test (better on more images than not, valid for differences of any
  shape), p-values Holm-adjusted across the methods of the (model, metric). The verdict
  names what it claims, the test, the adjusted p and how many images went each way; below
  the n at which the adjusted p could reach alpha at all it says there are too few images
  for a verdict.
- A mean's t interval that reaches past what the metric can take (`plan.value_range`: a
  softmax area below 0) is flagged, and the text says so beside it.
"""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict

import numpy as np

from ..infra.errors import OptionError
from ..metrics.agreement import spearman
from ..metrics import statistics as stats
from .plan import DIRECTION, HIGHER, METRIC_NOTES, RANDOM_METHOD, Settings, value_range


def _seed(seed: int, *names: str) -> int:
    digest = hashlib.sha256("|".join([str(seed), *names]).encode()).digest()
    return int.from_bytes(digest[:8], "little")


def image_ranks(values: dict[str, dict[str, float]], higher_is_better: bool
                ) -> tuple[list[str], np.ndarray]:
    """values[method][image] -> (methods, ranks (images, methods)): each method's rank among
    the methods with a finite value on that image (1 = best, ties get the average rank),
    NaN where it has none."""
    from scipy.stats import rankdata

    methods = list(values)
    images = sorted({image for per_image in values.values() for image in per_image})
    ranks = np.full((len(images), len(methods)), math.nan)
    for row, image in enumerate(images):
        present = [(column, v[image]) for column, v in enumerate(values.values())
                   if image in v and math.isfinite(v[image])]
        if present:
            scores = np.array([value for _, value in present])
            order = rankdata(-scores if higher_is_better else scores, method="average")
            ranks[row, [column for column, _ in present]] = order
    return methods, ranks[~np.isnan(ranks).all(axis=1)]


def mean_ranks(values: dict[str, dict[str, float]], higher_is_better: bool) -> dict[str, float]:
    """values[method][image] -> mean over images of the method's rank (`image_ranks`)."""
    methods, ranks = image_ranks(values, higher_is_better)
    return {method: float(np.nanmean(ranks[:, i])) for i, method in enumerate(methods)
            if not np.isnan(ranks[:, i]).all()}


def summarise(rows: list[dict], settings: Settings, units_total: int, units_done: int) -> dict:
    groups: dict[tuple[str, str], dict[str, dict[str, float]]] = defaultdict(
        lambda: defaultdict(dict))
    failures: dict[tuple[str, str, str], int] = defaultdict(int)
    extras: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        value = row.get("value")
        key = (row["model"], row["metric"])
        for extra in PER_IMAGE_EXTRAS:
            if row.get(extra) is not None and math.isfinite(float(row[extra])):
                extras[(row["model"], row["method"])][extra].append(float(row[extra]))
        if value is None or not math.isfinite(float(value)):
            failures[(*key, row["method"])] += 1
            groups[key].setdefault(row["method"], {})
            continue
        groups[key][row["method"]][row["image"]] = float(value)
    tables = [_table(model_id, metric, per_method, failures, extras, settings.seed)
              for (model_id, metric), per_method in sorted(groups.items())]
    return {"settings": settings.as_dict(), "versions": library_versions(),
            "units": {"total": units_total, "done": units_done},
            "interval": f"{stats.INTERVAL_WORDS[stats.CHOSEN_INTERVAL]}, "
                        f"{stats.CONFIDENCE:.0%}",
            "statistics": statistics_metadata(), "tables": tables}


# per-image figures a row may carry besides its value; the summary gives their mean
PER_IMAGE_EXTRAS = ("stability", "completeness_error")


def _table(model_id, metric, per_method, failures, extras, seed) -> dict:
    higher = DIRECTION[metric] == HIGHER
    methods, ranks = image_ranks(per_method, higher)
    rank_bounds = stats.rank_intervals(ranks, _seed(seed, model_id, metric, "ranks"))
    rank_of = {m: (float(np.nanmean(ranks[:, i])) if not np.isnan(ranks[:, i]).all()
                   else math.nan, tuple(map(float, rank_bounds[i])))
               for i, m in enumerate(methods)}
    overlaps = stats.overlapping({m: bounds for m, (_, bounds) in rank_of.items()})
    limits = value_range(metric, model_id)
    entries = []
    for method, per_image in per_method.items():
        values = np.array(list(per_image.values()))
        low, high = stats.t_interval(values)
        mean_rank, (rank_low, rank_high) = rank_of[method]
        entry = {"method": method, "images": int(values.size),
                 "failed": failures[(model_id, metric, method)],
                 "mean": _number(values.mean()) if values.size else None,
                 "interval": [_number(low), _number(high)],
                 "interval_past_range": _past(low, high, limits),
                 "mean_rank": _number(mean_rank),
                 "rank_interval": [_number(rank_low), _number(rank_high)],
                 "rank_overlaps": overlaps[method]}
        for extra, found in extras[(model_id, method)].items():
            entry[extra] = _number(np.mean(found))
        entries.append(entry)
    floor = per_method.get(RANDOM_METHOD, {})
    if floor:
        _floor_verdicts(entries, per_method, floor, higher)
    entries.sort(key=lambda e: (e["mean_rank"] is None, e["mean_rank"] or 0, e["method"]))
    return {"model": model_id, "metric": metric, "better": DIRECTION[metric],
            "note": METRIC_NOTES[metric], "range": None if limits is None else list(limits),
            "methods": entries}


def _past(low: float, high: float, limits: tuple[float, float] | None) -> str | None:
    """Words when a t interval reaches past the values the metric can take (it is symmetric
    about the mean, so a mean near an end with a wide spread crosses it), else None."""
    if limits is None or not (math.isfinite(low) and math.isfinite(high)):
        return None
    if low >= limits[0] and high <= limits[1]:
        return None
    return (f"the t interval reaches past what the metric can take ({limits[0]:g} to "
            f"{limits[1]:g}): too few images or too spread out for its normal approximation")


def _floor_verdicts(entries, per_method, floor, higher) -> None:
    """Each method's `vs_random`: the one-sided sign test's p of its paired differences to
    the floor, Holm-adjusted over the methods of this table, and the verdict in words."""
    compared = [e for e in entries if e["method"] != RANDOM_METHOD]
    sign = 1.0 if higher else -1.0
    tests = []
    for entry in compared:
        per_image = per_method[entry["method"]]
        paired = sorted(set(per_image) & set(floor))
        better = sign * np.array([per_image[i] - floor[i] for i in paired])
        tests.append((paired, better, stats.sign_test_p(better)))
    adjusted = stats.holm([p for _, _, p in tests])
    needed = stats.min_images_for_verdict(len(compared))
    for entry, (paired, better, p), p_holm in zip(compared, tests, adjusted):
        n = len(paired)
        low, high = stats.t_interval(sign * better)
        entry["vs_random"] = {
            "images": n, "mean_difference": _number(sign * better.mean()) if n else None,
            "interval": [_number(low), _number(high)],
            "p": _number(p), "p_holm": _number(p_holm), "methods_compared": len(compared),
            "images_needed": needed, "images_better": int((better > 0).sum()),
            "images_worse": int((better < 0).sum()),
            "better_than_random": bool(stats.better_than_random(p_holm, n, len(compared))),
            "verdict": _verdict(better, needed, p_holm, len(compared))}


def _verdict(better: np.ndarray, needed: int, p_holm: float, methods: int) -> str:
    """What the sign test supports, in words: better than random on more images than not,
    with the counts each way, the test and its Holm-adjusted p."""
    images = len(better)
    if images == 0:
        return "no paired images"
    if images < needed:
        return f"too few images for a verdict (n = {images}; {needed} needed)"
    wins, losses = int((better > 0).sum()), int((better < 0).sum())
    ties = images - wins - losses
    counts = f"better on {wins} of {images} images, worse on {losses}" + (
        f", level on {ties}" if ties else "")
    test = (f"sign test, Holm p = {p_holm:.3g} over {methods} method"
            f"{'s' if methods != 1 else ''}" if p_holm == p_holm else "sign test: no untied image")
    if p_holm <= stats.ALPHA:
        return f"better than random on more images than not ({counts}; {test})"
    return f"not shown better than random on more images than not ({counts}; {test})"


def statistics_metadata() -> dict:
    """How the summary's intervals and verdicts are made, and the simulation behind the
    interval's choice."""
    return {"interval": {"method": stats.INTERVAL_WORDS[stats.CHOSEN_INTERVAL],
                         "confidence": stats.CONFIDENCE,
                         "chosen_by": "coverage of the true mean in 2000 simulated samples per "
                                      "cell (normal and lognormal populations, n = 3, 5, 8, "
                                      "20); the t interval was the only one at >= 93 % for "
                                      "normal data at every n",
                         "simulated_coverage": {stats.INTERVAL_WORDS[m]: cells for m, cells
                                                in stats.SIMULATED_COVERAGE.items()}},
            "floor_test": stats.FLOOR_TEST,
            "too_few_images": "no verdict below the n where the smallest possible p after "
                              "Holm (m / 2^n for m methods) exceeds alpha",
            "rank_interval": f"percentile bootstrap over images of the mean rank, "
                             f"{stats.RANK_RESAMPLES} resamples, {stats.CONFIDENCE:.0%}; "
                             "rank_overlaps lists the methods whose rank intervals overlap"}


def _number(value) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


def library_versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    from .. import __version__

    found = {"vit_lens": __version__}
    for name in ("torch", "timm", "captum", "grad-cam", "numpy", "scipy", "ray"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return found


def format_ranking(summary: dict) -> str:
    """The summary as text: one ranked table per model and metric."""
    settings = summary["settings"]
    lines = [f"{summary['units']['done']} of {summary['units']['total']} units done "
             f"(image x model x method); baseline {settings['baseline']}, "
             f"{settings['steps']} steps; intervals: {summary['interval']}; vs random: "
             f"{summary['statistics']['floor_test']}."]
    if settings.get("random_weights"):
        lines.insert(0, "RANDOM WEIGHTS (shapes only): every model below was built with random "
                        "weights, so these values say nothing about a trained model.")
    for table in summary["tables"]:
        count = max((e["images"] for e in table["methods"]), default=0)
        stability = any("stability" in e for e in table["methods"])
        lines += ["", f"{table['model']} · {table['metric']} ({table['better']} is better; "
                      f"{count} images)",
                  f"  {'rank [95 % interval]':20}  {'method':22} {'mean':>9}  "
                  f"{'95 % interval':21} " + ("stability " if stability else "") + "vs random"]
        for entry in table["methods"]:
            lines.append(_ranking_line(entry, stability))
        lines += _rank_ties(table["methods"])
        if any(e.get("interval_past_range") for e in table["methods"]):
            low, high = table["range"]
            lines.append(f"  * the t interval reaches past what {table['metric']} can take "
                         f"({low:g} to {high:g}): too few images or too spread out for it")
    return "\n".join(lines)


def _ranking_line(entry: dict, stability: bool) -> str:
    rank = "-" if entry["mean_rank"] is None else f"{entry['mean_rank']:.2f}"
    if entry.get("rank_interval", [None])[0] is not None:
        rank += " [{:.2f}, {:.2f}]".format(*entry["rank_interval"])
    mean = "n/a" if entry["mean"] is None else f"{entry['mean']:.4f}"
    low, high = entry["interval"]
    interval = "" if low is None else f"[{low:.4f}, {high:.4f}]" + (
        "*" if entry.get("interval_past_range") else "")
    versus = ("the floor" if entry["method"] == RANDOM_METHOD
              else entry.get("vs_random", {}).get("verdict", "no floor"))
    failed = f" ({entry['failed']} failed)" if entry["failed"] else ""
    steady = ""
    if stability:
        steady = "n/a" if entry.get("stability") is None else f"{entry['stability']:.2f}"
        steady = f"{steady:>9} "
    return (f"  {rank:20}  {entry['method']:22} {mean:>9}  {interval:21} {steady}"
            f"{versus}{failed}")


def rank_tie_groups(entries: list[dict]) -> list[list[str]]:
    """[method, the methods below it in the table whose rank intervals overlap its own]
    for each method that has any: every overlapping pair once, so the order the table shows
    between them is not supported by the data."""
    order = [e["method"] for e in entries]
    groups = []
    for position, entry in enumerate(entries):
        below = [m for m in order[position + 1:] if m in (entry.get("rank_overlaps") or ())]
        if below:
            groups.append([entry["method"], *below])
    return groups


def _rank_ties(entries: list[dict]) -> list[str]:
    groups = rank_tie_groups(entries)
    if not groups:
        return []
    return ["  rank intervals overlap (order not supported by the data): "
            + "; ".join(f"{g[0]} ~ {', '.join(g[1:])}" for g in groups)]


# --- the data-set view (page 7) ---------------------------------------------------------------

def load_results(data) -> tuple[Settings, list[dict]]:
    """A parsed results.json -> (settings, rows); bad content raises OptionError in words."""
    try:
        settings = Settings.from_dict(data["settings"])
        rows = [dict(row) for row in data["rows"]]
        for row in rows:
            for key in ("image", "model", "method", "metric"):
                if not isinstance(row[key], str):
                    raise TypeError(key)
            if row["metric"] not in DIRECTION:
                raise ValueError(row["metric"])
            row["value"] = math.nan if row.get("value") is None else float(row["value"])
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise OptionError("This is not a benchmark results.json (expected 'settings' and 'rows' "
                          f"with image, model, method, metric and value; problem: {error}).") \
            from None
    return settings, rows


def mean_curves(rows: list[dict], steps: int) -> dict:
    """{(model, metric): {method: (fractions, mean score per step, images)}} for the curve
    metrics: the recorded scores averaged over images, point by point."""
    from ..metrics.faithfulness import fractions_for

    curves: dict = defaultdict(lambda: defaultdict(list))
    for row in rows:
        scores = row.get("scores")
        if scores:
            curves[(row["model"], row["metric"])][row["method"]].append(scores)
    out: dict = {}
    for (model_id, metric), per_method in sorted(curves.items()):
        fractions = fractions_for(metric, steps)
        out[(model_id, metric)] = {
            method: (fractions, np.mean([s for s in lists if len(s) == len(fractions)], axis=0),
                     len(lists))
            for method, lists in per_method.items()}
    return out


def metric_agreement(rows: list[dict]) -> dict[str, tuple[list[str], np.ndarray]]:
    """Per model: Spearman correlation between every two metrics over the (image, method)
    pairs both scored, each metric turned so that higher is better (deletion's AUC is
    negated): 1 = the two metrics order the maps identically."""
    values: dict = defaultdict(lambda: defaultdict(dict))
    for row in rows:
        value = row.get("value")
        if value is not None and math.isfinite(float(value)):
            sign = 1.0 if DIRECTION[row["metric"]] == HIGHER else -1.0
            values[row["model"]][row["metric"]][(row["image"], row["method"])] = sign * value
    out = {}
    for model_id, per_metric in sorted(values.items()):
        names = list(per_metric)
        matrix = np.eye(len(names))
        for i in range(len(names)):
            for j in range(i + 1, len(names)):
                common = sorted(set(per_metric[names[i]]) & set(per_metric[names[j]]))
                a = [per_metric[names[i]][k] for k in common]
                b = [per_metric[names[j]][k] for k in common]
                rho = spearman(np.array(a), np.array(b)) if len(common) > 2 else math.nan
                matrix[i, j] = matrix[j, i] = rho
        out[model_id] = (names, matrix)
    return out
