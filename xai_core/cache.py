"""A thread-safe LRU cache bounded by entries and by bytes.

Captures are keyed by content (model, image sha256, target, options), so one
session's entry is a correct answer for any other session asking the same
question: sharing them leaks nothing and saves the GPU from repeating work.
Values must be treated as read-only by callers.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Callable, Hashable

import numpy as np
import torch


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
        if isinstance(item, dict):
            return sum(walk(v) for v in item.values())
        if isinstance(item, (list, tuple)):
            return sum(walk(v) for v in item)
        if hasattr(item, "__dict__"):
            return walk(vars(item))
        return 0

    return walk(value)


class BoundedCache:
    def __init__(self, max_entries: int, max_bytes: int):
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self._items: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()
        self._pending: dict[Hashable, threading.Lock] = {}
        self.hits = self.misses = 0

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
                value = compute()  # may fail or be stopped: then nothing is stored
                self._store(key, value)
                return value
            finally:
                with self._lock:
                    self._pending.pop(key, None)

    def _store(self, key: Hashable, value: Any) -> None:
        size = approximate_bytes(value)
        with self._lock:
            self.misses += 1
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
