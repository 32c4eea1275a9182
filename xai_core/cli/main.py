"""`python -m xai_core`: the dashboard's numbers from the command line.

Every subcommand takes the same style: --model ID, --image PATH (or
sample:ID for a gallery image), --json for machine-readable output. Bad input
prints one line to stderr and exits with status 2.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from .benchmark import add_benchmark_command
from ..infra.provenance import run_meta
from .classroom import add_class_command
from .common import (FAULT, USAGE_ERROR, CliError, add_budget_flag, budget_of, emit, labelled,
                     load_image, load_model, method_options_model_image, save_npz)
from .studies import add_interventions_commands
from .lesson import add_lesson_command
from .metrics import add_metrics_command
from .warmup import add_health_command, add_warmup_command


def cmd_models(args) -> None:
    from ..models import MODEL_SPECS, availability

    rows = []
    for spec in MODEL_SPECS.values():
        status = availability(spec.id)
        rows.append({"id": spec.id, "name": spec.display_name, "family": spec.family,
                     "source": spec.source, "available": status.available,
                     "reason": status.reason})
    text = "\n".join(f"{r['id']:20} {r['family']:5} {r['source']:8} "
                     f"{'yes' if r['available'] else 'no ':4} {r['reason']}" for r in rows)
    emit(args, {"models": rows}, text)


def cmd_predict(args) -> None:
    from ..studies.open_set import open_set
    from ..pipeline import predict

    model, image = load_model(args), load_image(args.image)
    if model.head is None:
        raise CliError(f"{model.spec.display_name} does not classify images.")
    top = predict(model, image, topk=args.topk)
    found = open_set(model, image)
    payload = {"model": model.spec.id, "random_weights": model.random_weights,
               "top": [{"index": p.index, "label": p.label, "probability": p.probability}
                       for p in top], "open_set": found.as_dict()}
    text = "\n".join(f"{p.probability:7.2%}  {p.label} ({p.index})" for p in top)
    if not found.known:
        text += f"\nThis picture looks like none of what the model knows: {found.why()}."
    emit(args, payload, labelled(model, text))


def cmd_capture(args) -> None:
    from ..pipeline import vit_capture

    model, image = load_model(args), load_image(args.image)
    if not model.spec.is_vit:
        raise CliError("capture records transformer attention: choose a ViT model.")
    result = vit_capture(model, image)
    layout = result.layout
    arrays = {"attentions": result.stacked("attn")[:, 0].numpy().astype(np.float32),
              "num_prefix_tokens": np.array(layout.num_prefix_tokens),
              "grid": np.array(layout.grid), "patch_size": np.array(layout.patch_size)}
    if any(b.kind == "class" for b in result.blocks):
        arrays["class_attentions"] = result.stacked("attn", kind="class")[:, 0].numpy()
    save_npz(args.out, arrays, run_meta(model, image, {"seconds": result.seconds}))
    emit(args, {"out": args.out, "attentions_shape": list(arrays["attentions"].shape),
                 "grid": list(layout.grid), "num_prefix_tokens": layout.num_prefix_tokens},
          f"wrote {args.out}: attentions {arrays['attentions'].shape}, grid {layout.grid}, "
          f"{layout.num_prefix_tokens} prefix token(s)")


def cmd_methods(args) -> None:
    from ..methods import METHODS

    described = [METHODS[name].describe() for name in sorted(METHODS)]

    def line(entry) -> str:
        options = ", ".join(f"{o['name']}={o['default']}" for o in entry["options"]) or "none"
        return (f"{entry['name']:18} {entry['family']:4} {entry['cost']:9} options: {options}"
                f"\n{'':18} {entry['convention']}")
    emit(args, {"methods": described}, "\n".join(map(line, described)))


def cmd_explain(args) -> None:
    from ..pipeline import resolve_target

    method, options, model, image = method_options_model_image(args)
    target = resolve_target(model, args.target, image) if method.needs_target else None
    result = method(model, image, target=target, **options)
    meta = run_meta(model, image, {"method": method.name, "options": result.options,
                                "target": target,
                                "target_label": None if target is None
                                else model.class_names[target], **result.meta})
    if args.stability:
        from ..metrics.stability import seed_stability

        found = seed_stability(method, model, image, target=target, **options)
        meta.update(stability=found["stability"], stability_seeds=found["seeds"])
    arrays = {"map": result.map.astype(np.float32), **result.arrays}
    save_npz(args.out, arrays, meta)
    emit(args, {"out": args.out, "map_shape": list(result.map.shape), "meta": meta},
          labelled(model, f"wrote {args.out}: map {result.map.shape} ({method.name})"
                          + _stability_words(meta)))


def _stability_words(meta: dict) -> str:
    if "stability" not in meta:
        return ""
    value = meta["stability"]
    return ("; seed stability undefined (a constant map)" if value is None else
            f"; seed stability {value:.3f} (mean Spearman over seeds "
            f"{', '.join(map(str, meta['stability_seeds'])) or 'none: not seeded'})")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m xai_core", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    def add(name, function, help_text, image=True):
        sub = commands.add_parser(name, help=help_text)
        sub.set_defaults(function=function)
        sub.add_argument("--json", action="store_true", help="print JSON")
        if image:
            sub.add_argument("--model", required=True, help="model id (see `models`)")
            sub.add_argument("--image", required=True, help="image file, or sample:ID")
            sub.add_argument("--random-weights", action="store_true",
                             help="hub models only: random weights, for shapes and layouts")
        return sub

    add("models", cmd_models, "list models and whether they can load here", image=False)
    add("methods", cmd_methods, "list explanation methods with their options and conventions",
        image=False)
    add("predict", cmd_predict, "top classes for an image").add_argument(
        "--topk", type=int, default=5, choices=range(1, 51), metavar="K")
    add("capture", cmd_capture, "record every block's attention to an .npz").add_argument(
        "--out", required=True)
    explain = add("explain", cmd_explain, "run one explanation method, write the raw map")
    explain.add_argument("--method", required=True)
    explain.add_argument("--target", help="class index or name (default: the top prediction)")
    explain.add_argument("--set", action="append", metavar="KEY=VALUE",
                         help="method option; repeatable")
    explain.add_argument("--out", required=True)
    add_budget_flag(explain)
    explain.add_argument("--stability", action="store_true",
                         help="also run a seeded method at the next two seeds and write the "
                              "mean pairwise Spearman of the three maps to meta.stability")
    for extend in (add_metrics_command, add_benchmark_command, add_warmup_command,
                   add_health_command, add_interventions_commands, add_lesson_command,
                   add_class_command):
        extend(add)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)  # --help and usage errors answer before torch loads
    from ..capture import CaptureError
    from ..infra.errors import OptionError
    from ..infra.faults import ModelOutOfMemory
    from ..images import ImageError
    from ..models import ModelUnavailableError, UnknownModelError, disk_cache
    from ..pipeline import TargetError

    from ..infra.budget import overriding

    try:
        with overriding(budget_of(args)):
            args.function(args)
    except (CliError, ImageError, ModelUnavailableError, UnknownModelError, TargetError,
            OptionError, CaptureError) as error:
        print(f"error: {error}", file=sys.stderr)
        return USAGE_ERROR
    except ModelOutOfMemory as error:  # a fault of the machine, not of the input
        print(f"error: {error}", file=sys.stderr)
        return FAULT
    finally:
        if cache_problem := disk_cache.notice():  # the result is good; the admin should know
            print(f"warning: {cache_problem}", file=sys.stderr)
    return 0
