"""Page 9's predict-then-reveal on a warmed gallery (issue 40): after the warm-up's page 9
computations for the default picture (`lessons.warmup.warm_step` of page 9, what `make run`
warms in the background before a class arrives), a learner's Reveal (both ways of removal at
k = 4, the bars and the picture with each method's top 4) and the star on cause vs claim
after it (tokens dropped, the curves figure) reuse everything but the learner's own patches.
Targets: Reveal <= 3 s and the star <= 3 s on the default picture on this CPU.

Rows: the warm-up itself (once), then each step as the median of 3 learners who picked
different patches (so nothing of theirs is cached), wall seconds.
"""

from __future__ import annotations

import statistics
import time

from xai_core.figures import intervention_figures as figs
from xai_core.lessons import interventions_lab as lab
from xai_core.lessons import warmup
from xai_core.studies import cause_vs_claim
from xai_core.images import load_sample
from xai_core.infra.cache import memory_only
from xai_core.models import DEFAULT_CNN, DEFAULT_VIT, get_model
from xai_core.pipeline import prepare, resolve_target

K = 4
LEARNERS = ((100, 101, 117, 118), (20, 37, 54, 71), (200, 201, 202, 203))


def _reveal(model, image, target, picked) -> None:
    """What page 9's Reveal computes and draws."""
    found = cause_vs_claim.cause_vs_claim(model, image, target=target, head=model.head,
                                          ks=lab.reveal_ks(model, K),
                                          removals=("tokens", "pixels"), learner=picked)
    rows = lab.reveal_rows(found)
    for removal in found.removals:
        lab.reveal_words(found.removals[removal], K, found.ks.index(K))
        figs.reveal_figure(rows, removal, found.score_kind)
    grid = cause_vs_claim.patch_grid(model)
    side = model.spec.input_size[0] / grid[0], model.spec.input_size[1] / grid[1]
    figs.choices_figure(prepare(model, image).model_image, grid, side, picked,
                        {name: order[:K].tolist() for name, order in found.chosen.items()})


def _star(model, image, target, picked) -> None:
    """What cause vs claim (tokens dropped) computes and draws after that Reveal."""
    found = cause_vs_claim.cause_vs_claim(model, image, target=target, head=model.head,
                                          removals="tokens", learner=picked)
    shown = lab.shown_by_default(list(found.removals["tokens"].methods))
    figs.claims_figure(found, "tokens", {name: name for name in shown})


def _median(step, model, image, target, learners) -> float:
    seconds = []
    for picked in learners:
        started = time.perf_counter()
        step(model, image, target, picked)
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds)


def run(smoke: bool = False) -> list[dict]:
    learners = LEARNERS[:1] if smoke else LEARNERS  # smoke: every step once, one learner
    with memory_only():  # warmed here, not read from an earlier run's store
        model, image = get_model(DEFAULT_VIT), load_sample("chelsea")
        started = time.perf_counter()
        failure = warmup.warm_step(model, get_model(DEFAULT_CNN), image, "9_interventions.py")
        if failure:
            raise RuntimeError(f"page 9's warm-up failed: {failure}")
        warmed = time.perf_counter() - started
        target = resolve_target(model, None, image, model.head)
        reveal = _median(_reveal, model, image, target, learners)
        star = _median(_star, model, image, target, learners)
    return [
        {"name": "page 9 warm-up of the default picture (once, before class)", "value": warmed,
         "unit": "s"},
        {"name": f"Reveal, k = {K}, both removals, after the warm-up", "value": reveal,
         "unit": "s", "note": "target <= 3 s"},
        {"name": "cause vs claim with the learner's star, after Reveal", "value": star,
         "unit": "s", "note": "target <= 3 s"},
    ]
