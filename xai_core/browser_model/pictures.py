"""The pictures the browser model is checked on: the 8 gallery samples and 6 others the
model has not seen in its k-NN bank, made offline from scikit-image's data folder and from
transformed gallery photos (no download)."""

from __future__ import annotations

from pathlib import Path

from PIL import Image, ImageOps

from ..images import SAMPLES, load_image_file, load_sample


def _skimage_file(name: str) -> Image.Image:
    import skimage.data

    return load_image_file(Path(skimage.data.__file__).parent / name)


def other_pictures() -> dict[str, Image.Image]:
    """Six pictures outside the bank: a second motorcycle view, a photographer (grey), the
    Hubble deep field, a retina, a stained tissue slide, and the coffee cup mirrored and
    turned a quarter."""
    coffee = ImageOps.mirror(load_sample("coffee")).rotate(90, expand=True)
    return {"motorcycle (right view)": _skimage_file("motorcycle_right.png"),
            "camera man (grey)": _skimage_file("camera.png"),
            "Hubble deep field": _skimage_file("hubble_deep_field.jpg"),
            "retina": _skimage_file("retina.jpg"),
            "stained tissue": _skimage_file("ihc.png"),
            "coffee, mirrored and turned": coffee}


def check_pictures() -> dict[str, Image.Image]:
    """The 8 gallery samples (by id) and the 6 others, in that order."""
    return {**{sample_id: load_sample(sample_id) for sample_id in SAMPLES}, **other_pictures()}
