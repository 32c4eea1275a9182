"""Faults of the machine, met in one place: running out of memory in a model call, and
long runs that the user no longer wants.

Every model call holds its model's lock (`LoadedModel.lock`), so the lock is where an
out-of-memory error is caught: `ModelLock` releases the model, frees what it can (the
failed call's tensors, the shared capture cache, CUDA's cached blocks) and raises
`ModelOutOfMemory`, a sentence for the user. Batched methods (Score-CAM, Ablation-CAM,
the perturbation metrics) retry once with a smaller batch (`retry_with_smaller_batch`);
everything else shows the sentence. Either way the process and the other sessions go on.

Long loops take a plain `should_stop()` callable (never Streamlit: the page supplies it)
and call `check_stop` between batches, so a stopped run ends within one batch.
"""

from __future__ import annotations

import ctypes
import gc
import time
import traceback
from typing import Callable, TypeVar

import torch

from . import fair_share
from .locks import FairLock

T = TypeVar("T")
StopCheck = Callable[[], bool]
RETRY_BATCH_DIVISOR = 4
# What running out of memory empties besides the failed call's tensors: each cache registers
# its own `clear` (`free_on_out_of_memory`; the pipeline's shared capture cache), so this
# module, below the caches, imports none of them.
FREED_ON_OUT_OF_MEMORY: list[Callable[[], None]] = []


class ModelOutOfMemory(RuntimeError):
    """A model call ran out of (GPU or CPU) memory; the message says what to do."""


class Cancelled(Exception):
    """The caller's should_stop() asked to stop between two batches."""


def free_on_out_of_memory(clear: Callable[[], None]) -> None:
    """Run `clear` (a cache's) whenever a model call runs out of memory."""
    FREED_ON_OUT_OF_MEMORY.append(clear)


def is_out_of_memory(error: BaseException) -> bool:
    """CUDA's OutOfMemoryError, Python's MemoryError, or torch's CPU allocator failing
    ("DefaultCPUAllocator: can't allocate memory"), which is a plain RuntimeError."""
    if isinstance(error, (torch.OutOfMemoryError, MemoryError, ModelOutOfMemory)):
        return True
    text = str(error).lower()
    return isinstance(error, RuntimeError) and ("can't allocate memory" in text
                                                or "out of memory" in text)


def free_memory(failed_traceback=None) -> None:
    """Drop the failed call's tensors, the shared capture cache and CUDA's cached blocks."""
    if failed_traceback is not None:
        traceback.clear_frames(failed_traceback)  # finished frames still hold activations
    for clear in FREED_ON_OUT_OF_MEMORY:
        clear()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def return_freed_memory() -> None:
    """Give the heap pages Python has freed back to the system (glibc's `malloc_trim`): after
    large buffers of many threads are freed, glibc keeps their pages for later, and the
    process's resident memory stays at its peak (20 lesson exports at once: 1.0 GB before,
    1.7 GB long after every socket closed). Nothing where there is no glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass


def out_of_memory_message(error: BaseException) -> str:
    where = "GPU" if isinstance(error, torch.OutOfMemoryError) else "memory"
    return (f"The server ran out of {where} for this request, so it was stopped; the caches "
            "were freed and the app keeps running. Try again in a moment, or ask for less at "
            "once (a smaller image, fewer steps or methods).")


def raise_if_out_of_memory(error: BaseException) -> None:
    """Called with a model call's error: running out of memory becomes ModelOutOfMemory (the
    failed call's tensors and the shared capture cache freed first); any other error is
    left to the caller to raise."""
    if isinstance(error, ModelOutOfMemory) or not is_out_of_memory(error):
        return
    free_memory(error.__traceback__)
    raise ModelOutOfMemory(out_of_memory_message(error)) from None


class ModelLock(FairLock):
    """The lock every model call holds (first come, first served). An out-of-memory error
    inside it becomes ModelOutOfMemory, after the lock is released and memory freed. A
    visitor past its allowance over time waits before taking it, and the call's CPU time is
    charged to the visitor after (`fair_share`)."""

    def __enter__(self) -> "ModelLock":
        fair_share.admit(may_refuse=False)  # before the lock: a wait holds nobody up
        self.acquire()
        fair_share.model_taken()
        self._since = time.perf_counter()
        return self

    def __exit__(self, exc_type, error, tb) -> None:
        held = time.perf_counter() - self._since  # set under the lock: still this call's
        fair_share.model_released()
        self.release()
        # torch's other threads worked for this call only while it held the model
        fair_share.settle(helpers_busy=held * (torch.get_num_threads() - 1))
        if error is not None:
            raise_if_out_of_memory(error)


def retry_with_smaller_batch(run: Callable[[int], T], batch_size: int) -> T:
    """run(batch_size); after an out-of-memory error, once more with a batch
    RETRY_BATCH_DIVISOR times smaller. A second failure reaches the caller."""
    try:
        return run(batch_size)
    except ModelOutOfMemory:
        smaller = max(1, batch_size // RETRY_BATCH_DIVISOR)
        if smaller == batch_size:
            raise
    return run(smaller)  # outside the except: the first error's frames are gone


def check_stop(should_stop: StopCheck | None) -> None:
    if should_stop is not None and should_stop():
        raise Cancelled("Stopped before the end, as asked.")
