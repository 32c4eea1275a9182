"""Page 1 (pages/1_tokenization.py): from pixels to tokens, and what the model predicts."""

from __future__ import annotations

from ... import pipeline
from ...analysis import tokens
from ...figures.curves import prediction_bars
from ...figures.matrices import embedding_pca_figure, position_mosaic_figure
from ...figures.tokenization import tokenization_figure
from .answers import answer
from .view import FORWARD, NO_PASS, Page, view

TOKENS = Page("1_tokenization.py", compute=lambda model, image, values: pipeline.prepare(
    model, image))
STEP = TOKENS.picker("tok_view", label="Step")


@view(STEP, "patches", "1-2 · Patches and the sequence", figure=tokenization_figure)
def patches(model, image, values) -> None:
    """The grid is read from the model's layout: nothing to compute."""


@view(STEP, "embedding", "3 · Patch embedding", figure=embedding_pca_figure, cost=NO_PASS)
def embedding(model, image, values) -> None:
    tokens.cached_embedding_pca(model)


@view(STEP, "position", "4 · Position embeddings", figure=position_mosaic_figure)
def position(model, image, values) -> None:
    tokens.cached_position_similarity(model)


@view(STEP, "prediction", "5 · The prediction", models=("vit", "cnn"), figure=prediction_bars,
      cost=FORWARD)
def prediction(model, image, values) -> None:
    answer(model, image)
    if model.head is not None and model.head.kind == "knn":  # the nearest bank entries
        model.head.neighbours(pipeline.model_output(model, image))
