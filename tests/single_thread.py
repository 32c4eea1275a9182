"""One torch intra-op thread for tests that bring their own concurrency or run many
small forwards: on two busy cores, intra-op threads spin against each other (a tiny
capture took ~60 ms with one thread and ~800 ms with two on the shared dev machine)."""

from __future__ import annotations

from contextlib import contextmanager

import torch


@contextmanager
def one_torch_thread():
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(saved)
