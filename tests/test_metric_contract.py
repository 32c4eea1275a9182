"""The metric contract (`xai_core/metrics/contract.py`): every metric the benchmark, page 7 and
the CLI know is declared once with `@metric` - which direction is better, what it needs, its
typed options - and each of them reads the declaration: a curve's steps and baseline, the
metric names and directions have one home. The scans below fail on a default or a list of
metric names typed again outside the declarations."""

from __future__ import annotations

import argparse
import ast

import numpy as np
import pytest

from source_scan import ROOT, metric_name_lists, python_files, typed_defaults
from xai_core.analysis.perturbation import BASELINES
from xai_core.benchmark import plan, small
from xai_core.infra.errors import OptionError
from xai_core.lessons.comparison import FaithSettings
from xai_core.metrics import HIGHER, LOWER, METRICS, MetricRequest, curve_metrics
from xai_core.metrics.contract import Metric, metric
from xai_core.metrics.faithfulness import BASELINE, STEPS, faithfulness



def test_every_benchmark_metric_is_declared_once_with_its_direction():
    # the direction of each metric, from the papers: a faithful map makes deletion's and
    # positive perturbation's score fall fast (low area), insertion's rise fast (high area);
    # ROAD's (LeRF - MoRF) / 2 grows with faithfulness; a map that survives randomisation
    # explains nothing (low correlation is good); the box metrics count hits
    expected = {"deletion": LOWER, "insertion": HIGHER, "pos-perturb": LOWER,
                "neg-perturb": HIGHER, "road": HIGHER, "randomisation": LOWER,
                "pointing-game": HIGHER, "energy-in-box": HIGHER}
    assert {name: m.better for name, m in METRICS.items()} == expected
    assert plan.DIRECTION == expected and set(plan.METRIC_NOTES) == set(expected)
    assert curve_metrics("pixel") == ("deletion", "insertion")
    assert curve_metrics("cell") == ("pos-perturb", "neg-perturb")
    assert plan.BOX_METRICS == ("pointing-game", "energy-in-box")
    for declared in METRICS.values():
        described = declared.describe()
        assert described["name"] == declared.name and described["summary"]
        if declared.is_curve:  # one pair of options, shared by every curve
            assert declared.options == (STEPS, BASELINE)
        else:
            assert declared.options == ()


def test_the_curves_options_are_typed_and_checked_in_words():
    deletion = METRICS["deletion"]
    assert deletion.defaults() == {"steps": STEPS.default, "baseline": BASELINE.default}
    assert BASELINE.choices == BASELINES and BASELINE.default in BASELINES
    assert deletion.resolve({"steps": "7"}) == {"steps": 7, "baseline": BASELINE.default}
    for given, words in (({"steps": 1}, "out of range"), ({"steps": "x"}, "whole number"),
                         ({"baseline": "noise"}, "not one of"), ({"colour": 1}, "Unknown")):
        with pytest.raises(OptionError, match=words):
            deletion.resolve(given)


def test_every_reader_of_a_curve_default_reads_the_declaration():
    """The benchmark's settings, the small run, page 7's faithfulness and the CLI flags start
    at the declared values (and the small run keeps its own, smaller, declared steps)."""
    settings = plan.Settings()
    assert (settings.steps, settings.baseline) == (STEPS.default, BASELINE.default)
    assert settings.metrics == curve_metrics("pixel") == small.METRICS
    faith = FaithSettings()
    assert (faith.steps, faith.baseline) == (STEPS.default, BASELINE.default)
    assert small.SmallRun(("dinov2-s14",), ("chelsea",), ("gradcam",)).settings().baseline \
        == BASELINE.default
    assert small.STEPS.low == STEPS.low and small.STEPS.high < STEPS.high
    from xai_core.cli.metrics import curve_options

    given = argparse.Namespace(steps=None, baseline=None)
    assert curve_options(given) == (STEPS.default, BASELINE.default)
    assert curve_options(argparse.Namespace(steps="3", baseline="blur")) == (3, "blur")
    with pytest.raises(OptionError, match=f"{STEPS.low}-{STEPS.high}"):
        curve_options(argparse.Namespace(steps="1", baseline=None))


def test_a_metric_through_its_declaration_is_the_function_it_declares(cnn_case):
    """`METRICS["deletion"](request, steps=...)` is the cached faithfulness curve (the same
    object), and a box metric without a box refuses in words."""
    model, image, target, cam = cnn_case
    request = MetricRequest(model, image, cam, target)
    curve = METRICS["deletion"](request, steps=4)
    assert curve is faithfulness(model, image, cam, "deletion", target, BASELINE.default, 4)
    assert Metric.value(curve) == curve.auc == pytest.approx(
        np.trapezoid(curve.scores, curve.fractions))
    with pytest.raises(ValueError, match="no box"):
        METRICS["pointing-game"](request)
    inside = MetricRequest(model, image, cam, target, boxes=((0, 0, 64, 64),))
    assert METRICS["pointing-game"](inside) == 1.0  # the box is the whole input
    assert METRICS["energy-in-box"](inside) == pytest.approx(1.0)


@pytest.fixture(scope="module")
def cnn_case():
    from tiny_models import images, tiny_cnn

    model = tiny_cnn()
    image = images(1)[0]
    cam = np.random.default_rng(0).random((4, 4)).astype(np.float32)
    return model, image, 3, cam


def test_a_declaration_with_a_mistake_fails_at_import():
    with pytest.raises(ValueError, match="better"):
        metric("x-bad", better="sideways", summary="s")(lambda request: 0.0)
    with pytest.raises(ValueError, match="keyword-only"):
        metric("x-bad", better=LOWER, summary="s", options=(STEPS,))(lambda request: 0.0)
    assert "x-bad" not in METRICS


# --- no default typed twice ---------------------------------------------------------------------

def test_the_scans_find_a_typed_default_and_a_list_of_metric_names():
    source = ("def curve(steps: int = 20, *, baseline='zeros'): ...\n"
              "DEFAULT_STEPS = 20\n"
              "class S:\n    steps: int = 20\n"
              "sub.add_argument('--baseline', default='zeros')\n"
              "run(steps=20, baseline='blur', other_steps=2)\n"
              "METRICS = ('deletion', 'insertion')\n")
    tree = ast.parse(source)
    assert typed_defaults(tree, (STEPS, BASELINE)) == [
        "line 1: steps = 20", "line 1: baseline = 'zeros'", "line 2: DEFAULT_STEPS = 20",
        "line 4: steps = 20", "line 5: --baseline = 'zeros'", "line 6: steps = 20"]
    assert metric_name_lists(tree) == [7]


def test_no_curve_default_or_metric_name_list_is_typed_outside_the_declarations():
    home = ROOT / "xai_core" / "metrics"
    found = {}
    for path in python_files():
        if path.is_relative_to(home):
            continue
        tree = ast.parse(path.read_text())
        hits = typed_defaults(tree, (STEPS, BASELINE)) + [
            f"line {line}: a list of metric names" for line in metric_name_lists(tree)]
        if hits:
            found[str(path.relative_to(ROOT))] = hits
    assert found == {}
