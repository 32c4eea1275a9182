"""A long method next to other users: EfficientNet-Lite0 predictions asked while Score-CAM
runs on the same model (one lock turn per batch of masked images), and how soon a stopped
Score-CAM gives the model back.

Score-CAM is stopped (through its `should_stop`) once the predictions are done, so this
takes a few batches, not the whole run (that figure is in bench_gradcam). Smoke: 2 predictions.
"""

from __future__ import annotations

import statistics
import threading
import time

PREDICTIONS = 8


def run(smoke: bool = False) -> list[dict]:
    from xai_core import pipeline
    from xai_core.infra.faults import Cancelled
    from xai_core.images import SAMPLES, load_sample
    from xai_core.methods.gradcam import timed_cam
    from xai_core.models import get_model

    model = get_model("efficientnet-lite0")
    cat = load_sample("chelsea")
    count = 2 if smoke else PREDICTIONS
    others = [load_sample(sample) for sample in SAMPLES if sample != "chelsea"][:count]
    target = pipeline.resolve_target(model, None, cat)
    pixels = pipeline.prepare(model, cat).pixels
    for image in others:
        pipeline.prepare(model, image)  # resizing is not what is measured
    alone = []
    for image in others[:3]:
        started = time.perf_counter()
        pipeline._plain_output(model, pipeline.prepare(model, image).pixels)
        alone.append(time.perf_counter() - started)

    batch_starts: list[float] = []
    stop, stopped_at, ended = threading.Event(), [], []

    def should_stop() -> bool:
        batch_starts.append(time.perf_counter())
        return stop.is_set()

    def score_cam():
        try:
            timed_cam(model, pixels, target, model.spec.cnn_target_layer, "Score-CAM",
                      model.head, should_stop)
        except Cancelled:
            ended.append(time.perf_counter())

    worker = threading.Thread(target=score_cam)
    worker.start()
    while len(batch_starts) < 3:  # the image, then batches: Score-CAM is under way
        time.sleep(0.05)
    during = []
    for image in others:
        started = time.perf_counter()
        pipeline._plain_output(model, pipeline.prepare(model, image).pixels)  # uncached
        during.append(time.perf_counter() - started)
    stop.set()
    stopped_at.append(time.perf_counter())
    worker.join()
    gaps = [b - a for a, b in zip(batch_starts[1:], batch_starts[2:])]
    return [
        {"name": "prediction alone (efficientnet-lite0, median)", "value": statistics.median(alone),
         "unit": "s"},
        {"name": f"prediction while Score-CAM runs on it (median of {len(during)})",
         "value": statistics.median(during), "unit": "s",
         "note": f"max {max(during):.2f} s; waits at most one Score-CAM batch"},
        {"name": f"Score-CAM batch of {pipeline.default_batch_size(model)} (median, with "
                 "predictions between)",
         "value": statistics.median(gaps) if gaps else float("nan"), "unit": "s"},
        {"name": "Score-CAM end after should_stop() says stop", "value": ended[0] - stopped_at[0],
         "unit": "s", "note": "the batch under way finishes, no other starts"},
    ]
