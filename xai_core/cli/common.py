"""What every sub-command shares: the one-line error, loading the model and image named
on the command line, output (text or --json, .npz) and --set options.

Heavy modules (torch, the models) are imported inside the functions that need them, so
`python -m xai_core --help` answers at once.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

USAGE_ERROR = 2
FAULT = 1  # the machine failed the request (out of memory): one line, no traceback


class CliError(Exception):
    """Bad input: printed as one line, exit status 2."""


def load_image(spec: str):
    from ..images import ImageError, load_image_file, load_sample

    try:
        if spec.startswith("sample:"):
            return load_sample(spec.split(":", 1)[1])
        return load_image_file(spec)
    except ImageError as error:
        raise CliError(f"{spec}: {error}") from None


def require_available(model_id: str) -> None:
    """Refuse a model whose real weights cannot load here, saying why (exit status 2)."""
    from ..models import availability

    status = availability(model_id)
    if not status.available:
        raise CliError(status.reason + " (use --random-weights to test shapes only)")


def load_model(args):
    from ..models import get_model, get_spec

    spec = get_spec(args.model)
    random_weights = getattr(args, "random_weights", False)
    if not random_weights:
        require_available(spec.id)
    return get_model(spec.id, random_weights=random_weights)


def labelled(model, text: str) -> str:
    """`text` about a model's results, under the model's label when its weights are random
    (the label says so), so printed numbers never pass for a trained model's."""
    return f"{model.label}\n{text}" if model.random_weights else text


def emit(args, payload: dict, text: str) -> None:
    print(json.dumps(payload, indent=2) if args.json else text)


def save_npz(path: str, arrays: dict, meta: dict) -> None:
    from ..models.disk_cache import os_reason, replace_atomically

    target = Path(path)
    if target.parent and not target.parent.exists():
        raise CliError(f"The folder {target.parent} does not exist.")
    if target.suffix != ".npz":  # as numpy names it when given a path
        target = target.with_name(target.name + ".npz")

    def write(name: str) -> None:
        with open(name, "wb") as handle:  # a file object: numpy adds no ".npz" to the name
            np.savez_compressed(handle, **arrays, meta=np.array(json.dumps(meta)))

    try:  # a full or read-only disk: one line, and no half-written file
        replace_atomically(target, write)
    except OSError as error:
        raise CliError(f"Could not write {path}: {os_reason(error)}.") from None


def parse_sets(pairs: list[str]) -> dict[str, str]:
    options = {}
    for pair in pairs or []:
        for item in pair.split():
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise CliError(f"--set takes key=value, got '{item}'.")
            options[key] = value
    return options


def method_options_model_image(args, curve: tuple[str, int] | None = None):
    """The method named by --method, its --set options, a model of its family and the image.
    An option with a bad type or outside a fixed bound, or passes over the budget (with a
    faithfulness `curve` (metric, steps) after the method), are refused before the model
    loads; an option outside a bound the model sets (its last block), or memory over the
    budget, right after, before any pass through the model."""
    from ..infra import budget
    from ..methods import METHODS
    from ..models import get_spec

    if args.method not in METHODS:
        raise CliError(f"Unknown method '{args.method}'. Methods: {', '.join(sorted(METHODS))}.")
    method = METHODS[args.method]
    spec = get_spec(args.model)
    options = method.parse(parse_sets(args.set))
    method.check_family(spec)
    values = method.spec_values(options)
    if curve is None:
        budget.check(method, values, spec=spec)
    else:
        budget.check_curve(method, values, *curve, spec)
    model, image = load_model(args), load_image(args.image)
    values = method.resolve(model, options)
    budget.check(method, values, model=model)  # the memory: before the prediction's pass
    return method, values, model, image


def add_budget_flag(sub) -> None:
    sub.add_argument("--budget", metavar="PASSES|none",
                     help="passes one request may run (default: the server's budget, "
                          "VIT_LENS_BUDGET_PASSES); 'none' lifts the pass and memory limits")


def budget_of(args):
    """The --budget of a command (None: the configured one), refused in one line."""
    from ..infra.budget import from_flag

    raw = getattr(args, "budget", None)
    if raw is None:
        return None
    try:
        return from_flag(raw)
    except ValueError as error:
        raise CliError(str(error)) from None
