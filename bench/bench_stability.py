"""Seed stability of the seeded methods (mean pairwise Spearman of the maps at seeds 0, 1,
2; `metrics.stability`) and the wall time of one map, on the gallery's coffee photo:
KernelSHAP on DINOv2 at increasing samples (the question: does a map of stability >= 0.5
fit in 60 s on this CPU?), KernelSHAP on EfficientNet-Lite0 and SmoothGrad on both at
their defaults. A level whose one map took over LONGEST_S is the last one tried. 600 samples
is more than the server's per-request budget allows (400 passes): the levels run under a
budget with no pass limit of their own (`budget.overriding`), the memory limit kept.

`run(smoke=True)`: the fewest samples KernelSHAP takes and two SmoothGrad copies."""

from __future__ import annotations

import os
import time
from dataclasses import replace

from xai_core import pipeline
from xai_core.infra import budget
from xai_core.images import load_sample
from xai_core.methods import METHODS
from xai_core.metrics.stability import seed_stability
from xai_core.models import get_model

SAMPLE = "coffee"
SHAP_SAMPLES = (200, 600)  # 600: about what fits 60 s on the quiet 2-core host (78 ms a forward)
LONGEST_S = 150
SMOKE = {"shap": (10,), "smoothgrad": {"samples": 2, "batch": 2}}  # the smallest: a run only


def _measure(model, image, target, name, **options) -> tuple[float | None, float]:
    """(stability, seconds per map): the three maps' time divided by three."""
    started = time.perf_counter()
    found = seed_stability(METHODS[name], model, image, target=target, **options)
    return found["stability"], (time.perf_counter() - started) / 3


def run(smoke: bool = False) -> list[dict]:
    rows, image = [], load_sample(SAMPLE)
    load = f"load average {os.getloadavg()[0]:.1f} at start"
    shap = SMOKE["shap"] if smoke else SHAP_SAMPLES
    smoothgrad = SMOKE["smoothgrad"] if smoke else {}
    for model_id in ("dinov2-s14", "efficientnet-lite0"):
        model = get_model(model_id)
        target = pipeline.resolve_target(model, None, image)
        levels = shap if model_id == "dinov2-s14" else shap[:1]
        for samples in levels:
            with budget.overriding(replace(budget.current(), passes=None)):
                stability, seconds = _measure(model, image, target, "kernel-shap",
                                              samples=samples)
            rows += [{"name": f"{model_id} kernel-shap {samples} samples: stability",
                      "value": float("nan") if stability is None else stability, "unit": "rho",
                      "note": "target >= 0.5 within 60 s"},
                     {"name": f"{model_id} kernel-shap {samples} samples: one map",
                      "value": seconds, "unit": "s", "note": load}]
            print(rows[-2], rows[-1], flush=True)
            if seconds > LONGEST_S:
                break
        stability, seconds = _measure(model, image, target, "smoothgrad", **smoothgrad)
        options = ", ".join(f"{k} {v}" for k, v in smoothgrad.items()) or "defaults"
        rows += [{"name": f"{model_id} smoothgrad ({options}): stability",
                  "value": float("nan") if stability is None else stability, "unit": "rho"},
                 {"name": f"{model_id} smoothgrad ({options}): one map", "value": seconds,
                  "unit": "s", "note": load}]
        print(rows[-2], rows[-1], flush=True)
    return rows


if __name__ == "__main__":
    run()
