"""Explanation methods over captured tensors. Importing this package registers them all."""

from . import attention  # noqa: F401  (each import registers its methods)
from . import daam  # noqa: F401
from . import distance, gae, rollout, sinks  # noqa: F401
from . import gradcam, vit_gradcam  # noqa: F401
from . import integrated_gradients, smoothgrad, input_x_gradient, saliency  # noqa: F401
from . import occlusion, kernel_shap, legrad  # noqa: F401
from .base import METHODS, ExplainRequest, ExplainResult, MethodInfo, Options

__all__ = ["METHODS", "ExplainRequest", "ExplainResult", "MethodInfo", "Options"]
