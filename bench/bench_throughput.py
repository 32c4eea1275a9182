"""Throughput of the shared server: 16 threads x 10 requests of mixed methods.

The same mix as tests/test_concurrency.py, but on the real bundled models (DINOv2
ViT-S/14 with its k-NN head, EfficientNet-Lite0) and two gallery images, as a class
of 16 students opening pages at once: every registered ViT and CNN method with its
default options, a capture with the backward, and a deletion curve. Run twice: cold
(capture cache emptied: the first wave of a lecture) and warm (everything cached: the
rest of the lecture). Each model runs one call at a time behind its fair lock, so on
one device the cold rate is bounded by the model time, not the thread count. Smoke: 2 threads
x 1 request.
"""

from __future__ import annotations

import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from xai_core import pipeline
from xai_core.images import load_sample
from xai_core.methods import METHODS
from xai_core.metrics.faithfulness import BASELINE, faithfulness
from xai_core.models import DEFAULT_CNN, DEFAULT_VIT, get_model

THREADS, REQUESTS_PER_THREAD = 16, 10
IMAGES = ("chelsea", "coffee")


def _jobs(vit, cnn) -> list[tuple]:
    jobs = []
    for image_id in IMAGES:
        jobs.append(("capture", vit, image_id, None))
        jobs.append(("metrics", vit, image_id, "rollout"))
        jobs += [("method", model, image_id, name) for name, info in sorted(METHODS.items())
                 for model in (vit, cnn) if info.family == model.spec.family]
    return jobs


def _run(job, images) -> None:
    kind, model, image_id, name = job
    image = images[image_id]
    target = pipeline.resolve_target(model, None, image)
    if kind == "capture":
        pipeline.vit_capture(model, image, target)
        return
    result = METHODS[name](model, image, target=target)
    if kind == "metrics":
        faithfulness(model, image, result.map, "deletion", target, BASELINE.default, steps=10)


def _wave(jobs, images, seed: int, threads: int,
          per_thread: int) -> tuple[float, list[float], int]:
    picks = np.random.default_rng(seed).integers(0, len(jobs), threads * per_thread)
    chunks = [picks[i::threads] for i in range(threads)]
    latencies, errors, lock = [], [], threading.Lock()
    start = threading.Barrier(threads)

    def worker(chunk):
        start.wait()
        for index in chunk:
            began = time.perf_counter()
            try:
                _run(jobs[index], images)
            except Exception as error:  # noqa: BLE001  (counted and reported)
                with lock:
                    errors.append(repr(error))
                continue
            with lock:
                latencies.append(time.perf_counter() - began)

    began = time.perf_counter()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(worker, chunks))
    return time.perf_counter() - began, latencies, len(errors)


def run(smoke: bool = False) -> list[dict]:
    vit, cnn = get_model(DEFAULT_VIT), get_model(DEFAULT_CNN)
    images = {image_id: load_sample(image_id) for image_id in IMAGES}
    jobs = _jobs(vit, cnn)
    threads, per_thread = (2, 1) if smoke else (THREADS, REQUESTS_PER_THREAD)
    requests = threads * per_thread
    pipeline.CAPTURE_CACHE.clear()
    rows = []
    for label, seed in (("cold cache", 1), ("warm cache", 2)):
        seconds, latencies, errors = _wave(jobs, images, seed, threads, per_thread)
        if smoke and errors:
            raise RuntimeError(f"{errors} of {requests} requests failed")
        p95 = float(np.percentile(latencies, 95)) if latencies else float("nan")
        mix = f"{threads} threads x {per_thread} mixed requests, {label}"
        rows += [
            {"name": f"{mix}: throughput",
             "value": requests / seconds, "unit": "req/s",
             "note": f"{seconds:.1f} s wall, {errors} errors, {len(jobs)} distinct requests"},
            {"name": f"{mix}: median latency",
             "value": statistics.median(latencies) if latencies else float("nan"), "unit": "s",
             "note": f"p95 {p95:.2f} s"},
        ]
    return rows
