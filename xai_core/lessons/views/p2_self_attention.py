"""Page 2 (pages/2_self_attention.py): self-attention by hand, then in the real model."""

from __future__ import annotations

from ... import pipeline
from ...figures.matrices import matrix_figure, multihead_figure
from ...figures.curves import distribution_figure
from ...figures.overlays import query_attention_figure
from ...methods import METHODS
from ...methods.base import LAST_BLOCK, LAST_PATCH, Int
from ...studies.interventions import LAST_HEAD
from .answers import CENTRE_PATCH
from .view import FORWARD, Flag, Page, view

ATTENTION = Page("2_self_attention.py")
PART = ATTENTION.picker("sa_view", label="Part")
MEAN_HEAD = "mean"  # the head option averaging all heads (in links: sa_head=mean, or an index)

# The toy parts use fixed matrices (`analysis.toy_attention`): nothing on the model.
view(PART, "hand", "1 · By hand", models=(), figure=matrix_figure)(None)
view(PART, "temperature", "2 · Temperature", models=(), figure=distribution_figure)(None)
view(PART, "heads", "3 · Heads", models=(), figure=multihead_figure)(None)


@view(PART, "model", "4 · In the real model", figure=query_attention_figure, cost=FORWARD,
      options=(Int("sa_block", LAST_BLOCK, 0, LAST_BLOCK, "The block whose attention is drawn."),
               Int("sa_head", MEAN_HEAD, 0, LAST_HEAD, "A head index, or the mean of the heads.",
                   word=MEAN_HEAD)),
      settings=(Flag("sa_use_cls", False, "[CLS] as the query (off: a patch)."),
                Int("sa_query", CENTRE_PATCH, 0, LAST_PATCH, "The query patch (raster index).")))
def real_model(model, image, values) -> None:
    """One query row of the chosen block (the centre patch's; a class-attention block has
    only [CLS]), and the heads' distances the text quotes (page 3's default measurement)."""
    capture = pipeline.vit_capture(model, image)
    pipeline.prepare(model, image)
    record = capture.blocks[values["sa_block"]]
    use_cls = values["sa_use_cls"] or record.kind == "class"
    METHODS["attention"](model, image, block=values["sa_block"],
                         query=-1 if use_cls else values["sa_query"])
    METHODS["distance"](model, image)
