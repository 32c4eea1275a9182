"""`python -m xai_core metrics`: one faithfulness curve for one method's map.

Added to the parser by `cli.main`; heavy imports happen only when the command runs.
"""

from __future__ import annotations

from ..infra.provenance import run_meta
from .common import CliError, add_budget_flag, emit, labelled, method_options_model_image



def add_metrics_command(add) -> None:
    sub = add("metrics", cmd_metrics, "faithfulness curve (deletion, insertion, perturbation) "
                                      "of one method's map")
    sub.add_argument("--method", required=True)
    sub.add_argument("--metric", required=True, help="a faithfulness curve: deletion, "
                                                      "insertion, pos-perturb or neg-perturb")
    add_curve_flags(sub)
    sub.add_argument("--target", help="class index or name (default: the top prediction)")
    sub.add_argument("--set", action="append", metavar="KEY=VALUE",
                     help="method option; repeatable")
    add_budget_flag(sub)


def add_curve_flags(sub) -> None:
    """--steps and --baseline, the options every faithfulness curve declares: their defaults,
    ranges and choices are the declaration's (`metrics.faithfulness`), read when the command
    runs, so `--help` answers before torch loads."""
    sub.add_argument("--steps", help="perturbation steps (default: the curves' declared one, "
                                     "within their declared range)")
    sub.add_argument("--baseline", help="what a removed pixel shows: one of the analysis "
                                        "baselines (default: the curves' declared one)")


def curve_options(args) -> tuple[int, str]:
    """(steps, baseline) given on the command line, the others at their declared defaults;
    a bad value refused in one line."""
    from ..metrics.faithfulness import BASELINE, STEPS

    steps = STEPS.default if args.steps is None else STEPS.parse(args.steps)
    baseline = BASELINE.default if args.baseline is None else BASELINE.parse(args.baseline)
    return steps, baseline


def cmd_metrics(args) -> None:
    from ..metrics.faithfulness import check_curve_options, faithfulness
    from ..pipeline import resolve_target

    args.steps, args.baseline = curve_options(args)
    check_curve_options(args.metric, args.baseline, args.steps)
    method, options, model, image = method_options_model_image(args, (args.metric, args.steps))
    if model.head is None:
        raise CliError(f"{model.spec.display_name} has no class score to perturb.")
    target = resolve_target(model, args.target, image)  # metrics always score a class
    result = method(model, image, target=target, **options)
    try:
        curve = faithfulness(model, image, result.map, args.metric, target, args.baseline,
                             args.steps)
    except ValueError as error:  # a map the metric cannot rank (not 2-D, NaN)
        raise CliError(str(error)) from None
    payload = {**curve.as_dict(), "method": method.name, "options": result.options,
               "target_label": model.class_names[target],
               "meta": run_meta(model, image)}
    text = (f"{curve.metric} AUC {curve.auc:.4f} ({method.name}, target {target} "
            f"'{model.class_names[target]}', {curve.score_kind}; baseline {curve.baseline}, "
            f"{len(curve.fractions)} points, full image {curve.full_score:.4f}, "
            f"baseline {curve.baseline_score:.4f})")
    emit(args, payload, labelled(model, text))
