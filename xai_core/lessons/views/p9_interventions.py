"""Page 9 (pages/9_interventions.py): the intervention lab - change one thing in the model or
its input and watch the answer."""

from __future__ import annotations

from dataclasses import replace

from .. import interventions_lab
from ...analysis.perturbation import BASELINES
from ...capture import model_layout, transformer_blocks
from ...figures import intervention_figures as figs
from ...methods.base import LAST_BLOCK, Choice, Cost, FromModel, Int
from ...studies import cause_vs_claim as claims
from ...studies import interventions as iv
from ...studies.readout import readout
from .answers import answer
from .view import FORWARD, NO_PASS, FromPicture, Many, Page, Target, view


def _target(model, image, values) -> None:
    """The target picker (the lab's views share it); which views the model refuses is read
    from its modules."""
    answer(model, image)
    interventions_lab.refusals(model)


LAB_PAGE = Page(
    "9_interventions.py", compute=_target, refusals=interventions_lab.refusals, cost=FORWARD,
    options=(Choice("iv_model", "vit", ("vit", "cnn"), "The sidebar's ViT, or its CNN "
                                                       "(pixels only)."),
             Target("iv_target", "The class whose score the interventions move.")))
LAB = LAB_PAGE.picker("iv_view")


def _outcome(model, image, values, given: dict) -> None:
    """`show_outcome`: the intervention, and the plain forward whose maps it is drawn next to
    (when the intervention's maps exist)."""
    outcome = iv.intervene(model, image, target=values["iv_target"], head=model.head, **given)
    if outcome.maps:
        iv.intervene(model, image, target=values["iv_target"], head=model.head)


# the intervention, the plain forward, and each one's maps (a capture with gradients)
OUTCOME = Cost("passes", forwards=lambda values, model: 4, backwards=lambda values, model: 2,
               graded=True)
HEAD_NAMES = FromModel("every block.head of the model", lambda model: tuple(
    f"{b}.{h}" for b in range(model_layout(model).num_blocks)
    for h in range(transformer_blocks(model.module)[0][1].attn.num_heads)))


def _sink_head(model, image) -> tuple[str, ...]:
    block, head, _sink = interventions_lab.sink_suggestion(model, image)
    return (f"{block}.{head}",)


FILL = replace(iv.BY_NAME["heads_fill"], name="iv_fill")


@view(LAB, "heads", "Switch heads off", figure=figs.before_after_bars, cost=OUTCOME,
      options=(Many("iv_heads", FromPicture("the strongest sink head", _sink_head), HEAD_NAMES,
                    "Heads switched off, as block.head."), FILL))
def heads(model, image, values) -> None:
    _outcome(model, image, values, {"heads_off": ",".join(values["iv_heads"]),
                                    "heads_fill": values["iv_fill"]})


REMOVALS = FromModel("tokens or pixels on a ViT, pixels on a CNN", lambda model: (
    ("tokens", "pixels") if model.spec.family == "vit" else ("pixels",)))
FIRST_REMOVAL = FromModel("tokens on a ViT, pixels on a CNN",
                          lambda model: REMOVALS.read(model)[0])
PATCHES = FromModel("the model's patches", lambda model: tuple(range(claims.num_patches(model))))


view(LAB, "tokens", "Drop tokens / mask patches", figure=figs.pick_figure, cost=NO_PASS,
     options=(Choice("iv_remove", FIRST_REMOVAL, REMOVALS, "Drop the tokens, or mask the "
                                                           "pixels."),
              Many("iv_patches", (), PATCHES, "The patches removed (raster order)."),
              replace(claims.BASELINE, name="iv_baseline")),
     quiet=("iv_baseline",))(None)  # nothing runs before a patch is picked


@view(LAB, "positions", "Positions", figure=figs.before_after_bars, cost=OUTCOME,
      options=(Choice("iv_positions", "shuffle", ("shuffle", "zero"),
                      "Shuffle the patches' position embeddings, or remove them."),
               replace(iv.BY_NAME["seed"], name="iv_seed", high=9999)))
def positions(model, image, values) -> None:
    _outcome(model, image, values, {"positions": values["iv_positions"],
                                    "seed": values["iv_seed"]})


CHANGES = FromModel("the attention changes the model takes",
                    lambda model: tuple(interventions_lab.attention_options(model)))
BLOCKS = FromModel("the model's blocks",
                   lambda model: tuple(range(model_layout(model).num_blocks)))


@view(LAB, "attention", "Sinks, registers, uniform", figure=figs.before_after_bars, cost=OUTCOME,
      options=(Choice("iv_change", FromModel("sink_off", lambda model: CHANGES.read(model)[0]),
                      CHANGES, "Cut the attention to the sinks, drop the registers, or make "
                               "the attention uniform."),
               Many("iv_sink_off_blocks", BLOCKS, BLOCKS, "The blocks whose sinks are cut."),
               Many("iv_uniform_blocks", FromModel("the last block", lambda model: (
                   LAST_BLOCK.read(model),)), BLOCKS, "The blocks made uniform.")),
      quiet=("iv_sink_off_blocks", "iv_uniform_blocks"))
def attention(model, image, values) -> None:
    change = values["iv_change"]
    if interventions_lab.attention_options(model)[change]:
        return  # refused in words
    given = {"registers_off": "yes"} if change == "registers_off" else {
        change: ",".join(map(str, values[f"iv_{change}_blocks"]))}
    _outcome(model, image, values, given)


@view(LAB, "readout", "Read-out per block", figure=figs.readout_figure,
      cost=Cost("passes", forwards=lambda values, model: 1),
      options=(Int("iv_readout_block", LAST_BLOCK, 0, LAST_BLOCK,
                   "The block whose patches are read out."),))
def read_out(model, image, values) -> None:
    readout(model, image, target=values["iv_target"], head=model.head)


def _heads_count(values, model) -> int:
    """Every head switched off on its own, and the plain forward."""
    return len(HEAD_NAMES.read(model)) + 1


@view(LAB, "importance", "Head importance", figure=figs.importance_grid,
      cost=Cost("passes", forwards=_heads_count), options=(FILL,))
def importance(model, image, values) -> None:
    grid = iv.head_importance(model, image, target=values["iv_target"], head=model.head,
                              fill=values["iv_fill"])
    interventions_lab.importance_stories(model, image, grid)


def _claim_methods(model) -> tuple[str, ...]:
    from ...studies.method_runs import default_methods

    return tuple(default_methods(model))


CLAIM_METHODS = FromModel("the methods cause vs claim tests on the model", _claim_methods)
CLAIM_SHOWN = FromModel("three of them (attention, rollout and GAE where the model has them)",
                        lambda model: tuple(interventions_lab.shown_by_default(
                            _claim_methods(model))))


def _claims_passes(values, model) -> int:
    """Each removal's images (`cause_vs_claim.DECLARATION`) and the maps of its methods."""
    request = claims.check_request(model, values["iv_claim_remove"], None, claims.MIN_DRAWS, 0)
    counted = {**request, "methods": len(request["methods"]), "removals": 1, "batch": 1}
    return claims.DECLARATION.cost.passes(counted, model) + 2 * len(request["methods"])


@view(LAB, "claims", "Cause vs claim", figure=figs.claims_figure,
      cost=Cost("passes", forwards=_claims_passes),
      options=(Choice("iv_claim_remove", FIRST_REMOVAL, REMOVALS, "Remove a patch by dropping "
                                                                  "its token or masking it."),
               replace(claims.BASELINE, name="iv_claim_baseline"),
               Many("iv_claim_methods", CLAIM_SHOWN, CLAIM_METHODS,
                    "The methods whose lines are drawn (all are computed).")),
      quiet=("iv_claim_baseline", "iv_claim_methods"), also={"iv_claim_remove": REMOVALS})
def cause_vs_claim(model, image, values) -> None:
    """Each method's top patches against random ones (the learner's revealed picks are
    the session's own: none by default)."""
    claims.cause_vs_claim(model, image, target=values["iv_target"], head=model.head,
                          removals=values["iv_claim_remove"],
                          baseline=values["iv_claim_baseline"])


view(LAB, "predict", "Predict, then reveal", figure=figs.reveal_figure, cost=NO_PASS,
     options=(Int("iv_k", 4, 1, 16, "How many patches the learner picks."),))(None)
