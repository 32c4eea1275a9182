"""Page 0 (pages/0_vit_explainer.py): the ViT Explainer, one view of its own; its deep links
(`tour`, `vx_*`) are the component's (`dashboard/explainer/component.py`)."""

from __future__ import annotations

from .. import explainer
from .answers import answer
from ...methods.base import Cost
from .view import Page, view

EXPLAINER = Page("0_vit_explainer.py")


# the prediction, the forward-only capture and the capture whose backward DAAM reads
@view(EXPLAINER, "explainer", "ViT Explainer", cost=Cost(
    "passes", forwards=lambda values, model: 3, backwards=lambda values, model: 1, graded=True))
def overview(model, image, values) -> None:
    """The overview and the last block's detail (the block it opens on)."""
    answer(model, image)
    payload = explainer.overview_payload(model, image, model.head)
    explainer.block_payload(model, image, len(payload["blocks"]) - 1)
