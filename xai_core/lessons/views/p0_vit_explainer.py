"""Page 0 (pages/0_vit_explainer.py): the ViT Explainer, one view of its own; its deep links
(`tour`, `vx_*`) are the component's (`dashboard/explainer/component.py`)."""

from __future__ import annotations

from .. import explainer
from ..tour_choices import TOUR_SWITCHES, switched_heads
from .answers import answer
from ...methods.base import Cost
from .view import Page, view

EXPLAINER = Page("0_vit_explainer.py")


# the prediction, the forward-only capture, the capture whose backward DAAM reads, and one
# pass without each head the tour switches off
@view(EXPLAINER, "explainer", "ViT Explainer", cost=Cost(
    "passes", forwards=lambda values, model: 3 + len(TOUR_SWITCHES),
    backwards=lambda values, model: 1, graded=True))
def overview(model, image, values) -> None:
    """The overview, the last block's detail (the block it opens on) and the tour's head
    switches (its steps that run the model again without a head: `tour_choices`)."""
    answer(model, image)
    payload = explainer.overview_payload(model, image, model.head)
    explainer.block_payload(model, image, len(payload["blocks"]) - 1)
    for pair in sorted(set(switched_heads(payload).values())):
        explainer.head_switch(model, image, model.head, [pair])
