"""`make bench`: run every bench/bench_*.py, print one table, write bench/results.json.

Each module exposes `run(smoke: bool = False) -> list[dict]` with rows
{"name": str, "value": float, "unit": str, "note": str (optional)}.
Pass module names (e.g. `foundation`) to run only those.

`--smoke` runs every module once at its smallest size (one image, the fewest samples, steps
and students), to show that the benchmark still runs to its end: its rows are printed under a
SMOKE banner and no results file is written (the figures measure nothing worth keeping).
"""

from __future__ import annotations

import importlib
import json
import os
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import xai_core  # noqa: E402,F401  (before torch: it sets the threads' wait policy)
import torch  # noqa: E402

SMOKE_FLAG = "--smoke"


def device_name() -> str:
    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def print_rows(rows: list[dict]) -> None:
    for row in rows:
        note = f"  {row['note']}" if row.get("note") else ""
        print(f"  {row['name']:<58} {row['value']:>10.3f} {row['unit']:<6}{note}", flush=True)


def bench_modules(selected: list[str]) -> list[str]:
    modules = sorted(p.stem for p in HERE.glob("bench_*.py"))
    if selected:
        modules = [m for m in modules if m.removeprefix("bench_") in selected or m in selected]
    return modules


def main(argv: list[str]) -> None:
    smoke = SMOKE_FLAG in argv
    modules = bench_modules([a for a in argv if a != SMOKE_FLAG])
    results = {"device": device_name(), "torch": torch.__version__, "sections": {},
               "load_average_at_start": os.getloadavg()[0]}
    # a shared machine's other work slows every row alike: say how busy it was
    print(f"ViT Lens benchmarks on {results['device']}, load average "
          f"{results['load_average_at_start']:.1f} on {os.cpu_count()} cores")
    if smoke:
        print("SMOKE RUN: every script once at its smallest size; the figures are not results "
              "and no results file is written")
    began = time.perf_counter()
    for name in modules:
        started = time.perf_counter()
        rows = importlib.import_module(f"bench.{name}").run(smoke=smoke)
        results["sections"][name] = rows
        print(f"\n== {name.removeprefix('bench_')}{' (smoke)' if smoke else ''} "
              f"({time.perf_counter() - started:.0f} s)")
        print_rows(rows)
    results["load_average_at_end"] = os.getloadavg()[0]
    print(f"\nload average at the end {results['load_average_at_end']:.1f}; "
          f"{len(modules)} scripts in {time.perf_counter() - began:.0f} s")
    if smoke:
        print("smoke run: nothing written")
        return
    out = HERE / f"results-{'cuda' if torch.cuda.is_available() else 'cpu'}.json"
    out.write_text(json.dumps(results, indent=2))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
