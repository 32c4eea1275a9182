"""Page 8 (pages/8_text_attention.py): attention in a text transformer. Its computations run on
the text model and the sentence typed (by default the first example's), not on the picture."""

from __future__ import annotations

from ...analysis import text_attention as text
from ...figures import text as text_figures
from ...methods.base import Choice, FromModel, Int
from ...metrics import text_heads
from ...models import specs_of_family
from .view import FORWARD, GRADIENT, NO_PASS, Flag, Page, Text, view

# title -> (sentence to inspect, second sentence for the similarity target); the first is
# the page's default
EXAMPLES = {
    "Pronoun to resolve (it = animal?)": (
        "The animal didn't cross the street because it was too tired.",
        "The animal was exhausted."),
    "Pronoun to resolve (it = street?)": (
        "The animal didn't cross the street because it was too wide.",
        "The road was very broad."),
    "Winograd: trophy and suitcase": (
        "The trophy doesn't fit into the brown suitcase because it is too large.",
        "The trophy is big."),
    "Negation": ("This film was not good at all, although the actors tried hard.",
                 "I loved this movie."),
    "Rare word split into pieces": ("Photosynthesis converts sunlight into chemical energy.",
                                    "Plants make food from light."),
}
FIRST_EXAMPLE = next(iter(EXAMPLES))
TEXT_MODELS = tuple(spec.id for spec in specs_of_family("text"))
LAST_LAYER = FromModel("the last layer", lambda model: model.module.config.num_hidden_layers - 1)
LAST_TEXT_HEAD = FromModel("the last head",
                           lambda model: model.module.config.num_attention_heads - 1)
HEAD_SHOWS = ("one head", "mean of the heads", "all heads of the layer")


def _sentence(model, image, values) -> None:
    text.text_capture(model, values["text_input"])


TEXT = Page(
    "8_text_attention.py", compute=_sentence, models=("text",), cost=FORWARD,
    options=(Choice("text_model", TEXT_MODELS[0], TEXT_MODELS, "The text model."),),
    settings=(Choice("text_example", FIRST_EXAMPLE, tuple(EXAMPLES),
                     "An example: fills both sentences."),
              Text("text_input", EXAMPLES[FIRST_EXAMPLE][0], "The sentence to inspect.", 5000),
              Text("text_reference", EXAMPLES[FIRST_EXAMPLE][1], "The second sentence (the "
                                                                 "similarity target).", 2000)))
PART = TEXT.picker("text_part", label="Part")

view(PART, "head", "Head view", figure=text_figures.attention_heatmap, cost=NO_PASS,
     options=(Int("text_layer", LAST_LAYER, 0, LAST_LAYER, "A layer index."),
              Int("text_head", 0, 0, LAST_TEXT_HEAD, "A head index.")),
     settings=(Choice("text_view", HEAD_SHOWS[0], HEAD_SHOWS, "One head, their mean, or all "
                                                              "of the layer."),))(None)
view(PART, "special", "Head specialisation", figure=text_figures.head_metric_heatmap,
     cost=NO_PASS, settings=(Choice("text_question", next(iter(text_heads.HEAD_QUESTIONS)),
                                    tuple(text_heads.HEAD_QUESTIONS), "The habit to look for."),
                             ))(None)
view(PART, "layers", "Layer by layer", figure=text_figures.layer_progression_figure,
     cost=NO_PASS)(None)
view(PART, "rollout", "Rollout", figure=text_figures.token_bars, cost=NO_PASS)(None)


@view(PART, "importance", "Attention vs. importance", cost=GRADIENT,
      figure=text_figures.attention_vs_gradient_figure,
      settings=(Choice("text_source", next(iter(text_heads.ATTENTION_SOURCES)),
                       tuple(text_heads.ATTENTION_SOURCES), "The attention summary compared."),
                Flag("text_special", False, "Include [CLS] and [SEP].")))
def importance(model, image, values) -> None:
    """Gradient x input of the similarity to the second sentence."""
    text.gradient_importance(model, values["text_input"], values["text_reference"])
