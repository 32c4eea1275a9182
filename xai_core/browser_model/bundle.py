"""What the browser needs to run the Explainer's model itself: the ONNX file
(`model_file`, built once per model, weights and precision, kept in the cache folder) and
the model's data (`model_data`: the layout, the k-NN bank and its open-set threshold, the
LayerNorms' weights the block cards quote), as one Explainer message.

`run` runs a model file with onnxruntime (Python): the tests and the bench compare what it
returns with the torch forward and with the server's answers (`answers`).
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
from ..studies.interventions import CONVENTION as SWITCH_CONVENTION
from ..metrics.faithfulness import score_kind
from ..studies.open_set import KNN_PERCENTILE, RULES, threshold
from ..pipeline import head_of
from ..analysis.tokens import prefix_token_names
from .graph import INPUTS, NORM_STEPS, OUTPUTS, ExplainerGraph, export_onnx
from .precision import halve_weights

GRAPH_FORMAT = 1  # bump when the graph's inputs, outputs or export change
PRECISIONS = ("fp32", "fp16")
DEFAULT_PRECISION = "fp16"  # weights stored as float16, arithmetic in float32
_BUILD_LOCK = threading.Lock()
# What the browser computes for the learner's own photo, and what it leaves to the server.
OWN_PHOTO_LIMITS = {
    "daam": "The DAAM map needs a backward pass (the gradient of the answer), which the "
            "browser model does not run: the ViT Lens app computes it for your photo.",
    "readout": "Reading each block out needs a memory bank per block, which this file does "
               "not hold: the ViT Lens app computes it for your photo.",
    "tour": "The guided tour is written from the server's analyses of a picture; it follows "
            "the recorded pictures.",
}


def model_file(model, precision: str = DEFAULT_PRECISION) -> Path:
    """The model's ONNX file for the browser (`graph.ExplainerGraph`), exported once and
    kept in the cache folder (named by model, weights and precision)."""
    if precision not in PRECISIONS:
        raise OptionError(f"precision must be one of {', '.join(PRECISIONS)}; got {precision}.")
    if model.random_weights:
        raise OptionError("The browser model needs trained weights; this model has random ones.")
    tag = f"{model.spec.id}-{weights_fingerprint(model.module)}-g{GRAPH_FORMAT}"
    folder = cache_dir() / "browser-model"
    with _BUILD_LOCK:
        if (folder / f"{tag}-{precision}.onnx").is_file():
            return folder / f"{tag}-{precision}.onnx"
        full = folder / f"{tag}-fp32.onnx"
        if not full.is_file():
            with model.lock:
                full = _written(full, lambda name: export_onnx(model.module,
                                                               model.spec.input_size, Path(name)))
        if precision == "fp32":
            return full
        halved = halve_weights(onnx.load(str(full)))
        return _written(folder / f"{tag}-{precision}.onnx", lambda name: onnx.save(halved, name))


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


def model_data(model, head=None) -> dict:
    """The model's facts and k-NN bank for the browser (one Explainer message's fields)."""
    head = head_of(model, head)
    if head.kind != "knn":
        raise OptionError("The browser model answers with the k-NN bank (DINOv2); this "
                          "model's head is another.")
    module = model.module
    graph = ExplainerGraph(module)
    grid = tuple(int(side) for side in module.patch_embed.grid_size)
    prefix = int(module.num_prefix_tokens)
    bank = head.bank
    first = graph.blocks[0]
    return {
        "format": GRAPH_FORMAT, "model": model.spec.id, "label": model.label,
        "inputs": list(INPUTS), "outputs": list(OUTPUTS), "norm_steps": list(NORM_STEPS),
        "input": list(model.spec.input_size), "grid": list(grid), "prefix": prefix,
        "prefix_names": prefix_token_names(module), "tokens": prefix + math.prod(grid),
        "blocks": len(graph.blocks), "heads": graph.heads,
        "head_dim": int(first.attn.head_dim), "width": int(module.embed_dim),
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
        "switch_convention": SWITCH_CONVENTION,
        "own_photo_limits": OWN_PHOTO_LIMITS,
    }


def model_message(model, head=None) -> bytes:
    return explainer.encode_message({"browser_model": model_data(model, head)})


# --- running a model file in Python (tests, bench) ----------------------------------------------

def session(path: Path):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def head_mask(blocks: int, heads: int, off=()) -> np.ndarray:
    """(blocks, heads) float32: 1 for a head on, 0 for each (block, head) in `off`."""
    mask = np.ones((blocks, heads), np.float32)
    for block, head_index in off:
        mask[block, head_index] = 0.0
    return mask


def run(runner, pixels: torch.Tensor, mask: np.ndarray) -> dict[str, np.ndarray]:
    """The graph's outputs by name for one image's pixels (1, 3, H, W)."""
    values = runner.run(None, {"pixels": pixels.numpy().astype(np.float32), "head_mask": mask})
    return dict(zip(OUTPUTS, values))


def torch_run(module, pixels: torch.Tensor, mask: np.ndarray) -> dict[str, np.ndarray]:
    """The same outputs from the torch module (the oracle of the export)."""
    with torch.no_grad():
        values = ExplainerGraph(module)(pixels, torch.from_numpy(mask))
    return {name: value.numpy() for name, value in zip(OUTPUTS, values)}
