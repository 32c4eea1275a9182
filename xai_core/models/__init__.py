"""Model registry, settings, loaders and heads (ImageNet classifier or k-NN bank)."""

from ..infra.cache import share_results_through
from .disk_cache import result_store
from .loaders import LoadedModel, availability, get_model, loaded_model
from .registry import (DEFAULT_CNN, DEFAULT_TEXT, DEFAULT_VIT, MODEL_SPECS, ModelSpec,
                       UnknownModelError, get_spec, specs_of_family)
from .settings import Availability, ModelUnavailableError, cache_dir, default_device

share_results_through(result_store)  # the shared caches keep their results in the cache folder

__all__ = [
    "Availability", "LoadedModel", "ModelUnavailableError", "availability", "cache_dir",
    "default_device", "get_model", "loaded_model", "DEFAULT_CNN", "DEFAULT_TEXT", "DEFAULT_VIT", "MODEL_SPECS",
    "ModelSpec", "UnknownModelError", "get_spec", "specs_of_family",
]
