"""Computed results on disk, shared by every replica and every restart (the second level
behind a `BoundedCache` made with `shared=True`: memory first, then this store, then the
computation, whose result is written through to both).

One file per result, named by the digest of its key (`key_digest`): the `cache_key` tuple in
a canonical encoding, with this format's tag, a fingerprint of the code and of the library
versions that computed it, and the weights of the model it names. A result of a model whose
weights were never fingerprinted here (`remember_weights`, done by the loaders) is kept in
memory only, so a test's tiny model can never be answered from a real model's file.

A file is MAGIC, the key's digest, a sha256 of the payload, then the payload: a safetensors
blob whose metadata holds the value's structure as JSON. No pickle: a writable shared folder
must not be able to run code here. Decoding builds only plain data, arrays and tensors, and
the dataclasses and enums of xai_core itself. A file whose checksum, key or format does not
match is deleted and its result recomputed.

Writes happen in the store's own thread (`save_later`), so the request that computed a result
does not wait for its encoding, checksum and write (a DINOv2 capture with gradients is 124 MB:
about 3 s on the busy 2-core machine); `flush` waits for them, and so does the process's exit.
Files are written under a temporary name and renamed into place, so two processes writing
the same key each leave a whole file (the same one). Reading a file touches its time; after
each write the oldest files are removed until the folder is under its byte bound (LRU across
every process that shares it). When the folder cannot be written, the store only reads: the
memory cache goes on as before, and the writer the caller gives says why.

Two areas, each with its own bound: what the warm-ups compute (`warmup --gallery`,
`dashboard.warm_pages`, inside `pinning()`) goes to `warm/`, everything else (visitors' own
photos, links, options) to the rest of the folder. A visitor's results evict only visitors'
results, so no number of uploads can push the warmed gallery out; a warm-up that reads a
result a visitor left moves it into `warm/`.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import enum
import functools
import hashlib
import json
import logging
import os
import queue
import struct
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Hashable

import numpy as np
import safetensors.torch
import torch

from xai_core.infra.priority import lower_this_thread

FORMAT = "vit-lens-results/1"
MAGIC = b"VLRES001"
SUFFIX = ".vlr"
WARM = "warm"  # the warm-ups' area, inside the folder
_HEADER = len(MAGIC) + 32 + 32  # magic, key digest, payload sha256
STALE_TEMPORARY_S = 600  # a writer's temporary file this old was left by a killed process
# results waiting for the writer thread at most: each may be a 124 MB capture that the memory
# cache has let go meanwhile; beyond it a result is not written (it is only a cache)
PENDING_WRITES = 8

log = logging.getLogger(__name__)


class Unstorable(TypeError):
    """A value (or key) this format does not hold: it stays in memory only."""


class Corrupt(ValueError):
    """A file that is not a whole, matching entry of this format."""


MISSING = object()  # what `load` returns when there is no usable entry

# (model id, random weights) -> digest of the weights the results of that id come from
_WEIGHTS: dict[tuple[str, bool], str] = {}
_WEIGHTS_LOCK = threading.Lock()


def weights_digest(module: torch.nn.Module) -> str:
    """The names, shapes and dtypes of every tensor and the values of the first and last two
    (the stem and the head: what a checkpoint or a fine-tune changes first); about a
    millisecond even for large models."""
    state = module.state_dict()
    digest = hashlib.sha256(json.dumps([(name, list(t.shape), str(t.dtype))
                                        for name, t in state.items()]).encode())
    tensors = list(state.values())
    for tensor in tensors[:2] + tensors[-2:]:
        flat = tensor.detach().cpu().contiguous().reshape(-1)
        digest.update(flat.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:24]


def remember_weights(model) -> None:
    """Fingerprint `model`'s weights, so its results may be shared on disk."""
    tag = weights_digest(model.module)
    with _WEIGHTS_LOCK:
        _WEIGHTS[(model.spec.id, bool(model.random_weights))] = tag


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """Every source file of xai_core and the versions of the numeric libraries: a change to
    any of them means new results, never a stale file."""
    import importlib.metadata

    root = Path(__file__).resolve().parents[1]  # all of xai_core
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    for package in ("torch", "numpy", "timm", "captum", "grad-cam"):
        try:
            version = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            version = "absent"
        digest.update(f"{package}={version};".encode())
    return digest.hexdigest()[:24]


def _canonical_key(item: Any) -> Any:
    """A JSON form of a key that is the same in every process (no `hash()`, floats exact,
    tuples and lists apart)."""
    if item is None or isinstance(item, (bool, str)):
        return item
    if isinstance(item, int):
        return {"i": str(item)}
    if isinstance(item, float):
        return {"f": item.hex()}
    if isinstance(item, bytes):
        return {"y": item.hex()}
    if isinstance(item, (tuple, list)):
        return {type(item).__name__[0]: [_canonical_key(part) for part in item]}
    raise Unstorable(f"a key part of type {type(item).__qualname__}")


def key_digest(key: Hashable) -> str | None:
    """The file name of `key` (hex sha256), or None when its result must stay in memory: a
    key this encoding does not hold, or one naming a model whose weights were never
    fingerprinted (`remember_weights`)."""
    if not isinstance(key, tuple) or len(key) < 3:
        return None
    weights = ""
    if key[1] is not None:
        with _WEIGHTS_LOCK:
            weights = _WEIGHTS.get((key[1], bool(key[2])))
        if weights is None:
            return None
    try:
        canonical = json.dumps([FORMAT, code_fingerprint(), weights, _canonical_key(key)],
                               separators=(",", ":"), sort_keys=True)
    except Unstorable:
        return None
    return hashlib.sha256(canonical.encode()).hexdigest()


# ---------------------------------------------------------------- values <-> bytes

def _qualified(kind: type) -> str:
    return f"{kind.__module__}:{kind.__qualname__}"


def _resolve(name: str, want: Callable[[Any], bool]) -> type:
    """A class of xai_core itself, by its qualified name, from a module this process has
    already imported (a file can make it import nothing); anything else is refused."""
    module_name, _, qualname = name.partition(":")
    if module_name != "xai_core" and not module_name.startswith("xai_core."):
        raise Corrupt(f"a class from outside xai_core: {name}")
    found: Any = sys.modules.get(module_name)
    if found is None:
        raise Corrupt(f"{module_name} is not loaded here")
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if not isinstance(found, type) or not want(found):
        raise Corrupt(f"not a stored kind of class: {name}")
    return found


def encode(value: Any) -> bytes:
    """The payload of `value`: safetensors with the structure as JSON metadata."""
    tensors: dict[str, torch.Tensor] = {}
    storages: set[int] = set()

    def add(tensor: torch.Tensor) -> str:
        tensor = tensor.detach().cpu().contiguous()
        pointer = tensor.untyped_storage().data_ptr()
        if pointer in storages or tensor.untyped_storage().nbytes() != tensor.nbytes:
            tensor = tensor.clone()  # safetensors refuses tensors that share memory
        storages.add(tensor.untyped_storage().data_ptr())
        name = str(len(tensors))
        tensors[name] = tensor
        return name

    def walk(item: Any) -> Any:
        if item is None or isinstance(item, (bool, str)):
            return item
        if isinstance(item, np.generic):  # before float: np.float64 is a float
            return {"g": item.dtype.str, "v": walk(item.item())}
        if isinstance(item, int):
            return item
        if isinstance(item, float):
            return {"f": item.hex()}
        if isinstance(item, torch.Tensor):
            return {"T": add(item)}
        if isinstance(item, np.ndarray) and item.dtype.kind == "U":  # names (page 5's cells)
            return {"S": item.ravel().tolist(), "shape": list(item.shape), "dtype": item.dtype.str}
        if isinstance(item, np.ndarray):
            if item.dtype.kind not in "biuf":
                raise Unstorable(f"an array of {item.dtype}")
            native = item.astype(item.dtype.newbyteorder("="), copy=False)
            if not native.flags.writeable:  # torch wants a writable buffer, even to read
                native = native.copy()
            return {"A": add(torch.from_numpy(np.ascontiguousarray(native))),
                    "dtype": item.dtype.str}
        if isinstance(item, list):
            return [walk(part) for part in item]
        if isinstance(item, tuple):
            return {"t": [walk(part) for part in item]}
        if isinstance(item, dict):
            return {"d": [[walk(k), walk(v)] for k, v in item.items()]}
        if isinstance(item, bytes):
            return {"y": item.hex()}
        if isinstance(item, enum.Enum):
            return {"e": _qualified(type(item)), "n": item.name}
        if dataclasses.is_dataclass(item) and not isinstance(item, type):
            return {"c": _qualified(type(item)),
                    "f": {field.name: walk(getattr(item, field.name))
                          for field in dataclasses.fields(item)}}
        raise Unstorable(f"a {type(item).__qualname__}")

    tree = json.dumps(walk(value), separators=(",", ":"))
    return safetensors.torch.save(tensors, metadata={"tree": tree})


def _metadata(payload: bytes) -> dict:
    """The metadata of a safetensors blob (its header is 8 bytes of length, then JSON)."""
    (length,) = struct.unpack("<Q", payload[:8])
    return json.loads(payload[8:8 + length]).get("__metadata__") or {}


def decode(payload: bytes) -> Any:
    tensors = safetensors.torch.load(payload)

    def walk(item: Any) -> Any:
        if item is None or isinstance(item, (bool, str, int)):
            return item
        if isinstance(item, list):
            return [walk(part) for part in item]
        (tag, body), *rest = item.items()
        if tag == "f":
            return float.fromhex(body)
        if tag == "g":
            return np.dtype(body).type(walk(item["v"]))
        if tag == "T":
            return tensors[body]
        if tag == "A":
            return tensors[body].numpy().astype(np.dtype(item["dtype"]), copy=False)
        if tag == "S":
            return np.array(body, dtype=np.dtype(item["dtype"])).reshape(item["shape"])
        if tag == "t":
            return tuple(walk(part) for part in body)
        if tag == "d":
            return {walk(k): walk(v) for k, v in body}
        if tag == "y":
            return bytes.fromhex(body)
        if tag == "e":
            return _resolve(body, lambda kind: issubclass(kind, enum.Enum))[item["n"]]
        if tag == "c":
            return _dataclass(_resolve(body, dataclasses.is_dataclass), item["f"], walk)
        raise Corrupt(f"unknown tag {tag!r}")

    tree = _metadata(payload).get("tree")
    if tree is None:
        raise Corrupt("no structure in the file")
    return walk(json.loads(tree))


def _dataclass(kind: type, stored: dict, walk: Callable[[Any], Any]) -> Any:
    """An instance with exactly the stored fields, set as they were (no __init__ or
    __post_init__ runs: the values are the computed ones)."""
    names = [field.name for field in dataclasses.fields(kind)]
    if sorted(names) != sorted(stored):
        raise Corrupt(f"{kind.__qualname__} has other fields now")
    instance = object.__new__(kind)
    for name in names:
        object.__setattr__(instance, name, walk(stored[name]))
    return instance


# ---------------------------------------------------------------- the folder

class ResultStore:
    """The files of one folder, bounded by `max_bytes` (LRU by file time)."""

    def __init__(self, folder: Path, max_bytes: int,
                 write: Callable[[Path, Callable[[str], None]], bool],
                 warm_max_bytes: int | None = None):
        """`write(path, fill)` creates `path` atomically by `fill(temporary name)` and says
        whether it could (and why not, to the admin); after one failure the store only
        reads. `max_bytes` bounds the visitors' area, `warm_max_bytes` (default the same)
        the warm-ups' area."""
        self.folder, self.max_bytes = Path(folder), max_bytes
        self.warm_max_bytes = max_bytes if warm_max_bytes is None else warm_max_bytes
        self._write = write
        self._pinning = threading.local()  # this thread's writes and reads go to warm/
        self._pinning_all = 0  # every thread's do
        self.writable = True
        self._lock = threading.RLock()  # evict counts under it
        self._pending: queue.Queue = queue.Queue(maxsize=PENDING_WRITES)
        self._writer: threading.Thread | None = None
        # a batch job (warm-up) waits for room in the queue instead of dropping the write
        self.wait_for_room = False
        self.counts = {"read": 0, "written": 0, "corrupt": 0, "unstorable": 0, "evicted": 0,
                       "dropped": 0}

    def path_of(self, digest: str, warm: bool = False) -> Path:
        return self._area(warm) / digest[:2] / f"{digest}{SUFFIX}"

    def _area(self, warm: bool) -> Path:
        return self.folder / WARM if warm else self.folder

    @contextlib.contextmanager
    def pinning(self, every_thread: bool = False):
        """Inside (this thread, or with `every_thread` every thread of the process: a
        warm-up process whose pages run in threads of their own): results written and read
        belong to the warm-ups' area, and a write waits for room in the queue instead of
        being dropped (a batch job); every write is on disk when the block ends."""
        depth = getattr(self._pinning, "depth", 0)
        self._pinning.depth = depth + 1
        self._pinning_all += every_thread
        try:
            yield self
        finally:
            self._pinning.depth = depth
            self._pinning_all -= every_thread
            self.flush()

    def pins(self) -> bool:
        return self._pinning_all > 0 or getattr(self._pinning, "depth", 0) > 0

    def load(self, key: Hashable) -> Any:
        """The stored value of `key`, or MISSING (absent, not shareable, or corrupt: then the
        file is removed so the recomputed value replaces it). Looked for in the warm-ups'
        area first; a warm-up (`pinning`) moves what it finds in the visitors' area to its
        own."""
        digest = key_digest(key)
        if digest is None:
            return MISSING
        path, blob = self._read(digest)
        if blob is None:
            return MISSING
        try:
            value = decode(self._checked_payload(blob, digest))
        except (Corrupt, ValueError, KeyError, TypeError, struct.error,
                safetensors.SafetensorError) as error:
            self._count("corrupt")
            log.warning("result store: %s is corrupt (%s); recomputing it", path, error)
            _unlink(path)
            return MISSING
        if self.pins() and path != self.path_of(digest, warm=True):
            self._pin(path, digest)
        else:
            _touch(path)
        self._count("read")
        return value

    def _read(self, digest: str) -> tuple[Path, bytes | None]:
        """(the path, its bytes) of the entry, warm area first; (visitors' path, None)."""
        for warm in (True, False):
            path = self.path_of(digest, warm)
            try:
                return path, path.read_bytes()
            except OSError:
                continue
        return path, None

    def _pin(self, path: Path, digest: str) -> None:
        """Move a visitor's entry into the warm-ups' area (a rename: no copy)."""
        target = self.path_of(digest, warm=True)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(path, target)
        except OSError:
            return  # a read-only folder, or another process moved it first
        _touch(target)
        self.evict(warm=True)

    @staticmethod
    def _checked_payload(blob: bytes, digest: str) -> bytes:
        if len(blob) < _HEADER or not blob.startswith(MAGIC):
            raise Corrupt("not a result file")
        stored_key, checksum = blob[8:40], blob[40:72]
        payload = memoryview(blob)[_HEADER:]
        if stored_key != bytes.fromhex(digest):
            raise Corrupt("the file holds another key")
        if hashlib.sha256(payload).digest() != checksum:
            raise Corrupt("checksum mismatch")
        return bytes(payload)

    def save_later(self, key: Hashable, value: Any) -> None:
        """`save` in the writer thread (started on first use); the value must not change
        meanwhile (cached values are read-only)."""
        digest = key_digest(key)  # now: the weights it names are those of this moment
        if digest is None or not self.writable:
            return
        warm = self.pins()
        with self._lock:
            if self._writer is None:
                self._writer = threading.Thread(target=self._write_pending, daemon=True,
                                                name="result-store-writer")
                self._writer.start()
                atexit.register(self.flush)
        try:
            self._pending.put((digest, value, warm), block=self.wait_for_room or warm)
        except queue.Full:
            self._count("dropped")

    def _write_pending(self) -> None:
        lower_this_thread()  # nobody waits for a write: the cached value is already served
        while True:
            digest, value, warm = self._pending.get()
            try:
                self._save(digest, value, warm)
            except (OSError, RuntimeError, ValueError, TypeError) as error:
                log.warning("result store: could not write %s: %s", digest, error)
            finally:
                self._pending.task_done()

    def flush(self) -> None:
        """Wait until every result handed to `save_later` is written (or refused)."""
        self._pending.join()

    def save(self, key: Hashable, value: Any) -> bool:
        """Write `value` under `key` now (True when written); values this format does not
        hold, or larger than the whole bound, stay in memory only."""
        digest = key_digest(key)
        if digest is None:
            return False
        return self._save(digest, value, self.pins())

    def _save(self, digest: str, value: Any, warm: bool = False) -> bool:
        if not self.writable:
            return False
        try:
            payload = encode(value)
        except Unstorable:
            self._count("unstorable")
            return False
        size = _HEADER + len(payload)
        if size > (self.warm_max_bytes if warm else self.max_bytes):
            return False
        blob_head = MAGIC + bytes.fromhex(digest) + hashlib.sha256(payload).digest()

        def fill(name: str) -> None:
            with open(name, "wb") as handle:
                handle.write(blob_head)
                handle.write(payload)

        if not self._write(self.path_of(digest, warm), fill):
            self.writable = False
            return False
        if warm:  # one copy: a visitor's of the same result is now the warm-up's
            _unlink(self.path_of(digest))
        self._count("written")
        self.evict(warm)
        return True

    def entries(self, warm: bool = False) -> list[tuple[float, int, Path]]:
        """(last use, bytes, path) of every entry of one area; temporary files left by
        killed writers are removed on the way."""
        found = []
        now = time.time()
        try:
            shards = [entry for entry in os.scandir(self._area(warm))
                      if entry.is_dir() and entry.name != WARM]
        except OSError:
            return []
        for shard in shards:
            try:
                files = list(os.scandir(shard.path))
            except OSError:
                continue
            for entry in files:
                try:
                    stat = entry.stat()
                except OSError:  # removed meanwhile by another process
                    continue
                if entry.name.endswith(SUFFIX):
                    found.append((stat.st_mtime, stat.st_size, Path(entry.path)))
                elif entry.name.endswith(".tmp") and now - stat.st_mtime > STALE_TEMPORARY_S:
                    _unlink(Path(entry.path))
        return found

    def total_bytes(self, warm: bool = False) -> int:
        return sum(size for _, size, _ in self.entries(warm))

    def evict(self, warm: bool = False) -> None:
        """Remove the least recently used files of one area until it fits its bound."""
        bound = self.warm_max_bytes if warm else self.max_bytes
        with self._lock:  # one scan at a time in this process; other processes may race:
            entries = sorted(self.entries(warm))  # a file already gone is skipped
            total = sum(size for _, size, _ in entries)
            for _, size, path in entries:
                if total <= bound:
                    break
                if _unlink(path):
                    self._count("evicted")
                total -= size

    def _count(self, what: str) -> None:
        with self._lock:
            self.counts[what] += 1


def _unlink(path: Path) -> bool:
    try:
        path.unlink()
        return True
    except OSError:
        return False


def _touch(path: Path) -> None:
    """Mark the file as just used (LRU); a read-only folder keeps its old times."""
    try:
        os.utime(path)
    except OSError:
        pass
