"""Interventions: change one thing inside a ViT's forward pass and watch the answer move.

A map is a claim about what the model uses; an intervention tests it. Each intervention is
declared once, like a method's options (`INTERVENTIONS`), and applied with hooks on the real
timm modules for one forward under the model's lock (no copy of the model; every hook is
removed afterwards, also on error). Blocks, heads and patches are 0-based; blocks count the
self-attention blocks; patches are in raster order (row by row). A CNN takes patches_mask
only, its patches being the attribution methods' 16-pixel cells.

    heads_off     block.head pairs, e.g. 0.5,3.2. heads_fill names what replaces the head's
                  slice of the attention output (softmax(QK^T)V, as it enters W_O = attn.proj):
                  zero = 0; mean = its mean over the image's tokens (prefix tokens and patches)
    tokens_drop   patch tokens removed from the sequence after the position embeddings are
                  added (prefix tokens kept; a kept patch keeps its own position embedding)
    patches_mask  those patches replaced in the input pixels by mask_baseline (the reference
                  images of the attribution methods: zeros, black, blur, rise-blur, mean)
    positions     keep | shuffle (a permutation of the patches' position embeddings drawn from
                  `seed`) | zero (patches get none); prefix tokens keep theirs either way
    sink_off      blocks in which every head's attention to its measured sink key (the app's
                  sink analysis of the plain forward, `xai_core.analysis.attention_sinks`) is
                  set to 0 and each row renormalised to sum to 1
    registers_off yes = the register tokens are removed from the sequence (models with
                  registers only)
    uniform       blocks whose attention is replaced by uniform attention (1/N on every key)

The result (`intervene`) holds the top-5 before and after, the target's score before and
after with its drop (`DROP`: the one sign convention of every effect in the app, head
importance and cause vs claim included), and the attention, rollout, GAE and ViT Grad-CAM maps recomputed under the
intervention by the capture engine (when the token sequence keeps its length).
"""

from __future__ import annotations

import re
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from types import SimpleNamespace

import numpy as np
import torch

from ..infra.cache import BoundedCache, cache_key
from ..capture import (_unfused_attention, is_talking_heads, model_layout, run_capture,
                       separate_forwards, transformer_blocks)
from ..infra.errors import OptionError
from ..images import image_sha256
from ..methods.attribution import (REFERENCE_NAMES, REFERENCES, cell_mask, cell_size,
                                   reference_pixels)
from ..methods.base import LAST_SELF_BLOCK, Choice, FromModel, Int, _words
from ..pipeline import head_of, predictions_of, prepare, resolve_target, vit_capture
from ..infra.rng import seeded
from ..analysis.attention_sinks import analyse_sinks
from ..analysis.tokens import prefix_token_names

LAST_HEAD = FromModel("the last head",
                      lambda model: transformer_blocks(model.module)[0][1].attn.num_heads - 1)


def _num_cells(model) -> int:
    """A ViT's patches; on a CNN, the attribution methods' 16-pixel cells of its input."""
    if model.spec.family == "vit":
        return model_layout(model).tokens.num_patches
    cell, (height, width) = cell_size(model), model.spec.input_size
    return -(-height // cell) * -(-width // cell)


LAST_CELL = FromModel("the last patch (a 16-pixel cell on a CNN)",
                      lambda model: _num_cells(model) - 1)
# shared: every replica and restart reads an answer one computed (the Explainer's tour asks
# the same two switches for every visitor of a picture)
RESULTS = BoundedCache(max_entries=64, max_bytes=64 * 2**20, shared=True)
TOP_K = 5
_ITEM = re.compile(r"(-?\d+)(?:-(\d+))?")
_PAIR = re.compile(r"(-?\d+)\.(-?\d+)")


@dataclass(frozen=True)
class ListOption:
    """An option whose value is a list: (block, head) pairs, patches or blocks. Written as
    comma-separated items ('0.5,3.2'; '3,7-9' for patches and blocks); '' or 'none' = off.
    Same interface as `methods.base.Option` (parse, check, default_for, describe)."""

    name: str
    kind: str  # "pairs" | "patches" | "blocks"
    help: str
    default: tuple = ()

    @property
    def bounds(self) -> tuple[FromModel, ...]:
        return {"pairs": (LAST_SELF_BLOCK, LAST_HEAD), "patches": (LAST_CELL,),
                "blocks": (LAST_SELF_BLOCK,)}[self.kind]

    def parse(self, raw) -> tuple:
        """A sorted tuple without repeats; refused in words when malformed or negative."""
        if isinstance(raw, str):
            items = [] if raw.strip().lower() in ("", "none") else raw.split(",")
            values = [value for item in items for value in self._parse_item(item.strip())]
        else:
            values = [tuple(int(v) for v in item) if self.kind == "pairs" else int(item)
                      for item in raw]
        for value in values:
            for number in (value if self.kind == "pairs" else (value,)):
                if number < 0:
                    raise OptionError(self._out_of_range(value))
        return tuple(sorted(set(values)))

    def _parse_item(self, item: str) -> list:
        if self.kind == "pairs":
            match = _PAIR.fullmatch(item)
            if match is None:
                raise OptionError(f"{self.name} takes block.head pairs such as 0.5,3.2; "
                                  f"got '{item}'.")
            return [(int(match[1]), int(match[2]))]
        match = _ITEM.fullmatch(item)
        if match is None or (match[2] is not None and int(match[2]) < int(match[1])):
            raise OptionError(f"{self.name} takes {self.kind} as numbers or ranges such as "
                              f"3,7-9; got '{item}'.")
        first = int(match[1])
        return list(range(first, int(match[2]) + 1)) if match[2] is not None else [first]

    def check(self, value: tuple, model) -> tuple:
        highs = [bound.read(model) for bound in self.bounds]
        for item in value:
            numbers = item if self.kind == "pairs" else (item,)
            if any(n > high for n, high in zip(numbers, highs)):
                raise OptionError(self._out_of_range(item, highs, model.spec.display_name))
        return value

    def _out_of_range(self, item, highs=None, model_name: str = "") -> str:
        of = f" of {model_name}" if model_name else ""
        if self.kind == "pairs":
            limits = highs or [_words(b) for b in self.bounds]
            return (f"{self.name}={item[0]}.{item[1]} is out of range (blocks 0-{limits[0]}, "
                    f"heads 0-{limits[1]}{of}).")
        high = highs[0] if highs else _words(self.bounds[0])
        one = {"patches": "patch", "blocks": "block"}[self.kind]
        return f"{self.name}: {one} {item} is out of range (0-{high}{of})."

    def default_for(self, model) -> tuple:
        return self.default

    def describe(self) -> dict:
        return {"name": self.name, "type": self.kind, "default": "none", "help": self.help,
                "items": ", ".join(_words(b) for b in self.bounds) + " at most (0-based)"}


INTERVENTIONS = (
    ListOption("heads_off", "pairs", "Heads switched off, as block.head pairs (0-based)."),
    Choice("heads_fill", "zero", ("zero", "mean"),
           "What replaces a switched-off head's slice of the attention output before W_O: "
           "zero, or its mean over the image's tokens."),
    ListOption("tokens_drop", "patches", "Patch tokens removed from the sequence after the "
                                         "position embeddings (prefix tokens kept)."),
    ListOption("patches_mask", "patches", "Patches replaced in the input pixels by "
                                          "mask_baseline."),
    Choice("mask_baseline", "blur", REFERENCES,
           "What masked patches show: " + "; ".join(f"{k} = {v}"
                                                    for k, v in REFERENCE_NAMES.items()) + "."),
    Choice("positions", "keep", ("keep", "shuffle", "zero"),
           "The patches' position embeddings: kept, shuffled among the patches (seed), or "
           "zero; prefix tokens keep theirs."),
    Int("seed", 0, 0, 2**31 - 1, "Seed of positions=shuffle: the same seed, the same order."),
    ListOption("sink_off", "blocks", "Blocks in which each head's attention to its measured "
                                     "sink key is set to 0 and the rows renormalised."),
    Choice("registers_off", "no", ("no", "yes"),
           "yes: the register tokens are removed from the sequence (models with registers)."),
    ListOption("uniform", "blocks", "Blocks whose attention is replaced by uniform attention."),
)
BY_NAME = {option.name: option for option in INTERVENTIONS}
PIXEL_ONLY = ("patches_mask", "mask_baseline")  # what a CNN can take
CONVENTION = ("blocks (self-attention), heads and patches 0-based, patches in raster order; "
              "heads_off replaces the head's slice of softmax(QK^T)V before W_O (attn.proj); "
              "tokens_drop removes patch tokens after position embeddings; sink_off zeroes "
              "the attention to each head's sink key (argmax of the mean received attention "
              "in the plain forward) and renormalises every row")


def describe() -> dict:
    """Every intervention's declaration as plain JSON (`python -m xai_core interventions`)."""
    return {"interventions": [option.describe() for option in INTERVENTIONS],
            "convention": CONVENTION}


def parse(given: dict | None) -> dict:
    """Typed values of the given interventions; unknown names, malformed values and
    negative or fixed-range violations refused in words. Needs no model."""
    given = dict(given or {})
    unknown = sorted(set(given) - set(BY_NAME))
    if unknown:
        raise OptionError(f"Unknown intervention(s): {', '.join(unknown)} "
                          f"(there are: {', '.join(BY_NAME)}).")
    return {name: BY_NAME[name].parse(value) for name, value in given.items()}


def resolve(model, given: dict | None) -> dict:
    """Every intervention's value for this model (a loaded model, or `model_shell`'s
    weightless one): the given ones checked against its blocks, heads and patches, the rest
    at their defaults, and the rules between them."""
    parsed = parse(given)
    family = model.spec.family
    beyond_pixels = sorted(set(parsed) - set(PIXEL_ONLY))
    if family == "text" or (family == "cnn" and beyond_pixels):
        raise OptionError(f"{', '.join(beyond_pixels) or 'Interventions'}: acts on a ViT's "
                          f"tokens and heads; {model.spec.display_name} is a {family.upper()}"
                          + (" (a CNN takes patches_mask, in 16-pixel cells, and "
                             "mask_baseline)." if family == "cnn" else "."))
    values = {option.name: (option.check(parsed[option.name], model) if option.name in parsed
                            else option.default_for(model)) for option in INTERVENTIONS}
    if family == "vit":
        _check_together(values, model)
    return values


def _check_together(values: dict, model) -> None:
    module, layout = model.module, model_layout(model)
    changes_sequence = (values["tokens_drop"] or values["positions"] != "keep"
                        or values["registers_off"] == "yes")
    if changes_sequence and not hasattr(module, "patch_drop"):
        raise OptionError(f"tokens_drop, positions and registers_off need a timm "
                          f"VisionTransformer; {model.spec.display_name} has another layout.")
    if (values["sink_off"] or values["uniform"]) and any(
            is_talking_heads(block) for _, block in transformer_blocks(module)):
        raise OptionError(f"sink_off and uniform change the softmax attention; "
                          f"{model.spec.display_name} mixes its heads after the softmax "
                          "(talking heads).")
    if len(values["tokens_drop"]) >= layout.tokens.num_patches:
        raise OptionError("tokens_drop removes every patch; keep at least one.")
    if values["registers_off"] == "yes" and not _register_positions(module):
        raise OptionError(f"registers_off: {model.spec.display_name} has no register tokens.")
    if values["positions"] != "keep" and (getattr(module, "pos_embed", None) is None
                                          or getattr(module, "dynamic_img_size", False)):
        raise OptionError(f"positions: {model.spec.display_name} has no fixed position "
                          "embedding table.")


@lru_cache(maxsize=16)
def model_shell(model_id: str):
    """A weightless copy of a registry model's modules (built on torch's meta device: no
    weights read, no memory), so bounds such as its last block are known before it loads."""
    import timm

    from ..models import get_spec
    from ..models.loaders import _size_args

    spec = get_spec(model_id)
    if spec.family != "vit":  # only its input size matters (16-pixel cells)
        return SimpleNamespace(spec=spec, module=None)
    with torch.device("meta"):
        module = timm.create_model(spec.timm_name, pretrained=False, **_size_args(spec))
    return SimpleNamespace(spec=spec, module=module)


def check_before_load(model_id: str, given: dict | None) -> dict:
    """`resolve` against the registry model's shell: every bad value refused before the
    weights load."""
    return resolve(model_shell(model_id), given)


def active(values: dict) -> dict:
    """The interventions that change something (the rest are at their 'off' value), with
    the conventions they use."""
    changed = {name: value for name, value in values.items()
               if name in ("heads_off", "tokens_drop", "patches_mask", "sink_off", "uniform")
               and value}
    if values["positions"] != "keep":
        changed["positions"] = values["positions"]
        if values["positions"] == "shuffle":
            changed["seed"] = values["seed"]
    if values["registers_off"] == "yes":
        changed["registers_off"] = "yes"
    if values["heads_off"]:
        changed["heads_fill"] = values["heads_fill"]
    if values["patches_mask"]:
        changed["mask_baseline"] = values["mask_baseline"]
    return changed


# --- the hooks --------------------------------------------------------------------------------

def _register_positions(module) -> list[int]:
    return [i for i, name in enumerate(prefix_token_names(module)) if name.startswith("[REG")]


def position_order(num_patches: int, seed: int) -> torch.Tensor:
    """The shuffled order of the patches' position embeddings: patch i gets position
    order[i]. Drawn from torch's generator seeded through the process-wide rng lock."""
    with seeded(torch.device("cpu"), seed):
        return torch.randperm(num_patches)


def kept_tokens(module, values: dict) -> list[int]:
    """The positions (in the full sequence: prefix tokens, then patches) of the tokens that
    tokens_drop and registers_off leave in the sequence."""
    prefix, patches = int(module.num_prefix_tokens), int(module.patch_embed.num_patches)
    dropped = set(values["tokens_drop"])
    registers = set(_register_positions(module)) if values["registers_off"] == "yes" else set()
    return [i for i in range(prefix) if i not in registers] + [
        prefix + p for p in range(patches) if p not in dropped]


def _edit_sequence(module, values: dict, order: torch.Tensor | None):
    """The sequence right after the position embeddings (timm's `patch_drop` output):
    position embeddings swapped, registers and patch tokens removed."""
    prefix = int(module.num_prefix_tokens)
    keep = kept_tokens(module, values)

    def edit(_module, _inputs, tokens: torch.Tensor) -> torch.Tensor:
        patches = tokens.shape[1] - prefix
        if values["positions"] != "keep":
            table = module.pos_embed[0, -patches:].to(tokens.dtype)
            new = torch.zeros_like(table) if values["positions"] == "zero" else table[order]
            tokens = torch.cat([tokens[:, :prefix], tokens[:, prefix:] - table + new], dim=1)
        return tokens[:, keep] if len(keep) < tokens.shape[1] else tokens
    return edit


def _sink_keys_in(keys: np.ndarray, kept: list[int]) -> list[list[tuple[int, int]]]:
    """Per block, (head, key) with the key's position in the shortened sequence; a head
    whose sink key was dropped has nothing left to switch off."""
    where = {token: position for position, token in enumerate(kept)}
    return [[(head, where[int(key)]) for head, key in enumerate(row) if int(key) in where]
            for row in keys]


def _edit_attention(block_index: int, values: dict, sinks: list[tuple[int, int]] | None):
    """Forward hook on a block's `attn_drop` (the post-softmax attention, B x H x Nq x Nk);
    `sinks` = (head, key) pairs of this block."""
    def edit(_module, _inputs, attn: torch.Tensor) -> torch.Tensor:
        if block_index in values["uniform"]:
            return attn * 0.0 + 1.0 / attn.shape[-1]  # kept in the graph (gradient 0)
        if not sinks:
            return attn
        heads = torch.as_tensor([head for head, _ in sinks], device=attn.device)
        keys = torch.as_tensor([key for _, key in sinks], device=attn.device)
        kept = attn.clone()
        kept[:, heads, :, keys] = 0.0
        return kept / kept.sum(-1, keepdim=True)
    return edit


def _edit_heads(off: torch.Tensor, fill: str):
    """Forward pre-hook on a block's `attn.proj`: its input is the heads' outputs side by
    side (channel h * d + j). `off` (rows, heads) bool says which heads to replace in each
    image of the batch (one row: the same heads in every image)."""
    def edit(_module, args):
        context = args[0]
        batch, tokens, width = context.shape
        heads = off.shape[-1]
        split = context.reshape(batch, tokens, heads, width // heads)
        fills = torch.zeros_like(split) if fill == "zero" else split.mean(1, keepdim=True)
        chosen = off.to(context.device)[:, None, :, None]
        return (torch.where(chosen, fills, split).reshape(batch, tokens, width), *args[1:])
    return edit


def changes_the_forward(values: dict) -> bool:
    """Whether any intervention acts inside the model (not only on its input pixels)."""
    return bool(values["heads_off"] or values["tokens_drop"] or values["sink_off"]
                or values["uniform"] or values["positions"] != "keep"
                or values["registers_off"] == "yes")


def shuffled_order(module, values: dict) -> torch.Tensor | None:
    """`position_order` when positions=shuffle. Draw it before taking the model's lock: the
    draw takes the process-wide rng lock, which is never taken inside a model's lock."""
    if values["positions"] != "shuffle" or module is None:
        return None
    return position_order(int(module.patch_embed.num_patches), values["seed"])


@contextmanager
def applied(module: torch.nn.Module, values: dict, sink_keys: np.ndarray | None = None,
            order: torch.Tensor | None = None):
    """Hooks that apply `values` to every forward of `module` inside the block, removed when
    it ends (also on error). Hold the model's lock around it: other sessions must never run
    the modified model. `order`: `shuffled_order`'s, for positions=shuffle. With nothing
    active, nothing is hooked (the plain forward)."""
    if values["positions"] == "shuffle" and order is None:
        raise ValueError("positions=shuffle needs its order (shuffled_order), drawn before "
                         "the model's lock is taken.")
    if not changes_the_forward(values):  # pixels only, or nothing: the plain forward
        yield
        return
    blocks = [block for kind, block in transformer_blocks(module) if kind == "self"]
    handles = []
    with ExitStack() as stack:
        stack.callback(lambda: [handle.remove() for handle in handles])
        if (values["tokens_drop"] or values["positions"] != "keep"
                or values["registers_off"] == "yes"):
            handles.append(module.patch_drop.register_forward_hook(
                _edit_sequence(module, values, order)))
        changed_attention = set(values["uniform"]) | set(values["sink_off"])
        if changed_attention:
            stack.enter_context(_unfused_attention(module))
        sinks = (None if sink_keys is None
                 else _sink_keys_in(sink_keys, kept_tokens(module, values)))
        for index in sorted(changed_attention):
            handles.append(blocks[index].attn.attn_drop.register_forward_hook(
                _edit_attention(index, values, None if sinks is None else sinks[index])))
        for index in sorted({block for block, _ in values["heads_off"]}):
            attn = blocks[index].attn
            off = torch.zeros(1, attn.num_heads, dtype=torch.bool)
            off[0, [h for b, h in values["heads_off"] if b == index]] = True
            handles.append(attn.proj.register_forward_pre_hook(
                _edit_heads(off, values["heads_fill"])))
        yield


def masked_pixels(model, pixels: torch.Tensor, patches: tuple, baseline: str) -> torch.Tensor:
    """`pixels` with the given patches replaced by the reference image `baseline`."""
    if not patches:
        return pixels
    cells = cell_mask(tuple(pixels.shape[-2:]), cell_size(model))
    chosen = torch.isin(cells, torch.as_tensor(patches))
    return torch.where(chosen, reference_pixels(model, pixels, baseline), pixels)


def sink_keys_of(model, image) -> np.ndarray:
    """(self-attention blocks, heads): each head's sink key in the plain forward."""
    return analyse_sinks(vit_capture(model, image)).keys


def output_under(model, pixels: torch.Tensor, values: dict,
                 sink_keys: np.ndarray | None = None) -> torch.Tensor:
    """The model's output for `pixels` (already masked) under the interventions: one
    forward under the model's lock."""
    order = shuffled_order(model.module, values)
    with model.lock, applied(model.module, values, sink_keys, order), torch.inference_mode():
        return model.module(pixels.to(model.device)).float().cpu()


# --- one image, before and after ---------------------------------------------------------------

DROP = ("drop = the target's score in the plain forward minus its score after the change "
        "(positive: what was changed helped the answer; negative: the score rose)")


def drop_words(drop: float, digits: int = 4) -> str:
    """A drop (`DROP`) in words that say which way the score went: 'fell by 0.0067',
    'rose by 0.0018', or 'did not move' when it rounds to 0 at `digits` decimals."""
    size = round(abs(drop), digits)
    if size == 0:
        return "did not move"
    return f"{'fell' if drop > 0 else 'rose'} by {size:.{digits}f}"


@dataclass
class Outcome:
    before: list  # Prediction, best first
    after: list
    target: dict  # index, label, score kind, before, after, drop (DROP)
    intervention: dict  # the active interventions and the convention
    maps: dict[str, np.ndarray] = field(default_factory=dict)  # under the intervention
    maps_skipped: str | None = None  # why no maps were recomputed

    def as_dict(self) -> dict:
        return {"before": {"top": [asdict(p) for p in self.before]},
                "after": {"top": [asdict(p) for p in self.after]},
                "target": self.target, "drop_means": DROP, "intervention": self.intervention,
                "maps": sorted(self.maps), "maps_skipped": self.maps_skipped}


def _score(model, head, output: torch.Tensor, target: int) -> float:
    from ..pipeline import class_scorer

    return float(class_scorer(model, target, head)(output)[0])


def intervene(model, image, target=None, head=None, maps: bool = True, **given) -> Outcome:
    """The prediction before and after the interventions `given` (names of `INTERVENTIONS`,
    values as strings or typed), the target's class score (None: the top prediction before)
    and, with `maps`, the maps under the intervention (`maps_under`). Cached by
    content; treat the result as read-only."""
    values = resolve(model, given)
    head = head_of(model, head)
    target = resolve_target(model, target, image, head)
    key = cache_key("intervention", model, target, maps, *sorted(values.items()),
                    image=image_sha256(image), head=head)
    return RESULTS.get_or_compute(key, lambda: _intervene(model, image, target, head, maps,
                                                          values))


def _intervene(model, image, target: int, head, maps: bool, values: dict) -> Outcome:
    from ..pipeline import score_kind
    from ..pipeline import model_output

    pixels = prepare(model, image).pixels
    sink_keys = sink_keys_of(model, image) if values["sink_off"] else None
    before_output = model_output(model, image)
    pixels = masked_pixels(model, pixels, values["patches_mask"], values["mask_baseline"])
    after_output = output_under(model, pixels, values, sink_keys)
    before, after = (_score(model, head, o, target) for o in (before_output, after_output))
    outcome = Outcome(
        before=predictions_of(head, before_output, TOP_K),
        after=predictions_of(head, after_output, TOP_K),
        target={"index": target, "label": head.class_names[target],
                "score_kind": score_kind(model, head), "before": before, "after": after,
                "drop": before - after},
        intervention={"values": _plain(active(values)), "convention": CONVENTION,
                      "sink_keys": None if sink_keys is None else {
                          str(b): sink_keys[b].tolist() for b in values["sink_off"]}})
    if not maps:
        outcome.maps_skipped = "not asked for"
    elif model.spec.family != "vit":
        outcome.maps_skipped = "maps under an intervention are recomputed for ViTs only"
    elif values["tokens_drop"] or values["registers_off"] == "yes":
        outcome.maps_skipped = ("the token sequence is shorter than the patch grid, so the "
                                "maps' patches are not all there")
    else:
        outcome.maps = maps_under(model, pixels, values, sink_keys, head.score_fn(target))
    return outcome


def _plain(values: dict) -> dict:
    return {k: [list(v) if isinstance(v, tuple) else v for v in value]
            if isinstance(value, tuple) else value for k, value in values.items()}


def maps_under(model, pixels, values: dict, sink_keys, score_fn) -> dict[str, np.ndarray]:
    """Attention (last block, [CLS] row, heads averaged), rollout (every block), GAE and
    ViT Grad-CAM (the method's defaults: F1, patch weights, last block) maps of a capture
    taken by the capture engine with the interventions hooked in before its recorders, so
    it records the changed attention and its gradients."""
    from ..methods.gae import gae_map
    from ..methods.rollout import attention_rollout, last_block_cls_attention
    from ..methods.vit_gradcam import taxonomy

    order = shuffled_order(model.module, values)
    with model.lock, applied(model.module, values, sink_keys, order), separate_forwards():
        capture = run_capture(model.module, pixels.to(model.device), score_fn)
    return {"attention": np.asarray(last_block_cls_attention(capture)[0], np.float32),
            "rollout": np.asarray(attention_rollout(capture).query_row(None)[0], np.float32),
            "gae": np.asarray(gae_map(capture)[0], np.float32),
            "vit-gradcam": taxonomy(capture).cell(len(capture.blocks) - 1, "F1", "patch").map}


# --- the output the head reads, for less work -------------------------------------------------

def head_reads_prefix_only(module) -> bool:
    """Whether the output reads only the prefix tokens after plain timm blocks: timm's
    VisionTransformer with the 'token' pool ([CLS]) or the distilled DeiT ([CLS] and
    [DIST]). Then the last block's MLP, norm and head need not run on the patches: a token's
    MLP reads that token alone (only the attention mixes tokens)."""
    from timm.models.deit import VisionTransformerDistilled
    from timm.models.vision_transformer import Block, VisionTransformer

    if not isinstance(module, VisionTransformer) or not len(module.blocks):
        return False
    plain_head = type(module).forward_head is VisionTransformerDistilled.forward_head or (
        type(module).forward_head is VisionTransformer.forward_head
        and module.global_pool == "token" and module.attn_pool is None)
    return (plain_head and type(module).forward_features is VisionTransformer.forward_features
            and type(module.blocks[-1]) is Block)


def last_block_on_prefix(block, tokens: torch.Tensor, prefix: int) -> torch.Tensor:
    """timm's `Block.forward` that keeps the first `prefix` tokens after the attention (every
    token's keys and values still count), so the MLP runs on those alone: one image at a
    time, since a matrix product's rounding depends on its number of rows and an image's
    numbers must not depend on the batch it came in."""
    tokens = tokens + block.drop_path1(block.ls1(block.attn(block.norm1(tokens))))
    tokens = tokens[:, :prefix]
    mlp = torch.cat([block.mlp(image) for image in block.norm2(tokens).split(1)])
    return tokens + block.drop_path2(block.ls2(mlp))


def output_of(module, pixels: torch.Tensor) -> torch.Tensor:
    """`module(pixels)`, with the last block's MLP and the norm on the prefix tokens only
    where the output reads no patch (`head_reads_prefix_only`; about 6 % less work on a
    12-block ViT). Hooks on the embeddings (timm's `patch_drop`) and the blocks fire as
    in `module(pixels)`."""
    if not head_reads_prefix_only(module):
        return module(pixels)
    tokens = module.norm_pre(module.patch_drop(module._pos_embed(module.patch_embed(pixels))))
    for block in module.blocks[:-1]:
        tokens = block(tokens)
    tokens = last_block_on_prefix(module.blocks[-1], tokens, int(module.num_prefix_tokens))
    return module.forward_head(module.norm(tokens))


# --- head importance: every head switched off, one at a time ----------------------------------

@dataclass
class HeadImportance:
    """drops[b, h] = the target's score in the plain forward minus its score with head h of
    block b switched off (positive: the head helped the answer), beside the attention
    stories the app tells about the same heads."""

    drops: np.ndarray  # (self-attention blocks, heads)
    score: float  # the target's score in the plain forward
    target: int
    label: str
    score_kind: str
    fill: str  # heads_fill convention
    sink_scores: np.ndarray  # (blocks, heads), xai_core.analysis.attention_sinks
    entropy: np.ndarray  # (blocks, heads) nats
    correlations: dict[str, float]  # Spearman rho of the drops with each story
    seconds: float
    forwards: int  # batches run (block steps, each in parts of default_batch_size)

    def as_dict(self) -> dict:
        return {"drops": self.drops.tolist(), "drop_means": DROP, "score": self.score,
                "target": self.target,
                "label": self.label, "score_kind": self.score_kind, "fill": self.fill,
                "correlations": self.correlations, "seconds": self.seconds,
                "batches": self.forwards}


def head_importance(model, image, target=None, head=None,
                    fill: str = BY_NAME["heads_fill"].default,
                    should_stop=None) -> HeadImportance:
    """Every (block, head) switched off on its own (`heads_fill` = `fill`), cached by content."""
    fill = BY_NAME["heads_fill"].parse(fill)
    module = model.module
    if model.spec.family != "vit" or not hasattr(module, "forward_head") or any(
            kind != "self" for kind, _ in transformer_blocks(module)):
        raise OptionError(f"Head importance needs a timm VisionTransformer; "
                          f"{model.spec.display_name} has another layout.")
    head = head_of(model, head)
    target = resolve_target(model, target, image, head)
    key = cache_key("head-importance", model, target, fill, image=image_sha256(image),
                    head=head)
    return RESULTS.get_or_compute(key, lambda: _head_importance(model, image, target, head,
                                                                fill, should_stop))


def _block_inputs(model, pixels: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
    """(what enters every block, the output) of one plain forward."""
    inputs: list[torch.Tensor] = []
    blocks = [block for _, block in transformer_blocks(model.module)]
    with model.lock, ExitStack() as stack, torch.inference_mode():
        for block in blocks:
            handle = block.register_forward_pre_hook(lambda _m, args: inputs.append(args[0]))
            stack.callback(handle.remove)
        output = model.module(pixels)
    return inputs, output


def _heads_off_step(model, block, tokens: torch.Tensor, off: torch.Tensor, fill: str,
                    prefix: int | None) -> torch.Tensor:
    """`block` on `tokens` with each row's heads `off` replaced (`_edit_heads`), under the
    model's lock; with `prefix`, only the first `prefix` tokens leave the block."""
    with model.lock, torch.inference_mode():
        handle = block.attn.proj.register_forward_pre_hook(_edit_heads(off, fill))
        try:
            if prefix is None:
                return block(tokens)
            return last_block_on_prefix(block, tokens, prefix)
        finally:
            handle.remove()


def _head_importance(model, image, target: int, head, fill: str, should_stop) -> HeadImportance:
    """All blocks x heads switched-off copies in one growing batch: a head changes nothing
    before its block, so the H copies that switch off a head of block b join the batch at
    block b, starting from what entered block b in one plain forward (78 block passes per
    head on a 12-block model instead of 144). The batch goes through each block in parts of
    `default_batch_size` (memory stays that of one batch), each part holding the model's
    lock for that part only, its hook removed before the lock is let go; the last block
    keeps only what the head reads (`last_block_on_prefix`)."""
    import time

    from scipy.stats import spearmanr

    from ..infra.faults import check_stop
    from ..pipeline import class_scorer, score_kind
    from ..pipeline import default_batch_size

    started = time.perf_counter()
    module, scorer = model.module, class_scorer(model, target, head)
    inputs, output = _block_inputs(model, prepare(model, image).pixels.to(model.device))
    base = float(scorer(output.float().cpu())[0])
    blocks, size = list(module.blocks), default_batch_size(model)
    heads = blocks[0].attn.num_heads
    keep = int(module.num_prefix_tokens) if head_reads_prefix_only(module) else None
    tokens, batches = inputs[0][:0], 0
    for index, block in enumerate(blocks):
        tokens = torch.cat([tokens, inputs[index].expand(heads, -1, -1)])
        off = torch.zeros(len(tokens), heads, dtype=torch.bool)
        off[-heads:] = torch.eye(heads, dtype=torch.bool)  # the copies that join here
        prefix = keep if index == len(blocks) - 1 else None
        parts = []
        for first in range(0, len(tokens), size):
            check_stop(should_stop)
            parts.append(_heads_off_step(model, block, tokens[first:first + size],
                                         off[first:first + size], fill, prefix))
        tokens, batches = torch.cat(parts), batches + len(parts)
    with model.lock, torch.inference_mode():
        out = module.forward_head(module.norm(tokens))
    drops = (base - scorer(out.float().cpu())).reshape(len(blocks), heads)
    analysis = analyse_sinks(vit_capture(model, image))
    correlations = {story: float(spearmanr(drops.ravel(), values.ravel())[0])
                    for story, values in (("sink_score", analysis.scores),
                                          ("entropy", analysis.entropy))}
    return HeadImportance(drops, base, target, head.class_names[target],
                          score_kind(model, head), fill, analysis.scores, analysis.entropy,
                          correlations, time.perf_counter() - started, batches)
