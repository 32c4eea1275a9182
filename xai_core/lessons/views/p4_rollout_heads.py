"""Page 4 (pages/4_rollout_heads.py): attention rollout next to GAE, the sinks and registers,
and every head of every block."""

from __future__ import annotations

from ... import pipeline
from ...analysis.token_marks import high_norm_tokens
from ...figures.matrices import block_head_heatmap, head_mosaic
from ...figures.overlays import token_map_figure
from ...methods import METHODS, rollout
from ...methods.base import LAST_PATCH, Cost, Int
from ...studies.interventions import LAST_HEAD
from .answers import CENTRE_PATCH, LAST_SELF_INDEX, answer
from .view import FORWARD, NO_PASS, Flag, FromPicture, Page, Target, view


def _inputs(model, image, values) -> None:
    """What every view reads (the page's RolloutInputs): the capture, the model's input, the
    sink analysis and where rollout starts by default, the high-norm tokens."""
    capture = pipeline.vit_capture(model, image)
    pipeline.prepare(model, image)
    rollout.auto_start(METHODS["sinks"](model, image).detail)
    high_norm_tokens(capture)


ROLLOUT = Page("4_rollout_heads.py", compute=_inputs, cost=FORWARD)
SHOW = ROLLOUT.picker("p4_view")


def _strongest(part: str) -> FromPicture:
    """The block (among the self-attention blocks) or head of the strongest sink."""
    def read(model, image):
        sink = METHODS["sinks"](model, image).detail.strongest()
        return sink.block if part == "block" else sink.head
    return FromPicture(f"the strongest sink's {part}", read)


@view(SHOW, "rollout", "Rollout", figure=token_map_figure, method_options=(("rollout", "p4"),),
      options=(Target("p4_target", "The class GAE's gradient starts from."),),
      settings=(Flag("p4_full", False, "The full rollout from the first block next to it."),),
      cost=Cost("passes", forwards=lambda values, model: 1,
                backwards=lambda values, model: 1))
def rollout_view(model, image, values) -> None:
    """Rollout at the method's declared defaults (the page's option widgets start there), the
    last block's raw attention and GAE for the chosen class with the same query."""
    options = METHODS["rollout"].resolve(model, {})
    METHODS["rollout"](model, image, **options)
    capture = pipeline.vit_capture(model, image)
    query = options["query"]
    rollout.last_block_cls_attention(capture, None if query < 0 else query)
    answer(model, image)  # the target picker
    METHODS["gae"](model, image, target=values["p4_target"], head=model.head, query=query)


@view(SHOW, "sinks", "Sinks and registers", figure=block_head_heatmap, cost=NO_PASS,
      options=(Int("p4_sink_block", _strongest("block"), 0, LAST_SELF_INDEX,
                   "A self-attention block, by its index."),
               Int("p4_sink_head", _strongest("head"), 0, LAST_HEAD, "A head index.")))
def sinks(model, image, values) -> None:
    """Read from the sink analysis the page computed: nothing more."""


@view(SHOW, "heads", "Every head", figure=head_mosaic, cost=NO_PASS,
      options=(Int("p4_big_block", LAST_SELF_INDEX, 0, LAST_SELF_INDEX,
                   "The enlarged tile's block."),
               Int("p4_big_head", 0, 0, LAST_HEAD, "The enlarged tile's head.")),
      settings=(Int("p4_grid_query", CENTRE_PATCH, 0, LAST_PATCH,
                    "The query patch when the blocks have no [CLS]."),))
def every_head(model, image, values) -> None:
    """Each rollout block's attention per head, from [CLS] (a patch query without one)."""
    capture = pipeline.vit_capture(model, image)
    eligible = rollout.rollout_blocks(capture)
    has_cls = capture.blocks[eligible[0]].num_prefix_tokens > 0
    for block in eligible:
        METHODS["attention"](model, image, block=block,
                             query=-1 if has_cls else values["p4_grid_query"])
