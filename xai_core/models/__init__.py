"""Model registry and loaders."""

from .loaders import (Availability, LoadedModel, ModelUnavailableError, availability, cache_dir,
                      default_device, get_model)
from .registry import (DEFAULT_CNN, DEFAULT_TEXT, DEFAULT_VIT, MODEL_SPECS, ModelSpec,
                       UnknownModelError, get_spec, specs_of_family)

__all__ = [
    "Availability", "LoadedModel", "ModelUnavailableError", "availability", "cache_dir",
    "default_device", "get_model", "DEFAULT_CNN", "DEFAULT_TEXT", "DEFAULT_VIT", "MODEL_SPECS",
    "ModelSpec", "UnknownModelError", "get_spec", "specs_of_family",
]
