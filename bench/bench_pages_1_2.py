"""Pages 1-2 render time once the model, its capture and predictions are cached
(issue 3's target: each page under 1 s).

Two measures per page, both medians of several reruns after a warm-up:
- "AppTest rerun": the whole script run by Streamlit's AppTest (entry script with the
  sidebar, then the page), i.e. everything the server does except sending to a browser;
- "figures": the page's own work called directly - cached captures/predictions, the toy
  math, building every Plotly figure and serialising it to JSON as dashboard/charts.py does.
Smoke: one rerun of each.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from bench.bench_foundation import _median_seconds
from xai_core import pipeline
from xai_core.analysis import tokens
from xai_core.analysis import toy_attention as toy
from xai_core.capture import token_layout
from xai_core.figures.curves import distribution_figure, entropy_curve_figure, prediction_bars
from xai_core.figures.matrices import (embedding_pca_figure, matrix_figure, multihead_figure,
                                       position_map_figure, position_mosaic_figure)
from xai_core.figures.overlays import query_attention_figure
from xai_core.figures.tokenization import token_strip_figure, tokenization_figure
from xai_core.images import load_sample
from xai_core.methods.attention import query_attention
from xai_core.models import DEFAULT_CNN, DEFAULT_VIT, get_model

ENTRY = str(Path(__file__).resolve().parent.parent / "dashboard" / "app.py")
PAGES = {"page 1 (tokenization)": "1_tokenization.py",
         "page 2 (self-attention)": "2_self_attention.py"}


def _page1_figures(vit, cnn, image) -> int:
    prepared = pipeline.prepare(vit, image)
    layout = token_layout(vit.module, prepared.pixels)
    names = tokens.prefix_token_names(vit.module)
    pca = tokens.cached_embedding_pca(vit, 28)
    similarity = tokens.cached_position_similarity(vit)
    vit_top = pipeline.predict(vit, image, 5)
    cnn_top = pipeline.predict(cnn, image, 5)
    tokens.describe_neighbours(vit.head.neighbours(pipeline.model_output(vit, image)))
    figures = [
        tokenization_figure(prepared.model_image, layout.grid, layout.patch_size,
                            layout.num_prefix_tokens),
        token_strip_figure(prepared.model_image, layout.grid, layout.patch_size, names, 12),
        embedding_pca_figure(pca.tiles(), pca.explained),
        position_mosaic_figure(similarity.similarity),
        position_map_figure(similarity.similarity, 3, 4),
        prediction_bars([p.label for p in vit_top], [p.probability for p in vit_top], "vit"),
        prediction_bars([p.label for p in cnn_top], [p.probability for p in cnn_top], "cnn")]
    return sum(len(figure.to_json()) for figure in figures)


def _page2_figures(vit, image) -> int:
    steps = toy.seed_steps()
    labels = toy.SEED_TOKENS
    scores = toy.TEMPERATURE_Q @ toy.TEMPERATURE_K.T
    weights = toy.softmax_with_temperature(scores, 2.0)
    sweep = np.geomspace(0.02, 500, 120)
    multi = toy.multi_head_attention(toy.MULTIHEAD_X, toy.MULTIHEAD_WQ, toy.MULTIHEAD_WK,
                                     toy.MULTIHEAD_WV, toy.MULTIHEAD_WO, 2)
    capture = pipeline.vit_capture(vit, image)
    prepared = pipeline.prepare(vit, image)
    rows, cols = capture.layout.grid
    values = query_attention(capture, len(capture.blocks) - 1, (rows // 2) * cols).mean(0)
    figures = [
        matrix_figure(steps.scores, labels, labels, "s"),
        matrix_figure(steps.scaled, labels, labels, "s"),
        matrix_figure(steps.weights, labels, labels, "w"),
        matrix_figure(steps.output, labels, toy.SEED_DIMS, "o"),
        distribution_figure(toy.TEMPERATURE_TOKENS, weights[0], "d"),
        entropy_curve_figure(sweep, toy.temperature_sweep(scores, sweep),
                             toy.TEMPERATURE_TOKENS, 2.0, 2.0, math.log2(4)),
        matrix_figure(weights, toy.TEMPERATURE_TOKENS, toy.TEMPERATURE_TOKENS, "t"),
        multihead_figure([s.weights for s in multi.per_head], toy.MULTIHEAD_TOKENS),
        matrix_figure(multi.concat, toy.MULTIHEAD_TOKENS, range(4), "c"),
        matrix_figure(toy.MULTIHEAD_WO, range(4), range(4), "w"),
        matrix_figure(multi.output, toy.MULTIHEAD_TOKENS, range(4), "o"),
        query_attention_figure(prepared.model_image, values, capture.layout.patch_size,
                               (rows // 2, 0), "q")]
    return sum(len(figure.to_json()) for figure in figures)


def _apptest_rerun(page: str, repeats: int) -> float:
    from streamlit.testing.v1 import AppTest

    app = AppTest.from_file(ENTRY, default_timeout=600)
    app.run()
    app.switch_page(f"../pages/{page}").run()
    if app.exception:
        raise RuntimeError(f"{page} raised: {app.exception}")
    return _median_seconds(lambda: app.run(), repeats=repeats)


def run(smoke: bool = False) -> list[dict]:
    vit, cnn = get_model(DEFAULT_VIT), get_model(DEFAULT_CNN)
    image = load_sample("chelsea")
    reruns, repeats = (1, 1) if smoke else (5, 7)
    rows = []
    for name, page in PAGES.items():
        rows.append({"name": f"{name}: AppTest rerun, capture cached", "value":
                     _apptest_rerun(page, reruns), "unit": "s",
                     "note": "target < 1 s; whole script incl. sidebar"})
    bytes1 = _page1_figures(vit, cnn, image)
    rows.append({"name": "page 1: figures built + JSON, caches warm",
                 "value": _median_seconds(lambda: _page1_figures(vit, cnn, image), repeats),
                 "unit": "s", "note": f"{bytes1 / 1e6:.2f} MB of figure JSON"})
    bytes2 = _page2_figures(vit, image)
    rows.append({"name": "page 2: figures built + JSON, capture cached",
                 "value": _median_seconds(lambda: _page2_figures(vit, image), repeats),
                 "unit": "s", "note": f"{bytes2 / 1e6:.2f} MB of figure JSON"})
    return rows
