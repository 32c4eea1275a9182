"""Home (pages/home.py): the picture, each model's card and its top five."""

from __future__ import annotations

from ...models.card import model_card
from .answers import answer
from .view import FORWARD, Page, view

HOME = Page("home.py", models=("vit", "cnn"))


@view(HOME, "home", "Home", cost=FORWARD)  # the prediction
def home(model, image, values) -> None:
    model_card(model, image)
    answer(model, image)
