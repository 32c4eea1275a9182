"""What several pages' views ask of the core in the same way: a target picker's predictions
and its open-set note (`ui.target_picker`), and the bounds only a model knows."""

from __future__ import annotations

from ...capture import model_layout
from ...methods.base import FromModel
from ...pipeline import predict
from ...studies.open_set import open_set

CENTRE_PATCH = FromModel("the centre patch",
                         lambda model: model_layout(model).tokens.centre_patch)
LAST_SELF_INDEX = FromModel("the last self-attention block",
                            lambda model: model_layout(model).self_blocks[-1])


def answer(model, image) -> None:
    """What a page computes next to an answer: the top five of the shared head (a target
    picker's list, the predictions' bars) and whether the picture looks like anything the
    model knows."""
    if model.head is None:
        return
    predict(model, image, topk=5, head=model.head)
    open_set(model, image, model.head)
