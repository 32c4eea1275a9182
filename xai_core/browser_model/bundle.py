"""What the browser needs to run the Explainer's model itself: the model (`model_file`: the
graphs of `graph.py` and every block's weights, as one Explainer message, built once per
model, weights and precision and kept in the cache folder) and the model's data
(`model_data`: the layout, the k-NN bank and its open-set threshold, each block's bank for
the read-out, the LayerNorms' weights the block cards quote), as another.

`Runner` runs a model file with onnxruntime (Python) exactly as the browser's worker does
(dashboard/static/explainer/model/worker.js): the tests and the bench compare what it returns
with the torch forward and with the server's answers (`answers`).
"""

from __future__ import annotations

import math
import tempfile
import threading
from pathlib import Path

import numpy as np
import onnx
import torch

from ..lessons import explainer
from ..capture import transformer_blocks
from ..infra.errors import OptionError
from ..models import disk_cache
from ..models.knn import CLASS_SCORE_NEIGHBOURS, KNN_K, KNN_TEMPERATURE, weights_fingerprint
from ..models.settings import cache_dir
from ..methods.daam import CONVENTION as DAAM_CONVENTION
from ..studies.interventions import CONVENTION as SWITCH_CONVENTION
from ..metrics.faithfulness import score_kind
from ..studies.open_set import KNN_PERCENTILE, RULES, threshold
from ..pipeline import head_of
from ..analysis.tokens import prefix_token_names
from .graph import (BLOCK_OUTPUTS, BLOCK_WEIGHTS, GRAPHS, NORM_STEPS, OUTPUTS, Layout,
                    UnsupportedModel, block_weights, check_daam_ending, ending_weights,
                    export_onnx, self_attention_blocks)
from .precision import MIN_HALVED, halve_weights

GRAPH_FORMAT = 2  # bump when the graphs' inputs, outputs, the model message or export change
PRECISIONS = ("fp32", "fp16")
DEFAULT_PRECISION = "fp16"  # weights stored as float16, arithmetic in float32
_BUILD_LOCK = threading.Lock()
READOUT_BANK = "gallery bank of each block's features"  # studies/readout.block_heads


def _tag(model) -> str:
    return f"{model.spec.id}-{weights_fingerprint(model.module)}-g{GRAPH_FORMAT}"


def _stored(weight: torch.Tensor, precision: str) -> dict:
    """One weight as it travels: float16 for the large ones in fp16 precision (the graph
    casts it back to float32), float32 otherwise."""
    half = precision == "fp16" and weight.numel() >= MIN_HALVED
    return explainer.packed(weight.numpy().astype(np.float16 if half else np.float32),
                            "f16" if half else "f32")


def model_weights(module, precision: str) -> dict:
    """Every block's weights (by `graph.BLOCK_WEIGHTS` name) and the final norm's."""
    return {"blocks": [{name: _stored(value, precision) for name, value in
                        block_weights(block).items()} for block in self_attention_blocks(module)],
            "ending": {name: _stored(value, precision)
                       for name, value in ending_weights(module).items()}}


def _build(model, precision: str, path: str) -> None:
    """The model message: each graph's ONNX bytes, the inputs it kept, and the weights."""
    weights = model_weights(model.module, precision)
    halved = {name for name, item in {**weights["blocks"][0], **weights["ending"]}.items()
              if item["dtype"] == "f16"}
    with tempfile.TemporaryDirectory() as folder, model.lock:
        files = export_onnx(model.module, model.spec.input_size, Path(folder), halved)
        graphs = {name: onnx.load(str(file)) for name, file in files.items()}
    if precision == "fp16":
        graphs["embed"] = halve_weights(graphs["embed"])
    message = {"browser_graphs": {
        "format": GRAPH_FORMAT, "precision": precision,
        "graphs": {name: explainer.packed(np.frombuffer(graph.SerializeToString(), np.uint8),
                                          "u8") for name, graph in graphs.items()},
        "inputs": {name: [i.name for i in graph.graph.input] for name, graph in graphs.items()},
        "weights": weights}}
    Path(path).write_bytes(explainer.encode_message(message))


def model_file(model, precision: str = DEFAULT_PRECISION) -> Path:
    """The model for the browser (see the module note), exported once and kept in the
    cache folder (named by model, weights and precision)."""
    if precision not in PRECISIONS:
        raise OptionError(f"precision must be one of {', '.join(PRECISIONS)}; got {precision}.")
    if model.random_weights:
        raise OptionError("The browser model needs trained weights; this model has random ones.")
    path = cache_dir() / "browser-model" / f"{_tag(model)}-{precision}.vxb"
    with _BUILD_LOCK:
        if path.is_file():
            return path
        return _written(path, lambda name: _build(model, precision, name))


def _written(path: Path, write) -> Path:
    """`write` to `path` in the cache folder, or to a temporary folder when the cache cannot
    be written (a read-only or full disk): the export goes on either way."""
    try:
        disk_cache.replace_atomically(path, write)
        return path
    except OSError:
        fallback = Path(tempfile.mkdtemp(prefix="vit-lens-browser-model-")) / path.name
        write(str(fallback))
        return fallback


def _norm_weights(module) -> list[dict]:
    """Each block's LayerNorm weight sizes (‖γ‖, width), for `explainer.layer_norm_note`."""
    rows = []
    for _, block in transformer_blocks(module):
        row = {}
        for step, name in (("ln1", "norm1"), ("ln2", "norm2")):
            gamma = getattr(getattr(block, name, None), "weight", None)
            row[step] = None if gamma is None else float(gamma.detach().double().norm())
        rows.append(row)
    return rows


def _block_banks(model, head) -> list[dict]:
    """Each block's k-NN bank for the read-out (studies/readout.py: the gallery's views
    embedded at that block), features float32, labels as the bank's."""
    from ..studies.readout import block_heads

    heads, _ = block_heads(model, head)
    return [{"labels": list(h.bank.labels), "features": explainer.packed(h.bank.features.numpy(),
                                                                         "f32")} for h in heads]


def _daam(model) -> dict | str:
    """What DAAM in the browser needs (the k-NN variant's settings), or why it cannot run."""
    try:
        check_daam_ending(model.module)
    except UnsupportedModel as error:
        return str(error)
    return {"convention": DAAM_CONVENTION, "variant": "knn", "formula": "official",
            "channel_relu": False}


def model_data(model, head=None) -> dict:
    """The model's facts and k-NN banks for the browser (one Explainer message's fields)."""
    head = head_of(model, head)
    if head.kind != "knn":
        raise OptionError("The browser model answers with the k-NN bank (DINOv2); this "
                          "model's head is another.")
    module = model.module
    layout = Layout(module)
    grid = tuple(int(side) for side in module.patch_embed.grid_size)
    bank = head.bank
    return {
        "format": GRAPH_FORMAT, "model": model.spec.id, "label": model.label,
        "outputs": list(OUTPUTS), "block_outputs": list(BLOCK_OUTPUTS),
        "block_weights": list(BLOCK_WEIGHTS), "graphs": {k: list(v[1]) for k, v in GRAPHS.items()},
        "norm_steps": list(NORM_STEPS),
        "input": list(model.spec.input_size), "grid": list(grid), "prefix": layout.prefix,
        "prefix_names": prefix_token_names(module), "tokens": layout.prefix + math.prod(grid),
        "blocks": layout.blocks, "heads": layout.heads, "head_dim": layout.head_dim,
        "width": layout.width,
        "preprocess": {"mean": list(model.spec.mean), "std": list(model.spec.std),
                       "crop_pct": model.spec.crop_pct,
                       "interpolation": model.spec.interpolation},
        "norm_weights": _norm_weights(module),
        "knn": {"k": KNN_K, "temperature": KNN_TEMPERATURE,
                "class_score_neighbours": CLASS_SCORE_NEIGHBOURS,
                "labels": list(bank.labels), "sources": list(bank.sources),
                "classes": bank.class_names,
                "features": explainer.packed(bank.features.numpy(), "f32"),
                "threshold": threshold(model, head), "percentile": KNN_PERCENTILE,
                "rule": RULES["knn"], "score_kind": score_kind(model, head)},
        "readout": {"bank": READOUT_BANK, "banks": _block_banks(model, head)},
        "daam": _daam(model),
        "switch_convention": SWITCH_CONVENTION,
    }


def model_message(model, head=None) -> bytes:
    return explainer.encode_message({"browser_model": model_data(model, head)})


# --- running a model file in Python (tests, bench) ----------------------------------------------

def head_mask(blocks: int, heads: int, off=()) -> np.ndarray:
    """(blocks, heads) float32: 1 for a head on, 0 for each (block, head) in `off`."""
    mask = np.ones((blocks, heads), np.float32)
    for block, head_index in off:
        mask[block, head_index] = 0.0
    return mask


class Runner:
    """A model file run by onnxruntime as the browser's worker runs it: `forward` (embed,
    then the block graph once per block with that block's weights), `resume` (a head switch:
    from the first block with a head off, on the sequence that entered it in the forward)
    and `daam` (the backward, block by block down)."""

    def __init__(self, message: bytes, threads: int = 1):
        import onnxruntime

        found = explainer.decode_message(message)["browser_graphs"]
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3
        options.intra_op_num_threads = threads
        self.sessions = {name: onnxruntime.InferenceSession(
            explainer.decode(item).tobytes(), options, providers=["CPUExecutionProvider"])
            for name, item in found["graphs"].items()}
        self.inputs = found["inputs"]
        self.blocks = [{name: explainer.decode(item) for name, item in block.items()}
                       for block in found["weights"]["blocks"]]
        self.ending = {name: explainer.decode(item)
                       for name, item in found["weights"]["ending"].items()}

    def _run(self, graph: str, feeds: dict, outputs=None) -> list[np.ndarray]:
        wanted = set(self.inputs[graph])
        return self.sessions[graph].run(outputs, {k: v for k, v in feeds.items() if k in wanted})

    def _blocks(self, x, mask, start: int, outputs=None):
        """Blocks `start`.. on `x`: (per block outputs, the sequence entering each block)."""
        found, entered = [], []
        for b in range(start, len(self.blocks)):
            entered.append(x)
            values = self._run("block", {"x": x, "head_mask": mask[b], **self.blocks[b],
                                         **self.ending}, outputs)
            found.append(dict(zip(outputs or BLOCK_OUTPUTS, values)))
            x = found[-1]["x_out"]
        return found, entered + [x]

    def forward(self, pixels: torch.Tensor, mask: np.ndarray) -> dict[str, np.ndarray]:
        """`OUTPUTS` stacked over the blocks for one image's pixels (1, 3, H, W), and
        "inputs": the sequence entering each block (and leaving the last)."""
        tokens = self._run("embed", {"pixels": pixels.numpy().astype(np.float32)})[0]
        found, entered = self._blocks(tokens, mask, 0)
        out = {name: np.stack([f[name] for f in found]) for name in OUTPUTS if name != "output"}
        out["output"] = found[-1]["readout"][None]
        out["inputs"] = np.stack(entered)
        return out

    def resume(self, inputs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """The output (1, C) with `mask`'s heads off (at least one), restarted from the
        first block that has a head off, on what entered it in the forward with every head
        on."""
        start = int(np.flatnonzero((mask < 1).any(axis=1))[0])
        found, _ = self._blocks(inputs[start], mask, start, ["x_out", "readout"])
        return found[-1]["readout"][None]

    def daam(self, inputs: np.ndarray, score_grad: np.ndarray) -> np.ndarray:
        """Every block's DAAM map L_b (B, patches) for the gradient `score_grad` of the
        score at the output (k-NN: eq. 13's weights)."""
        grad = self._run("ending_grad", {"x": inputs[-1], "score_grad": score_grad,
                                         **self.ending})[0]
        maps = [None] * len(self.blocks)
        for b in reversed(range(len(self.blocks))):
            grad, maps[b] = self._run("block_grad", {"x": inputs[b], "grad_out": grad,
                                                     **self.blocks[b]})
        return np.stack(maps)


def torch_forward(module, pixels: torch.Tensor, mask: np.ndarray) -> dict[str, np.ndarray]:
    """`Runner.forward`'s outputs from the same graphs run by torch (the export's oracle)."""
    from .graph import BlockGraph, EmbedGraph

    graph, weights = BlockGraph(module), [block_weights(b) for b in self_attention_blocks(module)]
    ending = tuple(ending_weights(module).values())
    with torch.no_grad():
        x, found = EmbedGraph(module)(pixels), []
        for b, w in enumerate(weights):
            found.append(dict(zip(BLOCK_OUTPUTS, graph(x, torch.from_numpy(mask[b]),
                                                       *w.values(), *ending))))
            x = found[-1]["x_out"]
    out = {name: torch.stack([f[name] for f in found]).numpy() for name in OUTPUTS
           if name != "output"}
    out["output"] = found[-1]["readout"][None].numpy()
    return out


def runner(model, precision: str = DEFAULT_PRECISION, threads: int = 1) -> Runner:
    return Runner(model_file(model, precision).read_bytes(), threads)
