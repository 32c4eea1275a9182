"""Page 7 (pages/7_comparison.py): every method on one image - theory and maps, faithfulness,
agreement, localisation, export - and the benchmark over a data set."""

from __future__ import annotations

from dataclasses import replace

from ...benchmark import small
from ...figures.curves import attention_gradient_scatter, curves_figure, ranking_figure
from ...figures.matrices import agreement_heatmap
from ...figures.overlays import localisation_figure, practical_matrix
from ...images import SAMPLES
from ...methods import METHODS
from ...methods.base import Choice, Cost, FromModel, Int
from ...metrics.faithfulness import BASELINE, STEPS
from ...studies import method_runs
from ..comparison import BOX_NAMES, DEFAULT_TOP_K_PERCENT, FaithSettings, default_box
from .answers import answer
from .view import GRADIENT, NO_PASS, Flag, Many, Page, Target, view

FAMILIES = ("vit", "cnn")


def _sections(model, image, values) -> None:
    """One model's column: its target picker and its ticked methods, at their defaults."""
    family = model.spec.family
    answer(model, image)
    method_runs.run_methods(model, image, values[f"cmp_methods_{family}"],
                            values[f"cmp_target_{family}"], model.head, {})


def _methods_cost(part: str):
    """Images forward (or back) of every default method of a model, at its defaults."""
    def count(values, model) -> int:
        return sum(getattr(METHODS[name].cost, part)(METHODS[name].resolve(model, {}), model)
                   for name in method_runs.default_methods(model))
    return count


DEFAULT_METHODS = FromModel("the comparison's default methods for the model's family",
                            lambda model: tuple(method_runs.default_methods(model)))
APPLICABLE = FromModel("every method for the model's family", lambda model: tuple(
    info.name for info in method_runs.applicable_methods(model)))
COMPARISON = Page(
    "7_comparison.py", compute=_sections, models=FAMILIES,
    method_options=(("every ticked method", "cmp_opt_{family}_{method}"),),
    cost=Cost("passes", forwards=_methods_cost("forwards"), backwards=_methods_cost("backwards"),
              graded=True),
    options=tuple(option for family in FAMILIES for option in (
        Target(f"cmp_target_{family}", f"The class the {family.upper()}'s maps explain."),
        Many(f"cmp_methods_{family}", DEFAULT_METHODS, APPLICABLE,
             f"The {family.upper()}'s methods (every method not off by default)."),
        Flag(f"cmp_options_{family}", False, "Draw the methods' option fields (off: every "
                                              "method at its defaults)."))))
SECTION = COMPARISON.picker("cmp_view", label="Section")

view(SECTION, "maps", "1-2 · Theory and maps", figure=practical_matrix,
     settings=(Flag("cmp_stability", False, "Also each seeded map's seed stability."),))(None)
view(SECTION, "faith", "3 · Faithfulness", figure=curves_figure,
     settings=(replace(BASELINE, name="cmp_baseline"),
               replace(STEPS, name="cmp_steps", high=100),  # one curve: one request
               Flag("cmp_perturb", FaithSettings.perturb, "Also positive/negative "
                                                          "perturbation.")))(None)


def _attention_pair(model, image, values) -> None:
    """The ViT's attention against its class score's gradient, patch by patch."""
    method_runs.attention_vs_gradient(model, image, values["cmp_target_vit"], head=model.head)


view(SECTION, "agree", "4 · Agreement", models=("vit",), figure=agreement_heatmap, cost=GRADIENT,
     options=(Int("cmp_topk", DEFAULT_TOP_K_PERCENT, 1, 50, "The top-k share in %."),))(
    _attention_pair)


def _box(index: int) -> FromModel:
    words = ("a quarter of", "a quarter of", "three quarters of", "three quarters of")[index]
    side = "width" if index % 2 == 0 else "height"
    return FromModel(f"{words} the first model's input {side}", lambda model: default_box(
        model.spec.input_size[1], model.spec.input_size[0])[index])


def _side(index: int) -> FromModel:
    side = "width" if index % 2 == 0 else "height"
    return FromModel(f"the first model's input {side}",
                     lambda model: model.spec.input_size[1 - index % 2])


BOX = tuple(Int(f"cmp_box_{name}", _box(i), 0, _side(i), f"The box's {name} in model-input "
                                                         "pixels.")
            for i, name in enumerate(BOX_NAMES))
view(SECTION, "local", "5 · Localisation", models=("vit",), figure=localisation_figure,
     options=(Flag("cmp_localise", False, "Score the maps against a box."), *BOX),
     quiet=tuple(option.name for option in BOX))(None)
view(SECTION, "export", "6 · Export", models=("vit",), cost=GRADIENT)(_attention_pair)
view(SECTION, "dataset", "7 · Over a data set", figure=ranking_figure, cost=NO_PASS,
     settings=(Choice("cmp_bench_source", "run", ("run", "load"),
                      "Run a small benchmark on the gallery, or load a results.json."),
               Many("cmp_bench_images", tuple(small.default_images()), tuple(SAMPLES),
                    "The gallery pictures of the small run."),
               Many("cmp_bench_methods", small.DEFAULT_METHODS, tuple(METHODS),
                    "The small run's methods (the random floor is always added)."),
               replace(small.STEPS, name="cmp_bench_steps")))(None)
