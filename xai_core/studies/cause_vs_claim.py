"""Cause vs claim: does removing the patches a map ranks highest hurt the answer more than
removing as many patches at random?

For each method of page 7's list (`method_runs.default_methods`, maps from
`method_runs.run_methods`) its top-k patches are removed, for k on a grid (by default 1, 2,
4, ..., 32: those below the model's patch count), and the drop of the target's class score is
measured: drop = score of the plain forward - score with the patches removed (positive: the
patches helped the answer).
Against it: k patches drawn at random (`draws` >= 20 seeded draws, the mean with Student's t
interval, `metrics.statistics.t_interval`), and the patches a learner chose.

Two ways to remove a patch (`REMOVALS`):
    tokens  its token leaves the sequence after the position embeddings (prefix tokens kept,
            the kept patches keep their own position embeddings: `interventions.tokens_drop`)
    pixels  its pixels are replaced by a benchmark baseline (`analysis.perturbation.BASELINES`:
            the image the deletion curves move towards; `interventions.patches_mask`)
A CNN has no tokens: it takes `pixels`, its patches the attribution methods' 16-pixel cells.

A method's map is read per patch: the map itself when it is on the patch grid, else the
map resized to the input (`maps.upsample`) and averaged over each patch's pixels. Ties keep
raster order. Every image of one k goes through the model in batches (`default_batch_size`),
each a single forward under the model's lock with one hook that drops a different token
set per image, its last block's MLP run on the tokens the head reads
(`interventions.output_of`); the result is cached by content and its passes checked against
the server's budget (`infra.budget`) before any pass.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import torch

from ..metrics.statistics import CONFIDENCE, t_interval
from ..infra import budget
from ..infra.cache import BoundedCache, cache_key
from ..infra.errors import OptionError
from ..infra.faults import check_stop
from ..images import image_sha256
from .interventions import BY_NAME, DROP, ListOption, _num_cells, output_of
from ..maps import upsample
from ..methods.attribution import cell_mask, cell_size, reference_pixels
from ..methods.base import Choice, Cost, Int
from ..pipeline import default_batch_size, head_of, model_output, prepare, resolve_target

K_GRID = (1, 2, 4, 8, 16, 32)
REMOVALS = {"tokens": "tokens dropped from the sequence", "pixels": "pixels masked"}
MIN_DRAWS, MAX_DRAWS = 20, 200
# shared: a class asking the same picture's test on several replicas waits for it once
RESULTS = BoundedCache(max_entries=32, max_bytes=32 * 2**20, shared=True)
# the learner's patches, written as the interventions' patch lists ('3,7-9')
LEARNER = ListOption("learner", "patches", "The patches you chose (0-based, raster order).")
OVERLAP = ("overlap: the share of your k patches that are also among the method's top k "
           "(shared patches / k)")


def _baselines() -> tuple[str, ...]:
    from ..analysis.perturbation import BASELINES

    return BASELINES


# What masked pixels show unless asked: the intervention's own default (`mask_baseline`).
BASELINE = Choice("baseline", BY_NAME["mask_baseline"].default, _baselines(),
                  "What a masked patch's pixels show (the benchmark's baselines).")


def _images(values: dict, _spec=None) -> int:
    """Images through the model: per k and way of removal, one per method, per random draw
    and for the learner's choice at its own k."""
    per_k = values["methods"] + values["draws"]
    return values["removals"] * (len(values["ks"]) * per_k + (1 if values["learner"] else 0))


# Declared like a method (name, options, cost), so the server's budget checks it the same way.
DECLARATION = SimpleNamespace(
    name="cause-vs-claim",
    options=(Int("draws", MIN_DRAWS, MIN_DRAWS, MAX_DRAWS,
                 "Random draws of k patches per k (their mean and t interval)."),
             Int("seed", 0, 0, 2**31 - 1, "Seed of the random draws.")),
    cost=Cost("passes", forwards=_images, batch=lambda values, _spec: values["batch"]))


def num_patches(model) -> int:
    """The patches a removal can take: a ViT's patch tokens, a CNN's 16-pixel cells."""
    return _num_cells(model)


def patch_grid(model) -> tuple[int, int]:
    if model.spec.family == "vit":
        from ..capture import model_layout

        return tuple(model_layout(model).tokens.grid)
    cell, (height, width) = cell_size(model), model.spec.input_size
    return -(-height // cell), -(-width // cell)


def default_ks(model) -> tuple[int, ...]:
    """K_GRID's counts that leave at least one patch of the model's."""
    return tuple(k for k in K_GRID if k < num_patches(model))


def parse_ks(raw) -> tuple[int, ...]:
    """'1,2,4' or a sequence -> sorted distinct k >= 1 (refused in words otherwise)."""
    items = raw.split(",") if isinstance(raw, str) else list(raw)
    try:
        ks = sorted({int(str(item).strip()) for item in items if str(item).strip()})
    except ValueError:
        raise OptionError(f"k takes whole numbers such as 1,2,4,8; got '{raw}'.") from None
    if not ks or ks[0] < 1:
        raise OptionError(f"k takes whole numbers of at least 1, such as 1,2,4,8; got '{raw}'.")
    return tuple(ks)


def check_request(model, removals, ks, draws: int, seed: int, learner=(), methods=None,
                  baseline: str = BASELINE.default) -> dict:
    """The request's values, checked against the model (a loaded one, or
    `interventions.model_shell`'s weightless one) before any pass; refused in words."""
    family = model.spec.family
    removals = tuple(dict.fromkeys([removals] if isinstance(removals, str) else removals))
    unknown = [r for r in removals if r not in REMOVALS]
    if unknown or not removals:
        raise OptionError(f"Removal '{', '.join(unknown)}' is not one of: "
                          f"{', '.join(REMOVALS)}.")
    if family == "text":
        raise OptionError(f"{model.spec.display_name} reads text: cause vs claim removes image "
                          "patches.")
    if "tokens" in removals and (family != "vit" or not hasattr(model.module, "patch_drop")):
        raise OptionError(f"Dropping tokens needs a timm VisionTransformer; "
                          f"{model.spec.display_name} has no tokens to drop (mask pixels "
                          "instead).")
    if baseline not in _baselines():
        raise OptionError(f"Baseline '{baseline}' is not one of: {', '.join(_baselines())}.")
    ks, patches = parse_ks(default_ks(model) if ks is None else ks), num_patches(model)
    if ks[-1] >= patches:
        raise OptionError(f"k={ks[-1]} leaves no patch of the {patches}; take k below "
                          f"{patches}.")
    values = {option.name: option.parse(given)
              for option, given in zip(DECLARATION.options, (draws, seed))}
    learner = LEARNER.check(LEARNER.parse(learner), model)
    if len(learner) >= patches:
        raise OptionError("Your choice removes every patch; keep at least one.")
    names = _check_methods(model, methods)
    return {**values, "ks": ks, "removals": removals, "learner": learner, "methods": names,
            "baseline": baseline}


def _check_methods(model, methods) -> tuple[str, ...]:
    from .method_runs import default_methods
    from ..methods import METHODS

    if methods is None:
        return tuple(default_methods(model))
    names = tuple(dict.fromkeys(methods))
    for name in names:
        if name not in METHODS:
            raise OptionError(f"Unknown method '{name}'. Methods: {', '.join(sorted(METHODS))}.")
        METHODS[name].check_family(model.spec)
    return names


def check_budget(values: dict, model) -> None:
    """Refuse the request over the server's pass budget (one sentence: the draws to lower)."""
    loaded = hasattr(model, "device")  # not `interventions.model_shell`'s weightless one
    cost = {**values, "methods": len(values["methods"]), "removals": len(values["removals"]),
            "batch": default_batch_size(model) if loaded else 16}
    budget.check(DECLARATION, cost, model=model if loaded else None, spec=model.spec)


# --- which patches ---------------------------------------------------------------------------

def patch_scores(model, saliency: np.ndarray) -> np.ndarray:
    """(patches,) a map's value per patch in raster order: the map itself on the patch
    grid, else resized to the input and averaged over each patch's pixels."""
    grid = patch_grid(model)
    saliency = np.asarray(saliency, dtype=np.float64)
    if saliency.shape == grid:
        return saliency.ravel()
    size = tuple(model.spec.input_size)
    cells = cell_mask(size, cell_size(model))[0, 0].numpy().ravel()
    pixels = upsample(saliency, size).astype(np.float64).ravel()
    return np.bincount(cells, pixels, grid[0] * grid[1]) / np.bincount(cells, None,
                                                                       grid[0] * grid[1])


def top_patches(scores: np.ndarray, k: int) -> np.ndarray:
    """The k highest-scoring patches (ties: raster order), as sorted indices."""
    return np.sort(np.argsort(-np.asarray(scores), kind="stable")[:k])


def random_orders(patches: int, draws: int, seed: int) -> np.ndarray:
    """(draws, patches): each row a random order of the patches from numpy's generator
    seeded with `seed` (no shared state: the same seed, the same draws). The random
    choice of k patches is a row's first k, so the draws are nested across k."""
    rng = np.random.default_rng(seed)
    return np.stack([rng.permutation(patches) for _ in range(draws)])


def overlap(first, second) -> float:
    """Shared patches / k of two choices of k patches (OVERLAP)."""
    first, second = set(map(int, first)), set(map(int, second))
    return len(first & second) / max(1, len(first))


# --- removing them, a batch at a time --------------------------------------------------------

def _keep_rows(module, dropped: list[np.ndarray]) -> torch.Tensor:
    """(rows, kept) positions in the full sequence of the tokens each row keeps."""
    prefix, patches = int(module.num_prefix_tokens), int(module.patch_embed.num_patches)
    rows = []
    for patches_out in dropped:
        kept = np.setdiff1d(np.arange(patches), patches_out)
        rows.append(np.concatenate([np.arange(prefix), prefix + kept]))
    return torch.as_tensor(np.stack(rows), dtype=torch.long)


def _drop_hook(keep: torch.Tensor):
    """Forward hook on timm's `patch_drop` (its output: the sequence after the position
    embeddings): row b keeps the tokens keep[b]."""
    def edit(_module, _inputs, tokens: torch.Tensor) -> torch.Tensor:
        index = keep.to(tokens.device)[:, :, None].expand(-1, -1, tokens.shape[-1])
        return tokens.gather(1, index)
    return edit


def _outputs(model, pixels: torch.Tensor, removal: str, chosen: list[np.ndarray],
             reference: torch.Tensor | None, should_stop) -> torch.Tensor:
    """The model's outputs with each row's patches (all of one count) removed, in batches."""
    size = default_batch_size(model)
    cells = cell_mask(tuple(pixels.shape[-2:]), cell_size(model))
    outputs = []
    for first in range(0, len(chosen), size):
        check_stop(should_stop)
        part = chosen[first:first + size]
        with ExitStack() as stack:
            if removal == "tokens":
                batch = pixels.expand(len(part), -1, -1, -1)
                hook = _drop_hook(_keep_rows(model.module, part))
            else:
                masks = torch.cat([torch.isin(cells, torch.as_tensor(p)) for p in part])
                batch, hook = torch.where(masks, reference, pixels), None
            stack.enter_context(model.lock)
            if hook is not None:
                stack.callback(model.module.patch_drop.register_forward_hook(hook).remove)
            stack.enter_context(torch.inference_mode())
            outputs.append(output_of(model.module, batch.to(model.device)).float().cpu())
    return torch.cat(outputs)


# --- the result ------------------------------------------------------------------------------

@dataclass
class Removal:
    """One way of removing patches: drops per k of each method, of the random draws and of
    the learner's choice."""

    removal: str  # a key of REMOVALS
    methods: dict[str, np.ndarray]  # method -> (len(ks),) drops
    random: np.ndarray  # (draws, len(ks)) drops
    learner: float | None  # the drop of the learner's patches (at k = len(learner))

    def random_mean(self) -> np.ndarray:
        return self.random.mean(axis=0)

    def random_interval(self) -> np.ndarray:
        """(len(ks), 2): Student's t interval of the mean random drop at each k."""
        return np.array([t_interval(column) for column in self.random.T])


@dataclass
class ClaimTest:
    ks: tuple[int, ...]
    target: int
    label: str
    score_kind: str
    score: float  # the target's score in the plain forward
    baseline: str  # what masked pixels show
    draws: int
    seed: int
    learner: tuple[int, ...]
    removals: dict[str, Removal]
    chosen: dict[str, np.ndarray]  # method -> its patch ranking (best first)
    failed: dict[str, str] = field(default_factory=dict)  # method -> why it has no map
    images: int = 0  # images through the model (one per distinct patch set)
    seconds: float = 0.0

    def agreement(self) -> dict[str, float]:
        """Each method's overlap with the learner's patches at their k (OVERLAP)."""
        k = len(self.learner)
        return {name: overlap(order[:k], self.learner) for name, order in self.chosen.items()}

    def closest_method(self) -> tuple[str, float] | None:
        """The method that agreed most with the learner (first in the list on a tie)."""
        shares = self.agreement()
        if not self.learner or not shares:
            return None
        name = max(shares, key=lambda n: (shares[n], -list(shares).index(n)))
        return name, shares[name]

    def as_dict(self) -> dict:
        removals = {}
        for name, found in self.removals.items():
            interval = found.random_interval()
            removals[name] = {
                "words": REMOVALS[name],
                "methods": {m: drops.tolist() for m, drops in found.methods.items()},
                "random": {"mean": found.random_mean().tolist(),
                           "low": interval[:, 0].tolist(), "high": interval[:, 1].tolist(),
                           "interval": f"Student's t, {CONFIDENCE:.0%}, {self.draws} draws"},
                "learner": found.learner}
        closest = self.closest_method()
        return {"k": list(self.ks), "target": self.target, "label": self.label,
                "score_kind": self.score_kind, "score": self.score, "drop_means": DROP, "baseline": self.baseline,
                "draws": self.draws, "seed": self.seed, "learner": list(self.learner),
                "removals": removals, "failed": self.failed, "images": self.images,
                "seconds": self.seconds,
                "agreement": self.agreement() if self.learner else {},
                "closest": None if closest is None else {"method": closest[0],
                                                         "overlap": closest[1]},
                "overlap": OVERLAP}


def cause_vs_claim(model, image, target=None, head=None, removals=tuple(REMOVALS), ks=None,
                   draws: int = MIN_DRAWS, seed: int = 0, learner=(), methods=None,
                   baseline: str = BASELINE.default, should_stop=None,
                   progress=None) -> ClaimTest:
    """The drops of every method's top-k, of random k and of the learner's patches (treat the
    result as read-only). Bad values and requests over the budget are refused in words
    before any pass. Each way of removal is measured and cached on its own, by content and
    without the learner's patches (`_part`), so the view of one removal, predict-then-reveal
    (both removals and a learner) and the warm-up share one computation; the learner's
    patches then cost one image per removal. `progress(fraction, what)` is called after each
    removal and k while it computes (not on a cached answer)."""
    values = check_request(model, removals, ks, draws, seed, learner, methods, baseline)
    check_budget(values, model)
    head = head_of(model, head)
    target = resolve_target(model, target, image, head)
    started, parts = time.perf_counter(), {}
    for index, removal in enumerate(values["removals"]):
        report = None if progress is None else _part_progress(progress, index,
                                                              len(values["removals"]))
        parts[removal] = _part(model, image, target, head, values, removal, should_stop, report)
    first = next(iter(parts.values()))
    learner = np.array(values["learner"], dtype=np.int64)
    removed = {removal: Removal(removal, part.methods, part.random,
                                _learner_drop(model, image, target, head, values, removal,
                                              part.score, should_stop) if len(learner)
                                else None)
               for removal, part in parts.items()}
    return ClaimTest(values["ks"], target, head.class_names[target], first.score_kind,
                     first.score, values["baseline"], values["draws"], values["seed"],
                     values["learner"], removed, first.rankings, first.failed,
                     sum(part.images for part in parts.values()) + (len(parts) if len(learner)
                                                                     else 0),
                     time.perf_counter() - started)


def _part_progress(progress, index: int, count: int):
    """A removal's own progress (0-1) as the request's: removal `index` of `count`."""
    return lambda fraction, what: progress((index + fraction) / count, what)


@dataclass
class _Part:
    """One way of removal measured for every method and random draw (no learner)."""

    score: float
    score_kind: str
    methods: dict[str, np.ndarray]  # method -> (len(ks),) drops
    random: np.ndarray  # (draws, len(ks)) drops
    rankings: dict[str, np.ndarray]
    failed: dict[str, str]
    images: int


def _part_key(model, image, target: int, head, values: dict, removal: str, *more) -> tuple:
    shared = {k: v for k, v in values.items() if k not in ("learner", "removals")}
    return cache_key("cause-vs-claim", model, target, removal, *sorted(
        (k, tuple(v) if isinstance(v, tuple) else v) for k, v in shared.items()), *more,
        image=image_sha256(image), head=head)


def _part(model, image, target: int, head, values: dict, removal: str, should_stop,
          progress) -> _Part:
    key = _part_key(model, image, target, head, values, removal)
    return RESULTS.get_or_compute(key, lambda: _measure(model, image, target, head, values,
                                                        removal, should_stop, progress))


def _learner_drop(model, image, target: int, head, values: dict, removal: str, score: float,
                  should_stop) -> float:
    """The drop of the learner's own patches: one image, cached with its part's key."""
    learner = tuple(values["learner"])
    key = _part_key(model, image, target, head, values, removal, ("learner", learner))

    def compute() -> float:
        from ..pipeline import class_scorer

        pixels = prepare(model, image).pixels
        reference = (reference_pixels(model, pixels, values["baseline"])
                     if removal == "pixels" else None)
        out = _outputs(model, pixels, removal, [np.array(learner, dtype=np.int64)], reference,
                       should_stop)
        return float(score - class_scorer(model, target, head)(out)[0])

    return RESULTS.get_or_compute(key, compute)


def method_rankings(model, image, target: int, head, names) -> tuple[dict, dict]:
    """({method: its patches, best first}, {method: why it has no map})."""
    from .method_runs import run_methods

    rankings, failed = {}, {}
    for run in run_methods(model, image, list(names), target, head):
        if run.ok:
            scores = patch_scores(model, run.map)
            rankings[run.name] = np.argsort(-scores, kind="stable")
        else:
            failed[run.name] = run.error
    return rankings, failed


def _measure(model, image, target: int, head, values: dict, removal: str, should_stop,
             progress=None) -> _Part:
    from ..pipeline import class_scorer, score_kind

    scorer = class_scorer(model, target, head)
    score = float(scorer(model_output(model, image))[0])
    rankings, failed = method_rankings(model, image, target, head, values["methods"])
    orders = random_orders(num_patches(model), values["draws"], values["seed"])
    pixels = prepare(model, image).pixels
    reference = (reference_pixels(model, pixels, values["baseline"])
                 if removal == "pixels" else None)
    rows = [(name, k, np.sort(order[:k])) for k in values["ks"]
            for name, order in [*rankings.items(), *((d, o) for d, o in enumerate(orders))]]
    drops, images = np.empty(len(rows)), 0
    for step, k in enumerate(values["ks"]):  # one sequence length per batch
        # choosers that picked the same patches share one image (methods often agree)
        sets = {}
        for i, row in enumerate(rows):
            if row[1] == k:
                sets.setdefault(tuple(row[2].tolist()), []).append(i)
        out = _outputs(model, pixels, removal, [np.array(p) for p in sets], reference,
                       should_stop)
        for same, drop in zip(sets.values(), score - scorer(out)):
            drops[same] = drop
        images += len(sets)
        if progress is not None:
            progress((step + 1) / len(values["ks"]),
                     f"{REMOVALS[removal]}: k = {k} done ({images} images so far)")
    by_k = {(name, k): drop for (name, k, _), drop in zip(rows, drops)}
    return _Part(score, score_kind(model, head),
                 {name: np.array([by_k[name, k] for k in values["ks"]]) for name in rankings},
                 np.array([[by_k[d, k] for k in values["ks"]] for d in range(len(orders))]),
                 rankings, failed, images)
