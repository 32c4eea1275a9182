"""Tests for xai_core.images: samples, collage, upload validation, model input.

Every upload case is generated here with PIL or raw bytes; nothing is downloaded.
"""

from __future__ import annotations

import io
import random
import struct
import warnings
import zipfile
import zlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from PIL import Image

from xai_core.images import (
    COLLAGE_ID,
    SAMPLES,
    ImageError,
    fit_to_model,
    image_sha256,
    load_image_file,
    load_sample,
    load_upload,
    make_collage,
    shared_image,
    sample_ids,
    to_model_tensor,
)

# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def encode(image: Image.Image, fmt: str, **save_args) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **save_args)
    return buffer.getvalue()


def solid(color, size=(64, 48), mode="RGB") -> Image.Image:
    return Image.new(mode, size, color)


def png_with_header_size(width: int, height: int) -> bytes:
    """A small valid PNG whose IHDR claims width x height (CRC fixed, so PIL trusts it)."""
    data = bytearray(encode(solid((10, 20, 30), (32, 32)), "PNG"))
    assert data[12:16] == b"IHDR"
    data[16:24] = struct.pack(">II", width, height)
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(data[12:29])))
    return bytes(data)


def pixel(image: Image.Image, xy) -> tuple[int, int, int]:
    return image.getpixel(xy)


def close_to(actual, expected, tolerance=0) -> bool:
    return all(abs(a - e) <= tolerance for a, e in zip(actual, expected))


# ---------------------------------------------------------------------------
# samples and collage
# ---------------------------------------------------------------------------


def test_sample_ids_are_gallery_then_collage():
    assert sample_ids() == [*SAMPLES, COLLAGE_ID]
    assert list(SAMPLES)[:2] == ["chelsea", "coffee"]
    assert SAMPLES["chelsea"].label == "cat"
    assert SAMPLES["china"].label == "palace"


@pytest.mark.parametrize("sample_id", sample_ids())
def test_every_sample_loads_as_rgb(sample_id):
    image = load_sample(sample_id)
    assert image.mode == "RGB"
    assert min(image.size) >= 16
    # real photos, not a blank canvas
    assert np.asarray(image).std() > 10


def test_sample_sizes_match_the_shipped_files():
    assert load_sample("chelsea").size == (451, 300)
    assert load_sample("grace_hopper").size == (512, 600)


def test_unknown_sample_lists_valid_ids():
    with pytest.raises(ImageError) as error:
        load_sample("dog")
    message = str(error.value)
    assert "dog" in message
    for sample_id in sample_ids():
        assert sample_id in message


def test_collage_is_square_deterministic_and_two_sided():
    first, second = make_collage(), make_collage()
    assert first.mode == "RGB" and first.size == (448, 448)
    assert image_sha256(first) == image_sha256(second)
    assert load_sample(COLLAGE_ID).tobytes() == first.tobytes()
    pixels = np.asarray(first).astype(float)
    left, right = pixels[:, :224], pixels[:, 224:]
    assert np.abs(left - right).mean() > 20
    # the coffee half is dominated by the red-brown cup and saucer: red >> blue
    assert right[..., 0].mean() - right[..., 2].mean() > left[..., 0].mean() - left[..., 2].mean()


def test_collage_other_size():
    assert make_collage(224).size == (224, 224)
    with pytest.raises(ValueError):
        make_collage(225)


# ---------------------------------------------------------------------------
# hashing
# ---------------------------------------------------------------------------


def test_sha_changes_with_one_pixel():
    image = solid((1, 2, 3))
    changed = image.copy()
    changed.putpixel((5, 7), (1, 2, 4))
    assert image_sha256(image) == image_sha256(image.copy())
    assert image_sha256(image) != image_sha256(changed)


def test_shared_image_digest_is_the_content_hash_computed_once(monkeypatch):
    import gc
    import hashlib

    import xai_core.images as images

    image = load_sample("coffee")
    oracle = hashlib.sha256(f"RGB:{image.width}x{image.height}:".encode() + image.tobytes())
    assert shared_image(image) is image
    hashed, sha256 = [], hashlib.sha256
    monkeypatch.setattr(images.hashlib, "sha256", lambda: hashed.append(1) or sha256())
    assert image_sha256(image) == oracle.hexdigest() and not hashed  # no pass over the pixels
    twin = image.copy()  # not declared shared: hashed every time, changes seen
    twin.putpixel((0, 0), (0, 0, 0))
    assert image_sha256(twin) != oracle.hexdigest() and len(hashed) == 1
    key = id(image)
    del image
    gc.collect()
    assert key not in images._SHARED_DIGESTS  # forgotten with the image


def test_sha_distinguishes_size_with_same_bytes():
    assert image_sha256(solid((0, 0, 0), (4, 6))) != image_sha256(solid((0, 0, 0), (6, 4)))


# ---------------------------------------------------------------------------
# fit_to_model / to_model_tensor, checked against timm's own eval transform
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def photo() -> Image.Image:
    return load_sample("rocket")  # 640x427, landscape


@pytest.mark.parametrize("input_size", [(224, 224), (160, 224), (224, 160), (518, 518)])
@pytest.mark.parametrize("crop_pct", [1.0, 0.875])
def test_fit_to_model_exact_size(photo, input_size, crop_pct):
    fitted = fit_to_model(photo, input_size, crop_pct=crop_pct)
    assert fitted.mode == "RGB"
    assert fitted.size == (input_size[1], input_size[0])


def test_fit_to_model_squashes_at_crop_pct_one(photo):
    fitted = fit_to_model(photo, (160, 224), crop_pct=1.0)
    expected = photo.resize((224, 160), Image.Resampling.BICUBIC)
    assert fitted.tobytes() == expected.tobytes()


def test_fit_to_model_matches_torchvision_resize_and_center_crop(photo):
    from torchvision import transforms

    oracle = transforms.Compose(
        [
            transforms.Resize(256, interpolation=transforms.InterpolationMode.BICUBIC),
            transforms.CenterCrop(224),
        ]
    )
    fitted = fit_to_model(photo, (224, 224), crop_pct=0.875)
    assert np.array_equal(np.asarray(fitted), np.asarray(oracle(photo)))


@pytest.mark.parametrize("sample_id", ["rocket", "grace_hopper"])  # landscape, portrait
@pytest.mark.parametrize(
    "input_size, crop_pct, crop_mode",
    [
        ((224, 224), 0.875, "center"),
        ((160, 224), 0.9, "center"),
        ((224, 160), 0.875, "center"),
        ((160, 224), 1.0, "squash"),
    ],
)
def test_model_tensor_matches_timm_eval_transform(sample_id, input_size, crop_pct, crop_mode):
    from timm.data import create_transform

    photo = load_sample(sample_id)

    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    timm_transform = create_transform(
        input_size=(3, *input_size),
        crop_pct=crop_pct,
        crop_mode=crop_mode,
        interpolation="bicubic",
        mean=mean,
        std=std,
    )
    ours = to_model_tensor(fit_to_model(photo, input_size, crop_pct), mean, std)
    theirs = timm_transform(photo).unsqueeze(0)
    assert ours.shape == theirs.shape == (1, 3, *input_size)
    assert torch.allclose(ours, theirs, atol=1e-6)


def test_to_model_tensor_matches_numpy():
    rng = np.random.default_rng(0)
    array = rng.integers(0, 256, size=(20, 30, 3), dtype=np.uint8)
    mean, std = (0.5, 0.25, 0.1), (0.2, 0.3, 0.4)
    tensor = to_model_tensor(Image.fromarray(array), mean, std)
    expected = (array.astype(np.float64) / 255.0 - np.array(mean)) / np.array(std)
    expected = expected.transpose(2, 0, 1)[None]
    assert tensor.dtype == torch.float32 and tuple(tensor.shape) == (1, 3, 20, 30)
    np.testing.assert_allclose(tensor.numpy(), expected, atol=1e-5)


def test_fit_to_model_rejects_bad_arguments(photo):
    with pytest.raises(ValueError):
        fit_to_model(photo, (224, 224), crop_pct=1.5)
    with pytest.raises(ValueError):
        fit_to_model(photo, (224, 224), interpolation="cubic-ish")
    with pytest.raises(ValueError):
        fit_to_model(photo, (0, 224))


# ---------------------------------------------------------------------------
# upload validation: refused inputs
# ---------------------------------------------------------------------------


def refused_cases() -> dict[str, bytes]:
    png = encode(solid((200, 10, 10)), "PNG")
    jpeg = encode(solid((200, 10, 10), (256, 256)), "JPEG", quality=90)
    return {
        "zero bytes": b"",
        "truncated PNG": png[: len(png) // 2],
        "PNG cut inside the header": png[:20],
        "truncated JPEG": jpeg[: len(jpeg) // 2],
        "text renamed": b"These are my lecture notes, saved as photo.png\n" * 20,
        "HTML": b"<!DOCTYPE html><html><body><img src=x onerror=alert(1)></body></html>",
        "SVG text": (
            b'<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg" width="64" '
            b'height="64"><rect width="64" height="64" fill="red"/></svg>'
        ),
        "zip": _zip_bytes(),
        "1x1 PNG": encode(solid((0, 0, 0), (1, 1)), "PNG"),
        "8x8 PNG (smaller than a patch)": encode(solid((0, 0, 0), (8, 8)), "PNG"),
        "15x200 PNG": encode(solid((0, 0, 0), (15, 100)), "PNG"),
        "extreme aspect 2000x20": encode(solid((0, 0, 0), (2000, 20)), "PNG"),
        "extreme aspect 20x300": encode(solid((0, 0, 0), (20, 300)), "PNG"),
        "bomb 30000x30000 header": png_with_header_size(30000, 30000),
        "over our limit 8000x6000 header": png_with_header_size(8000, 6000),
        "PNG header with corrupt CRC": _png_with_bad_crc(),
    }


def _zip_bytes() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("photo.png", b"not really")
    return buffer.getvalue()


def _png_with_bad_crc() -> bytes:
    data = bytearray(encode(solid((1, 2, 3), (32, 32)), "PNG"))
    data[29] ^= 0xFF
    return bytes(data)


@pytest.mark.parametrize("name", list(refused_cases()))
def test_refused_uploads_raise_image_error(name):
    data = refused_cases()[name]
    with pytest.raises(ImageError) as error:
        load_upload(data)
    assert type(error.value) is ImageError
    assert error.value.__cause__ is None  # no PIL chain shown to a learner
    assert len(str(error.value)) > 10


def test_refusal_messages_say_what_to_do():
    def message(data, **limits):
        with pytest.raises(ImageError) as error:
            load_upload(data, **limits)
        return str(error.value)

    assert message(b"") == "The file is empty."
    assert "PNG, JPEG, WEBP, GIF, BMP or TIFF" in message(b"hello world\n" * 10)
    assert "8x8" in message(encode(solid((0, 0, 0), (8, 8)), "PNG"))
    assert "2000x20" in message(encode(solid((0, 0, 0), (2000, 20)), "PNG"))
    assert "8000x6000" in message(png_with_header_size(8000, 6000))
    assert "40 megapixels" in message(png_with_header_size(8000, 6000))
    assert "40 megapixels" in message(png_with_header_size(30000, 30000))
    assert "damaged" in message(refused_cases()["truncated JPEG"])


def test_too_many_bytes():
    png = encode(solid((5, 5, 5)), "PNG")
    with pytest.raises(ImageError, match="limit is"):
        load_upload(png, max_bytes=len(png) - 1)
    assert load_upload(png, max_bytes=len(png)).size == (64, 48)
    with pytest.raises(ImageError, match="10 MB"):
        load_upload(b"\x89PNG" + bytes(10 * 2**20))


def test_pil_bomb_warning_becomes_an_error_without_global_side_effects():
    # 100 MP is over PIL's own warning threshold (~89 MP) but under its hard error
    # (~179 MP); with our limit raised, only the warning-as-error can stop it.
    limit_before = Image.MAX_IMAGE_PIXELS
    filters_before = list(warnings.filters)
    with pytest.raises(ImageError, match="too many pixels"):
        load_upload(png_with_header_size(10000, 10000), max_pixels=200_000_000)
    assert Image.MAX_IMAGE_PIXELS == limit_before
    assert warnings.filters == filters_before


@pytest.mark.filterwarnings("ignore::UserWarning")  # PIL's TIFF metadata warnings
def test_mutated_files_never_leak_other_exceptions():
    """Random byte damage to valid files of every format: RGB image or ImageError only."""
    rng = random.Random(1234)
    base = solid((0, 0, 0), (40, 30))
    base.paste((250, 120, 0), (10, 5, 30, 25))
    originals = [
        encode(base, "PNG"),
        encode(base, "JPEG"),
        encode(base, "GIF"),
        encode(base, "BMP"),
        encode(base, "TIFF"),
        encode(base, "WEBP"),
    ]
    for original in originals:
        for _ in range(40):
            data = bytearray(original)
            for _ in range(rng.randint(1, 8)):
                data[rng.randrange(len(data))] = rng.randrange(256)
            if rng.random() < 0.3:
                data = data[: rng.randrange(1, len(data))]
            try:
                image = load_upload(bytes(data))
            except ImageError:
                continue
            assert image.mode == "RGB"


# ---------------------------------------------------------------------------
# upload validation: accepted inputs, converted correctly
# ---------------------------------------------------------------------------


def test_png_loads_as_new_rgb_with_exact_pixels():
    image = solid((12, 34, 56))
    image.putpixel((3, 4), (200, 100, 0))
    loaded = load_upload(encode(image, "PNG"))
    assert loaded.mode == "RGB" and loaded.size == (64, 48)
    assert loaded.tobytes() == image.tobytes()


def test_bmp_and_lossless_webp():
    image = solid((12, 34, 56), (20, 20))
    for data in (encode(image, "BMP"), encode(image, "WEBP", lossless=True)):
        loaded = load_upload(data)
        assert loaded.mode == "RGB"
        assert loaded.tobytes() == image.tobytes()


def test_cmyk_jpeg_converts_to_rgb():
    cmyk = solid((0, 255, 255, 0), (32, 32), mode="CMYK")  # pure red
    data = encode(cmyk, "JPEG", quality=95)
    assert Image.open(io.BytesIO(data)).mode == "CMYK"
    loaded = load_upload(data)
    assert loaded.mode == "RGB"
    assert close_to(pixel(loaded, (16, 16)), (255, 0, 0), tolerance=6)


def test_16_bit_grayscale_png_is_scaled_not_clipped():
    values = np.array([[0, 1000, 25700, 32896, 65535] * 4] * 20, dtype=np.uint16)
    source = Image.fromarray(values)
    data = encode(source, "PNG")
    assert Image.open(io.BytesIO(data)).mode == "I;16"
    loaded = load_upload(data)
    assert loaded.mode == "RGB" and loaded.size == (20, 20)
    gray = [pixel(loaded, (x, 0)) for x in range(5)]
    assert gray == [(0, 0, 0), (4, 4, 4), (100, 100, 100), (128, 128, 128), (255, 255, 255)]


def test_palette_with_transparency_goes_on_white():
    image = Image.new("P", (32, 32), 0)
    image.putpalette([255, 0, 0, 0, 255, 0])
    image.paste(1, (0, 0, 16, 32))  # left half index 1 (green) is transparent
    data = encode(image, "PNG", transparency=1)
    loaded = load_upload(data)
    assert loaded.mode == "RGB"
    assert pixel(loaded, (4, 4)) == (255, 255, 255)
    assert pixel(loaded, (24, 4)) == (255, 0, 0)


def test_grayscale_and_one_bit():
    assert pixel(load_upload(encode(solid(77, (20, 20), "L"), "PNG")), (5, 5)) == (77, 77, 77)
    one_bit = solid(0, (20, 20), "1")
    one_bit.paste(1, (10, 0, 20, 20))
    loaded = load_upload(encode(one_bit, "PNG"))
    assert pixel(loaded, (2, 2)) == (0, 0, 0)
    assert pixel(loaded, (15, 2)) == (255, 255, 255)


def test_la_and_rgba_are_composited_on_white():
    la = solid((0, 0), (24, 24), "LA")
    la.paste((0, 255), (0, 0, 8, 24))  # opaque black
    la.paste((0, 128), (8, 0, 16, 24))  # half transparent black
    loaded = load_upload(encode(la, "PNG"))
    assert pixel(loaded, (2, 2)) == (0, 0, 0)
    assert close_to(pixel(loaded, (10, 2)), (127, 127, 127), tolerance=1)
    assert pixel(loaded, (20, 2)) == (255, 255, 255)

    rgba = solid((255, 0, 0, 128), (24, 24), "RGBA")
    assert close_to(pixel(load_upload(encode(rgba, "PNG")), (5, 5)), (255, 127, 127), 1)


def test_animated_gif_uses_first_frame():
    frames = [solid(color, (32, 32)) for color in ((255, 0, 0), (0, 0, 255), (0, 255, 0))]
    data = encode(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=100)
    assert Image.open(io.BytesIO(data)).n_frames == 3
    loaded = load_upload(data)
    assert loaded.mode == "RGB"
    assert pixel(loaded, (16, 16)) == (255, 0, 0)


def test_multi_page_tiff_uses_first_page():
    pages = [solid((0, 200, 0), (32, 32)), solid((0, 0, 200), (48, 48))]
    data = encode(pages[0], "TIFF", save_all=True, append_images=pages[1:])
    assert Image.open(io.BytesIO(data)).n_frames == 2
    loaded = load_upload(data)
    assert loaded.size == (32, 32)
    assert pixel(loaded, (10, 10)) == (0, 200, 0)


def test_exif_orientation_6_is_applied():
    # Stored 80x40 with a red block in the stored top-left corner. Orientation 6
    # means "rotate 90 degrees clockwise to display": that corner ends up top-right.
    stored = solid((0, 0, 255), (80, 40))
    stored.paste((255, 0, 0), (0, 0, 16, 16))
    exif = Image.Exif()
    exif[0x0112] = 6
    loaded = load_upload(encode(stored, "JPEG", quality=95, exif=exif))
    assert loaded.size == (40, 80)
    assert close_to(pixel(loaded, (40 - 5, 5)), (255, 0, 0), tolerance=30)
    assert close_to(pixel(loaded, (5, 5)), (0, 0, 255), tolerance=30)
    assert close_to(pixel(loaded, (5, 75)), (0, 0, 255), tolerance=30)


@pytest.mark.parametrize("tail", ["html", "zip"])
def test_polyglot_png_loads_as_the_png(tail):
    """PNG bytes followed by an HTML or zip tail: PIL stops at IEND, so the PNG loads.

    That is safe: we return freshly decoded pixels and never serve the original bytes.
    """
    image = solid((10, 200, 30), (32, 32))
    extra = b"<html><script>alert(1)</script></html>" if tail == "html" else _zip_bytes()
    loaded = load_upload(encode(image, "PNG") + extra)
    assert loaded.mode == "RGB"
    assert loaded.tobytes() == image.tobytes()


def test_large_jpeg_is_downscaled_to_max_side():
    gradient = np.linspace(0, 255, 3000, dtype=np.float32)
    array = np.stack(
        [np.tile(gradient, (2000, 1)), np.full((2000, 3000), 128), np.tile(gradient[::-1], (2000, 1))],
        axis=-1,
    ).astype(np.uint8)
    data = encode(Image.fromarray(array), "JPEG", quality=85)
    loaded = load_upload(data)
    assert loaded.mode == "RGB" and loaded.size == (1024, 683)
    # still the same picture: red rises left to right, blue falls
    assert close_to(pixel(loaded, (2, 340)), (0, 128, 255), tolerance=12)
    assert close_to(pixel(loaded, (1021, 340)), (255, 128, 0), tolerance=12)
    assert load_upload(data, max_side=500).size == (500, 333)


def test_concurrent_uploads_are_independent():
    colors = [(i * 20, 255 - i * 20, 7) for i in range(12)]
    uploads = [encode(solid(color, (40, 40)), "PNG") for color in colors]
    uploads += [png_with_header_size(30000, 30000)] * 4
    filters_before = list(warnings.filters)

    def outcome(data):
        try:
            return pixel(load_upload(data), (20, 20))
        except ImageError:
            return "refused"

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(outcome, uploads))
    assert results == colors + ["refused"] * 4
    assert warnings.filters == filters_before


def test_load_upload_returns_a_new_image_each_time():
    data = encode(solid((1, 1, 1)), "PNG")
    first, second = load_upload(data), load_upload(data)
    first.putpixel((0, 0), (9, 9, 9))
    assert pixel(second, (0, 0)) == (1, 1, 1)


# ---------------------------------------------------------------------------
# files on disk
# ---------------------------------------------------------------------------


def test_load_image_file(tmp_path):
    path = tmp_path / "photo.jpg"  # content is PNG: the name does not matter
    path.write_bytes(encode(solid((40, 50, 60), (30, 20)), "PNG"))
    loaded = load_image_file(path)
    assert loaded.size == (30, 20) and pixel(loaded, (0, 0)) == (40, 50, 60)

    with pytest.raises(ImageError, match="no file"):
        load_image_file(tmp_path / "missing.png")
    with pytest.raises(ImageError, match="folder"):
        load_image_file(tmp_path)
    (tmp_path / "notes.png").write_text("hello")
    with pytest.raises(ImageError, match="not an image"):
        load_image_file(tmp_path / "notes.png")
    with pytest.raises(ImageError, match="limit is"):
        load_image_file(path, max_bytes=10)


# ---------------------------------------------------------------------------
# Decoded size: checked from the header, big images reduced before conversion
# ---------------------------------------------------------------------------


def test_16_bit_6300_png_is_reduced_without_full_size_float_copies():
    """The issue's 16-bit 6300x6300 PNG: four float64 copies at full size took 1.3 GB.
    Now it is box-reduced in its own mode before the 8-bit conversion: numpy's part of the
    peak (tracemalloc sees numpy's buffers, not PIL's) is that of the reduced image."""
    import tracemalloc

    from hostile_corpus import deep_png

    data = deep_png(6300, channels=1, left=0, right=0x9234)
    tracemalloc.start()
    try:
        loaded = load_upload(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # reduced to 2100x2100 (factor 3) first: its float64 copy is 34 MB; one at full size
    # would be 303 MB (the old code made four: 1.2 GB)
    assert peak < 96 * 2**20, peak / 2**20
    assert loaded.size == (1024, 1024) and loaded.info["source_size"] == (6300, 6300)
    assert pixel(loaded, (100, 500)) == (0, 0, 0)
    assert pixel(loaded, (900, 500)) == (146, 146, 146)  # 0x9234 / 257 = 145.6


def test_decoded_size_is_refused_from_the_header_before_decoding(monkeypatch):
    """Pixels x the bytes a pixel takes decoded (2 for 16-bit grayscale, 1 for 8-bit, 4 for
    RGB): over the limit, refused in words and the decoder never runs."""
    from PIL import ImageFile

    decodes = []
    real_load = ImageFile.ImageFile.load  # what PIL's PNG reader decodes with
    monkeypatch.setattr(ImageFile.ImageFile, "load",
                        lambda self: decodes.append(self.size) or real_load(self))
    deep = encode(Image.fromarray(np.zeros((3000, 2000), np.uint16)), "PNG")  # 12 MB decoded
    with pytest.raises(ImageError) as refused:
        load_upload(deep, max_decoded_bytes=10 * 2**20)
    assert str(refused.value) == (
        "The 16-bit image is 2000x3000 pixels and would take 11.4 MB of memory to open; the "
        "limit is 10 MB. Make it smaller and upload it again.")
    assert decodes == []
    assert load_upload(deep, max_decoded_bytes=12_000_000).size == (683, 1024)
    assert set(decodes) == {(2000, 3000)}  # the hook sees a decode when there is one
    gray = encode(solid(9, (3000, 2000), "L"), "PNG")  # 6 MB: 1 byte a pixel
    assert load_upload(gray, max_decoded_bytes=6_000_000).size == (1024, 683)
    rgb = encode(solid((9, 9, 9), (3000, 2000)), "PNG")  # 24 MB: PIL holds RGB in 4 bytes
    with pytest.raises(ImageError, match="22.9 MB"):
        load_upload(rgb, max_decoded_bytes=24_000_000 - 1)


def test_a_reduced_image_keeps_its_exif_orientation_and_transparency():
    stored = solid((0, 0, 255, 255), (4400, 2200), "RGBA")
    stored.paste((255, 0, 0, 0), (0, 0, 2200, 2200))  # left half: transparent
    exif = Image.Exif()
    exif[0x0112] = 6  # shown turned a quarter clockwise
    loaded = load_upload(encode(stored, "PNG", exif=exif.tobytes()))
    assert loaded.size == (512, 1024) and loaded.info["source_size"] == (2200, 4400)
    assert pixel(loaded, (256, 100)) == (255, 255, 255)  # the transparent half, on white, on top
    assert pixel(loaded, (256, 900)) == (0, 0, 255)
