"""Grad-CAM on a CNN, step by step, and the CAM family from pytorch-grad-cam.

Our teaching implementation follows Selvaraju et al. and pytorch-grad-cam's
conventions exactly (see REFERENCE_CONVENTIONS.md), so the page can show every
intermediate and still agree with the reference library:

    alpha_k = spatial mean of d y_c / d A_k        (y_c: the logit, pre-softmax)
    L       = ReLU(sum_k alpha_k A_k)              (feature-map resolution)
    shown   = minmax(bilinear(minmax(L)))          (pytorch-grad-cam's scale_cam_image,
                                                    applied per layer, then once more
                                                    when it aggregates the layers)

The wider CAM family runs through pytorch-grad-cam itself. That library
registers hooks on the model (and Ablation-CAM swaps a layer out), so it runs on
a private copy of the model's structure that shares the weights, under the
model's lock (see run_library_cam).
"""

from __future__ import annotations

import copy
import time
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..infra.cache import cache_key
from ..capture import CnnCapture, conv_layer_names
from ..infra.errors import OptionError
from ..infra.faults import StopCheck, check_stop, retry_with_smaller_batch
from ..maps import min_max
from ..pipeline import CAPTURE_CACHE, cnn_capture, default_batch_size, head_of, prepare
from .base import Choice, ExplainRequest, ExplainResult, FromModel, Theory, method

MINMAX_EPS = 1e-7  # pytorch-grad-cam divides by (max + 1e-7) after subtracting the min


@dataclass(frozen=True)
class GradCamSteps:
    """Every intermediate of one Grad-CAM, for the page to explain."""

    layer: str
    activations: np.ndarray  # (K, h, w) A_k
    gradients: np.ndarray  # (K, h, w) d y_c / d A_k
    alpha: np.ndarray  # (K,) channel weights
    weighted_sum: np.ndarray  # (h, w) sum_k alpha_k A_k, before the ReLU
    cam: np.ndarray  # (h, w) after the ReLU: the raw Grad-CAM map
    upsampled: np.ndarray  # (H, W) in [0, 1], exactly as pytorch-grad-cam shows it
    score: float  # the target scalar y_c

    @property
    def cell_size(self) -> tuple[float, float]:
        """Pixels of model input per feature-map cell (for overlays)."""
        (height, width), (rows, cols) = self.upsampled.shape, self.cam.shape
        return height / rows, width / cols


def scale_like_pytorch_grad_cam(cam: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """(..., h, w) maps -> (..., H, W) in [0, 1]: min-max, bilinear (half-pixel centres,
    as cv2.INTER_LINEAR), min-max again, per map - what pytorch-grad-cam returns for one
    layer. Stacked maps are scaled in one call."""
    cam = np.asarray(cam, dtype=np.float32)
    lead = cam.shape[:-2]
    flat = cam.reshape(-1, *cam.shape[-2:])
    flat = min_max(flat, axis=(1, 2), eps=MINMAX_EPS, dtype=np.float32)
    up = F.interpolate(torch.from_numpy(flat)[:, None], size=tuple(size), mode="bilinear",
                       align_corners=False)[:, 0].numpy()
    up = min_max(np.maximum(up, 0), axis=(1, 2), eps=MINMAX_EPS, dtype=np.float32)
    return up.reshape(*lead, *size).astype(np.float32)


def gradcam_steps(capture: CnnCapture) -> GradCamSteps:
    """Grad-CAM from one captured layer (activations and gradients, batch item 0)."""
    if capture.gradients is None:
        raise ValueError("This capture ran without a target class, so it has no gradients.")
    acts = capture.activations[0].double()  # (K, h, w)
    grads = capture.gradients[0].double()
    if acts.dim() != 3:
        raise ValueError(f"Layer {capture.layer} does not give a spatial feature map "
                         f"(its output has shape {tuple(capture.activations.shape)}).")
    alpha = grads.mean(dim=(1, 2))  # global average pooling of the gradient
    weighted = torch.einsum("k,khw->hw", alpha, acts)
    cam = weighted.clamp(min=0)
    size = tuple(capture.input_grad.shape[-2:])
    return GradCamSteps(
        layer=capture.layer, activations=acts.float().numpy(), gradients=grads.float().numpy(),
        alpha=alpha.float().numpy(), weighted_sum=weighted.float().numpy(),
        cam=cam.float().numpy(), upsampled=scale_like_pytorch_grad_cam(cam.float().numpy(), size),
        score=float(capture.score))


def map_correlation(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson correlation of two maps of the same shape (0 when either is constant)."""
    a, b = np.asarray(a, dtype=np.float64).ravel(), np.asarray(b, dtype=np.float64).ravel()
    a, b = a - a.mean(), b - b.mean()
    norm = np.sqrt((a * a).sum() * (b * b).sum())
    return float((a * b).sum() / norm) if norm > 0 else 0.0


def layer_choices(model) -> list[str]:
    """Conv stages to pick from, in forward order, plus the spec's default stage when it is
    a container (ResNet's `layer4`) rather than a single conv or batch-norm layer."""
    names = conv_layer_names(model.module)
    default = model.spec.cnn_target_layer
    return names if default in names or default is None else names + [default]


def check_layer(model, layer: str | None) -> str:
    """A layer for the CAM family, checked by the gradcam method's own `layer` option."""
    return explain.resolve(model, {} if layer is None else {"layer": layer})["layer"]


# --- the CAM family through pytorch-grad-cam --------------------------------------------------

CAM_FAMILY = ("Grad-CAM", "Grad-CAM++", "XGrad-CAM", "Layer-CAM", "Eigen-CAM", "Score-CAM",
              "Ablation-CAM")
SLOW_CAMS = ("Score-CAM", "Ablation-CAM")  # one forward pass per channel (batched)
CAM_NOTES = {
    "Grad-CAM": "spatial mean of the gradient per channel",
    "Grad-CAM++": "second-order weighting of positive gradients",
    "XGrad-CAM": "gradient weighted by the normalised activation",
    "Layer-CAM": "element-wise ReLU(gradient) x activation, no pooling",
    "Eigen-CAM": "first principal component of the activations (no gradient, no class)",
    "Score-CAM": "softmax of the score when the input is masked by each channel",
    "Ablation-CAM": "drop in the score when each channel is zeroed",
}


def _cam_class(name: str):
    import pytorch_grad_cam as pgc

    return {"Grad-CAM": pgc.GradCAM, "Grad-CAM++": pgc.GradCAMPlusPlus,
            "XGrad-CAM": pgc.XGradCAM, "Layer-CAM": pgc.LayerCAM, "Eigen-CAM": pgc.EigenCAM,
            "Score-CAM": pgc.ScoreCAM, "Ablation-CAM": pgc.AblationCAM}[name]


class ScoreTarget:
    """A pytorch-grad-cam target that uses our head's score (the logit, or the k-NN
    class score). The library calls it on one unbatched output at a time."""

    def __init__(self, score_fn):
        self.score_fn = score_fn

    def __call__(self, output: torch.Tensor) -> torch.Tensor:
        return self.score_fn(output.unsqueeze(0) if output.dim() == 1 else output)


def run_library_cam(cam_class, module: torch.nn.Module, target_layers: list, pixels: torch.Tensor,
                    score_fn, lock=None, reshape_transform=None, batch_size: int | None = None,
                    should_stop: StopCheck | None = None) -> np.ndarray:
    """One pytorch-grad-cam call for a shared model. Returns (H, W).

    The library hooks the target layers (and Ablation-CAM swaps one out), so it runs on a
    private copy of the module's structure that shares every parameter and buffer: the
    shared model itself is never touched. Gradient methods (no `batch_size`) are quick and
    hold the model's lock for the whole call. The batched ones (Score-CAM, Ablation-CAM,
    `batch_size` set) take the lock for each batch's forward, so other sessions' calls go
    in between (the lock is first come, first served); before each batch `should_stop()`
    may end the run, and after running out of memory the call is retried once with a
    smaller batch.

    The input requires grad because our models' parameters do not: without it
    the library's backward would have nothing to differentiate."""
    lock = lock if lock is not None else nullcontext()
    if batch_size is None:
        with lock:
            private, layers = _structure_copy(module, target_layers)
            return _library_call(cam_class, private, layers, pixels, score_fn,
                                 reshape_transform, None)

    def attempt(size: int) -> np.ndarray:
        with lock:  # copied while no other call has hooks on the module
            private, layers = _structure_copy(module, target_layers)
        return _library_call(cam_class, _TurnTaking(private, lock, should_stop), layers,
                             pixels, score_fn, reshape_transform, size)

    return retry_with_smaller_batch(attempt, batch_size)


def _library_call(cam_class, model, target_layers, pixels, score_fn, reshape_transform,
                  batch_size) -> np.ndarray:
    kwargs = {"reshape_transform": reshape_transform} if reshape_transform else {}
    if cam_class.__name__ == "AblationCAM":  # its default ablation layer is one shared object
        from pytorch_grad_cam.ablation_layer import AblationLayer

        kwargs["ablation_layer"] = AblationLayer()
    cam = cam_class(model=model, target_layers=target_layers, **kwargs)
    try:
        if batch_size is not None:
            cam.batch_size = batch_size
        pixels = pixels.detach().clone().requires_grad_(True)
        return cam(input_tensor=pixels, targets=[ScoreTarget(score_fn)])[0]
    finally:
        cam.activations_and_grads.release()


def _structure_copy(module: torch.nn.Module, target_layers: list):
    """A copy of the module objects that shares (does not copy) every parameter and buffer,
    and the copies of `target_layers` in it."""
    shared = {id(tensor): tensor for tensor in (*module.parameters(), *module.buffers())}
    private = copy.deepcopy(module, memo=shared)
    names = {id(layer): name for name, layer in module.named_modules()}
    return private, [private.get_submodule(names[id(layer)]) for layer in target_layers]


class _TurnTaking(torch.nn.Module):
    """A batched method's model: each forward checks `should_stop` and then holds the shared
    model's lock for that forward only."""

    def __init__(self, inner: torch.nn.Module, lock, should_stop: StopCheck | None):
        super().__init__()
        self.inner, self.turn, self.should_stop = inner, lock, should_stop

    def forward(self, batch: torch.Tensor) -> torch.Tensor:
        check_stop(self.should_stop)
        with self.turn:
            return self.inner(batch)


@dataclass(frozen=True)
class CamTiming:
    name: str
    map: np.ndarray  # (H, W) in [0, 1], as the library returns it
    seconds: float
    note: str


def cam_family(model, image, target: int, layer: str | None = None,
               names: tuple[str, ...] = CAM_FAMILY, head=None,
               should_stop: StopCheck | None = None) -> list[CamTiming]:
    """Each chosen pytorch-grad-cam method on the same layer, class and input, timed.
    Results are cached per (model, image, class, layer, method). `should_stop()` is asked
    before every batch of Score-CAM and Ablation-CAM (see run_library_cam)."""
    layer = check_layer(model, layer)
    prepared = prepare(model, image)
    head = head_of(model, head)
    results = []
    for name in names:
        if name not in CAM_NOTES:
            raise OptionError(f"Unknown CAM method '{name}'. Choose from: {', '.join(CAM_FAMILY)}.")
        key = cache_key("cam-family", model, target, layer, name, image=prepared.sha256,
                        head=head)
        results.append(CAPTURE_CACHE.get_or_compute(
            key, lambda name=name: timed_cam(model, prepared.pixels, target, layer, name, head,
                                             should_stop)))
    return results


def timed_cam(model, pixels, target, layer, name, head,
              should_stop: StopCheck | None = None) -> CamTiming:
    module = model.module
    started = time.perf_counter()
    result = run_library_cam(_cam_class(name), module, [module.get_submodule(layer)],
                             pixels.to(model.device), head.score_fn(target), lock=model.lock,
                             batch_size=default_batch_size(model) if name in SLOW_CAMS else None,
                             should_stop=should_stop)
    return CamTiming(name, np.asarray(result, dtype=np.float32), time.perf_counter() - started,
                     CAM_NOTES[name])


# --- the method -------------------------------------------------------------------------------

CONV_LAYERS = FromModel("a conv layer", layer_choices)
CONVENTION = ("Selvaraju Grad-CAM: alpha_k = spatial mean of d(logit)/dA_k; map = ReLU(sum_k "
              "alpha_k A_k) at feature resolution (raw); 'upsampled' = pytorch-grad-cam display "
              "scaling (min-max, bilinear, min-max)")


@method("gradcam", family="cnn", needs_target=True, cost="gradient",
        title="Grad-CAM",
        summary="Grad-CAM on a CNN conv stage (--set layer=NAME; default the last stage).",
        convention=CONVENTION,
        theory=Theory(
            mechanism="Averages the class gradient over a CNN conv stage to weight its "
                      "channels; ReLU of the weighted sum (Selvaraju).",
            cost="One forward and one backward pass per class.",
            class_specificity="Yes: a different map for every class.",
            resolution="The conv stage's grid, upsampled to the image.",
            supervision="A class score.",
            best_for="Checking what a CNN relied on; telling two classes in one image apart."),
        options=(Choice("layer", FromModel("the model's last conv stage",
                                           lambda model: model.spec.cnn_target_layer),
                        CONV_LAYERS, "The conv stage whose activations and gradients are "
                                     "used."),))
def explain(request: ExplainRequest, *, layer: str) -> ExplainResult:
    """Our Grad-CAM for one class at one layer, from the shared (cached) CNN capture;
    `detail` is the GradCamSteps the page explains step by step."""
    capture = cnn_capture(request.model, request.image, request.target, layer)
    steps = gradcam_steps(capture)
    return ExplainResult(
        map=steps.cam.astype(np.float32),
        arrays={"alpha": steps.alpha, "weighted_sum": steps.weighted_sum,
                "upsampled": steps.upsampled},
        meta={"layer": layer, "score": steps.score, "feature_map": list(steps.cam.shape)},
        detail=steps)
