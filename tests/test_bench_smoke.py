"""`python -m bench.run --smoke` (in .ci/run): every bench/bench_*.py takes `run(smoke=...)`,
the smoke run hands it smoke=True, prints its rows under a SMOKE banner and writes no results
file. The run itself is .ci/run's; here only what it relies on."""

from __future__ import annotations

import importlib
import inspect

import pytest

from bench import run as bench_run


def test_every_bench_module_takes_smoke():
    modules = bench_run.bench_modules([])
    assert len(modules) >= 20 and "bench_stability" in modules
    for name in modules:
        run = importlib.import_module(f"bench.{name}").run
        smoke = inspect.signature(run).parameters.get("smoke")
        assert smoke is not None and smoke.default is False, name


@pytest.mark.parametrize("smoke", [True, False])
def test_the_runner_passes_smoke_and_writes_only_a_full_run(smoke, monkeypatch, tmp_path,
                                                            capsys):
    module = importlib.import_module("bench.bench_intervals")
    asked = []
    monkeypatch.setattr(module, "run", lambda smoke: asked.append(smoke) or [
        {"name": "a row", "value": 1.0, "unit": "s"}])
    monkeypatch.setattr(bench_run, "HERE", tmp_path)  # where the results file goes
    (tmp_path / "bench_intervals.py").touch()  # the runner lists the scripts it finds there
    bench_run.main(["intervals"] + (["--smoke"] if smoke else []))
    printed = capsys.readouterr().out
    assert asked == [smoke] and "a row" in printed
    assert ("SMOKE RUN" in printed) is smoke
    assert len(list(tmp_path.glob("results-*.json"))) == (0 if smoke else 1)
