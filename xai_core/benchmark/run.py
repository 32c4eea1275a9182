"""Running a benchmark: the units to do, the journal that makes it resumable, and the
local and Ray backends.

A unit is one (image, model, method) with all its metric rows. Finished units are
appended to a journal in the output folder (`rows.jsonl`, or `rows-shard-I-of-N.jsonl`
for `--shard I/N`) as one JSON line each, flushed and synced, so a killed run loses at
most the unit in flight; a rerun reads every journal in the folder and skips what is
there. The tables (`results.csv`, `results.json`, `summary.json`) are rebuilt from the
journals at the end of every run.
"""

from __future__ import annotations

import csv
import json
import math
import os
import sys
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Callable, Iterable

from ..infra.errors import OptionError
from ..models.disk_cache import replace_atomically
from .plan import (ImageItem, Settings, check_settings, list_images, methods_for, parse_shard,
                   read_boxes)

CSV_COLUMNS = ("image", "model", "method", "metric", "value", "target", "target_label",
               "score_kind", "steps", "baseline", "seed", "random_weights", "error", "method_ms",
               "stability", "completeness_error")
SETTINGS_FILE = "settings.json"
MAX_IMAGES_PER_TASK = 8
Unit = tuple[str, str, str]  # image id, model id, method


@dataclass
class Plan:
    settings: Settings
    items: list[ImageItem]  # every image of the run (all shards)
    shard: tuple[int, int]
    boxes: dict[str, list]

    @cached_property
    def _by_id(self) -> dict[str, ImageItem]:
        return {item.id: item for item in self.items}

    def item(self, image_id: str) -> ImageItem:
        return self._by_id[image_id]

    @property
    def shard_items(self) -> list[ImageItem]:
        index, count = self.shard
        return self.items[index::count]

    def units(self, items: Iterable[ImageItem] | None = None) -> list[Unit]:
        """Image-major, so the methods of one image share its cached captures."""
        per_model = {m: methods_for(m, self.settings.methods) for m in self.settings.models}
        return [(item.id, model_id, method)
                for item in (self.shard_items if items is None else items)
                for model_id in self.settings.models for method in per_model[model_id]]


def make_plan(settings: Settings, shard: str | None = None) -> Plan:
    check_settings(settings)
    items = list_images(settings.images)
    boxes = read_boxes(settings.boxes, items) if settings.boxes else {}
    return Plan(settings, items, parse_shard(shard), boxes)


# --- the journal --------------------------------------------------------------------------------

class Journal:
    """Appends finished units to this run's journal file."""

    def __init__(self, out_dir: Path, shard: tuple[int, int]):
        out_dir.mkdir(parents=True, exist_ok=True)
        name = "rows.jsonl" if shard == (0, 1) else f"rows-shard-{shard[0]}-of-{shard[1]}.jsonl"
        self.path = out_dir / name
        _drop_torn_tail(self.path)

    def append(self, unit: Unit, rows: list[dict]) -> None:
        line = json.dumps({"unit": list(unit), "rows": rows}, allow_nan=True)
        with self.path.open("a") as handle:
            handle.write(line + "\n")
            handle.flush()
            os.fsync(handle.fileno())


def _drop_torn_tail(path: Path) -> None:
    """A run killed while writing leaves a last line without its newline: cut it off, so
    the next append starts on a line of its own."""
    if not path.is_file():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with path.open("r+b") as handle:
            handle.truncate(data.rfind(b"\n") + 1)


def read_units(out_dir: Path) -> dict[Unit, list[dict]]:
    """Every finished unit in every journal of the folder (the first copy wins)."""
    done: dict[Unit, list[dict]] = {}
    for path in sorted(out_dir.glob("rows*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn line from a killed run
            done.setdefault(tuple(record["unit"]), record["rows"])
    return done


def check_folder(out_dir: Path, settings: Settings) -> None:
    """A folder holds values of one kind: refuse to mix steps, baselines or seeds."""
    path = out_dir / SETTINGS_FILE
    if path.is_file():
        before = json.loads(path.read_text()).get("value_fields", {})
        if before and before != settings.value_fields():
            now = settings.value_fields()
            changed = ", ".join(f"{k} {before.get(k)} -> {now.get(k)}"
                                for k in {**before, **now} if before.get(k) != now.get(k))
            raise OptionError(f"{out_dir} holds a run with other settings ({changed}); "
                              "use another --out folder.")
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    _write_atomic(path, json.dumps({"value_fields": settings.value_fields()}, indent=2))


# --- computing units ----------------------------------------------------------------------------

def compute_unit(plan: Plan, unit: Unit) -> list[dict]:
    """The rows of one unit; input that fails for this image alone (an unreadable file, an
    ImageFolder class the model does not know) becomes rows with the reason in `error`."""
    from ..images import ImageError
    from ..models import get_model
    from ..pipeline import TargetError
    from .scoring import unit_rows

    image_id, model_id, method = unit
    item = plan.item(image_id)
    model = get_model(model_id, random_weights=plan.settings.random_weights)
    try:
        return unit_rows(plan.settings, item, model, method, plan.boxes.get(image_id))
    except (ImageError, TargetError, OptionError) as error:
        return [{"image": image_id, "model": model_id, "method": method, "metric": metric,
                 "value": float("nan"), "error": str(error), **plan.settings.value_fields()}
                for metric in plan.settings.metrics]


Progress = Callable[[int], None]  # called with the number of units just finished


def run_local(plan: Plan, pending: list[Unit], journal: Journal, progress: Progress) -> None:
    for unit in pending:
        journal.append(unit, compute_unit(plan, unit))
        progress(1)


def _ray_shard(plan: Plan, units: list[Unit], threads: int) -> list[tuple[Unit, list[dict]]]:
    """One Ray task: a shard of images. Models load once per worker process (the loader
    caches them per process) and stay loaded for the worker's next task."""
    import torch

    torch.set_num_threads(max(1, threads))
    return [(unit, compute_unit(plan, unit)) for unit in units]


def run_ray(plan: Plan, pending: list[Unit], journal: Journal, progress: Progress,
            address: str | None = None, cpus_per_task: int = 1) -> dict:
    """The same units as Ray tasks, one task per shard of images; results are written to the
    journal as each task returns. Joins the running Ray instance of this process, or the
    cluster at `address` ('auto' = the one `ray start` made on this machine), or starts a
    local one."""
    import ray

    started_here = not ray.is_initialized()
    if started_here:
        try:
            ray.init(address=address, runtime_env=_runtime_env(), include_dashboard=False,
                     logging_level="ERROR", log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as error:
            raise OptionError(f"Cannot reach a Ray cluster at {address or 'a new local one'}: "
                              f"{str(error).splitlines()[0]}") from None
    try:
        cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
        shards = _image_shards(pending, tasks=max(1, 2 * cpus // cpus_per_task))
        task = ray.remote(num_cpus=cpus_per_task)(_ray_shard)
        plan_ref = ray.put(plan)
        waiting = [task.remote(plan_ref, shard, cpus_per_task) for shard in shards]
        failures = []
        while waiting:
            done, waiting = ray.wait(waiting, num_returns=1)
            try:
                finished = ray.get(done[0])
            except ray.exceptions.RayError as error:  # a worker died or raised: keep the rest
                failures.append(str(error).strip().splitlines()[-1])
                continue
            for unit, rows in finished:
                journal.append(unit, rows)
            progress(len(finished))
        if failures:
            raise OptionError(f"{len(failures)} of {len(shards)} Ray tasks failed (the others' "
                              f"results are saved; rerun to retry): {failures[0]}")
        return {"cluster_cpus": cpus, "tasks": len(shards)}
    finally:
        if started_here:
            ray.shutdown()


def _image_shards(units: list[Unit], tasks: int, most: int = MAX_IMAGES_PER_TASK
                  ) -> list[list[Unit]]:
    """Units grouped by image, images dealt in order into shards of at most `most` images
    (at least `tasks` shards when there are enough images), so results reach the journal
    task by task and a restart loses little."""
    images = list(dict.fromkeys(unit[0] for unit in units))
    size = max(1, min(most, math.ceil(len(images) / tasks)))
    shard_of = {image: i // size for i, image in enumerate(images)}
    shards: list[list[Unit]] = [[] for _ in range(math.ceil(len(images) / size))]
    for unit in units:
        shards[shard_of[unit[0]]].append(unit)
    return shards


def _runtime_env() -> dict:
    """Workers get this package as a module (shipped by Ray) and the settings that
    choose devices, caches and offline mode."""
    package = Path(__file__).resolve().parent.parent
    passed = {k: v for k, v in os.environ.items()
              if k.startswith("VIT_LENS_") or k in ("HF_HUB_OFFLINE", "OMP_NUM_THREADS")}
    return {"py_modules": [str(package)], "env_vars": passed}


# --- the whole run ------------------------------------------------------------------------------

def run_benchmark(settings: Settings, out_dir: str | Path, backend: str = "local",
                  address: str | None = None, shard: str | None = None,
                  progress_bar: bool | None = None,
                  on_progress: Callable[[int, int], None] | None = None) -> dict:
    """Run (or resume) a benchmark and write its tables; returns the summary.
    `on_progress(done, total)` is called after every finished unit (the page's bar)."""
    from .summary import summarise

    if backend not in ("local", "ray"):
        raise OptionError(f"--backend is local or ray, got '{backend}'.")
    plan = make_plan(settings, shard)
    out_dir = Path(out_dir)
    check_folder(out_dir, settings)
    journal = Journal(out_dir, plan.shard)
    done = read_units(out_dir)
    shard_units = plan.units()
    pending = [unit for unit in shard_units if unit not in done]
    skipped = len(shard_units) - len(pending)
    bar = _progress_bar(len(pending), backend, progress_bar)
    finished = [0]

    def advance(count: int) -> None:
        bar.update(count)
        finished[0] += count
        if on_progress is not None:
            on_progress(finished[0], len(pending))

    try:
        if backend == "ray" and pending:
            info = run_ray(plan, pending, journal, advance, address)
        else:
            run_local(plan, pending, journal, advance)
            info = {}
    finally:
        bar.close()
    all_units = plan.units(plan.items)
    found = read_units(out_dir)
    rows = [row for unit in all_units if unit in found for row in found[unit]]
    summary = summarise(rows, settings, units_total=len(all_units),
                        units_done=sum(unit in found for unit in all_units))
    summary["run"] = {"backend": backend, "address": address, "shard": list(plan.shard),
                      "computed_units": len(pending), "skipped_units": skipped, **info}
    write_tables(out_dir, rows, settings, summary)
    return summary


def _progress_bar(total: int, backend: str, enabled: bool | None):
    from tqdm import tqdm

    enabled = sys.stderr.isatty() if enabled is None else enabled
    return tqdm(total=total, desc=f"benchmark ({backend})", unit="unit", file=sys.stderr,
                disable=not enabled, dynamic_ncols=True)


def write_tables(out_dir: Path, rows: list[dict], settings: Settings, summary: dict) -> None:
    from io import StringIO

    rows = [{k: _finite_or_none(v) for k, v in row.items()} for row in rows]
    text = StringIO()
    writer = csv.DictWriter(text, fieldnames=CSV_COLUMNS, extrasaction="ignore",
                            lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)  # a missing value (None) is an empty cell; `error` says why
    _write_atomic(out_dir / "results.csv", text.getvalue())
    _write_atomic(out_dir / "results.json", json.dumps(
        {"settings": settings.as_dict(), "rows": rows}, indent=1, allow_nan=False))
    _write_atomic(out_dir / "summary.json", json.dumps(summary, indent=2, allow_nan=False))


def _finite_or_none(value):
    """NaN is not JSON: a missing value is written as null (JSON) or an empty cell (CSV)."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _write_atomic(path: Path, text: str) -> None:
    """Write then rename, so a reader (or a shard finishing at the same time) never sees
    half a file."""
    replace_atomically(path, lambda name: Path(name).write_text(text))
