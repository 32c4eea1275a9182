"""The gradient and perturbation baselines (issue 17): seconds per image for each on the two
bundled models, and images per second of `python -m xai_core benchmark` on the local
backend and on Ray (a local Ray instance with this machine's CPUs)."""

from __future__ import annotations

import statistics
import tempfile
import time

from xai_core.studies import method_runs
from xai_core import pipeline
from xai_core.images import load_sample
from xai_core.methods import METHODS
from xai_core.models import get_model

BUNDLED = ("dinov2-s14", "efficientnet-lite0")
NEW_METHODS = ("saliency", "input-x-gradient", "integrated-gradients", "smoothgrad", "occlusion",
               "kernel-shap", "legrad")
IMAGES = ("coffee", "chelsea")
BENCH_IMAGES = "sample:"  # the 8 gallery photos


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
                run = method_runs.run_method(model, image, name, target)
                seconds.append(time.perf_counter() - started)
                cost = run.cost_text() if run.ok else run.error
            rows.append({"name": f"{model_id} {name}: seconds per image",
                         "value": statistics.mean(seconds), "unit": "s",
                         "note": f"default options, mean of {len(images)} images; last: {cost}"})
    return rows


def benchmark_rows() -> list[dict]:
    """Local, Ray started by the command (cold: includes starting Ray and loading the model in
    every worker), and Ray already running with warm workers."""
    import ray

    from xai_core.benchmark.plan import Settings, list_images
    from xai_core.benchmark.run import _runtime_env, run_benchmark

    settings = Settings(models=("efficientnet-lite0",), images=BENCH_IMAGES,
                        methods=("gradcam", "saliency"), metrics=("deletion", "insertion"),
                        steps=20)
    count = len(list_images(BENCH_IMAGES))
    work = (f"{count} images x (gradcam, saliency, random) x (deletion, insertion), 20 steps, "
            "EfficientNet-Lite0")

    def timed(backend: str) -> tuple[float, dict]:
        pipeline.CAPTURE_CACHE.clear()
        with tempfile.TemporaryDirectory() as folder:
            started = time.perf_counter()
            summary = run_benchmark(settings, folder, backend=backend, progress_bar=False)
            return time.perf_counter() - started, summary

    local_s, local = timed("local")
    cold_s, cold = timed("ray")
    ray.init(runtime_env=_runtime_env(), include_dashboard=False, logging_level="ERROR",
             log_to_driver=False)
    try:
        timed("ray")  # loads the model in every worker
        warm_s, warm = timed("ray")
    finally:
        ray.shutdown()
    cpus, tasks = warm["run"]["cluster_cpus"], warm["run"]["tasks"]
    rows = [{"name": "benchmark images per second, local", "value": count / local_s,
             "unit": "img/s", "note": f"{work}: {local_s:.1f} s (model already loaded)"},
            {"name": "benchmark images per second, Ray (cold)", "value": count / cold_s,
             "unit": "img/s", "note": f"{cold_s:.1f} s, including starting a local Ray instance "
                                      "and loading the model in each worker"},
            {"name": "benchmark images per second, Ray (warm workers)", "value": count / warm_s,
             "unit": "img/s", "note": f"{warm_s:.1f} s; {cpus} CPUs, {tasks} tasks, 1 torch "
                                      "thread per task"}]
    def means(summary):
        return {(t["model"], t["metric"], e["method"]): e["mean"] for t in summary["tables"]
                for e in t["methods"]}

    means = [(value, means(other)[key]) for key, value in means(local).items()
             for other in (cold, warm)]
    rows.append({"name": "benchmark: largest |local - Ray| of a method mean",
                 "value": max(abs(x - y) for x, y in means), "unit": "",
                 "note": "same units, same code; float reductions differ with the thread count"})
    return rows


def run() -> list[dict]:
    return method_rows() + benchmark_rows()
