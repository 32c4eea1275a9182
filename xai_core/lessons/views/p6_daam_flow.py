"""Page 6 (pages/6_daam_flow.py): DAAM's flow block by block, the k-NN vote behind its
weights, the channels, and the cascading randomisation check."""

from __future__ import annotations

from dataclasses import replace

from ... import pipeline
from ...capture import transformer_blocks
from ...figures.curves import weights_figure
from ...figures.overlays import flow_figure, map_row_figure
from ...methods import METHODS, daam
from ...methods.base import LAST_BLOCK, Choice, Cost, Int
from ...metrics import daam_sanity
from .answers import answer
from .view import GRADIENT, NO_PASS, Page, Target, view

DAAM = METHODS["daam"]


def _flow(model, image, values) -> None:
    """What every view reads: the top class, the chosen class's DAAM with the page's
    weights."""
    pipeline.predict(model, image, topk=1, head=model.head)
    answer(model, image)  # the target picker
    DAAM(model, image, target=values["daam_target"], head=model.head,
         knn_weights=values["daam_formula"], channel_relu=values["daam_relu"])
    pipeline.prepare(model, image)


def _refusals(model) -> dict[str, str]:
    """The vote exists for a k-NN head only."""
    knn = model.head is not None and model.head.kind == "knn"
    return {} if knn else {"vote": f"{model.spec.display_name} has no k-NN memory bank."}


FLOW = Page("6_daam_flow.py", compute=_flow, refusals=_refusals, cost=GRADIENT, options=(
    Target("daam_target", "The class the flow explains."),), settings=(
    Choice("daam_display", next(iter(daam.DISPLAY_MODES)), tuple(daam.DISPLAY_MODES),
           "How the frames are scaled for display (the raw maps stay the same)."),
    replace(DAAM.option("channel_relu"), name="daam_relu"),
    replace(DAAM.option("knn_weights"), name="daam_formula")))
SHOW = FLOW.picker("daam_view")


@view(SHOW, "flow", "The flow", figure=flow_figure, cost=GRADIENT)  # another class: its DAAM
def flow(model, image, values) -> None:
    """The sink frames it marks, and the top class's flow when another class is chosen."""
    METHODS["sinks"](model, image)
    top = pipeline.predict(model, image, topk=1, head=model.head)[0].index
    if values["daam_target"] != top:
        DAAM(model, image, target=top, head=model.head, knn_weights=values["daam_formula"],
             channel_relu=values["daam_relu"])


@view(SHOW, "vote", "The memory bank's vote", figure=weights_figure, cost=NO_PASS)
def vote(model, image, values) -> None:
    """A k-NN model's weights, read from the flow's result (the page shows it for a k-NN
    head only)."""


@view(SHOW, "channels", "Channel inspector", figure=map_row_figure, cost=NO_PASS,
      options=(Int("daam_channel_block", LAST_BLOCK, 0, LAST_BLOCK,
                   "The block whose top channels are drawn."),))
def channels(model, image, values) -> None:
    """Read from the flow's result."""


def _sanity_passes(values, model) -> int:
    return len(daam_sanity.sanity_steps(len(transformer_blocks(model.module))))


@view(SHOW, "sanity", "Sanity check", figure=map_row_figure,
      cost=Cost("passes", forwards=_sanity_passes, backwards=_sanity_passes, graded=True))
def sanity(model, image, values) -> None:
    daam_sanity.cascading_randomisation(model, image, values["daam_target"], model.head,
                                        values["daam_formula"], values["daam_relu"])
