"""What page 9 (the intervention lab) asks of the core, beyond `interventions`, `readout` and
`cause_vs_claim`: which views a model allows (and why not), the sink head to suggest, each
head's weight in rollout, how well the attention stories rank the heads' importance (in
words), and the predict-then-reveal summary. No Streamlit here."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..capture import is_talking_heads, transformer_blocks
from ..images import image_sha256
from ..infra.cache import BoundedCache, cache_key, fingerprint
from ..studies.interventions import _register_positions
from ..methods import METHODS
from ..pipeline import vit_capture

STORIES = BoundedCache(max_entries=64, max_bytes=8 * 2**20, shared=True)
ROLLOUT_WEIGHT = ("a head's weight in rollout: the part of rollout's final [CLS] row on the "
                  "image patches that passes through that head (rollout with (mean of heads "
                  "+ I) / 2 per block; by linearity head h of block b carries (1/2H) s_b A_bh "
                  "R_(b-1), s_b the [CLS] row of the blocks after b, R_(b-1) rollout up to b)")


def _timm_vit(model) -> bool:
    module = model.module
    return (model.spec.family == "vit" and hasattr(module, "forward_head")
            and hasattr(module, "patch_drop")
            and all(kind == "self" for kind, _ in transformer_blocks(module)))


def refusals(model) -> dict[str, str]:
    """View id -> why this model cannot show it (views it can show are absent)."""
    name = model.spec.display_name
    if model.spec.family != "vit":
        why = (f"{name} is a CNN: it has no heads, tokens, position embeddings or attention "
               "to change. It takes masked pixels (16-pixel cells) and cause vs claim.")
        return {view: why for view in ("heads", "positions", "attention", "readout",
                                       "importance")}
    if not _timm_vit(model):
        why = f"{name} has another layout than a timm VisionTransformer (class-attention blocks)."
        return {view: why for view in ("positions", "readout", "importance")}
    return {}


def attention_options(model) -> dict[str, str | None]:
    """sink_off / registers_off / uniform -> None when the model allows it, else why not."""
    name = model.spec.display_name
    talking = any(is_talking_heads(block) for _, block in transformer_blocks(model.module))
    mixes = (f"{name} mixes its heads after the softmax (talking heads), so there is no "
             "single softmax attention to change.") if talking else None
    registers = None if _register_positions(model.module) else (
        f"{name} has no register tokens (DINOv2-reg4 has four).")
    return {"sink_off": mixes, "uniform": mixes, "registers_off": registers}


def sink_suggestion(model, image):
    """The strongest sink head of the plain forward (`analysis.attention_sinks`): (block, head) in
    self-attention block numbering, and the SinkHead. Read from the `sinks` method's shared
    result, not the capture: a replica's first visit of a picture then reads a few kB from
    the result store instead of a DINOv2 capture with gradients (124 MB)."""
    analysis = METHODS["sinks"](model, image).detail
    sink = analysis.strongest()
    return analysis.blocks.index(sink.block), sink.head, sink


def rollout_weights(model, image) -> np.ndarray:
    """(self-attention blocks, heads): ROLLOUT_WEIGHT of every head."""
    capture = vit_capture(model, image)
    attns = [block.acts["attn"][0].double().numpy() for block in capture.blocks
             if block.kind == "self"]
    prefix = capture.blocks[0].num_prefix_tokens
    tokens = attns[0].shape[-1]
    factors = [(a.mean(0) + np.eye(tokens)) / 2 for a in attns]
    before, running = [], np.eye(tokens)  # R_(b-1)
    for factor in factors:
        before.append(running)
        running = factor @ running
    weights = np.zeros((len(attns), attns[0].shape[0]))
    after = np.eye(tokens)[0]  # s_b: [CLS] row of the blocks after b
    for b in reversed(range(len(attns))):
        heads = attns[b].shape[0]
        for h in range(heads):
            row = after @ attns[b][h] @ before[b] / (2 * heads)
            weights[b, h] = row[prefix:].sum()
        after = after @ factors[b]
    return weights


def rho_words(rho: float) -> str:
    """A Spearman rank correlation in words."""
    if rho != rho:
        return "undefined (one of them is constant)"
    size = abs(rho)
    strength = ("no" if size < 0.1 else "a weak" if size < 0.3 else "a moderate"
                if size < 0.5 else "a strong")
    if strength == "no":
        return f"no rank correlation (ρ = {rho:+.2f})"
    direction = "positive" if rho > 0 else "negative"
    return f"{strength} {direction} rank correlation (ρ = {rho:+.2f})"


@dataclass(frozen=True)
class Stories:
    """Head importance beside the three attention stories, with Spearman's rho of each."""

    drops: np.ndarray
    stories: dict[str, np.ndarray]  # sink score, entropy (nats), rollout weight
    rho: dict[str, float]

    def sentences(self) -> list[str]:
        return [f"{story} and a head's importance: {rho_words(rho)}."
                for story, rho in self.rho.items()]


def importance_stories(model, image, grid) -> Stories:
    """`interventions.head_importance`'s grid beside the sink score, entropy and rollout
    weight of each head, and Spearman's rho of the drops with each story; cached by content
    and shared (the rollout weights read the capture: for DINOv2 with gradients 124 MB, per
    picture and replica)."""
    # keyed by what the stories read, not by the grid's timing fields
    key = cache_key("importance-stories", model,
                    fingerprint((grid.drops, grid.sink_scores, grid.entropy)),
                    image=image_sha256(image))
    return STORIES.get_or_compute(key, lambda: _stories(model, image, grid))


def _stories(model, image, grid) -> Stories:
    from scipy.stats import spearmanr

    stories = {"sink score": grid.sink_scores, "entropy (nats)": grid.entropy,
               "rollout weight": rollout_weights(model, image)}
    rho = {name: float(spearmanr(grid.drops.ravel(), values.ravel())[0])
           for name, values in stories.items()}
    return Stories(grid.drops, stories, rho)


def reveal_rows(found) -> list[dict]:
    """Predict, then reveal: one row per chooser (you, each method by its name, random) at
    the learner's k, for each way of removing: the drop, and each method's overlap with the
    learner."""
    index = found.ks.index(len(found.learner))
    shares = found.agreement()
    rows = []
    for removal in found.removals.values():
        low, high = removal.random_interval()[index]
        rows.append({"removal": removal.removal, "chooser": "you",
                     "drop": removal.learner, "overlap": 1.0})
        rows += [{"removal": removal.removal, "chooser": METHODS[name].shown_name,
                  "drop": float(drops[index]), "overlap": shares[name]}
                 for name, drops in removal.methods.items()]
        rows.append({"removal": removal.removal, "chooser": "random (mean)",
                     "drop": float(removal.random_mean()[index]), "low": low, "high": high,
                     "overlap": float("nan")})
    return rows


def reveal_ks(model, k: int) -> tuple[int, ...] | None:
    """The k grid predict-then-reveal asks for: the default grid (None) when it holds `k`,
    so the reveal reuses cause vs claim's computation (the warm-up's too), else `k` alone."""
    from ..studies.cause_vs_claim import default_ks

    return None if k in default_ks(model) else (k,)


def against_random(drop: float, low: float, high: float) -> str:
    """Where a drop falls against random's interval: 'above', 'within' or 'below'."""
    return "above" if drop > high else "below" if drop < low else "within"


def reveal_words(removal, k: int, index: int) -> str:
    """One removal's result for the learner, in words (markdown): which way their k patches
    moved the score, and how that compares with random patches' 95 % interval at
    k = ks[index]."""
    mine, (low, high) = removal.learner, removal.random_interval()[index]
    patches = f"your {k} patch{'' if k == 1 else 'es'}"
    if mine < 0:
        effect = (f"{patches} **raised the score by {-mine:.4f}**: the model did not need "
                  f"{'it' if k == 1 else 'them'}")
    elif mine == 0:
        effect = f"{patches} did not move the score"
    else:
        effect = f"{patches} **lowered the score by {mine:.4f}**"
    where = {"above": "more than random patches do", "within": "about as much as random "
             "patches do", "below": "less than random patches do"}[
        against_random(mine, low, high)]
    return (f"{effect}; that is {where} (random sets of {k} lower it by {low:+.4f} to "
            f"{high:+.4f}, the 95 % interval of their mean).")


# cause vs claim's methods drawn by default: the attention story, its rollout, and a
# gradient-weighted one; the others on demand
CLAIM_DEFAULTS = ("attention", "rollout", "gae", "gradcam", "saliency")


def shown_by_default(methods, count: int = 3) -> list[str]:
    """The `count` methods of `methods` (ids) drawn before the learner asks for more:
    CLAIM_DEFAULTS first, then the others in their order."""
    ordered = [m for m in CLAIM_DEFAULTS if m in methods] + [
        m for m in methods if m not in CLAIM_DEFAULTS]
    return ordered[:count]


def beating_random(removal, index: int) -> list[str]:
    """The methods (ids) whose top-k drop at k = ks[index] is above random's interval."""
    high = removal.random_interval()[index, 1]
    return [name for name, drops in removal.methods.items() if drops[index] > high]
