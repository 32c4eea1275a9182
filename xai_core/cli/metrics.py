"""`python -m xai_core metrics`: one faithfulness curve for one method's map.

Added to the parser by `cli.main`; heavy imports happen only when the command runs.
"""

from __future__ import annotations

from ..infra.provenance import run_meta
from .common import CliError, add_budget_flag, emit, labelled, method_options_model_image

METRIC_CHOICES = ("deletion", "insertion", "pos-perturb", "neg-perturb")
BASELINE_CHOICES = ("zeros", "blur", "rise-blur", "mean")


def add_metrics_command(add) -> None:
    sub = add("metrics", cmd_metrics, "faithfulness curve (deletion, insertion, perturbation) "
                                      "of one method's map")
    sub.add_argument("--method", required=True)
    sub.add_argument("--metric", required=True, choices=METRIC_CHOICES)
    sub.add_argument("--steps", type=int, default=20, help="perturbation steps (2-500)")
    sub.add_argument("--baseline", default="zeros", choices=BASELINE_CHOICES)
    sub.add_argument("--target", help="class index or name (default: the top prediction)")
    sub.add_argument("--set", action="append", metavar="KEY=VALUE",
                     help="method option; repeatable")
    add_budget_flag(sub)


def cmd_metrics(args) -> None:
    from ..metrics.faithfulness import check_curve_options, faithfulness
    from ..pipeline import resolve_target

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
