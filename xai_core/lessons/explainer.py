"""Compact data for the ViT Explainer page (its browser component draws everything).

Two payloads, both built from the shared cached capture and cached themselves:

- the OVERVIEW (once per model, image and head): the pipeline's stages with their real
  tensor shapes, every block's attention row of the [CLS] query per head (or, in a block
  without [CLS], the mean over the patch rows), attention rollout so far and the DAAM
  accumulated map after each block, per-token residual-stream norms, the prediction
  (ImageNet logits or the k-NN vote) and the [CLS] feature of a k-NN head;
- a BLOCK DETAIL (when the learner opens a block): that block's full attention, each
  head's query norms and per-token norms at each step of the block;
- a block's VECTORS (when its query · key panel comes into view): the queries and keys of
  every token (about half as many bytes as the detail: they travel only when wanted).

Arrays travel as raw little-endian bytes behind a JSON header (`encode_message`: no
base64, so a third fewer bytes than JSON). Non-negative maps (attention, rollout, DAAM) are 8-bit
with one scale per row (the row's largest patch value), so every value is within
scale/510 of the captured one. Queries and keys are signed 8-bit with one scale per token
and head (the largest |value| of its head_dim numbers): within scale/254. Prefix-token
attention and norms are float16 (relative error <= 2^-11). `decode_message` reads a
message back and `decode` turns a packed array into numpy (the tests use both).

Token layout comes from the capture: prefix tokens ([CLS], [DIST], registers), CaiT's
class-attention blocks (one [CLS] query over [CLS] + patches, after patch blocks that
have no [CLS]), any grid.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import numpy as np
import torch

from ..infra.cache import BoundedCache, cache_key
from ..capture import Capture, is_talking_heads, shared_forwards, transformer_blocks
from ..figures.layers import image_data_uri
from ..figures.style import HEATMAP_SCALE, colour_table
from ..images import model_crop_box, scale_words
from ..methods import METHODS
from ..methods.daam import CONVENTION as DAAM_CONVENTION
from ..methods.distance import cached_distances
from ..methods.rollout import AUTO_RULE, CONVENTION_NAMES, attention_rollout, auto_start, token_row
from ..models.knn import KNN_K, KNN_TEMPERATURE
from ..infra.errors import OptionError
from ..studies.open_set import open_set
from ..pipeline import head_of, predict, prepare, vit_capture
from ..studies.readout import readout
from ..analysis.token_marks import RULE as HIGH_NORM_RULE
from ..analysis.token_marks import high_norm_tokens, largest_norm_ratio
from ..analysis.tokens import prefix_token_names

# Payloads are a few MB at most; entries are keyed by content, shared by every session.
EXPLAINER_CACHE = BoundedCache(max_entries=32, max_bytes=192 * 2**20, shared=True)
# In every payload's cache key: a new field makes old stored payloads unreachable.
PAYLOAD_VERSION = 2

QUANTISATION = {
    "attention": "attention over patch keys as 8-bit integers, one scale per row (its "
                 "largest patch value): each value within (row max)/510 of the captured "
                 "one; prefix keys as float16",
    "qk": "queries and keys as 8-bit integers, one scale per token and head (its largest "
          "|value|): each value within (that largest)/254 of the captured one, so a q·k of d "
          "products within (‖q‖₁·max|k| + ‖k‖₁·max|q|)/254 + d·max|q|·max|k|/254²",
    "maps": "rollout and DAAM maps as 8-bit integers, one scale per block: within "
            "(block max)/510",
    "norms": "norms as float16 (relative error at most 0.05%)",
}
# The component's vocabulary (the guided tour names these; tests check them).
STAGE_IDS = ("image", "patches", "tokens", "blocks", "norm", "feature", "head", "top5")
OVERLAYS = ("attention", "rollout", "daam")
PACKED_DTYPES = {"u8": np.uint8, "i8": np.int8, "f16": np.float16, "f32": np.float32}
THUMBNAIL_SIDE = 320  # the learner's own picture, with the part the model keeps


# --- packing ---------------------------------------------------------------------------------

def quantise_unsigned(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Non-negative values -> (uint8 codes, float32 scale per row of the last axis)."""
    values = np.asarray(values, dtype=np.float64)
    scale = values.max(axis=-1, keepdims=True) if values.shape[-1] else np.zeros(
        values.shape[:-1] + (1,))
    safe = np.where(scale > 0, scale, 1.0)
    codes = np.rint(np.clip(values / safe, 0.0, 1.0) * 255).astype(np.uint8)
    return codes, scale[..., 0].astype(np.float32)


def quantise_signed(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Values of either sign -> (int8 codes in -127..127, float32 scale per row of the last
    axis: its largest |value|, which its code ±127 gives back exactly)."""
    values = np.asarray(values, dtype=np.float64)
    scale = np.abs(values).max(axis=-1, keepdims=True) if values.shape[-1] else np.zeros(
        values.shape[:-1] + (1,))
    safe = np.where(scale > 0, scale, 1.0)
    codes = np.rint(values / safe * 127).astype(np.int8)
    return codes, scale[..., 0].astype(np.float32)


def dequantise(codes: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """The inverse of `quantise_unsigned` (uint8 codes) and of `quantise_signed` (int8
    codes): what the browser computes."""
    levels = 127.0 if codes.dtype == np.int8 else 255.0
    return codes.astype(np.float64) * (np.asarray(scale, dtype=np.float64)[..., None] / levels)


def packed(array: np.ndarray, dtype: str) -> dict:
    """A numpy array to send: {"dtype", "array"} (counted by the bounded cache), written
    as raw bytes by `encode_message`."""
    return {"dtype": dtype, "array": np.ascontiguousarray(array, dtype=PACKED_DTYPES[dtype])}


def decode(item: dict) -> np.ndarray:
    """A packed array (as cached, or as `decode_message` returns it) as numpy."""
    return item["array"]


def _is_packed(value: Any) -> bool:
    return isinstance(value, dict) and "array" in value and "dtype" in value


MESSAGE_MAGIC = b"VXB1"
ALIGN = 8  # every array starts at a multiple of 8 bytes: the browser views it in place

# The wire format: every field of a message to the component, with what it holds when the
# sender has nothing new for it (None for a payload: the browser keeps what it has). Declared
# once here; the browser's twin, dashboard/static/explainer/component/wire.js FIELDS, is
# checked equal by tests/test_explainer_wire.py. Senders build messages with `message`
# (wire.js `message` in the browser), naming only the fields they set.
MESSAGE_FIELDS: dict[str, Any] = {
    "signature": None,  # what the overview depends on: model, weights, image content, head
    "presentation": False,  # presentation mode: larger type
    "overview": None,  # the overview and the pictures (None: the browser holds them)
    "detail": None,  # the shown block's detail (None: the browser keeps it)
    "vectors": None,  # that block's queries and keys (None: their panel is hidden, or kept)
    "daam": None,  # DAAM's frames when they come after the overview (the model in the browser)
    "tour": {"steps": None, "active": None, "resume": None},  # steps: None when held
    "initial": {"block": None, "stage": "blocks"},  # the view to open (a link's view too)
    "link": {"sample": None},  # "Copy link" on an upload names this sample instead
    "second_opinion": None,  # the sidebar CNN's answer for a picture the k-NN bank lacks
    "switch": {"live": False, "result": None},  # live: this sender can switch heads off
}

# What the component sends back, its `view` state (one rerun each time it changes): each
# field and its kind. Declared once here; wire.js VIEW_FIELDS is checked equal by
# tests/test_explainer_wire.py, the browser builds every view with wire.js `view` and the
# live page reads it field by field from this declaration (dashboard/explainer/component.py).
# Kinds: "int" and "text" (absent unless one), "ints" (a set), "pairs" ((block, head) pairs),
# "flag" (true only when true).
VIEW_FIELDS: dict[str, str] = {
    "block": "int",  # the block on screen
    "tour": "int",  # the tour step on screen (none: the tour is closed)
    "have": "text",  # the signature of the overview the browser holds
    "blocks": "ints",  # the blocks whose detail it keeps
    "qk": "ints",  # the blocks whose queries and keys it keeps
    "want_qk": "flag",  # the query · key panel is in view
    "off": "pairs",  # the heads the learner switched off, (block, head)
    "dismissed": "flag",  # the learner closed the tour
    "ask": "int",  # how often it asked again for everything: a new view each time
}


def message(**fields: Any) -> dict:
    """A message to the component: the fields given, every other at its declared "nothing
    new" value (`MESSAGE_FIELDS`). A name the wire format lacks is a ValueError."""
    unknown = sorted(fields.keys() - MESSAGE_FIELDS.keys())
    if unknown:
        raise ValueError(f"not fields of an Explainer message: {', '.join(unknown)}")
    return {name: fields[name] if name in fields else json.loads(json.dumps(default))
            for name, default in MESSAGE_FIELDS.items()}


def encode_message(message: dict) -> bytes:
    """One binary message for the browser: b"VXB1", the header's length (uint32,
    little-endian), the header (UTF-8 JSON in which each packed array became
    {"dtype", "shape", "offset"}, padded with spaces to a multiple of 8 bytes), then the
    arrays' little-endian bytes, `offset` counted from the end of the header."""
    chunks: list[bytes] = []
    size = 0

    def walk(value: Any) -> Any:
        nonlocal size
        if _is_packed(value):
            array = value["array"]
            data = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
            item = {"dtype": value["dtype"], "shape": list(array.shape), "offset": size}
            data += b"\0" * (-len(data) % ALIGN)
            chunks.append(data)
            size += len(data)
            return item
        if isinstance(value, dict):
            return {key: walk(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [walk(item) for item in value]
        return value

    header = json.dumps(walk(message), separators=(",", ":")).encode()
    header += b" " * (-(len(header) + 8) % ALIGN)
    return b"".join([MESSAGE_MAGIC, struct.pack("<I", len(header)), header, *chunks])


def decode_message(blob: bytes) -> dict:
    """The inverse of `encode_message` (what the browser does): arrays come back packed."""
    if blob[:4] != MESSAGE_MAGIC:
        raise ValueError("not an Explainer message")
    (length,) = struct.unpack_from("<I", blob, 4)
    body = memoryview(blob)[8 + length:]

    def walk(value: Any) -> Any:
        if isinstance(value, dict) and {"dtype", "shape", "offset"} <= value.keys():
            dtype = np.dtype(PACKED_DTYPES[value["dtype"]]).newbyteorder("<")
            count = math.prod(value["shape"])
            array = np.frombuffer(body, dtype, count, value["offset"]).reshape(value["shape"])
            return {"dtype": value["dtype"], "array": array}
        if isinstance(value, dict):
            return {key: walk(item) for key, item in value.items()}
        if isinstance(value, list):
            return [walk(item) for item in value]
        return value

    return walk(json.loads(bytes(blob[8:8 + length])))


def _unsigned_rows(values: np.ndarray) -> dict:
    codes, scale = quantise_unsigned(values)
    return {"codes": packed(codes, "u8"), "scale": packed(scale, "f32")}


def _signed_rows(values: np.ndarray) -> dict:
    codes, scale = quantise_signed(values)
    return {"codes": packed(codes, "i8"), "scale": packed(scale, "f32")}


def _norms(tensor: torch.Tensor) -> np.ndarray:
    """Per-token L2 norm of (tokens, C)."""
    return tensor.double().norm(dim=-1).numpy()


# --- the residual stream ---------------------------------------------------------------------

def branch_scales(block: torch.nn.Module) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The per-channel factors on the attention and MLP branches before each residual
    add: timm's LayerScale (`ls1.gamma`, `ls2.gamma`), CaiT's `gamma_1`/`gamma_2`, or
    None when the branch is added as it is."""
    def read(module_name: str, parameter_name: str):
        gamma = getattr(getattr(block, module_name, None), "gamma", None)
        if gamma is None:
            gamma = getattr(block, parameter_name, None)
        return None if gamma is None else gamma.detach().float().cpu()
    return read("ls1", "gamma_1"), read("ls2", "gamma_2")


def residual_stream(block: torch.nn.Module, acts: dict[str, torch.Tensor]):
    """(x_in, x_mid, x_out) of the query tokens, from the block output and its two branch
    outputs: x_out = x_mid + s2*mlp and x_mid = x_in + s1*attn_out."""
    scale_attn, scale_mlp = branch_scales(block)
    x_out = acts["out"][0].double()
    mlp, attn_out = acts["mlp"][0].double(), acts["attn_out"][0].double()
    x_mid = x_out - (mlp if scale_mlp is None else mlp * scale_mlp.double())
    x_in = x_mid - (attn_out if scale_attn is None else attn_out * scale_attn.double())
    return x_in, x_mid, x_out


# --- describing the model --------------------------------------------------------------------

def _pooling(module: torch.nn.Module, prefix_names: list[str]) -> tuple[str, str]:
    """How the model summarises the tokens: (a sentence, a label short enough for the
    pipeline's box)."""
    pool = getattr(module, "global_pool", "token")
    if "[DIST]" in prefix_names:
        return ("[CLS] and [DIST], each through its own linear head, the two score vectors "
                "averaged", "[CLS] and [DIST]")
    if pool == "avg":
        return "the mean of the patch tokens", "mean of patches"
    if pool == "token" and prefix_names:
        return "the [CLS] token", "the [CLS] token"
    return f"pooling '{pool}'", f"pooling '{pool}'"


def _branch_facts(block: torch.nn.Module) -> dict:
    """What the component says about a block's wiring beside its shapes."""
    return {"talking_heads": is_talking_heads(block),
            "layer_scale": any(scale is not None for scale in branch_scales(block))}


def _block_facts(capture: Capture, module: torch.nn.Module) -> list[dict]:
    modules = transformer_blocks(module)
    facts = []
    for record, (_, block) in zip(capture.blocks, modules):
        attn = record.acts["attn"]
        # numbered from 0 in forward order, as on the other pages and in the code
        label = f"Block {record.index}" + (" (class attention)" if record.kind == "class" else "")
        facts.append({"index": record.index, "kind": record.kind, "label": label,
                      "prefix": record.num_prefix_tokens, "nq": int(attn.shape[2]),
                      "nk": int(attn.shape[3]), "heads": int(attn.shape[1]),
                      **_branch_facts(block)})
    return facts


def _dims(capture: Capture, module: torch.nn.Module) -> dict:
    first = capture.blocks[0]
    heads, head_dim = first.acts["q"].shape[1], first.acts["q"].shape[3]
    block = transformer_blocks(module)[0][1]
    fc1 = getattr(block.mlp, "fc1", None)
    table = getattr(module, "pos_embed", None)
    return {"width": int(first.acts["out"].shape[-1]), "heads": int(heads),
            "head_dim": int(head_dim), "mlp_hidden": int(fc1.out_features) if fc1 else None,
            "blocks": len(capture.blocks),
            "self_blocks": sum(b.kind == "self" for b in capture.blocks),
            "class_blocks": sum(b.kind == "class" for b in capture.blocks),
            "pos_table": list(table.shape[1:]) if isinstance(table, torch.Tensor) else None}


def _stages(layout, dims: dict, prefix_names: list[str], pooling: tuple[str, str],
            prediction: dict, cls_joins_late: bool) -> list[dict]:
    """The pipeline's stages in forward order, with the shapes of the real tensors."""
    (height, width), (ph, pw) = layout.input_size, layout.patch_size
    rows, cols = layout.grid
    n_patch, width_d = layout.num_patches, dims["width"]
    tokens = n_patch if cls_joins_late else layout.num_tokens
    head = prediction["head"]
    blocks = f"{dims['self_blocks']} self-attention"
    if dims["class_blocks"]:
        blocks += f" + {dims['class_blocks']} class-attention"
    out_dim = prediction["output_shape"][-1]
    two_heads = "[DIST]" in prefix_names  # DeiT-distilled: [CLS] and [DIST] each get a head
    return [
        {"id": "image", "title": "Image", "shape": f"{height}×{width}×3"},
        {"id": "patches", "title": "Patches", "shape": f"{rows}×{cols} of {ph}×{pw}×3"},
        {"id": "tokens", "title": "Tokens",
         "shape": f"{tokens}×{width_d}"
                  + ("" if cls_joins_late or not prefix_names
                     else f" ({len(prefix_names)} prefix + {n_patch})")},
        {"id": "blocks", "title": "Blocks", "shape": blocks},
        {"id": "norm", "title": "Final LayerNorm", "shape": f"{layout.num_tokens}×{width_d}"},
        {"id": "feature", "title": "Feature", "shape": f"2×{width_d}" if two_heads else f"{width_d}",
         "note": pooling[1], "sentence": pooling[0]},
        {"id": "head", "title": "k-NN vote" if head == "knn" else "Linear head",
         "shape": (f"{prediction['bank_size']} bank entries" if head == "knn"
                   else f"2 × {width_d}→{out_dim}" if two_heads else f"{width_d}→{out_dim}")},
        {"id": "top5", "title": "Prediction", "shape": f"top-5 of {prediction['classes']}"},
    ]


def _prediction(model, image, head, capture: Capture) -> dict:
    top = predict(model, image, topk=5, head=head)
    result = {"head": head.kind, "classes": len(head.class_names),
              "output_shape": list(capture.output.shape),
              "top": [{"index": p.index, "label": p.label, "probability": p.probability}
                      for p in top]}
    found = open_set(model, image, head)
    result["open_set"] = found.as_dict() | {"why": found.why()}
    if head.kind == "knn":
        neighbours = head.neighbours(capture.output)
        result.update(k=KNN_K, temperature=KNN_TEMPERATURE, bank_size=len(head.bank.labels),
                      bank_classes=list(head.class_names),
                      neighbours=[{"label": n.label, "source": n.source,
                                   "similarity": round(n.similarity, 4)} for n in neighbours])
    return result


def _picture(image, model) -> dict:
    """The learner's picture as the page describes it: its size (and the file's own size
    when the upload was shrunk), the part of it the model keeps, and a small copy."""
    width, height = image.size
    source = image.info.get("source_size") or (width, height)
    left, top, right, bottom = model_crop_box(image.size, model.spec.input_size,
                                              model.spec.crop_pct)
    thumbnail = image.copy()
    thumbnail.thumbnail((THUMBNAIL_SIDE, THUMBNAIL_SIDE))
    return {"size": [width, height], "source": [int(source[0]), int(source[1])],
            "crop": [round(left, 2), round(top, 2), round(right, 2), round(bottom, 2)],
            "kept": round((right - left) * (bottom - top) / (width * height), 4),
            "squashed": model.spec.crop_pct == 1 and width * model.spec.input_size[0]
            != height * model.spec.input_size[1],
            "scale": scale_words(image.size, model.spec.input_size, model.spec.crop_pct),
            "image": image_data_uri(thumbnail)}


def _colormap() -> dict:
    """Inferno as a 256-entry RGB table, from the same stops as every Plotly map."""
    return packed(colour_table(HEATMAP_SCALE), "u8")


# --- per-block rows for the animation --------------------------------------------------------

def _query_rows(capture: Capture) -> list[dict]:
    """Per block and head: the [CLS] row (or the mean patch row) over the patch grid,
    8-bit per head, and the prefix keys' values."""
    grid = capture.layout.grid
    rows = []
    for record in capture.blocks:
        attn = record.acts["attn"][0].double().numpy()  # (H, Nq, Nk)
        maps, prefixes, what = [], [], ""
        for head in attn:  # a class block's one query is [CLS]: token_row reads its row 0
            grid_map, prefix_values, what = token_row(head, record.num_prefix_tokens, grid)
            maps.append(grid_map.reshape(-1))
            prefixes.append(prefix_values)
        rows.append({"what": what, **_unsigned_rows(np.stack(maps)),
                     "prefix": packed(np.stack(prefixes), "f16")})
    return rows


def _rollout_frames(capture: Capture, start: int) -> dict:
    rolled = attention_rollout(capture, start=start)
    maps, prefixes, what = [], [], ""
    for matrix in rolled.matrices:
        grid_map, prefix_values, what = rolled.query_row(None, matrix)
        maps.append(grid_map.reshape(-1))
        prefixes.append(prefix_values)
    return {"blocks": rolled.block_indices, "what": what,
            "convention": CONVENTION_NAMES["oracle"], **_unsigned_rows(np.stack(maps)),
            "prefix": packed(np.stack(prefixes), "f16")}


def _sink_facts(model, image) -> tuple[dict, int]:
    """The sink analysis the app's rollout starts from (start=auto, as on page 4), with
    block and head numbers as indices; and the rollout start position it implies."""
    analysis = METHODS["sinks"](model, image).detail
    auto = auto_start(analysis)
    strongest = analysis.strongest()
    sink = lambda s: {"block": s.block, "head": s.head, "score": round(s.score, 4),  # noqa: E731
                      "key": s.key_name, "on_patch": s.on_patch,
                      "patch": s.key - analysis.num_prefix_tokens if s.on_patch else None}
    facts = {"strongest": sink(strongest),
             "heads": [sink(s) for s in analysis.sink_heads()],  # every sink head
             "dominated": [analysis.blocks[p] for p in analysis.sink_dominated()],
             "left_out": [{"block": entry["block"],
                           "heads": [{"head": h["head"], "score": h["score"], "key": h["key"]}
                                     for h in entry["sink_heads"]]} for entry in auto.left_out],
             "rule": AUTO_RULE}
    return facts, auto.start


def _distance_facts(model, image) -> dict:
    """Mean attention distance of every head of every self-attention block (page 3's
    default convention, from the same cache), in pixels: the tour quotes it."""
    measured = cached_distances(model, image, "exclude", False)
    return {"blocks": measured.blocks, "mad": np.round(measured.mad, 3).tolist(),
            "reference": round(measured.reference, 3), "convention": measured.convention}


def _high_norm(capture: Capture) -> dict:
    marks = [{"patch": t.patch, "block": t.block, "ratio": round(t.ratio, 2),
              "gap": round(t.gap, 2)} for t in high_norm_tokens(capture)]
    top = largest_norm_ratio(capture)
    return {"rule": HIGH_NORM_RULE, "flagged": marks,
            "largest": {"patch": top.patch, "block": top.block, "ratio": round(top.ratio, 2),
                        "gap": round(top.gap, 2)}}


def _daam_frames(model, image, head, target: int) -> dict:
    result = METHODS["daam"](model, image, target=target, head=head).detail
    frames = result.D.reshape(len(result.D), -1)
    return {"blocks": result.block_indices, "labels": result.block_labels,
            "target": result.target_label, "variant": result.variant,
            "convention": DAAM_CONVENTION, **_unsigned_rows(frames)}


def _readout_facts(model, image, head) -> dict:
    """What each block would answer (xai_core.studies.readout, image level): its top class and that
    class's share, and the final answer's class score read out there."""
    try:
        found = readout(model, image, head=head, patches=False)
    except OptionError as error:  # not a timm ViT (e.g. class-attention blocks)
        return {"unavailable": str(error)}
    return {"label": found.label, "score_kind": found.score_kind, "bank": found.bank,
            "first_block": found.first_block,
            "blocks": [{"label": row[0].label, "share": round(row[0].probability, 4),
                        "target_score": round(float(score), 4)}
                       for row, score in zip(found.top, found.target_scores)]}


def head_switch(model, image, head, off: list[tuple[int, int]]) -> dict:
    """The Explainer's head switch: the top-5 before and after switching these (block,
    head) pairs off (page 9's `heads_off`, zero convention) and the answer's class score
    before and after, with its drop (before minus after, `interventions.DROP`) and the drop
    in words. {"off", "error"} when the pairs are not heads of this model."""
    from ..studies.interventions import CONVENTION, drop_words, intervene

    pairs = [[int(b), int(h)] for b, h in off]
    try:
        outcome = intervene(model, image, head=head, maps=False,
                            heads_off=tuple(tuple(pair) for pair in pairs))
    except OptionError as error:
        return {"off": pairs, "error": str(error)}
    top = lambda predictions: [{"label": p.label, "share": round(p.probability, 4)}  # noqa: E731
                               for p in predictions]
    target = outcome.target
    return {"off": pairs, "before": top(outcome.before), "after": top(outcome.after),
            "target": {"label": target["label"], "score_kind": target["score_kind"],
                       "before": round(target["before"], 4), "after": round(target["after"], 4),
                       "drop": round(target["drop"], 4), "words": drop_words(target["drop"])},
            "convention": CONVENTION}


# --- the two payloads ------------------------------------------------------------------------

def build_overview(model, image, head=None) -> dict:
    """Everything the Explainer draws before a block is opened (uncached)."""
    head = head_of(model, head)
    # One forward for the capture, the read-out and DAAM's backward (`shared_forwards`): the
    # plain capture and DAAM's hold the same activations, and the pass's graph is freed
    # as soon as DAAM is done.
    with shared_forwards():
        capture = vit_capture(model, image)
        prediction = _prediction(model, image, head, capture)
        readout_facts = _readout_facts(model, image, head)
        try:
            daam = _daam_frames(model, image, head, prediction["top"][0]["index"])
        except ValueError as error:  # e.g. no block with a [CLS] query
            daam = {"unavailable": str(error)}
    prepared = prepare(model, image)
    module = model.module
    layout = capture.layout
    prefix_names = prefix_token_names(module)
    dims = _dims(capture, module)
    cls_joins_late = bool(getattr(module, "blocks_token_only", None))
    blocks = _block_facts(capture, module)
    for fact, record in zip(blocks, capture.blocks):
        fact["norm_out"] = packed(_norms(record.acts["out"][0]), "f16")
    first_block = transformer_blocks(module)[0][1]
    embeddings = residual_stream(first_block, capture.blocks[0].acts)[0]
    overview = {
        "model": {"id": model.spec.id, "label": model.label, "random": model.random_weights,
                  "weights": model.weights_source},
        "layout": {"prefix_names": prefix_names, "prefix": layout.num_prefix_tokens,
                   "grid": list(layout.grid), "patch": list(layout.patch_size),
                   "input": list(layout.input_size), "tokens": layout.num_tokens,
                   "patches": layout.num_patches,
                   "cls_joins_late": cls_joins_late},
        "dims": dims, "blocks": blocks, "prediction": prediction,
        "stages": _stages(layout, dims, prefix_names, _pooling(module, prefix_names),
                          prediction, cls_joins_late),
        "image": image_data_uri(prepared.model_image),
        "picture": _picture(image, model),
        "preprocess": {"mean": list(model.spec.mean), "std": list(model.spec.std),
                       "crop_pct": model.spec.crop_pct,
                       "interpolation": model.spec.interpolation},
        "colormap": _colormap(),
        "embedding_norms": packed(embeddings.norm(dim=-1).numpy(), "f16"),
        "query_rows": _query_rows(capture),
        "high_norm": _high_norm(capture),
        "distance": _distance_facts(model, image),
        "quantisation": QUANTISATION,
    }
    overview["readout"] = readout_facts
    overview["sinks"], start = _sink_facts(model, image)
    overview["rollout"] = _rollout_frames(capture, start)
    overview["feature"] = (packed(capture.output[0].numpy(), "f16") if head.kind == "knn"
                           else None)
    overview["daam"] = daam
    return overview


def _block_record(model, image, block: int):
    capture = vit_capture(model, image)
    if not 0 <= block < len(capture.blocks):  # numbered from 0, as the component shows them
        raise ValueError(f"Block must be 0-{len(capture.blocks) - 1}; got {block}.")
    return capture.blocks[block]


def layer_norm_note(norm: torch.nn.Module | None, before: np.ndarray,
                    after: np.ndarray) -> str | None:
    """Why a token's length jumps (or drops) across a LayerNorm, in this block's numbers:
    the norm sets every token to mean 0 and standard deviation 1 over its channels (length
    sqrt(C)), then scales each channel by a learned gamma and adds a learned beta. None for a
    norm without learned weights."""
    gamma = getattr(norm, "weight", None)
    if gamma is None:
        return None
    gamma = gamma.detach().double()
    width, size = gamma.numel(), float(gamma.norm())
    return (f"LayerNorm gives every token mean 0 and standard deviation 1 over its {width} "
            f"numbers (a length of √{width} ≈ {math.sqrt(width):.3g}, whatever it had), then "
            f"multiplies each number by a learned weight γ (here ‖γ‖ = {size:.3g}) "
            f"and adds a learned β: so every token leaves at a similar length (median "
            f"{float(np.median(after)):.3g}) whatever it came in with (median "
            f"{float(np.median(before)):.3g}).")


def build_block_detail(model, image, block: int) -> dict:
    """One block's full attention, query norms and per-token norms (uncached)."""
    record = _block_record(model, image, block)
    module_block = transformer_blocks(model.module)[block][1]
    acts, prefix = record.acts, record.num_prefix_tokens
    attn = acts["attn"][0].double().numpy()  # (H, Nq, Nk)
    heads, nq, nk = attn.shape
    x_in, x_mid, x_out = residual_stream(module_block, acts)
    context = acts["context"][0].double()
    head_dim = acts["q"].shape[-1]
    context_heads = context.reshape(nq, heads, head_dim).norm(dim=-1).T.numpy()
    return {
        "block": block, "kind": record.kind, "nq": nq, "nk": nk, "prefix": prefix,
        "heads": heads, "head_dim": int(head_dim), **_branch_facts(module_block),
        "attention": {**_unsigned_rows(attn[:, :, prefix:]),
                      "prefix": packed(attn[:, :, :prefix], "f16")},
        "q_norms": packed(_norms(acts["q"][0]), "f16"),  # (heads, tokens)
        "norms": {name: packed(values, "f16") for name, values in {
            "x_in": _norms(x_in), "ln1": _norms(acts["ln1"][0]), "context": _norms(context),
            "attn_out": _norms(acts["attn_out"][0]), "x_mid": _norms(x_mid),
            "ln2": _norms(acts["ln2"][0]), "mlp": _norms(acts["mlp"][0]),
            "x_out": _norms(x_out)}.items()},
        "context_heads": packed(context_heads, "f16"),
        # why the lengths jump at each norm (the cards show 1.96 -> 44 at LayerNorm 2)
        "norm_notes": {
            "ln1": layer_norm_note(getattr(module_block, "norm1", None), _norms(x_in),
                                   _norms(acts["ln1"][0])),
            "ln2": layer_norm_note(getattr(module_block, "norm2", None), _norms(x_mid),
                                   _norms(acts["ln2"][0]))},
    }


def build_block_vectors(model, image, block: int) -> dict:
    """One block's queries and keys, (heads, tokens, head_dim) codes each with a
    (heads, tokens) scale: 8-bit, half the bytes of float16 (uncached)."""
    acts = _block_record(model, image, block).acts
    return {"block": block, "q": _signed_rows(acts["q"][0].numpy()),
            "k": _signed_rows(acts["k"][0].numpy())}


def overview_payload(model, image, head=None) -> dict:
    """`build_overview`, cached by model, weights, head and image content."""
    head = head_of(model, head)
    key = cache_key("explainer-overview", model, PAYLOAD_VERSION,
                    image.info.get("source_size"),
                    image=prepare(model, image).sha256, head=head)
    return EXPLAINER_CACHE.get_or_compute(key, lambda: build_overview(model, image, head))


def block_payload(model, image, block: int) -> dict:
    """`build_block_detail`, cached by model, weights, image content and block."""
    key = cache_key("explainer-block", model, PAYLOAD_VERSION, int(block),
                    image=prepare(model, image).sha256)
    return EXPLAINER_CACHE.get_or_compute(key, lambda: build_block_detail(model, image, block))


def vectors_payload(model, image, block: int) -> dict:
    """`build_block_vectors`, cached by model, weights, image content and block."""
    key = cache_key("explainer-vectors", model, PAYLOAD_VERSION, int(block),
                    image=prepare(model, image).sha256)
    return EXPLAINER_CACHE.get_or_compute(key, lambda: build_block_vectors(model, image, block))
