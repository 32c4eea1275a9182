"""Files kept in the cache directory: the converted DINOv2 weights, the k-NN memory banks
and the computed results every replica shares (`result_store`, in `results/`).

The cache saves time, never correctness. When the directory cannot be created or written -
a read-only home, a quota, a full /var - the app converts in memory and goes on, says why
once (`notice()`: a small note in the app, one stderr line from the CLI, and `health` and
`warmup` check the directory themselves), and leaves nothing partial behind: every file is
written under a temporary name in its own folder and renamed into place, or removed.
"""

from __future__ import annotations

import os
import re
import threading
import uuid
from pathlib import Path
from typing import Callable

from safetensors import SafetensorError

from ..infra.result_store import ResultStore
from .settings import CACHE_ENV, WARM_RESULTS_MB_ENV, results_dir, results_max_bytes

# What the cache needs at least: the converted DINOv2 weights (89 MB at 224 px) and a k-NN
# bank for each self-supervised model (well under 1 MB each). The shared results come on top,
# as much as there is room for, up to their own bound (settings.results_max_bytes).
SPACE_NEEDED_MB = 100

_lock = threading.Lock()
_failures: dict[str, tuple[str, list[str]]] = {}  # folder -> (the system's reason, what is lost)


def os_reason(error: BaseException) -> str:
    """The operating system's words for a failed write, also when safetensors wraps them
    ("... I/O error: No space left on device (os error 28)")."""
    if isinstance(error, OSError) and error.errno:
        return f"{os.strerror(error.errno)} (errno {error.errno})"
    code = re.search(r"(?:\bcode: |os error )(\d+)", str(error))
    if code:
        return f"{os.strerror(int(code[1]))} (errno {code[1]})"
    return str(error).splitlines()[0][:160] or type(error).__name__


def replace_atomically(path: Path, write: Callable[[str], None]) -> None:
    """Create `path` by `write(temporary file name)` in the same folder, then an atomic
    rename: readers never see half a file, and after a failure (raised as it came) no
    temporary file is left."""
    temporary = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # a name of its own per writer (another process may convert at the same time), made
        # with open(): the file gets the usual permissions (umask), unlike mkstemp's 0600
        candidate = path.with_name(f"{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
        open(candidate, "xb").close()
        temporary = str(candidate)
        write(temporary)
        os.replace(temporary, path)
    finally:
        if temporary is not None:
            try:
                Path(temporary).unlink(missing_ok=True)  # gone already after the rename
            except OSError:
                pass


def write_atomically(path: Path, write: Callable[[str], None], what: str | None) -> bool:
    """replace_atomically for a cache file; True when it is cached. When the folder cannot
    be made or written, nothing is left on disk, the reason is kept for `notice()` and
    False is returned: the caller goes on without the file."""
    try:
        replace_atomically(path, write)
        return True
    except (OSError, SafetensorError) as error:
        _remember(path.parent, os_reason(error), what)
        return False


RESULTS = "computed results"
_stores: dict[tuple[str, int, int], ResultStore] = {}


def result_store() -> ResultStore | None:
    """The shared result store of the current settings (None when they turn it off)."""
    folder = results_dir()
    if folder is None:
        return None
    where = (str(folder), results_max_bytes(), results_max_bytes(WARM_RESULTS_MB_ENV))
    with _lock:
        if where not in _stores:
            _stores[where] = ResultStore(
                folder, where[1], lambda path, fill: write_atomically(path, fill, RESULTS),
                warm_max_bytes=where[2])
        return _stores[where]


def check_writable(folder: Path) -> str | None:
    """None when a file can be created in `folder` (made if missing), else the reason
    (and it is kept for `notice()`). Used by `health` and `warmup`."""
    written = write_atomically(folder / ".vit-lens-write-check", lambda name: None, None)
    if written:
        (folder / ".vit-lens-write-check").unlink(missing_ok=True)
        return None
    with _lock:
        return _failures[str(folder)][0]


def _remember(folder: Path, reason: str, what: str | None) -> None:
    with _lock:
        _, whats = _failures.setdefault(str(folder), (reason, []))
        if what and what not in whats:
            whats.append(what)


def notice() -> str | None:
    """One sentence on why nothing is cached and how to fix it; None when all is well."""
    with _lock:
        if not _failures:
            return None
        folder, (reason, whats) = next(iter(_failures.items()))
        lost = " and ".join(whats) or "whatever is not cached yet"
    return (f"Nothing new can be cached on disk: writing to {folder} failed ({reason}), so "
            f"{lost} will be rebuilt in memory at every start. Set {CACHE_ENV} to a writable "
            f"folder with at least {SPACE_NEEDED_MB} MB free.")


def forget() -> None:
    """Clear the kept reasons (tests; a server would need a restart to write anyway)."""
    with _lock:
        _failures.clear()
