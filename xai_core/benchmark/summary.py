"""A benchmark's summary: per model and metric, each method's mean with a bootstrap 95 %
interval, its mean rank over images, and how it compares with the random floor.

- Interval: percentile bootstrap of the mean over images (2000 resamples), seeded from the
  run's seed and the (model, metric, method) names, so it does not depend on row order.
- Mean rank: within each (image, model, metric) the methods with a value are ranked, 1 =
  best (lowest for deletion-like metrics, highest for the others), ties averaged.
- Floor: the paired difference method - random over the images both have, with its own
  bootstrap interval. "better than random" / "worse than random" when the interval lies
  wholly on one side of 0, "not distinguishable from random" otherwise; with one paired
  image there is no interval to speak of (it is that image's difference), so no verdict.
"""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict

import numpy as np

from ..errors import OptionError
from ..metrics.agreement import spearman
from .plan import DIRECTION, HIGHER, METRIC_NOTES, RANDOM_METHOD, Settings

RESAMPLES = 2000
CONFIDENCE = 0.95


def bootstrap_interval(values: np.ndarray, seed: int, resamples: int = RESAMPLES
                       ) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of `values`."""
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return math.nan, math.nan
    if values.size == 1:
        return float(values[0]), float(values[0])
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, values.size, size=(resamples, values.size))].mean(axis=1)
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(low), float(high)


def _seed(seed: int, *names: str) -> int:
    digest = hashlib.sha256("|".join([str(seed), *names]).encode()).digest()
    return int.from_bytes(digest[:8], "little")


def mean_ranks(values: dict[str, dict[str, float]], higher_is_better: bool) -> dict[str, float]:
    """values[method][image] -> mean over images of the method's rank among the methods
    with a finite value on that image (1 = best, ties get the average rank)."""
    from scipy.stats import rankdata

    ranks: dict[str, list[float]] = defaultdict(list)
    images = {image for per_image in values.values() for image in per_image}
    for image in sorted(images):
        present = [(m, v[image]) for m, v in values.items()
                   if image in v and math.isfinite(v[image])]
        if not present:
            continue
        scores = np.array([v for _, v in present])
        order = rankdata(-scores if higher_is_better else scores, method="average")
        for (method, _), rank in zip(present, order):
            ranks[method].append(float(rank))
    return {method: float(np.mean(r)) for method, r in ranks.items()}


def _verdict(low: float, high: float, higher_is_better: bool, images: int) -> str:
    if images == 0 or not (math.isfinite(low) and math.isfinite(high)):
        return "no paired images"
    if images == 1:
        return "one paired image: too few to tell"
    if (low > 0) if higher_is_better else (high < 0):
        return "better than random"
    if (high < 0) if higher_is_better else (low > 0):
        return "worse than random"
    return "not distinguishable from random"


def summarise(rows: list[dict], settings: Settings, units_total: int, units_done: int) -> dict:
    groups: dict[tuple[str, str], dict[str, dict[str, float]]] = defaultdict(
        lambda: defaultdict(dict))
    failures: dict[tuple[str, str, str], int] = defaultdict(int)
    for row in rows:
        value = row.get("value")
        key = (row["model"], row["metric"])
        if value is None or not math.isfinite(float(value)):
            failures[(*key, row["method"])] += 1
            groups[key].setdefault(row["method"], {})
            continue
        groups[key][row["method"]][row["image"]] = float(value)
    tables = []
    for (model_id, metric), per_method in sorted(groups.items()):
        higher = DIRECTION[metric] == HIGHER
        ranks = mean_ranks(per_method, higher)
        floor = per_method.get(RANDOM_METHOD, {})
        entries = []
        for method, per_image in per_method.items():
            values = np.array(list(per_image.values()))
            low, high = bootstrap_interval(values, _seed(settings.seed, model_id, metric, method))
            entry = {"method": method, "images": int(values.size),
                     "failed": failures[(model_id, metric, method)],
                     "mean": _number(values.mean()) if values.size else None,
                     "interval": [_number(low), _number(high)],
                     "mean_rank": _number(ranks.get(method, math.nan))}
            if method != RANDOM_METHOD and floor:
                entry["vs_random"] = _versus_floor(per_image, floor, higher, settings.seed,
                                                   model_id, metric, method)
            entries.append(entry)
        entries.sort(key=lambda e: (e["mean_rank"] is None, e["mean_rank"] or 0, e["method"]))
        tables.append({"model": model_id, "metric": metric, "better": DIRECTION[metric],
                       "note": METRIC_NOTES[metric], "methods": entries})
    return {"settings": settings.as_dict(), "versions": library_versions(),
            "units": {"total": units_total, "done": units_done},
            "interval": f"percentile bootstrap of the mean over images, {RESAMPLES} resamples, "
                        f"{CONFIDENCE:.0%}",
            "tables": tables}


def _versus_floor(per_image, floor, higher, seed, model_id, metric, method) -> dict:
    paired = sorted(set(per_image) & set(floor))
    differences = np.array([per_image[i] - floor[i] for i in paired])
    low, high = bootstrap_interval(differences, _seed(seed, model_id, metric, method, "floor"))
    return {"images": len(paired),
            "mean_difference": _number(differences.mean()) if paired else None,
            "interval": [_number(low), _number(high)],
            "verdict": _verdict(low, high, higher, len(paired))}


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
             f"{settings['steps']} steps; intervals: {summary['interval']}."]
    if settings.get("random_weights"):
        lines.insert(0, "RANDOM WEIGHTS (shapes only): every model below was built with random "
                        "weights, so these values say nothing about a trained model.")
    for table in summary["tables"]:
        count = max((e["images"] for e in table["methods"]), default=0)
        lines += ["", f"{table['model']} · {table['metric']} ({table['better']} is better; "
                      f"{count} images)",
                  f"  {'rank':>5}  {'method':22} {'mean':>9}  {'95 % interval':21} vs random"]
        for entry in table["methods"]:
            rank = "-" if entry["mean_rank"] is None else f"{entry['mean_rank']:.2f}"
            mean = "n/a" if entry["mean"] is None else f"{entry['mean']:.4f}"
            low, high = entry["interval"]
            interval = "" if low is None else f"[{low:.4f}, {high:.4f}]"
            versus = ("the floor" if entry["method"] == RANDOM_METHOD
                      else entry.get("vs_random", {}).get("verdict", "no floor"))
            failed = f" ({entry['failed']} failed)" if entry["failed"] else ""
            lines.append(f"  {rank:>5}  {entry['method']:22} {mean:>9}  {interval:21} "
                         f"{versus}{failed}")
    return "\n".join(lines)


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
