"""Memory on a shared server: 200 distinct images through the app's cached pipeline.

Each image gets what a student's first visit costs: DINOv2 k-NN prediction, a DINOv2
capture with the backward for its top class (the biggest cached object: every
block's activations and gradients), and the EfficientNet prediction. Resident memory
is sampled as it goes; with caches bounded by entries and bytes
(pipeline.CAPTURE_CACHE: VIT_LENS_CAPTURE_ENTRIES, VIT_LENS_CAPTURE_MB) it must level
off once the cache is full instead of growing with every image.

`python -m bench.bench_memory` prints the whole curve; VIT_LENS_BENCH_IMAGES changes
the count. Smoke: SAMPLE_EVERY images (one point of the curve).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from xai_core import pipeline
from xai_core.models import DEFAULT_CNN, DEFAULT_VIT, get_model

IMAGES = int(os.environ.get("VIT_LENS_BENCH_IMAGES", 200))
SAMPLE_EVERY = 10


def resident_mb() -> float:
    """Resident set size of this process (psutil when installed, else /proc)."""
    try:
        import psutil

        return psutil.Process().memory_info().rss / 2**20
    except ImportError:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no way to read resident memory here")


def distinct_image(index: int) -> Image.Image:
    """A photo-like image (smooth colour field + noise), different for every index."""
    rng = np.random.default_rng(index)
    height, width = 180 + index % 7 * 20, 240 + index % 5 * 24
    y, x = np.mgrid[0:height, 0:width] / max(height, width)
    field = np.stack([np.sin(x * rng.uniform(2, 9) + rng.uniform(0, 6)) for _ in range(3)], -1)
    field = (field + 1) * 110 + rng.normal(0, 18, (height, width, 3)) + y[..., None] * 30
    return Image.fromarray(np.clip(field, 0, 255).astype(np.uint8))


def curve(images: int = IMAGES) -> list[dict]:
    """Resident memory every SAMPLE_EVERY images. One torch thread: this measures
    memory, and on a loaded 2-core machine intra-op threads only slow it down."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _curve(images)
    finally:
        torch.set_num_threads(threads)


def _curve(images: int) -> list[dict]:
    vit, cnn = get_model(DEFAULT_VIT), get_model(DEFAULT_CNN)
    cache = pipeline.CAPTURE_CACHE
    cache.clear()
    rows = [{"images": 0, "rss_mb": resident_mb(), "cache_entries": 0, "cache_mb": 0.0,
             "seconds": 0.0}]
    started = time.perf_counter()
    for index in range(1, images + 1):
        image = distinct_image(index)
        top = pipeline.predict(vit, image, topk=1)[0].index
        pipeline.vit_capture(vit, image, top)
        pipeline.predict(cnn, image, topk=5)
        if index % SAMPLE_EVERY == 0:
            rows.append({"images": index, "rss_mb": resident_mb(), "cache_entries": len(cache),
                         "cache_mb": cache.total_bytes() / 2**20,
                         "seconds": time.perf_counter() - started})
    return rows


def run(smoke: bool = False) -> list[dict]:
    cache = pipeline.CAPTURE_CACHE
    images = SAMPLE_EVERY if smoke else IMAGES
    points = curve(images)
    half = next(p for p in points if p["images"] >= images // 2)
    last = points[-1]
    peak_cache = max(p["cache_mb"] for p in points)
    trace = " ".join(f"{p['images']}:{p['rss_mb']:.0f}" for p in points[::2] + [last])
    return [
        {"name": "resident memory before (models loaded)", "value": points[0]["rss_mb"],
         "unit": "MB"},
        {"name": f"resident memory after {half['images']} distinct images",
         "value": half["rss_mb"], "unit": "MB"},
        {"name": f"resident memory after {last['images']} distinct images",
         "value": last["rss_mb"], "unit": "MB", "note": f"images:MB {trace}"},
        {"name": f"growth over the second {last['images'] - half['images']} images",
         "value": last["rss_mb"] - half["rss_mb"], "unit": "MB",
         "note": "plateau: should be small next to one capture's size"},
        {"name": "capture cache at the end", "value": last["cache_mb"], "unit": "MB",
         "note": f"{last['cache_entries']} entries; bounds {cache.max_entries} entries, "
                 f"{cache.max_bytes / 2**20:.0f} MB; peak {peak_cache:.0f} MB"},
        {"name": "time per image (predict x2 + capture with backward)",
         "value": last["seconds"] / last["images"], "unit": "s"},
    ]


if __name__ == "__main__":
    for point in curve():
        print(f"{point['images']:4d} images  {point['rss_mb']:8.1f} MB resident  "
              f"cache {point['cache_entries']:3d} entries {point['cache_mb']:8.1f} MB  "
              f"{point['seconds']:7.1f} s")
