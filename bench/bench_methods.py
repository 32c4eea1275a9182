"""The gradient and perturbation baselines (issue 17): seconds per image for each on the two
bundled models, and images per second of `python -m xai_core benchmark` on the local
backend and on Ray (a local Ray instance with this machine's CPUs)."""

from __future__ import annotations

import statistics
import tempfile
import time

from xai_core import compare, pipeline
from xai_core.images import load_sample
from xai_core.methods import METHODS
from xai_core.models import get_model

BUNDLED = ("dinov2-s14", "efficientnet-lite0")
NEW_METHODS = ("saliency", "input-x-gradient", "integrated-gradients", "smoothgrad", "occlusion",
               "kernel-shap", "legrad")
IMAGES = ("coffee", "chelsea")
BENCH_IMAGES = "sample:coffee,chelsea,rocket,astronaut"


def method_rows() -> list[dict]:
    rows = []
    for model_id in BUNDLED:
        model = get_model(model_id)
        images = [load_sample(name) for name in IMAGES]
        targets = [pipeline.resolve_target(model, None, image) for image in images]
        for name in NEW_METHODS:
            if not METHODS[name].fits(model.spec.family):
                continue
            seconds, cost = [], ""
            for image, target in zip(images, targets):
                pipeline.CAPTURE_CACHE.clear()  # every image pays for its own passes
                started = time.perf_counter()
                run = compare.run_method(model, image, name, target)
                seconds.append(time.perf_counter() - started)
                cost = run.cost_text() if run.ok else run.error
            rows.append({"name": f"{model_id} {name}: seconds per image",
                         "value": statistics.mean(seconds), "unit": "s",
                         "note": f"default options, mean of {len(images)} images; last: {cost}"})
    return rows


def benchmark_rows() -> list[dict]:
    from xai_core.benchmark.plan import Settings
    from xai_core.benchmark.run import run_benchmark

    settings = Settings(models=("efficientnet-lite0",), images=BENCH_IMAGES,
                        methods=("gradcam", "saliency"), metrics=("deletion", "insertion"),
                        steps=10)
    count = len(BENCH_IMAGES.split(":", 1)[1].split(","))
    rows, tables = [], {}
    for backend in ("local", "ray"):
        pipeline.CAPTURE_CACHE.clear()
        with tempfile.TemporaryDirectory() as folder:
            started = time.perf_counter()
            summary = run_benchmark(settings, folder, backend=backend, progress_bar=False)
            seconds = time.perf_counter() - started
            tables[backend] = (summary["tables"], summary["run"])
        note = (f"{count} images x (gradcam, saliency, random) x (deletion, insertion), "
                f"10 steps, EfficientNet-Lite0, {seconds:.1f} s")
        if backend == "ray":
            note += (f"; includes starting a local Ray instance ({summary['run']['cluster_cpus']} "
                     f"CPUs, {summary['run']['tasks']} tasks) and loading the model in each "
                     "worker")
        rows.append({"name": f"benchmark images per second, {backend}",
                     "value": count / seconds, "unit": "img/s", "note": note})
    same = all(a["methods"] == b["methods"] for a, b in zip(tables["local"][0], tables["ray"][0]))
    rows.append({"name": "benchmark: Ray summary equals local", "value": float(same),
                 "unit": "bool", "note": "means, intervals and ranks compared exactly"})
    return rows


def run() -> list[dict]:
    return method_rows() + benchmark_rows()
