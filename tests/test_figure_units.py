"""Every colour bar and axis says what it measures: each figure builder of xai_core.figures
is called here (on a tiny random-weight ViT's capture where it draws one, on small made-up
arrays elsewhere) and its output walked by one rule, `unlabelled_parts`:

- a colour bar (a heatmap's, a colour axis's, a marker scale's) that is shown has a title;
- an axis that prints tick labels has a title, unless it is categorical (its ticks are words:
  `ticktext`, type "category", or a trace that places words along it) or an image axis
  (it carries a picture: a hidden axis prints nothing, so it passes as hidden).

A new builder fails `test_every_builder_is_walked` until it gets a recipe here."""

from __future__ import annotations

import importlib
import inspect

import numpy as np
import plotly.graph_objects as go
import pytest
from PIL import Image
from tiny_models import tiny_vit

from xai_core import pipeline
from xai_core.studies.cause_vs_claim import ClaimTest, Removal
from xai_core.pipeline import Prediction
from xai_core.analysis.token_marks import high_norm_tokens
from xai_core.methods.vit_gradcam import cached_taxonomy

MODULES = ("curves", "matrices", "overlays", "text", "tokenization", "intervention_figures")
RNG = np.random.default_rng(5)


def builders() -> dict[str, object]:
    """Every public function of the figure modules that returns a figure."""
    found = {}
    for name in MODULES:
        module = importlib.import_module(f"xai_core.figures.{name}")
        for attr, function in inspect.getmembers(module, inspect.isfunction):
            if (not attr.startswith("_") and function.__module__ == module.__name__
                    and "Figure" in str(inspect.signature(function).return_annotation)):
                found[attr] = function
    return found


def _title(thing) -> str:
    title = getattr(thing, "title", None)
    return (getattr(title, "text", None) or "").strip() if title is not None else ""


def _shows_scale(trace) -> bool:
    if trace.type in ("heatmap", "contour"):
        return trace.showscale is not False and trace.coloraxis is None
    marker = getattr(trace, "marker", None)
    return bool(marker is not None and getattr(marker, "showscale", None))


def _has_words(values) -> bool:
    if values is None:
        return False
    flat = np.asarray(values, dtype=object).ravel()
    return any(isinstance(v, str) for v in flat)


def _axis_names(figure: go.Figure) -> set[str]:
    """xaxis, xaxis2, yaxis, ... that some trace is drawn on."""
    names = set()
    for trace in figure.data:
        for letter in "xy":
            ref = getattr(trace, f"{letter}axis", None) or letter
            names.add(f"{letter}axis{ref[1:]}")
    return names


def unlabelled_parts(figure: go.Figure) -> list[str]:
    """The colour bars and axes that break the rule in the module docstring."""
    problems = []
    for i, trace in enumerate(figure.data):
        if _shows_scale(trace):
            bar = trace.colorbar if trace.type in ("heatmap", "contour") else trace.marker.colorbar
            if not _title(bar):
                problems.append(f"colour bar of trace {i} ({trace.type})")
    shared = {getattr(t, "coloraxis", None) or getattr(getattr(t, "marker", None), "coloraxis",
                                                        None) for t in figure.data} - {None}
    for name in sorted(shared):  # a colour axis some traces share: one bar for them all
        axis = figure.layout[name]
        if axis.showscale is not False and not _title(axis.colorbar):
            problems.append(f"colour bar of {name}")
    for name in sorted(_axis_names(figure)):
        axis = figure.layout[name]
        if axis.visible is False or axis.showticklabels is False or _title(axis):
            continue
        if axis.ticktext or axis.type == "category":
            continue
        letter, ref = name[0], name[0] + name[5:]
        on_axis = [t for t in figure.data if (getattr(t, f"{letter}axis", None) or letter) == ref]
        if any(t.type == "image" for t in on_axis):
            continue
        if any(_has_words(getattr(t, letter, None)) for t in on_axis):
            continue
        problems.append(name)
    return problems


# --- a small capture and made-up arrays ------------------------------------------------------

@pytest.fixture(scope="module")
def captured():
    model = tiny_vit("test-units-vit", knn=False, patch=8)
    image = Image.fromarray(RNG.integers(0, 256, (64, 64, 3), dtype=np.uint8))
    capture = pipeline.vit_capture(model, image)
    model_image = pipeline.prepare(model, image).model_image
    return model, image, capture, model_image


class Curve:
    def __init__(self, auc: float):
        self.fractions = np.linspace(0, 1, 6)
        self.scores = np.linspace(1, 0, 6) ** 2
        self.auc, self.score_kind = auc, "class probability (softmax)"


def recipes(captured) -> dict:
    model, image, capture, model_image = captured
    rows, cols = capture.layout.grid
    patch = capture.layout.patch_size
    blocks = [b.index for b in capture.blocks]
    heads = capture.blocks[0].num_heads
    attn = capture.blocks[0].acts["attn"][0].double().numpy()  # (heads, tokens, tokens)
    grid_map = attn[:, 0, 1:].mean(0).reshape(rows, cols)
    mad = RNG.random((len(blocks), heads)) * 40
    taxonomy = cached_taxonomy(model, image, 0, None)
    cell = next(iter(taxonomy.cells.values()))
    tokens = ["[CLS]", "the", "cat", "sat", "[SEP]"]
    words = RNG.random((len(tokens), len(tokens)))
    words /= words.sum(-1, keepdims=True)
    similarity = RNG.uniform(-1, 1, (rows, cols, rows, cols))
    ranking = {"model": "vit", "metric": "deletion", "better": "lower", "methods": [
        {"method": name, "mean": mean, "interval": [mean - 0.05, mean + 0.05], "mean_rank": 1.5,
         "rank_interval": [1, 2]} for name, mean in (("gradcam", 0.2), ("random", 0.4))]}
    mean_curves = {("vit", "deletion"): {"gradcam": (np.linspace(0, 1, 5), np.linspace(1, 0, 5), 3),
                                         "random": (np.linspace(0, 1, 5), np.linspace(1, .5, 5), 3)}}
    stages = [type("Stage", (), dict(rf=rf, stage=f"stage {i}", name=f"layer{i}", kernel=3,
                                     stride=2, jump=2 ** i))() for i, rf in enumerate((7, 19, 43))]
    top = [Prediction(index=i, label=name, probability=p)
           for i, (name, p) in enumerate((("cat", 0.6), ("dog", 0.3)))]
    drops = RNG.random((len(blocks), heads)) - 0.5
    ks = (1, 2, 4)
    removal = Removal(removal="tokens", methods={"rollout": RNG.random(3)},
                      random=RNG.random((5, 3)), learner=0.1)
    claim = ClaimTest(ks=ks, target=0, label="cat", score_kind="softmax probability of the class",
                      score=0.6, baseline="blur", draws=5, seed=0, learner=(0, 1),
                      removals={"tokens": removal}, chosen={"rollout": np.arange(rows * cols)})
    revealed = [{"removal": "tokens", "chooser": "you", "drop": 0.1},
                {"removal": "tokens", "chooser": "random", "drop": 0.05, "low": 0.0, "high": 0.1}]
    return {
        "before_after_bars": lambda f: f(top, top[::-1], "probability"),
        "maps_before_after": lambda f: f(model_image, {"attention": grid_map},
                                         {"attention": grid_map[::-1]}, patch),
        "readout_figure": lambda f: f(RNG.random(len(blocks)) - 0.5,
                                      np.arange(1, len(blocks) + 1), RNG.random(len(blocks)),
                                      np.arange(len(blocks)) < 2, claim.score_kind, 1),
        "readout_patch_figure": lambda f: f(model_image, grid_map, patch, 0, claim.score_kind),
        "stories_figure": lambda f: f(drops, {"sink score": mad}, {"sink score": 0.2},
                                      claim.score_kind),
        "claims_figure": lambda f: f(claim, "tokens", {"rollout": "rollout"}),
        "choices_figure": lambda f: f(model_image, (rows, cols), patch, [0, 3],
                                      {"rollout: 50% shared": [0, 1]}),
        "pick_figure": lambda f: f(model_image, (rows, cols), patch, [0, 3]),
        "reveal_figure": lambda f: f(revealed, "tokens", claim.score_kind),
        "importance_grid": lambda f: f(drops, claim.score_kind),
        "prediction_bars": lambda f: f(["cat", "dog"], [0.7, 0.2], "Top-2"),
        "distance_scatter": lambda f: f(mad, blocks, 30.0, "Distance"),
        "receptive_field_figure": lambda f: f([1, 3, 5, 7], stages, [1, 2, 4], 64, "RF", "cnn"),
        "curves_figure": lambda f: f({("a", "deletion"): Curve(0.2), ("a", "insertion"): Curve(0.6),
                                      ("b", "deletion"): Curve(0.3)}, "Curves",
                                     {"deletion": "lower", "insertion": "higher"}),
        "attention_gradient_scatter": lambda f: f(grid_map, RNG.random((rows, cols)), 0.3, "AG"),
        "contributions_figure": lambda f: f(RNG.random((3, rows, cols)), ["b0", "b1", "b2"]),
        "weights_figure": lambda f: f(RNG.normal(size=16)),
        "alpha_bars": lambda f: f(RNG.normal(size=16), "layer4"),
        "distribution_figure": lambda f: f(tokens, words[0], "Row"),
        "entropy_curve_figure": lambda f: f(np.logspace(-1, 1, 9), RNG.random((9, 2)), ["a", "b"],
                                            1.0, 2.0, 2.3),
        "ranking_figure": lambda f: f(ranking),
        "mean_curves_figure": lambda f: f(mean_curves, "vit"),
        "distance_variation": lambda f: f(RNG.random((3, len(blocks), heads)) * 10, blocks, "Var"),
        "head_mosaic": lambda f: f(RNG.random((len(blocks), heads, rows, cols)), blocks, "Heads"),
        "block_head_heatmap": lambda f: f(mad, blocks, "Sink", "sink score",
                                          [["x"] * heads for _ in blocks]),
        "agreement_heatmap": lambda f: f(["a", "b"], np.array([[1, .2], [.2, 1]]), "Agree"),
        "taxonomy_mosaic": lambda f: f(taxonomy, "patch", "relu-sum"),
        "per_head_maps": lambda f: f(cell) if cell.per_head.size else f(
            next(c for c in taxonomy.cells.values() if c.per_head.size)),
        "matrix_figure": lambda f: f(words, tokens, tokens, "Matrix"),
        "multihead_figure": lambda f: f([words, words.T], tokens),
        "embedding_pca_figure": lambda f: f(RNG.random((4, 8, 8, 3)), np.array([.4, .2, .1, .05])),
        "position_mosaic_figure": lambda f: f(similarity),
        "position_map_figure": lambda f: f(similarity, 1, 2),
        "cell_overlay": lambda f: f(model_image, cell, patch),
        "difference_figure": lambda f: f(model_image, grid_map - grid_map.mean(), patch, "Diff"),
        "flow_figure": lambda f: f(model_image, RNG.random((3, rows, cols)),
                                   RNG.random((3, rows, cols)), patch, ["b0", "b1", "b2"],
                                   ["0", "1", "2"]),
        "image_figure": lambda f: f(model_image, "Picture"),
        "localisation_figure": lambda f: f(model_image, (4, 4, 40, 40), {"a": (8, 8, 30, 30)},
                                           {"a": (20, 20)}, "Boxes"),
        "map_row": lambda f: f(model_image, [("a", RNG.random((64, 64))),
                                             ("b", RNG.random((64, 64)))]),
        "map_row_figure": lambda f: f(model_image, [grid_map, grid_map.T], ["a", "b"], patch),
        "overlay": lambda f: f(model_image, grid_map, patch, "Map"),
        "overlay_figure": lambda f: f(model_image, grid_map, patch, "Map"),
        "patch_grid_lines": lambda f: f(go.Figure(), (rows, cols), patch),
        "practical_matrix": lambda f: f([("ViT: tiger cat", model_image,
                                          [(f"m{i}", grid_map) for i in range(7)])]),
        "query_attention_figure": lambda f: f(model_image, grid_map, patch, (1, 1), "Query"),
        "token_map_figure": lambda f: f(model_image, grid_map, patch, "Norms",
                                        marks=high_norm_tokens(capture), query=3,
                                        grid=(rows, cols)),
        "all_heads_grid": lambda f: f(np.stack([words, words.T]), tokens, "Heads"),
        "attention_heatmap": lambda f: f(words, tokens, "Attention"),
        "attention_lines": lambda f: f(words, tokens, "Lines"),
        "head_metric_heatmap": lambda f: f(RNG.random((3, 2)), "Entropy", "entropy (nats)"),
        "layer_progression_figure": lambda f: f({key: RNG.random(3) for key in (
            "entropy_fraction", "entropy", "self", "cls", "sep", "previous")}, "Layers"),
        "token_bars": lambda f: f(tokens, {"a": RNG.random(5)}, "Bars", "share"),
        "attention_vs_gradient_figure": lambda f: f(tokens, words[0], RNG.random(5),
                                                    "attention", 0.4),
        "token_strip_figure": lambda f: f(model_image, (rows, cols), patch, ["[CLS]"]),
        "tokenization_figure": lambda f: f(model_image, (rows, cols), patch, 1, "Tokens"),
    }


def test_every_builder_is_walked(captured):
    assert set(builders()) == set(recipes(captured))


def test_the_rule_finds_a_bare_colour_bar_and_axis():
    """The rule itself: a heatmap with numbers on both axes and no titles fails three times;
    words on the axes and a titled bar pass."""
    bare = go.Figure(go.Heatmap(z=[[1, 2], [3, 4]]))
    assert unlabelled_parts(bare) == ["colour bar of trace 0 (heatmap)", "xaxis", "yaxis"]
    named = go.Figure(go.Heatmap(z=[[1, 2], [3, 4]], x=["a", "b"], y=["c", "d"],
                                 colorbar=dict(title="attention weight")))
    assert unlabelled_parts(named) == []


@pytest.mark.parametrize("name", sorted(builders()))
def test_each_colour_bar_and_axis_names_its_quantity(captured, name):
    figure = recipes(captured)[name](builders()[name])
    assert isinstance(figure, go.Figure)
    assert unlabelled_parts(figure) == [], name


def test_the_practical_matrix_wraps_its_maps_and_its_row_label(captured):
    """Thirteen maps take three lines of at most MAPS_PER_LINE beside one input picture (a
    line's empty panels hidden), and "ViT: tiger cat" is printed on two lines, so a phone
    gets thumbnails of a sixth of its width, not a fourteenth."""
    from xai_core.figures.overlays import MAPS_PER_LINE, practical_matrix
    _, _, _, model_image = captured
    grid_map = RNG.random((8, 8))
    figure = practical_matrix([("ViT: tiger cat", model_image,
                                [(f"m{i}", grid_map) for i in range(13)])])
    lines = -(-13 // MAPS_PER_LINE)
    overlays = [t for t in figure.data if t.type == "heatmap"]
    assert len(overlays) == 13 and len([t for t in figure.data if t.type == "image"]) == 14
    titles = [a.text for a in figure.layout.annotations]
    assert titles[0] == "ViT<br>tiger cat" and [f"m{i}" for i in range(13)] == [
        t for t in titles if t.startswith("m")]
    columns = MAPS_PER_LINE + 1
    axes = [figure.layout[f"xaxis{'' if i == 1 else i}"] for i in range(1, lines * columns + 1)]
    shown = [a.visible is not False for a in axes]
    assert sum(shown) == 0  # every panel of pictures hides its axes
    used = {t.xaxis for t in figure.data}
    assert len(used) == 14 and len(axes) == lines * columns  # 4 empty panels draw nothing
