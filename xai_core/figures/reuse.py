"""Built figures kept for reuse: a builder decorated with `@reused` builds a figure once per
set of inputs and afterwards returns a fresh copy of it (every rerun of a page asks for the
same figures again; page 2's worked examples depend on nothing the user changes but a
knob or two).

The figure is kept as its JSON text, immutable and shared by every session; each call
returns a new `go.Figure` read back from it without Plotly's validation (it was validated
when built), its data arrays numpy again (read-only), so a caller may change its copy (the
presentation font, a title) freely and reads what the builder made.
Inputs are keyed by content (`fingerprint`); a call with an input that has no content key
(an arbitrary object) is built directly, never cached under a guess.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import functools
import hashlib
import json
from typing import Any, Callable, Hashable

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
import torch
from PIL import Image

from ..cache import BoundedCache, cache_key
from ..images import image_sha256

FIGURE_CACHE = BoundedCache(max_entries=256, max_bytes=64 * 2**20)


class NoContentKey(TypeError):
    """An input whose content cannot be keyed: the figure is built without the cache."""


def fingerprint(value: Any) -> Hashable:
    """A hashable key that changes whenever `value`'s content does: arrays and images by a
    digest of their bytes (with dtype and shape, or mode and size), floats exactly."""
    if isinstance(value, bool):
        return ("bool", value)  # True == 1 as a key: keep them apart
    if value is None or isinstance(value, (int, str, bytes)):
        return value
    if isinstance(value, float):
        return ("float", value.hex())  # exact, and NaN equals itself
    if isinstance(value, enum.Enum):
        return ("enum", type(value).__qualname__, value.name)
    if isinstance(value, np.generic):
        return fingerprint(value.item())
    if isinstance(value, torch.Tensor):  # any dtype, bfloat16 included: its raw bytes
        flat = value.detach().cpu().contiguous().reshape(-1)
        return ("tensor", str(value.dtype), tuple(value.shape),
                hashlib.sha256(flat.view(torch.uint8).numpy().tobytes()).hexdigest())
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            return ("objects", value.shape, fingerprint(value.tolist()))
        contiguous = np.ascontiguousarray(value)
        return ("array", contiguous.dtype.str, contiguous.shape,
                hashlib.sha256(contiguous.tobytes()).hexdigest())
    if isinstance(value, Image.Image):
        return ("image", image_sha256(value))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(fingerprint(item) for item in value))
    if isinstance(value, dict):
        items = [(fingerprint(k), fingerprint(v)) for k, v in value.items()]
        return ("dict", tuple(sorted(items, key=repr)))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__qualname__, tuple(
            (field.name, fingerprint(getattr(value, field.name)))
            for field in dataclasses.fields(value)))
    raise NoContentKey(f"no content key for a {type(value).__qualname__}")


def reused(build: Callable[..., go.Figure]) -> Callable[..., go.Figure]:
    """Decorate a figure builder whose figure depends only on its arguments."""
    @functools.wraps(build)
    def built_once(*args, **kwargs) -> go.Figure:
        try:
            key = cache_key("figure", None, build.__module__, build.__qualname__,
                            fingerprint(args), fingerprint(kwargs))
        except NoContentKey:
            return build(*args, **kwargs)
        text = FIGURE_CACHE.get_or_compute(
            key, lambda: pio.to_json(build(*args, **kwargs), validate=False))
        return go.Figure(json.loads(text, object_hook=_typed_array), _validate=False)

    return built_once


def _typed_array(item: dict):
    """Plotly's JSON form of a numpy array, {"dtype", "bdata" (base64), "shape" ("2, 3";
    none for 1-D)}, back to the array; any other object unchanged."""
    if "bdata" not in item or "dtype" not in item:
        return item
    array = np.frombuffer(base64.b64decode(item["bdata"]), dtype=item["dtype"])
    shape = item.get("shape")
    if shape:
        array = array.reshape([int(n) for n in (shape.split(",") if isinstance(shape, str)
                                                else shape)])
    return array
