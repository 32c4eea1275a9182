"""Every registered method on one image: maps, measured cost, and the export bundle.

The comparison page, the `metrics` CLI and the benchmark read the method
registry (`xai_core.methods.METHODS`), so a method appears here as soon as its
module declares it, with its theory rows and whether it is ticked by default.

Cost is measured, not quoted: while a method runs, hooks on the model count the
forward passes (and images) and the backward passes that call actually ran in
this thread, and a clock measures its wall time. A method that finds the
capture it needs already cached (another method, or another page, paid for it)
runs 0 new passes - the "one capture serves many methods" design made visible.
Results are cached by content, so the numbers are those of the first run.
"""

from __future__ import annotations

import io
import json
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from ..infra.budget import OverBudget
from ..infra.cache import cache_key
from ..capture import CaptureError, shared_forwards, shared_outputs
from ..infra.provenance import run_meta
from ..infra.errors import OptionError
from ..infra.faults import Cancelled, StopCheck
from ..methods import METHODS, Method
from ..methods.base import RESULT_CACHE
from ..metrics.agreement import patch_gradient_importance, spearman
from ..metrics.localisation import localise
from ..pipeline import TargetError, prepare, vit_capture


@dataclass
class MethodRun:
    name: str
    family: str
    summary: str
    target: int | None
    map: np.ndarray | None
    meta: dict = field(default_factory=dict)
    options: dict = field(default_factory=dict)  # every option's value (resolved)
    given: dict = field(default_factory=dict)  # the options asked for (the rest: defaults)
    wall_ms: float = 0.0
    forwards: int = 0  # forward calls through the model during this run
    images: int = 0  # images in those forward calls
    backwards: int = 0  # backward passes through the model during this run
    partial_backwards: int = 0  # short backward passes inside the model (LeGrad: block score
    # to its own attention), counted by the method's hooks on those tensors
    error: str | None = None
    over_budget: bool = False  # refused by the server's budget (xai_core.infra.budget), no pass run

    @property
    def ok(self) -> bool:
        return self.map is not None

    @property
    def label(self) -> str:
        """The method's name, with the options it was asked for."""
        return f"{self.name} ({self.options_text()})" if self.given else self.name

    def options_text(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.given.items()) or "defaults"

    def cost_text(self) -> str:
        if not self.ok:
            return "n/a"
        passes = f"{self.forwards} fwd + {self.backwards} bwd"
        if self.partial_backwards:
            passes += f" + {self.partial_backwards} partial bwd"
        if self.images > self.forwards:
            passes += f" ({self.images} images)"
        return f"{passes}, {self.wall_ms:.0f} ms"


class PassCounter:
    """Counts forward calls (and their images) and backward passes through `model.module`
    made by the current thread while the context is open. Hooks are added and removed
    under the model's lock, so another session's forward never sees a half-changed
    hook table; other threads' passes are not counted. A backward through a forward pass
    kept from before (`capture.shared_forwards`) counts too: its output is hooked on entry."""

    def __init__(self, model):
        self.model, self.forwards, self.images, self.backwards = model, 0, 0, 0
        self._thread = threading.get_ident()
        self._handle = None
        self._output_hooks: list = []  # on outputs: removed on exit, so later passes
        # through a kept graph count for the method that runs them, not for this one

    def _hook_output(self, tensor) -> None:
        self._output_hooks.append(tensor.register_hook(self._on_backward))

    def _on_forward(self, _module, args, output):
        if threading.get_ident() != self._thread:
            return
        self.forwards += 1
        first = args[0] if args else None
        self.images += int(first.shape[0]) if hasattr(first, "shape") else 1
        tensor = output if hasattr(output, "register_hook") else None
        if tensor is not None and tensor.requires_grad:
            self._hook_output(tensor)

    def _on_backward(self, grad):
        self.backwards += 1  # may run on an autograd worker thread: registered by ours only

    def __enter__(self) -> "PassCounter":
        with self.model.lock:
            self._handle = self.model.module.register_forward_hook(self._on_forward)
        for output in shared_outputs():
            self._hook_output(output)
        return self

    def __exit__(self, *exc) -> None:
        with self.model.lock:
            self._handle.remove()
        for hook in self._output_hooks:
            hook.remove()


def applicable_methods(model) -> list[Method]:
    return [info for info in METHODS.values() if info.fits(model.spec.family)]


def off_by_default() -> dict[str, str]:
    """Registered methods the page lists but does not tick, and why."""
    return {info.name: info.off_by_default for info in METHODS.values() if info.off_by_default}


def default_methods(model) -> list[str]:
    return [info.name for info in applicable_methods(model) if not info.off_by_default]


def _valid_map(values) -> np.ndarray | None:
    values = np.asarray(values, dtype=np.float32)
    if values.ndim != 2 or values.size < 2 or not np.isfinite(values).all():
        return None
    return values


def run_method(model, image, name: str, target: int | None, head=None,
               options: dict | None = None, should_stop: StopCheck | None = None) -> MethodRun:
    """Run one registered method with its default (or given) options, measured and cached.
    User-facing failures (a bad option, a method that cannot handle this model) come back
    as `MethodRun.error` instead of raising, so one method cannot break the page; a stop
    (`should_stop`, asked between batches by the methods of many passes) is not a failure
    and propagates."""
    info = METHODS[name]
    target = target if info.needs_target else None
    prepared = prepare(model, image)
    key = cache_key("compare-run", model, name, target, json.dumps(options or {}, sort_keys=True),
                    image=prepared.sha256, head=head or model.head)

    def compute() -> MethodRun:
        run = MethodRun(name, info.family, info.summary, target, None, given=dict(options or {}))
        started = time.perf_counter()
        try:
            run.options = info.resolve(model, options)  # refused here, before any pass
            with PassCounter(model) as counter:
                result = info(model, image, target=target, head=head,
                              should_stop=should_stop, **run.options)
        except Cancelled:
            raise
        except (CaptureError, OptionError, TargetError, ValueError) as error:
            run.error, run.over_budget = str(error), isinstance(error, OverBudget)
            raise _Failed(run) from None
        except Exception as error:  # a bug in one method must not take the whole page down
            run.error = f"the method failed ({type(error).__name__}: {error})"
            raise _Failed(run) from None
        run.wall_ms = (time.perf_counter() - started) * 1000
        run.forwards, run.images, run.backwards = (counter.forwards, counter.images,
                                                   counter.backwards)
        run.partial_backwards = int(result.meta.get("partial_backward_passes", 0))
        run.map = _valid_map(result.map)
        run.meta = _jsonable(result.meta)
        if run.map is None:
            run.error = f"'{name}' returned no 2-D map (shape {np.shape(result.map)})."
        return run

    try:  # with the methods' own results: small entries must not push captures out
        return RESULT_CACHE.get_or_compute(key, compute)
    except _Failed as failed:  # failures are reported, never cached
        return failed.run


class _Failed(Exception):
    def __init__(self, run: MethodRun):
        super().__init__(run.error)
        self.run = run


def run_methods(model, image, names: list[str], target: int | None, head=None,
                options: dict[str, dict] | None = None,
                should_stop: StopCheck | None = None) -> list[MethodRun]:
    """`run_method` for each name; `options` maps a method's name to its non-default options.
    Results come in the order of `names`. The methods with a target run first, and their
    captures share one forward pass (`capture.shared_forwards`, a backward each); the
    forward-only methods then find that pass already made (`pipeline.vit_capture`)."""
    options = options or {}
    known = [name for name in names if name in METHODS]
    order = sorted(known, key=lambda name: not METHODS[name].needs_target)  # stable
    with shared_forwards():  # GAE, DAAM and LeGrad: one forward, a backward each
        runs = {name: run_method(model, image, name, target, head, options.get(name),
                                 should_stop) for name in order}
    return [runs[name] for name in known]


@dataclass(frozen=True)
class AttentionVsGradient:
    attention: np.ndarray  # (rows, cols) the attention method's map: last block, [CLS] row
    gradient: np.ndarray  # (rows, cols) patch-averaged size of the input gradient
    rho: float  # Spearman rank correlation over patches


def attention_vs_gradient(model, image, target: int, head=None) -> AttentionVsGradient | None:
    """Is a patch [CLS] attends to also one the class score is sensitive to? The attention
    method at its defaults against the size of the target's input gradient, patch by patch
    (None when the two grids differ)."""
    attention = METHODS["attention"](model, image).map
    capture = vit_capture(model, image, target, head=head)
    gradient = patch_gradient_importance(capture.input_grad, capture.layout.grid)
    if attention.shape != gradient.shape:
        return None
    return AttentionVsGradient(attention, gradient, spearman(attention, gradient))


def _jsonable(value):
    """Meta dicts as plain JSON types (numpy scalars/arrays become numbers/lists)."""
    return json.loads(json.dumps(value, default=_json_default))


def _json_default(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (set, tuple)):
        return list(value)
    return str(value)


# --- export -----------------------------------------------------------------------------------

@dataclass
class ModelSection:
    """What the comparison holds for one model."""

    model: object
    target: int | None
    target_label: str | None
    score_kind: str | None
    runs: list[MethodRun]
    curves: dict = field(default_factory=dict)  # (method, metric) -> faithfulness.Curve
    localisation: dict = field(default_factory=dict)  # method -> localisation.Localisation
    head: object = None  # the head the runs scored (the session's k-NN bank or classifier)


def manifest(image, sections: list[ModelSection], settings: dict, agreement: dict | None) -> dict:
    """Everything needed to reproduce the comparison: models, options, versions, image hash."""
    import plotly
    import scipy

    models = []
    for section in sections:
        meta = run_meta(section.model, image, {
            "target": section.target, "target_label": section.target_label,
            "score": section.score_kind,
            "methods": [{"name": r.name, "options": r.options, "target": r.target,
                         "error": r.error, "map_shape": None if r.map is None else list(r.map.shape),
                         "cost": {"wall_ms": round(r.wall_ms, 2), "forward_calls": r.forwards,
                                  "images": r.images, "backward_passes": r.backwards},
                         "meta": r.meta} for r in section.runs],
            "faithfulness": {f"{method}/{metric}": {k: v for k, v in curve.as_dict().items()
                                                    if k not in ("fractions", "scores")}
                             for (method, metric), curve in section.curves.items()},
            "localisation": {method: _jsonable(vars(loc))
                             for method, loc in section.localisation.items()}})
        meta["versions"].update(numpy=np.__version__, scipy=scipy.__version__,
                                plotly=plotly.__version__)
        models.append(meta)
    return {"app": "ViT Lens comparison matrix", "settings": _jsonable(settings),
            "models": models, "agreement": _jsonable(agreement) if agreement else None}


def npz_bytes(sections: list[ModelSection], manifest_dict: dict) -> bytes:
    """Raw maps and recorded curves, keyed `<model>__<method>__...`, plus the manifest."""
    arrays = {}
    for section in sections:
        model_id = section.model.spec.id
        for run in section.runs:
            if run.map is not None:
                arrays[f"{model_id}__{run.name}__map"] = run.map
        for (method, metric), curve in section.curves.items():
            arrays[f"{model_id}__{method}__{metric}__fractions"] = curve.fractions
            arrays[f"{model_id}__{method}__{metric}__scores"] = curve.scores
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays, manifest=np.array(json.dumps(manifest_dict)))
    return buffer.getvalue()


def manifest_digest(manifest_dict: dict) -> str:
    """A short content hash of a manifest (to tell whether a rendered PNG is still current)."""
    import hashlib

    text = json.dumps(manifest_dict, sort_keys=True, default=_json_default)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def scale_box(box, from_size: tuple[int, int], to_size: tuple[int, int]) -> list[int]:
    """A pixel box (x0, y0, x1, y1) typed on a (H, W) input, rescaled to another (H, W)."""
    sx, sy = to_size[1] / from_size[1], to_size[0] / from_size[0]
    return [round(box[0] * sx), round(box[1] * sy), round(box[2] * sx), round(box[3] * sy)]


def localise_section(section: ModelSection, box, box_size: tuple[int, int]) -> dict:
    """Localisation of every map of a section against a box typed on a `box_size` input."""
    size = tuple(section.model.spec.input_size)
    scaled = scale_box(box, box_size, size)
    section.localisation = {run.name: localise(run.map, size, scaled)
                            for run in section.runs if run.ok}
    return {"box": scaled, "results": section.localisation}
