"""Page 3 (pages/3_attention_distance.py): how far each head looks, one head, and whether the
distances belong to the image or to the weights."""

from __future__ import annotations

from dataclasses import replace

from ... import pipeline
from ...analysis.token_marks import high_norm_tokens
from ...methods.attention import query_prefix_attention
from ...figures.curves import distance_scatter
from ...figures.matrices import distance_variation
from ...figures.overlays import token_map_figure
from ... import images
from ...methods import METHODS, distance
from ...methods.base import LAST_PATCH, Cost, Int
from ...studies.interventions import LAST_HEAD
from .answers import CENTRE_PATCH, LAST_SELF_INDEX
from .view import FORWARD, NO_PASS, Flag, Page, view

PREFIX = replace(METHODS["distance"].option("prefix"), name="p3_prefix")


def _renormalise(values) -> str:
    """The distance method's renormalise option as the page sets it: only when the prefix
    columns are excluded."""
    return "yes" if values["p3_renorm"] and values["p3_prefix"] == "exclude" else "no"


def _measure(model, image, values) -> None:
    """What every view of the page starts from: the capture, every head's distance at the
    page's prefix setting, and the sink heads it rings."""
    pipeline.vit_capture(model, image)
    METHODS["distance"](model, image, prefix=values["p3_prefix"],
                        renormalise=_renormalise(values))
    METHODS["sinks"](model, image)


DISTANCE = Page("3_attention_distance.py", compute=_measure, cost=FORWARD,
                settings=(PREFIX, Flag("p3_renorm", False, "Renormalise each row after "
                                                          "dropping the prefix columns.")))
SHOW = DISTANCE.picker("p3_view")


@view(SHOW, "all", "Every head", figure=distance_scatter, cost=NO_PASS)
def every_head(model, image, values) -> None:
    """The scatter and a CNN's receptive fields (read from its modules: no pass)."""


@view(SHOW, "head", "One head", figure=token_map_figure, cost=NO_PASS,
      options=(Int("p3_block", LAST_SELF_INDEX, 0, LAST_SELF_INDEX,
                   "A measured (self-attention) block, by its index."),
               Int("p3_head", 0, 0, LAST_HEAD, "A head index.")),
      settings=(Int("p3_query", CENTRE_PATCH, 0, LAST_PATCH, "The query patch."),))
def one_head(model, image, values) -> None:
    capture = pipeline.vit_capture(model, image)
    METHODS["attention"](model, image, block=values["p3_block"], query=values["p3_query"])
    query_prefix_attention(capture, values["p3_block"], values["p3_query"])
    high_norm_tokens(capture)


@view(SHOW, "gallery", "Image or weights?", figure=distance_variation,
      cost=Cost("passes", forwards=lambda values, model: len(images.sample_ids())))
def gallery(model, image, values) -> None:
    """The same measurement on every gallery picture (each capture cached)."""
    pictures = {sample: images.load_sample(sample) for sample in images.sample_ids()}
    distance.gallery_distances(model, pictures, values["p3_prefix"],
                               _renormalise(values) == "yes")
