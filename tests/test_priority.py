"""Background work yields the CPU to visitors (issue 40: page 9 opened while the gallery warms):
the warm-up's thread and the result store's writer run at the lowest priority, and so do the
torch worker threads they start; the threads that serve pages keep theirs."""

from __future__ import annotations

import contextlib
import os
import sys
import threading

import numpy as np
import pytest
import torch

from xai_core.infra import priority
from xai_core.infra.cache import BoundedCache, cache_key
from xai_core.models import disk_cache

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="per-thread nice values are Linux's")


def process_thread_nices() -> dict[int, int]:
    """Every thread of this process and its nice value, read from /proc (field 19 of stat)."""
    nices = {}
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        nices[int(task)] = int(fields[16])
    return nices


def test_a_lowered_thread_and_the_torch_workers_it_starts_run_at_the_lowest_priority():
    before = process_thread_nices()
    seen = {}

    def background():
        seen["lowered"] = priority.lower_this_thread()
        seen["id"] = threading.get_native_id()
        torch.set_num_threads(2)  # a team of workers of this thread's own
        a = torch.randn(512, 512)
        for _ in range(4):
            a @ a
        seen["during"] = process_thread_nices()

    worker = threading.Thread(target=background)
    worker.start()
    worker.join()
    assert seen["lowered"] is True
    during = seen["during"]
    assert during[seen["id"]] == priority.BACKGROUND_NICE
    started = set(during) - set(before) - {seen["id"]}
    assert all(during[t] == priority.BACKGROUND_NICE for t in started)
    # the threads that were there before (this test's, the serving ones) keep their priority
    assert all(during[t] == before[t] for t in before if t in during)
    assert priority.thread_nice() == before[threading.get_native_id()]


def test_the_result_store_writes_at_the_lowest_priority(monkeypatch, tmp_path):
    from xai_core.models import settings

    monkeypatch.setenv(settings.RESULTS_ENV, str(tmp_path / "results"))
    disk_cache.forget()
    try:
        store = disk_cache.result_store()
        BoundedCache(4, 2**20, shared=True).get_or_compute(
            cache_key("test-priority", None, 1), lambda: {"map": np.zeros((4, 4), np.float32)})
        store.flush()
        assert store.counts["written"] == 1
        assert priority.thread_nice(store._writer.native_id) == priority.BACKGROUND_NICE
    finally:
        disk_cache.forget()


def test_the_gallery_warm_up_lowers_its_thread(monkeypatch):
    from dashboard import background_warmup

    seen = {}
    monkeypatch.setattr(background_warmup, "warm",
                        lambda log, images=None: seen.setdefault("nice", priority.thread_nice()))
    monkeypatch.setattr(background_warmup, "PROGRESS", background_warmup.Progress())
    monkeypatch.setattr(background_warmup, "_turn", lambda log: contextlib.nullcontext())
    monkeypatch.setenv(background_warmup.ENV, "1")
    assert background_warmup.start(None, log=lambda line: None)
    for thread in threading.enumerate():
        if thread.name == "vit-lens-gallery-warmup":
            thread.join(30)
    assert seen["nice"] == priority.BACKGROUND_NICE

