"""ROAD (Rong et al. 2022), as pytorch-grad-cam's `ROADCombined` computes it: remove the most
(MoRF) and the least (LeRF) relevant pixels by noisy linear imputation at the percentiles 10,
20, ..., 90, and report (LeRF - MoRF) / 2 of the class score's change; higher is better. The
class score is the one deletion and insertion use (`pipeline.class_scorer`)."""

from __future__ import annotations

import numpy as np
import torch

from ..infra.rng import seeded
from ..maps import min_max, upsample
from ..pipeline import class_scorer, prepare
from .contract import HIGHER, MetricRequest, metric


class _ProbabilityTarget:
    """pytorch-grad-cam calls targets on one unbatched output; ours is the same class score
    as deletion/insertion (softmax probability, or the k-NN class score)."""

    def __init__(self, model, target: int):
        self.scorer = class_scorer(model, target)

    def __call__(self, output: torch.Tensor) -> torch.Tensor:
        return torch.tensor(self.scorer(output.float().cpu()[None])[0])


def road_score(model, image, saliency: np.ndarray, target: int, seed: int) -> float:
    """ROADCombined over the library's percentiles 10..90: (LeRF - MoRF) / 2 of the class
    score change; higher is better. Its imputation draws noise from torch's global
    generator, so the call runs under a forked, seeded generator."""
    from pytorch_grad_cam.metrics.road import ROADCombined

    pixels = prepare(model, image).pixels.to(model.device)
    cam = min_max(upsample(saliency, tuple(pixels.shape[-2:])))[None].astype(np.float32)
    with seeded(model.device, seed), model.lock:  # the generator's lock first, as everywhere
        return float(ROADCombined()(pixels, cam, [_ProbabilityTarget(model, target)],
                                    model.module)[0])


@metric("road", better=HIGHER,
        summary="pytorch-grad-cam's ROADCombined: (LeRF - MoRF) / 2 score change under noisy "
                "linear imputation, averaged over the 10-90 % percentiles")
def road(request: MetricRequest) -> float:
    return road_score(request.model, request.image, request.saliency, request.target,
                      request.seed)
