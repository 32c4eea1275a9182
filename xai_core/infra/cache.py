"""A thread-safe LRU cache bounded by entries and by bytes, and the one way to key it.

Results are keyed by content (`cache_key`: model, weights, head, image digest, then the
question's own settings, arrays and images among them by `fingerprint`), so one session's
entry is a correct answer for any other session asking the same question: sharing them
leaks nothing and saves the GPU from repeating work.
Values must be treated as read-only by callers.

A cache made with `shared=True` has a second level on disk (`result_store`), read by every
replica and after every restart: memory first, then the disk, then the computation, whose
result goes to both. The store in use comes from `share_results_through` (the models
package names the one in the cache folder); none, or a result the store cannot hold, and the
cache works in memory alone.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import hashlib
import threading
from collections import OrderedDict
from typing import Any, Callable, Hashable

import numpy as np
import torch
from PIL import Image

from ..images import image_sha256
from .result_store import MISSING, ResultStore

_shared_store: Callable[[], ResultStore | None] = lambda: None


def share_results_through(store: Callable[[], ResultStore | None]) -> None:
    """Name the disk store of every `shared=True` cache: a function returning the store for
    the current settings (or None: memory only)."""
    global _shared_store
    _shared_store = store


@contextlib.contextmanager
def memory_only():
    """Inside: every shared cache works in memory alone (a benchmark timing a computation
    must not read its answer from the disk store)."""
    global _shared_store
    disk, _shared_store = _shared_store, lambda: None
    try:
        yield
    finally:
        _shared_store = disk


def cache_key(kind: str, model, *details: Hashable, image: str | None = None,
              head=None) -> tuple:
    """The key of a cached result: what it is (`kind`), the model's id and whether its weights
    are random (both None when `model` is None: a result about no model, such as a built
    figure), the fingerprint of the head that scored it (None when no head matters; a
    session's own k-NN bank has its own fingerprint, so it never gets another bank's result),
    the digest of the original image (None for results about the model alone), then
    everything else the result depends on (`details`)."""
    return (kind, None if model is None else model.spec.id,
            None if model is None else model.random_weights,
            None if head is None else head.fingerprint(), image, *details)


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


def approximate_bytes(value: Any) -> int:
    """Bytes held by the tensors and arrays inside `value` (dataclasses, dicts, lists)."""
    seen: set[int] = set()

    def walk(item) -> int:
        if id(item) in seen:
            return 0
        seen.add(id(item))
        if isinstance(item, torch.Tensor):
            return item.element_size() * item.nelement()
        if isinstance(item, np.ndarray):
            return item.nbytes
        if isinstance(item, (str, bytes)):  # encoded images and built figures
            return len(item)
        if isinstance(item, dict):
            return sum(walk(v) for v in item.values())
        if isinstance(item, (list, tuple)):
            return sum(walk(v) for v in item)
        if hasattr(item, "__dict__"):
            return walk(vars(item))
        return 0

    return walk(value)


class BoundedCache:
    def __init__(self, max_entries: int, max_bytes: int, shared: bool = False,
                 companions: tuple["BoundedCache", ...] = ()):
        """`shared`: also keep results in the disk store that every replica reads.
        `companions`: caches of the same kind of result, kept apart only for their bounds,
        emptied with this one by `clear`."""
        self.max_entries, self.max_bytes, self.shared = max_entries, max_bytes, shared
        self.companions = companions
        self._items: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()
        self._pending: dict[Hashable, threading.Lock] = {}
        self.hits = self.misses = self.disk_hits = 0  # misses: values computed here

    def get_or_compute(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                self.hits += 1
                return self._items[key][0]
            key_lock = self._pending.setdefault(key, threading.Lock())
        with key_lock:  # the same key asked twice at once is computed once
            try:
                with self._lock:
                    if key in self._items:
                        self.hits += 1
                        return self._items[key][0]
                store = _shared_store() if self.shared else None
                value = MISSING if store is None else store.load(key)
                if value is not MISSING:
                    self._keep_from_disk(key, value)
                    return value
                value = compute()  # may fail or be stopped: then nothing is stored
                self._store(key, value)
                if store is not None:
                    store.save_later(key, value)  # in the store's thread: no wait here
                return value
            finally:
                with self._lock:
                    self._pending.pop(key, None)

    def peek(self, key: Hashable) -> Any | None:
        """The value under `key` if it is cached in memory (counted as a hit), else None;
        never computes, never reads the disk."""
        with self._lock:
            if key not in self._items:
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return self._items[key][0]

    def put(self, key: Hashable, value: Any) -> None:
        """Store `value` under `key` as the newest entry, replacing what was there."""
        size = approximate_bytes(value)
        with self._lock:
            self._items.pop(key, None)
            self._insert(key, value, size)

    def _store(self, key: Hashable, value: Any) -> None:
        size = approximate_bytes(value)
        with self._lock:
            self.misses += 1
            self._insert(key, value, size)

    def _keep_from_disk(self, key: Hashable, value: Any) -> None:
        size = approximate_bytes(value)
        with self._lock:
            self.disk_hits += 1
            self._insert(key, value, size)

    def _insert(self, key: Hashable, value: Any, size: int) -> None:
        """Under the lock: keep `value` unless it alone exceeds the byte bound, then evict
        the oldest entries until both bounds hold."""
        if size > self.max_bytes:
            return  # too big to keep: still returned to the caller
        self._items[key] = (value, size)
        while len(self._items) > self.max_entries or self.total_bytes() > self.max_bytes:
            self._items.popitem(last=False)

    def total_bytes(self) -> int:
        return sum(size for _, size in self._items.values())

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
        for companion in self.companions:
            companion.clear()
