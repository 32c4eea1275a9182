"""The server's cost budget: what one request may ask of the model, refused before it runs.

A request is one method call (or one faithfulness curve set) with its options. Its cost
comes from the method's declaration (`methods.base.Cost`): image passes through the model
(each image forward, and each one back) and the images in one pass at once, which memory
grows with. A request over the budget is refused before any pass - the passes from the
options and the model's spec alone (before a model loads), the memory as soon as the model
is loaded - with one sentence that names the option to lower and the limit.

The budget: VIT_LENS_BUDGET_PASSES and VIT_LENS_BUDGET_MB ("none" lifts one), else
`.streamlit/budget.toml` (`passes = 400`, `megabytes = 1536`; Streamlit reads only its own
config.toml and secrets.toml there, so a file of our own is neither read nor warned about),
else the defaults, sized for a 2-core lab server. The CLI's `--budget` sets it for its own
command (`overriding`).
"""

from __future__ import annotations

import os
import threading
import tomllib
import weakref
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from .errors import OptionError

ENV_PASSES, ENV_MB = "VIT_LENS_BUDGET_PASSES", "VIT_LENS_BUDGET_MB"
SETTINGS_FILE = Path(__file__).resolve().parents[2] / ".streamlit" / "budget.toml"
NO_LIMIT = "none"

# Bytes of peak memory per image in one pass, per element of the leaf modules' outputs of
# one image's forward (`activation_elements`). Measured on this machine's CPU (one torch
# thread, bench/bench_budget.py): the peak resident memory (VmHWM, reset through
# /proc/self/clear_refs) that Integrated Gradients (graded: forward + backward) and
# KernelSHAP (forward only) add at batch 4 and 16, per image, divided by the count:
# DINOv2 ViT-S/14 (38.5 M elements) 72 MB graded, 9.2 MB forward; EfficientNet-Lite0
# (25.0 M elements) 76 MB graded, 15.1 MB forward. Rounded up, per family; another model
# of a family is scaled by its own count (an estimate: only these two were measured).
BYTES_PER_ELEMENT = {("vit", True): 2.0, ("vit", False): 0.26,
                     ("cnn", True): 3.3, ("cnn", False): 0.65}


@dataclass(frozen=True)
class Budget:
    passes: int | None = 400  # image passes per request; None: no limit
    megabytes: int | None = 1536  # peak memory per request; None: no limit


DEFAULT = Budget()
UNLIMITED = Budget(None, None)
_OVERRIDE: list[Budget] = []  # the CLI's --budget, while its command runs


class OverBudget(OptionError):
    """A request the server's budget refuses (one sentence, before anything runs)."""


def _limit(raw, name: str) -> int | None:
    text = str(raw).strip().lower()
    if text == NO_LIMIT:
        return None
    if not text.isdigit() or int(text) < 1:
        raise OptionError(f"{name} must be a whole number of at least 1 or 'none', got '{raw}'.")
    return int(text)


def read_settings_file(path: Path) -> dict:
    """The settings file's table ({} when there is none)."""
    try:
        return tomllib.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise OptionError(f"{path} cannot be read: {error}.") from None


def current() -> Budget:
    """The budget in force: the CLI's override, else env vars, else the settings file,
    else DEFAULT (read on every call, so a changed env var or file takes effect)."""
    if _OVERRIDE:
        return _OVERRIDE[-1]
    settings = read_settings_file(SETTINGS_FILE)

    def setting(env: str, key: str, default: int) -> int | None:
        if env in os.environ:
            return _limit(os.environ[env], env)
        return _limit(settings.get(key, default), f"{key} in {SETTINGS_FILE}")
    return Budget(setting(ENV_PASSES, "passes", DEFAULT.passes),
                  setting(ENV_MB, "megabytes", DEFAULT.megabytes))


@contextmanager
def overriding(budget: Budget | None):
    """Within this block, `budget` instead of the configured one (the CLI's --budget, for
    one command); None changes nothing."""
    if budget is None:
        yield
        return
    _OVERRIDE.append(budget)
    try:
        yield
    finally:
        _OVERRIDE.pop()


def from_flag(text: str) -> Budget:
    """--budget none (no limit) or --budget PASSES (that pass limit, memory as configured)."""
    if str(text).strip().lower() == NO_LIMIT:
        return UNLIMITED
    return replace(current(), passes=_limit(text, "--budget"))


# --- memory -----------------------------------------------------------------------------------

_ELEMENTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # module -> count
_ELEMENTS_LOCK = threading.Lock()


def activation_elements(model) -> int:
    """Elements of every leaf module's output for one image, counted on fake tensors
    (torch's FakeTensorMode: shapes only, no arithmetic, no memory), once per model. The
    module's own forward is called past its top-level hooks, so a pass counter open on it
    counts nothing; the model's lock keeps its hook table still meanwhile."""
    module = model.module
    with _ELEMENTS_LOCK:
        if module in _ELEMENTS:
            return _ELEMENTS[module]
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    total = [0]

    def count(_module, _args, output):
        if isinstance(output, torch.Tensor):
            total[0] += output.numel()
    leaves = [m for m in module.modules() if next(m.children(), None) is None]
    pixels = torch.zeros(1, 3, *model.spec.input_size, device=model.device)
    with model.lock:
        handles = [leaf.register_forward_hook(count) for leaf in leaves]
        try:
            with torch.no_grad(), FakeTensorMode(allow_non_fake_inputs=True) as mode:
                module.forward(mode.from_tensor(pixels))
        except Exception:  # an operation fake tensors do not know: count on real ones
            total[0] = 0
            with torch.no_grad():
                module.forward(pixels)
        finally:
            for handle in handles:
                handle.remove()
    with _ELEMENTS_LOCK:
        _ELEMENTS[module] = total[0]
    return total[0]


def bytes_per_image(model, graded: bool) -> float:
    family = "cnn" if model.spec.family == "cnn" else "vit"
    return activation_elements(model) * BYTES_PER_ELEMENT[(family, graded)]


def peak_bytes(method, values: dict, model) -> float:
    """The estimated peak memory one call adds: the images of one pass times the bytes
    each takes (kept for the backward when the method differentiates)."""
    return method.cost.batch(values, model) * bytes_per_image(model, method.cost.graded)


# --- the check --------------------------------------------------------------------------------

def check(method, values: dict, model=None, spec=None, budget: Budget | None = None) -> None:
    """Refuse `method` with `values` (every option, resolved) when it exceeds the budget:
    passes from the values and `spec` (no model needed), memory too once `model` is loaded.
    Raises OverBudget with one sentence; silent when it fits."""
    budget = budget or current()
    source = model if model is not None else spec
    over = _over(method, values, model, source, budget)
    if not over:
        return
    raise OverBudget(f"{method.name} with {_options_text(method, values)} needs "
                     + " and ".join(need for need, _ in over) + "; this server allows "
                     + " and ".join(limit for _, limit in over) + " per request: "
                     + _advice(method, values, model, source, budget, over) + ".")


def _over(method, values, model, source, budget) -> list[tuple[str, str]]:
    """[(what it needs, the limit)] for each limit it exceeds."""
    over = []
    passes = method.cost.passes(values, source)
    if budget.passes is not None and passes > budget.passes:
        over.append((f"{passes} passes through the model", f"{budget.passes} passes"))
    if budget.megabytes is not None and model is not None:
        needed = peak_bytes(method, values, model)
        if needed > budget.megabytes * 2**20:
            over.append((f"about {_size(needed)} of memory", _size(budget.megabytes * 2**20)))
    return over


def check_curve(method, values: dict, metric: str, steps: int, spec) -> None:
    """Refuse the `metrics` command's request - the method, then one faithfulness curve of
    `steps` (steps - 1 perturbed images and the two ends, forward only) - over the pass
    budget, naming the steps that fit. The method's own cost is checked first."""
    budget = current()
    check(method, values, spec=spec, budget=budget)
    method_passes = method.cost.passes(values, spec)
    total = method_passes + curve_passes(steps)
    if budget.passes is None or total <= budget.passes:
        return
    room = budget.passes - method_passes - 1  # the most steps that still fit
    advice = (f"lower --steps to {room} or less" if room >= 2
              else "no step count fits after this method")
    raise OverBudget(f"{metric} with {steps} steps after {method.name} needs {total} passes "
                     f"through the model; this server allows {budget.passes} passes per "
                     f"request: {advice}.")


def curve_passes(steps: int) -> int:
    """Forward images of one deletion/insertion curve (metrics.faithfulness): the steps - 1
    perturbed images, the untouched image and the pure baseline."""
    return int(steps) - 1 + 2


def most_curve_steps(most: int) -> int:
    """The most steps (up to `most`) of one faithfulness curve the pass budget allows."""
    limit = current().passes
    return most if limit is None else max(2, min(most, limit - curve_passes(0)))


def fits(method, values: dict, model=None, spec=None, budget: Budget | None = None) -> bool:
    budget = budget or current()
    return not _over(method, values, model, model if model is not None else spec, budget)


def fitting_range(method, name: str, values: dict, model, budget: Budget | None = None
                  ) -> tuple[int, int] | None:
    """The values of int option `name` (its range on this model) that fit the budget with
    the other options at `values`: (low, high), or None when none does. A cost grows or
    shrinks with one option, so the fitting values are one run at an end of its range."""
    budget = budget or current()
    limits = method.option(name).limits(model)
    if limits["high"] - limits["low"] > MAX_SCAN:
        return None
    fitting = [v for v in range(limits["low"], limits["high"] + 1)
               if fits(method, {**values, name: v}, model, budget=budget)]
    return (min(fitting), max(fitting)) if fitting else None


MAX_SCAN = 100_000  # an int option with a wider range (a seed) does not set the cost


def _tunable(method, values: dict) -> list:
    """The int options a user would turn to change the cost (not a seed, not a word)."""
    return [o for o in method.options
            if o.kind == "int" and isinstance(values.get(o.name), int)
            and not (isinstance(o.low, int) and isinstance(o.high, int)
                     and o.high - o.low > MAX_SCAN)]


def _advice(method, values, model, source, budget, over) -> str:
    """'lower batch to 16 or less' for each exceeded limit: the int option that alone brings
    that limit within the budget, preferring one that leaves the other kind of cost as it
    is (batch for memory, steps for passes); 'no setting ... fits' when none does."""
    changes = []
    for need, _ in over:
        change = _one_option_fix(method, values, model, source, budget,
                                 memory=need.startswith("about"))
        if change is None:
            return "no setting of its options fits this budget"
        if change not in changes:
            changes.append(change)
    return " and ".join(changes)


def _one_option_fix(method, values, model, source, budget, memory: bool) -> str | None:
    alone = Budget(None, budget.megabytes) if memory else Budget(budget.passes, None)
    fixes = []  # (changes the other kind of cost, words), in declaration order
    for option in _tunable(method, values):
        limits = option.limits(model) if model is not None else _spec_limits(option)
        if limits is None:
            continue
        name, now = option.name, values[option.name]
        fitting = [v for v in range(limits["low"], limits["high"] + 1)
                   if not _over(method, {**values, name: v}, model, source, alone)]
        if not fitting:
            continue
        found = min(fitting, key=lambda v: abs(v - now))
        lower = found < now
        words = (f"{'lower' if lower else 'raise'} {name} to {found} or "
                 f"{'less' if lower else 'more'}")
        other = _other_cost(method, model, source, memory)
        fixes.append((other(values) != other({**values, name: found}), words))
    fixes.sort(key=lambda fix: fix[0])  # stable: declaration order within each kind
    return fixes[0][1] if fixes else None


def _spec_limits(option) -> dict | None:
    """An option's fixed bounds (None when the model sets one: no model loaded yet)."""
    if not (isinstance(option.low, int) and isinstance(option.high, int)):
        return None
    return {"low": option.low, "high": option.high}


def _other_cost(method, model, source, memory: bool):
    """The kind of cost a fix for `memory` (or for passes) should leave as it is."""
    if memory:
        return lambda values: method.cost.passes(values, source)
    return lambda values: method.cost.batch(values, source)


def _options_text(method, values: dict) -> str:
    """The options the cost depends on, e.g. 'steps=64 and batch=64'."""
    shown = [f"{o.name}={values[o.name]}" for o in _tunable(method, values)]
    if not shown:
        return "its options"
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]


def _size(count: float) -> str:
    return f"{count / 2**30:.1f} GB" if count >= 2**30 else f"{count / 2**20:.0f} MB"
