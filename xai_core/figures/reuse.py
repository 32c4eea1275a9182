"""Built figures kept for reuse: a builder decorated with `@reused` builds a figure once per
set of inputs and afterwards returns a fresh copy of it (every rerun of a page asks for the
same figures again; page 2's worked examples depend on nothing the user changes but a
knob or two).

The figure is kept as its JSON text, immutable and shared by every session; each call
returns a new `go.Figure` read back from it without Plotly's validation (it was validated
when built), its data arrays numpy again (read-only), so a caller may change its copy (the
presentation font, a title) freely and reads what the builder made.
Inputs are keyed by content (`cache.fingerprint`); a call with an input that has no content key
(an arbitrary object) is built directly, never cached under a guess.
"""

from __future__ import annotations

import base64
import functools
import json
from typing import Callable

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio

from ..infra.cache import BoundedCache, NoContentKey, cache_key, fingerprint

# shared: built once for every replica and restart (a class asks for the same figures at once)
FIGURE_CACHE = BoundedCache(max_entries=256, max_bytes=64 * 2**20, shared=True)


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
