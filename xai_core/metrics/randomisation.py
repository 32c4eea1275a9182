"""Model randomisation (Adebayo et al. 2018, the sanity check): the map on the trained model
against the same method's map on a private copy whose weights are replaced by noise. A map
that barely changes does not depend on what the model learned."""

from __future__ import annotations

import copy
import dataclasses
import threading

import torch

from ..pipeline import head_of
from .agreement import spearman
from .contract import LOWER, MetricRequest, metric

_TWINS: dict = {}
_TWINS_LOCK = threading.Lock()


def randomised_twin(model, seed: int):
    """A private copy of `model` whose every weight tensor is replaced by Gaussian noise
    with that tensor's own mean and standard deviation (constant tensors such as
    LayerNorm scales at 1 are kept). The shared model is never touched. Its spec id is
    new, so nothing cached for the trained model is reused. One per model per process."""
    from ..models import LoadedModel

    key = (model.spec.id, model.random_weights, str(model.device), seed)
    with _TWINS_LOCK:
        if key in _TWINS:
            return _TWINS[key]
        with model.lock:
            module = copy.deepcopy(model.module)
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for parameter in module.parameters():
                if parameter.numel() > 1 and float(parameter.std()) > 0:
                    noise = torch.randn(parameter.shape, generator=generator)
                    parameter.copy_(noise.to(parameter) * parameter.std() + parameter.mean())
        spec = dataclasses.replace(model.spec, id=f"{model.spec.id}~randomised-{seed}",
                                   display_name=f"{model.spec.display_name} (randomised)")
        twin = LoadedModel(spec=spec, module=module, device=model.device, random_weights=True,
                           weights_source="trained weights replaced by noise (sanity check)",
                           class_names=model.class_names, head=head_of(model),
                           extras={"randomised_from": model.spec.id})
        _TWINS[key] = twin
        return twin


@metric("randomisation", better=LOWER, needs="twin",
        summary="Spearman correlation between the map on the trained model and on a copy "
                "whose weights are replaced by noise (Adebayo et al.); lower means the map "
                "depends on what the model learned")
def randomisation(request: MetricRequest) -> float:
    other = request.remap(randomised_twin(request.model, request.seed))
    return spearman(request.saliency, other)
