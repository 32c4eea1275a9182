"""Image I/O for ViT Lens: sample gallery, safe uploads, and the exact model input.

Pure Python (PIL, numpy, torch, torchvision); never imports streamlit.

Every public function either returns a fresh RGB `PIL.Image.Image` or raises
`ImageError` with a message a learner can act on. Uploads are validated by
their content, never their file name: the uploader's `type=` checks only the
extension.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import threading
import warnings
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from types import MappingProxyType

import numpy as np
import torch
import torchvision.transforms.v2.functional as TF
from PIL import Image, ImageOps, UnidentifiedImageError


class ImageError(ValueError):
    """An image we refuse or cannot read; the message is meant for the learner."""


# ---------------------------------------------------------------------------
# Sample gallery (photos shipped inside installed PyPI packages)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """A gallery photo. `loader_path` is "<import package>/<path inside it>"."""

    id: str
    title: str
    label: str
    loader_path: str


_PACKAGE_NAMES = {  # import name -> the name a learner or admin would install
    "skimage": "scikit-image",
    "sklearn": "scikit-learn",
    "matplotlib": "matplotlib",
}

SAMPLES: MappingProxyType[str, Sample] = MappingProxyType(
    {
        sample.id: sample
        for sample in (
            Sample("chelsea", "Chelsea the cat", "cat", "skimage/data/chelsea.png"),
            Sample("coffee", "Cup of coffee", "coffee cup", "skimage/data/coffee.png"),
            Sample("astronaut", "Astronaut", "astronaut", "skimage/data/astronaut.png"),
            Sample("rocket", "Rocket on the launch pad", "rocket", "skimage/data/rocket.jpg"),
            Sample("motorcycle", "Motorcycle", "motorcycle", "skimage/data/motorcycle_left.png"),
            Sample("china", "Chinese palace", "palace", "sklearn/datasets/images/china.jpg"),
            Sample("flower", "Flower", "flower", "sklearn/datasets/images/flower.jpg"),
            Sample(
                "grace_hopper",
                "Grace Hopper",
                "person",
                "matplotlib/mpl-data/sample_data/grace_hopper.jpg",
            ),
        )
    }
)

DEFAULT_SAMPLE = next(iter(SAMPLES))  # the picture the app opens on (the cat)
COLLAGE_ID = "collage"
COLLAGE_TITLE = "Cat and coffee cup (collage)"

# Crop boxes (left, top, right, bottom), each a 1:2 portrait strip chosen by eye:
# the cat's eye, nose and whiskers; the whole cup with its handle and spoon.
_COLLAGE_CROPS = {
    "chelsea": (150, 0, 300, 300),  # source 451x300
    "coffee": (188, 0, 388, 400),  # source 600x400
}


def sample_ids() -> list[str]:
    """Gallery ids in display order, then the collage."""
    return [*SAMPLES, COLLAGE_ID]


def sample_path(sample_id: str) -> Path:
    """The file of a gallery sample, located through its installed package."""
    sample = _get_sample(sample_id)
    package, _, inner_path = sample.loader_path.partition("/")
    install_name = _PACKAGE_NAMES.get(package, package)
    # find_spec locates the package without importing it (sklearn imports are slow).
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ImageError(
            f"The sample '{sample_id}' comes with the {install_name} package, "
            "which is not installed."
        )
    path = Path(next(iter(spec.submodule_search_locations))) / inner_path
    if not path.is_file():
        raise ImageError(
            f"The sample '{sample_id}' is missing from the installed {install_name} "
            f"package (expected {inner_path})."
        )
    return path


def load_sample(sample_id: str) -> Image.Image:
    """A gallery photo or the collage, as a new RGB image."""
    if sample_id == COLLAGE_ID:
        return make_collage()
    return load_image_file(sample_path(sample_id))


def make_collage(size: int = 448) -> Image.Image:
    """A square two-object image: the cat on the left half, the coffee cup on the right.

    No shipped photo holds two ImageNet classes; this one lets class-discriminative
    maps show that "cat" and "coffee cup" light up different halves.
    """
    if size < 32 or size % 2:
        raise ValueError(f"collage size must be an even number of pixels >= 32, got {size}")
    collage = Image.new("RGB", (size, size))
    for column, sample_id in enumerate(("chelsea", "coffee")):
        strip = load_sample(sample_id).crop(_COLLAGE_CROPS[sample_id])
        strip = strip.resize((size // 2, size), Image.Resampling.LANCZOS)
        collage.paste(strip, (column * size // 2, 0))
    return collage


def _get_sample(sample_id: str) -> Sample:
    try:
        return SAMPLES[sample_id]
    except KeyError:
        raise ImageError(
            f"There is no sample called '{sample_id}'. Choose one of: "
            + ", ".join(sample_ids())
            + "."
        ) from None


# ---------------------------------------------------------------------------
# Uploads: validate by content, decode fully, normalise to RGB
# ---------------------------------------------------------------------------

UPLOAD_FORMATS = ("PNG", "JPEG", "WEBP", "GIF", "BMP", "TIFF")
# file name endings of those formats (the uploader's list and the benchmark's folder scan)
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".gif", ".bmp", ".tif", ".tiff")
MIN_SIDE = 16  # smaller than one ViT patch is meaningless to explain
MAX_ASPECT_RATIO = 10

_NOT_AN_IMAGE = "This file is not an image we can read (PNG, JPEG, WEBP, GIF, BMP or TIFF)."
_DAMAGED = (
    "This image file is damaged or incomplete, so it cannot be decoded. "
    "Try saving it again as PNG or JPEG."
)
_HIGH_BIT_DEPTH_MODES = ("I;16", "I;16L", "I;16B", "I;16N", "I", "F")
# Bytes per pixel PIL holds for a decoded mode (its one-byte and 16-bit modes; every other
# mode, 16-bit RGB(A) PNGs included, is held in 4 bytes a pixel).
_MODE_BYTES = {"1": 1, "L": 1, "P": 1, "I;16": 2, "I;16L": 2, "I;16B": 2, "I;16N": 2}
# The most one upload may take decoded: 40 megapixels at 4 bytes (about 153 MB). A decoded
# image is reduced (a box average, PIL's `reduce` in `resize`) while it is still at least
# twice `max_side`, before any conversion makes copies of it.
MAX_DECODED_BYTES = 160 * 2**20

# warnings.catch_warnings swaps a process-wide filter list (not thread-safe before
# Python 3.14); serialising our own uses keeps concurrent uploads from restoring
# each other's filters and leaving the "error" filter installed for everyone.
_WARNINGS_LOCK = threading.Lock()


def load_upload(
    data: bytes,
    max_bytes: int = 10 * 2**20,
    max_pixels: int = 40_000_000,
    max_side: int = 1024,
    max_decoded_bytes: int = MAX_DECODED_BYTES,
) -> Image.Image:
    """Validate uploaded bytes and return a new RGB image, longer side <= max_side.

    The decoded size (pixels x the bytes a pixel of its mode takes, 16-bit included) is
    checked from the header before anything is decoded; a big JPEG is decoded at 1/2-1/8
    scale and any big image reduced right after decoding, so a 6300x6300 16-bit PNG adds
    about its decoded size (bench/bench_upload.py), not ten times it.
    `info["source_size"]` keeps the file's own (width, height), upright, so a page can
    say how big the photo was before it was shrunk."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"load_upload expects bytes, got {type(data).__name__}")
    data = bytes(data)
    if not data:
        raise ImageError("The file is empty.")
    if len(data) > max_bytes:
        raise ImageError(
            f"The file is {_megabytes(len(data))}; the limit is {_megabytes(max_bytes)}."
        )
    image, source_size = _decode_first_frame(data, max_pixels, max_side, max_decoded_bytes)
    image = shrink_to(_to_rgb(image), max_side)
    image.info["source_size"] = source_size
    return image


def load_image_file(
    path: str | Path,
    max_bytes: int = 10 * 2**20,
    max_pixels: int = 40_000_000,
    max_side: int = 1024,
) -> Image.Image:
    """Like `load_upload`, for a file on disk."""
    path = Path(path)
    try:
        if path.stat().st_size > max_bytes:  # refuse before reading it into memory
            raise ImageError(
                f"The file is {_megabytes(path.stat().st_size)}; "
                f"the limit is {_megabytes(max_bytes)}."
            )
        data = path.read_bytes()
    except FileNotFoundError:
        raise ImageError(f"There is no file at {path}.") from None
    except IsADirectoryError:
        raise ImageError(f"{path} is a folder, not an image file.") from None
    except OSError as error:
        raise ImageError(f"The file {path} cannot be read ({error.strerror}).") from None
    return load_upload(data, max_bytes=max_bytes, max_pixels=max_pixels, max_side=max_side)


def _decode_first_frame(data: bytes, max_pixels: int, max_side: int,
                        max_decoded_bytes: int) -> tuple[Image.Image, tuple[int, int]]:
    """Open, check the header (pixels, decoded bytes), decode the first frame (a JPEG at
    reduced scale), reduce it while it is over twice `max_side`, apply EXIF orientation.
    Returns the image and the file's own (width, height), upright.

    Every decoder failure becomes an ImageError: PIL raises OSError, SyntaxError,
    ValueError, EOFError, struct.error and more on hostile input.
    """
    with _WARNINGS_LOCK, warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            with Image.open(BytesIO(data), formats=list(UPLOAD_FORMATS)) as image:
                _check_dimensions(image.size, max_pixels)  # before any pixel is decoded
                source_size = image.size
                _request_reduced_jpeg_decode(image, max_side)
                _check_decoded_bytes(image, max_decoded_bytes)  # the draft's size, if any
                image.load()
                _check_dimensions(image.size, max_pixels)  # GIF frames may grow the canvas
                _check_decoded_bytes(image, max_decoded_bytes)
                reduced = _reduce_large(image, max_side)
                upright = ImageOps.exif_transpose(reduced)  # a new, fully loaded image
                if upright.size != reduced.size:  # turned a quarter
                    source_size = source_size[::-1]
                return upright, source_size
        except ImageError:
            raise
        except UnidentifiedImageError:
            raise ImageError(_NOT_AN_IMAGE) from None
        except (Image.DecompressionBombError, Image.DecompressionBombWarning):
            raise ImageError(
                f"The image has too many pixels; the limit is {_megapixels(max_pixels)}."
            ) from None
        except Exception:
            raise ImageError(_DAMAGED) from None


def _check_dimensions(size: tuple[int, int], max_pixels: int) -> None:
    width, height = size
    if width * height > max_pixels:
        raise ImageError(
            f"The image is {width}x{height} pixels ({_megapixels(width * height)}); "
            f"the limit is {_megapixels(max_pixels)}. Make it smaller and upload it again."
        )
    if min(width, height) < MIN_SIDE:
        raise ImageError(
            f"The image is {width}x{height} pixels; it must be at least "
            f"{MIN_SIDE}x{MIN_SIDE} pixels."
        )
    if max(width, height) > MAX_ASPECT_RATIO * min(width, height):
        raise ImageError(
            f"The image is {width}x{height} pixels, too long and thin: the longer side "
            f"may be at most {MAX_ASPECT_RATIO} times the shorter. Crop it closer to a square."
        )


def decoded_bytes(image: Image.Image) -> int:
    """The bytes PIL will hold for `image` decoded, from its header's size and mode."""
    return image.width * image.height * _MODE_BYTES.get(image.mode, 4)


def _check_decoded_bytes(image: Image.Image, max_decoded_bytes: int) -> None:
    needed = decoded_bytes(image)
    if needed > max_decoded_bytes:
        depth = "16-bit " if image.mode.startswith("I;16") else ""
        raise ImageError(
            f"The {depth}image is {image.width}x{image.height} pixels and would take "
            f"{_megabytes(needed)} of memory to open; the limit is "
            f"{_megabytes(max_decoded_bytes)}. Make it smaller and upload it again."
        )


def _reduce_large(image: Image.Image, max_side: int) -> Image.Image:
    """A decoded image over twice `max_side`, box-averaged by a whole factor to between
    two and four times `max_side`, in its own mode, strip by strip: converting or resizing
    it whole would copy it at full size (PIL premultiplies RGBA into a second full-size
    image). Its EXIF travels along for the orientation. The same image when not that large."""
    factor = max(image.size) // (2 * max_side)
    if factor < 2:
        return image
    width, height = (max(1, side // factor) for side in image.size)
    if image.mode in ("1", "P"):  # one byte a pixel, resampled by nearest neighbour anyway
        reduced = image.resize((width, height), Image.Resampling.NEAREST)
    else:
        reduced = Image.new(image.mode, (width, height))
        rows = 64  # output rows per strip
        for top in range(0, height, rows):
            bottom = min(top + rows, height)
            strip = image.crop((0, top * factor, width * factor, bottom * factor))
            reduced.paste(strip.resize((width, bottom - top), Image.Resampling.BOX), (0, top))
    reduced.info.update(image.info)
    exif = image.getexif()
    if exif:
        reduced.info["exif"] = exif.tobytes()
    return reduced


def _request_reduced_jpeg_decode(image: Image.Image, max_side: int) -> None:
    """Let libjpeg decode big photos at 1/2, 1/4 or 1/8 scale: far less memory.

    The reduced image is still at least the downscale target, so LANCZOS does the
    final resize as usual.
    """
    if image.format not in ("JPEG", "MPO") or max(image.size) <= max_side:
        return
    scale = max_side / max(image.size)
    image.draft(None, (math.ceil(image.width * scale), math.ceil(image.height * scale)))


def _to_rgb(image: Image.Image) -> Image.Image:
    """Any PIL mode to RGB; transparent areas become white, as a page shows them."""
    if image.mode in _HIGH_BIT_DEPTH_MODES:
        image = _high_bit_depth_to_grayscale(image)
    try:
        if image.has_transparency_data:
            rgba = image.convert("RGBA")
            white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
            return Image.alpha_composite(white, rgba).convert("RGB")
        return image.convert("RGB")
    except (ValueError, OSError):
        raise ImageError(
            f"The image uses a color format ({image.mode}) we cannot convert to RGB. "
            "Save it as an ordinary PNG or JPEG and upload it again."
        ) from None


def _high_bit_depth_to_grayscale(image: Image.Image) -> Image.Image:
    """16-bit / 32-bit / float grayscale to 8-bit by scaling, never by clipping. One
    float64 copy, scaled in place (four float64 copies took 1.3 GB for 40 megapixels)."""
    values = np.array(image, dtype=np.float64)
    np.nan_to_num(values, copy=False, nan=0.0, posinf=0.0, neginf=0.0)
    low, high = float(values.min()), float(values.max())
    if image.mode.startswith("I;16") or (image.mode == "I" and low >= 0 and high <= 65535):
        values /= 257.0  # 65535 -> 255 exactly
    elif image.mode == "F" and low >= 0 and high <= 1:
        values *= 255.0
    elif high > low:  # unknown range: stretch what is there
        values -= low
        values *= 255.0 / (high - low)
    else:
        values[...] = np.clip(low, 0, 255)
    np.rint(values, out=values)
    np.clip(values, 0, 255, out=values)
    return Image.fromarray(values.astype(np.uint8))


def shrink_to(image: Image.Image, max_side: int) -> Image.Image:
    """The image scaled down (Lanczos, aspect kept) so its longer side is at most `max_side`;
    the same image when it already fits."""
    longer = max(image.size)
    if longer <= max_side:
        return image
    scale = max_side / longer
    new_size = tuple(max(1, round(side * scale)) for side in image.size)
    return image.resize(new_size, Image.Resampling.LANCZOS)


def _megabytes(count: int) -> str:
    return f"{count / 2**20:.1f} MB" if count % 2**20 else f"{count // 2**20} MB"


def _megapixels(count: int) -> str:
    return f"{count / 1e6:g} megapixels"


# ---------------------------------------------------------------------------
# Identity and model input
# ---------------------------------------------------------------------------


def image_sha256(image: Image.Image) -> str:
    """A content hash (mode, size, pixels) to key caches; metadata is ignored."""
    known = _SHARED_DIGESTS.get(id(image))
    if known is not None and known[0]() is image:
        return known[1]
    digest = hashlib.sha256()
    digest.update(f"{image.mode}:{image.width}x{image.height}:".encode())
    digest.update(image.tobytes())
    return digest.hexdigest()


# Digests of images that are never changed in place (`shared_image`): id -> (a weak
# reference to the image, its digest), removed when the image dies. A page asks for its
# image's digest about 20 times a run (every cache key), each a pass over all its pixels.
# (A PIL image compares by content, so it cannot key a WeakKeyDictionary.)
_SHARED_DIGESTS: dict[int, tuple[weakref.ref, str]] = {}


def shared_image(image: Image.Image) -> Image.Image:
    """Declare `image` read-only from now on (a cached gallery photo, a visitor's upload, a
    cached model input: shared by every run that reads it) so that `image_sha256` computes
    its digest once. Returns the image. Never call it on an image anyone may still change
    in place (paste, draw, putpixel): its digest would then be stale."""
    key = id(image)
    _SHARED_DIGESTS[key] = (weakref.ref(image, lambda _: _SHARED_DIGESTS.pop(key, None)),
                            image_sha256(image))
    return image


_RESAMPLING = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "lanczos": Image.Resampling.LANCZOS,
    "box": Image.Resampling.BOX,
    "hamming": Image.Resampling.HAMMING,
}


def fit_to_model(
    img: Image.Image,
    input_size: tuple[int, int],
    crop_pct: float = 1.0,
    interpolation: str = "bicubic",
) -> Image.Image:
    """The exact RGB image the model sees, of size `input_size` (H, W).

    crop_pct < 1 follows timm's eval transform: resize (keeping the aspect ratio)
    so the image covers floor(H / crop_pct) x floor(W / crop_pct), then center-crop
    to H x W. crop_pct == 1 squashes the whole image to H x W, so nothing the
    learner uploaded is hidden from the model (and from the maps).
    """
    target_h, target_w = _check_input_size(input_size)
    if not 0 < crop_pct <= 1:
        raise ValueError(f"crop_pct must be in (0, 1], got {crop_pct}")
    if interpolation not in _RESAMPLING:
        raise ValueError(
            f"interpolation must be one of {', '.join(_RESAMPLING)}, got {interpolation!r}"
        )
    resample = _RESAMPLING[interpolation]
    img = img if img.mode == "RGB" else img.convert("RGB")
    if crop_pct == 1:
        return img.resize((target_w, target_h), resample)
    (resized_w, resized_h), (left, top) = _resize_and_crop(img.size, target_h, target_w, crop_pct)
    resized = img.resize((resized_w, resized_h), resample)
    return resized.crop((left, top, left + target_w, top + target_h))


def model_crop_box(size: tuple[int, int], input_size: tuple[int, int],
                   crop_pct: float = 1.0) -> tuple[float, float, float, float]:
    """The part of a picture of `size` (width, height) that `fit_to_model` keeps, as
    (left, top, right, bottom) in the picture's own pixels: all of it when crop_pct == 1
    (the picture is squashed instead)."""
    width, height = size
    target_h, target_w = _check_input_size(input_size)
    if crop_pct == 1:
        return 0.0, 0.0, float(width), float(height)
    (resized_w, resized_h), (left, top) = _resize_and_crop(size, target_h, target_w, crop_pct)
    x_scale, y_scale = width / resized_w, height / resized_h
    return (left * x_scale, top * y_scale, (left + target_w) * x_scale,
            (top + target_h) * y_scale)


NOTABLE_SCALE = 1.5  # enlarged or shrunk by more than this: the page says what it costs


def fit_scale(size: tuple[int, int], input_size: tuple[int, int],
              crop_pct: float = 1.0) -> float:
    """How many of the model's pixels one pixel of the picture becomes along a side (> 1:
    enlarged), the geometric mean of the two sides when the picture is squashed."""
    width, height = size
    target_h, target_w = _check_input_size(input_size)
    if crop_pct == 1:
        return math.sqrt(target_w / width * target_h / height)
    (resized_w, _), _ = _resize_and_crop(size, target_h, target_w, crop_pct)
    return resized_w / width


def scale_words(size: tuple[int, int], input_size: tuple[int, int],
                crop_pct: float = 1.0) -> str:
    """What resizing does to a picture, in words ("" when it barely changes its size)."""
    scale = fit_scale(size, input_size, crop_pct)
    if scale >= NOTABLE_SCALE:
        return (f"enlarged {scale:.1f}x: most pixels the model sees are blends of their "
                "neighbours, so its small details are made up, not photographed")
    if scale <= 1 / NOTABLE_SCALE:
        return (f"shrunk {1 / scale:.1f}x: details smaller than about {1 / scale:.0f} pixels "
                "of the picture are lost")
    return ""


def describe_fit(size: tuple[int, int], input_size: tuple[int, int],
                 crop_pct: float = 1.0) -> str:
    """What the model really sees of a picture of `size` (width, height): one sentence on
    the resizing and on what is cut off or squashed."""
    width, height = size
    target_h, target_w = _check_input_size(input_size)
    parts = [words for words in [scale_words(size, input_size, crop_pct)] if words]
    if crop_pct == 1:
        stretch = (target_w / width) / (target_h / height)
        if max(stretch, 1 / stretch) >= 1.1:
            parts.append(f"squashed whole into {target_w}x{target_h}, so shapes are "
                         f"{'stretched' if stretch > 1 else 'squeezed'} "
                         f"{max(stretch, 1 / stretch):.1f}x sideways")
    else:
        left, top, right, bottom = model_crop_box(size, input_size, crop_pct)
        kept = (right - left) * (bottom - top) / (width * height)
        if kept < 0.995:
            parts.append(f"cut to its centre: the model sees {kept:.0%} of it, a "
                         f"{right - left:.0f}x{bottom - top:.0f} box of the {width}x{height} "
                         "picture; the rest never reaches it")
    if not parts:
        return f"The model sees the whole picture at {target_w}x{target_h} pixels."
    return f"The model sees a {target_w}x{target_h} copy: " + "; ".join(parts) + "."


def _resize_and_crop(size: tuple[int, int], target_h: int, target_w: int,
                     crop_pct: float) -> tuple[tuple[int, int], tuple[int, int]]:
    """timm's eval transform: the covering size, then the centre crop's (left, top)."""
    cover_h, cover_w = math.floor(target_h / crop_pct), math.floor(target_w / crop_pct)
    resized_w, resized_h = _covering_size(size[0], size[1], cover_w, cover_h)
    # Same rounding as torchvision's CenterCrop, which timm uses.
    top = int(round((resized_h - target_h) / 2.0))
    left = int(round((resized_w - target_w) / 2.0))
    return (resized_w, resized_h), (left, top)


def _covering_size(width: int, height: int, cover_w: int, cover_h: int) -> tuple[int, int]:
    """Aspect-preserving size that covers cover_w x cover_h, rounded exactly as timm does.

    timm uses torchvision's Resize(int) for square targets (the longer side is
    truncated) and its own ResizeKeepRatio otherwise (both sides rounded); copying
    both keeps our model input pixel-identical to timm's eval transform.
    """
    if cover_w == cover_h:
        short, long = sorted((width, height))
        new_long = int(cover_w * long / short)
        return (cover_w, new_long) if width <= height else (new_long, cover_w)
    ratio = min(height / cover_h, width / cover_w)
    return round(width / ratio), round(height / ratio)


def to_model_tensor(
    model_image: Image.Image, mean: Sequence[float], std: Sequence[float]
) -> torch.Tensor:
    """(1, 3, H, W) float32: pixels scaled to [0, 1], then (x - mean) / std per channel."""
    if len(mean) != 3 or len(std) != 3 or any(s == 0 for s in std):
        raise ValueError(f"mean and std need 3 values each, std non-zero; got {mean}, {std}")
    rgb = model_image if model_image.mode == "RGB" else model_image.convert("RGB")
    tensor = TF.to_dtype(TF.to_image(rgb), torch.float32, scale=True)
    tensor = TF.normalize(tensor, mean=list(mean), std=list(std))
    return tensor.as_subclass(torch.Tensor).unsqueeze(0).contiguous()


def _check_input_size(input_size: Sequence[int]) -> tuple[int, int]:
    if len(input_size) != 2 or any(int(side) != side or side < 1 for side in input_size):
        raise ValueError(f"input_size must be (height, width) in pixels, got {input_size}")
    return int(input_size[0]), int(input_size[1])


def model_input_box(
    box: Sequence[float],
    image_size: tuple[int, int],
    input_size: tuple[int, int],
    crop_pct: float = 1.0,
) -> tuple[int, int, int, int] | None:
    """A pixel box (x0, y0, x1, y1) on an image of `image_size` (W, H), carried through
    `fit_to_model`'s resize and centre crop onto the model input (H, W), clipped to it.
    None when the box falls wholly outside the crop."""
    width, height = image_size
    target_h, target_w = _check_input_size(input_size)
    if crop_pct == 1:
        (resized_w, resized_h), (left, top) = (target_w, target_h), (0, 0)
    else:
        (resized_w, resized_h), (left, top) = _resize_and_crop(image_size, target_h, target_w,
                                                               crop_pct)
    sx, sy = resized_w / width, resized_h / height
    x0 = min(max(int(math.floor(box[0] * sx)) - left, 0), target_w)
    y0 = min(max(int(math.floor(box[1] * sy)) - top, 0), target_h)
    x1 = min(max(int(math.ceil(box[2] * sx)) - left, 0), target_w)
    y1 = min(max(int(math.ceil(box[3] * sy)) - top, 0), target_h)
    return (x0, y0, x1, y1) if x1 > x0 and y1 > y0 else None
