"""A small benchmark run started from page 7's data-set view: a few gallery images, a few
methods, deletion and insertion. It is one request to the server, so its passes are checked
against the cost budget (`xai_core.infra.budget`) as a whole before anything runs, and
refused in one sentence that names the option to lower and the limit. It runs through
`run_benchmark` in a temporary folder, so every value is what the CLI would compute."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..images import SAMPLES
from ..infra import budget
from ..methods import METHODS
from ..methods.base import Int
from ..metrics.faithfulness import BASELINE
from .plan import DEFAULT_METRICS, RANDOM_METHOD, Settings, methods_for

DEFAULT_IMAGE_COUNT = 3  # the first gallery images
DEFAULT_METHODS = ("gradcam", "saliency", "legrad", "attention")
# Fewer steps than a curve's own default, and at most 50: the run is one request.
STEPS = Int("steps", 10, 2, 50, "Perturbation steps of every curve of the run: each step is "
                                "one perturbed image per unit through the model.")
DEFAULT_STEPS, MIN_STEPS, MAX_STEPS = STEPS.default, STEPS.low, STEPS.high
METRICS = DEFAULT_METRICS  # deletion and insertion, at the curves' default baseline


def default_images() -> list[str]:
    return list(SAMPLES)[:DEFAULT_IMAGE_COUNT]


def method_choices(model_ids) -> list[str]:
    """Every method the run can score on at least one of the models (not the random floor,
    which is always added)."""
    return sorted({name for model_id in model_ids for name in methods_for(model_id, ("all",))
                   if name != RANDOM_METHOD})


def default_methods(choices) -> list[str]:
    return [name for name in DEFAULT_METHODS if name in choices]


@dataclass(frozen=True)
class SmallRun:
    models: tuple[str, ...]
    images: tuple[str, ...]
    methods: tuple[str, ...]
    steps: int = DEFAULT_STEPS
    random_weights: bool = False

    def settings(self) -> Settings:
        return Settings(models=self.models, images="sample:" + ",".join(self.images),
                        methods=self.methods, metrics=METRICS, steps=int(self.steps),
                        baseline=BASELINE.default, random_weights=self.random_weights)

    def passes(self, steps: int | None = None) -> int:
        """Image passes through the models: per image and model the prediction, then per
        method its declared cost (defaults) and one curve per metric."""
        from ..models import get_spec

        steps = self.steps if steps is None else steps
        total = 0
        for model_id in self.models:
            spec = get_spec(model_id)
            per_image = 1  # the prediction that picks the class
            for name in methods_for(model_id, self.methods):
                if name != RANDOM_METHOD:
                    method = METHODS[name]
                    per_image += method.cost.passes(method.spec_values({}), spec)
                per_image += len(METRICS) * budget.curve_passes(steps)
            total += per_image * len(self.images)
        return total


def check_budget(run: SmallRun) -> None:
    """Refuse the whole run, before any pass, when its passes exceed the server's budget."""
    limit = budget.current().passes
    needed = run.passes()
    if limit is None or needed <= limit:
        return
    fitting = [s for s in range(MIN_STEPS, run.steps) if run.passes(s) <= limit]
    advice = (f"lower Steps to {max(fitting)} or less" if fitting
              else "choose fewer gallery images or methods")
    raise budget.OverBudget(
        f"This benchmark run needs {needed} passes through the models; this server allows "
        f"{limit} passes per request: {advice}.")


def run_small(run: SmallRun, on_progress: Callable[[int, int], None] | None = None
              ) -> tuple[Settings, list[dict]]:
    """Check the budget, run the benchmark in a temporary folder, return its (settings,
    rows) as `summary.load_results` reads a results.json."""
    from .run import run_benchmark
    from .summary import load_results

    check_budget(run)
    with tempfile.TemporaryDirectory() as folder:
        run_benchmark(run.settings(), folder, progress_bar=False, on_progress=on_progress)
        return load_results(json.loads((Path(folder) / "results.json").read_text()))
