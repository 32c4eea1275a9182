"""Grad-CAM benchmarks (`make bench` / `python -m bench.run gradcam`).

1. The whole ViT Grad-CAM taxonomy (every block, location, weighting, head mode) from
   one forward + backward of the capture engine, against pytorch-grad-cam computing
   the cells it can express - one library call (a forward + backward) per block and
   location: F1 LN1, F2 [CLS] attention row (heads as channels), F3 per-head context
   (heads summed), F4 LN2, F5 MLP, F6 block output, patch-averaged weights. Same
   model (the bundled DINOv2), image, target. Both sides include the upsampling to
   the input size; the rows also report how far the two agree on the shared cells.
2. The CAM family on the bundled EfficientNet-Lite0 (last stage), one call each.

Smoke: one run of ours, the library on the last block only, the CAM family without the
one-forward-per-channel CAMs (bench_faults runs Score-CAM).
"""

from __future__ import annotations

import statistics
import time

import numpy as np

REPEATS = 3


def _timed(function):
    started = time.perf_counter()
    value = function()
    return value, time.perf_counter() - started


def _library_cells(model, pixels, layout, score_fn, blocks=None):
    """(block, location) -> pytorch-grad-cam GradCAM map, one call each (`blocks`: indices,
    all by default)."""
    from pytorch_grad_cam import GradCAM

    from xai_core.capture import _unfused_attention
    from xai_core.methods.gradcam import run_library_cam

    prefix, (rows, cols) = layout.num_prefix_tokens, layout.grid

    def tokens(t):  # (B, N, C) -> (B, C, rows, cols), prefix tokens dropped
        return t[:, prefix:, :].reshape(t.shape[0], rows, cols, -1).permute(0, 3, 1, 2)

    def cls_row(t):  # (B, H, N, N) -> (B, H, rows, cols): the [CLS] query's row, heads as channels
        return t[:, :, 0, prefix:].reshape(t.shape[0], t.shape[1], rows, cols)

    maps = {}
    module = model.module
    for index, block in enumerate(module.blocks):
        if blocks is not None and index not in blocks:
            continue
        places = {"F1": (block.norm1, tokens), "F2": (block.attn.attn_drop, cls_row),
                  "F3": (block.attn.norm, tokens), "F4": (block.norm2, tokens),
                  "F5": (block.mlp, tokens), "F6": (block, tokens)}
        for location, (layer, reshape) in places.items():
            with model.lock, _unfused_attention(module):
                maps[(index, location)] = run_library_cam(
                    GradCAM, module, [layer], pixels, score_fn, reshape_transform=reshape)
    return maps


def vit_rows(smoke: bool = False) -> list[dict]:
    from xai_core import pipeline
    from xai_core.capture import capture
    from xai_core.images import load_sample
    from xai_core.methods.vit_gradcam import taxonomy, upsample_for_display
    from xai_core.models import get_model

    model = get_model("dinov2-s14")
    image = load_sample("chelsea")
    target = pipeline.resolve_target(model, None, image)
    pixels = pipeline.prepare(model, image).pixels.to(model.device)
    score_fn = model.head.score_fn(target)

    def ours():
        captured = capture(model, pixels, score_fn)
        result = taxonomy(captured)
        variants = list(result.cells)
        stack = upsample_for_display(np.stack([result.cells[v].map for v in variants]),
                                     captured.layout.input_size)
        shown = dict(zip(variants, stack))
        return result, shown, captured.layout

    repeats = 1 if smoke else REPEATS
    if not smoke:
        ours()  # warm-up (first-call allocations)
    runs = [_timed(ours) for _ in range(repeats)]
    (result, shown, layout), _ = runs[0]
    ours_seconds = statistics.median(t for _, t in runs)
    only = [result.num_blocks - 1] if smoke else None
    library, library_seconds = _timed(lambda: _library_cells(model, pixels, layout, score_fn,
                                                             only))
    blocks = len(only) if smoke else result.num_blocks
    worst = 0.0
    for (block, location), reference in library.items():
        variant = next(v for v in result.cells if v.block == block and v.location == location
                       and v.weights == "patch" and v.heads in (None, "sum-relu"))
        if result.cells[variant].status == "ok":  # blank cells: the library divides 0 by 1e-7
            worst = max(worst, float(np.abs(shown[variant] - reference).max()))
    return [
        {"name": f"vit taxonomy, all {result.count} cells, one fwd+bwd (dinov2-s14)",
         "value": ours_seconds, "unit": "s",
         "note": f"median of {repeats}; capture + every cell + upsampling"},
        {"name": f"pytorch-grad-cam, {len(library)} cells ({blocks} blocks x 6 locations)",
         "value": library_seconds, "unit": "s", "note": "one GradCAM call per cell"},
        {"name": "speed-up per call set (library / ours)", "value": library_seconds / ours_seconds,
         "unit": "x", "note": f"target >= 20x; ours also gives {result.count - len(library)} "
                              "cells the library cannot express"},
        {"name": "max |ours - library| on the shared cells", "value": worst, "unit": "",
         "note": "after both upsample and min-max; zero-gradient cells skipped"},
    ]


def cam_family_rows(smoke: bool = False) -> list[dict]:
    from xai_core import pipeline
    from xai_core.images import load_sample
    from xai_core.methods.gradcam import CAM_FAMILY, SLOW_CAMS, timed_cam
    from xai_core.models import get_model

    model = get_model("efficientnet-lite0")
    image = load_sample("chelsea")
    target = pipeline.resolve_target(model, None, image)
    pixels = pipeline.prepare(model, image).pixels
    layer = model.spec.cnn_target_layer
    rows = []
    timed_cam(model, pixels, target, layer, "Grad-CAM", model.head)  # warm-up
    for name in CAM_FAMILY:
        if smoke and name in SLOW_CAMS:
            continue
        result = timed_cam(model, pixels, target, layer, name, model.head)
        note = (f"one forward per channel, batches of {pipeline.default_batch_size(model)}"
                if name in SLOW_CAMS else "")
        rows.append({"name": f"{name} (efficientnet-lite0, {layer})", "value": result.seconds,
                     "unit": "s", "note": note})
    return rows


def run(smoke: bool = False) -> list[dict]:
    return vit_rows(smoke) + cam_family_rows(smoke)


if __name__ == "__main__":
    for row in run():
        print(f"{row['name']:<64} {row['value']:>10.4f} {row['unit']:<3} {row.get('note', '')}")
