"""Page 5 (pages/5_gradcam.py): Grad-CAM on a CNN step by step, one image for two classes, the
CAM family; and the ViT Grad-CAM taxonomy."""

from __future__ import annotations

from ... import pipeline
from ...figures.curves import alpha_bars
from ...figures.matrices import taxonomy_mosaic
from ...figures.overlays import map_row
from ...methods import METHODS, gradcam
from ...methods.base import LAST_BLOCK, Choice, Cost, Int
from ...methods.vit_gradcam import HEAD_MODES, LOCATIONS, WEIGHTS
from .answers import answer
from .view import FORWARD, GRADIENT, Many, Page, Target, view

GRADCAM = Page("5_gradcam.py")
PART = GRADCAM.picker("gc_part", label="Part")


def _passes(count: int) -> Cost:
    """`count` images forward and back (a gradient method run `count` times)."""
    return Cost("passes", forwards=lambda values, model: count,
                backwards=lambda values, model: count, graded=True)


@view(PART, "cnn", "Grad-CAM on a CNN", models=("cnn",), cost=FORWARD,
      options=(Target("gc_cnn_target", "The class the steps and the CAM family explain."),))
def cnn_part(model, image, values) -> None:
    """The target picker (the layer is the model's default conv stage)."""
    answer(model, image)
    pipeline.prepare(model, image)


SECTION = GRADCAM.picker("gc_cnn_view", label="Section", within=cnn_part)


# Grad-CAM's capture (two forwards on a CNN) and pytorch-grad-cam's own pass
@view(SECTION, "steps", "Step by step", models=("cnn",), figure=alpha_bars, cost=_passes(3))
def steps(model, image, values) -> None:
    """Grad-CAM at the default layer, and pytorch-grad-cam's, which the page compares."""
    target, layer = values["gc_cnn_target"], model.spec.cnn_target_layer
    METHODS["gradcam"](model, image, target=target, layer=layer)
    gradcam.cam_family(model, image, target, layer, ("Grad-CAM",))


@view(SECTION, "classes", "One image, two classes", models=("cnn",), figure=map_row,
      cost=_passes(4),
      options=(Target("gc_class_a", "Class A."), Target("gc_class_b", "Class B.", rank=1)))
def classes(model, image, values) -> None:
    layer = model.spec.cnn_target_layer
    for target in (values["gc_class_a"], values["gc_class_b"]):
        METHODS["gradcam"](model, image, target=target, layer=layer)
        METHODS["saliency"](model, image, target=target)


FAST_CAMS = tuple(name for name in gradcam.CAM_FAMILY if name not in gradcam.SLOW_CAMS)


@view(SECTION, "family", "The CAM family", models=("cnn",), figure=map_row,
      cost=_passes(1 + len(FAST_CAMS)),
      options=(Many("gc_family", FAST_CAMS, gradcam.CAM_FAMILY,
                    "pytorch-grad-cam's methods (the slow ones run a pass per channel)."),))
def family(model, image, values) -> None:
    target, layer = values["gc_cnn_target"], model.spec.cnn_target_layer
    METHODS["gradcam"](model, image, target=target, layer=layer)
    gradcam.cam_family(model, image, target, layer, tuple(values["gc_family"]))


@view(PART, "vit", "Grad-CAM on a ViT: the taxonomy", models=("vit",), figure=taxonomy_mosaic,
      cost=GRADIENT,
      options=(Target("gc_vit_target", "The class every variant explains."),
               Choice("gc_weights", WEIGHTS[0], WEIGHTS, "The gradient averaged over the patch "
                                                         "tokens, or read at [CLS]."),
               Choice("gc_heads", HEAD_MODES[0], HEAD_MODES, "F2, F3: heads summed before the "
                                                             "ReLU, or one ReLU per head."),
               Int("gc_block", LAST_BLOCK, 0, LAST_BLOCK, "The block of the cell in detail."),
               Choice("gc_location", LOCATIONS[0], LOCATIONS, "Where the cell reads features.")))
def vit_part(model, image, values) -> None:
    """Every variant from one forward and one backward pass; the mosaic and the cell are
    read from it."""
    answer(model, image)
    METHODS["vit-gradcam-all"](model, image, target=values["gc_vit_target"], head=model.head)
