"""Page 8: what the text-attention page computes for one new sentence (all-MiniLM-L6-v2).

A "new sentence" run does everything the page does after the user types: tokenise, capture
(attentions + hidden states), specialisation metrics, layer progression, rollout, the
reference sentence's capture, the gradient x input backward, the Spearman comparison, and
building + serialising every figure of the default view. Each repeat uses a sentence the
cache has not seen; the "cached rerun" repeats the last one (a slider move). Smoke: one of
each."""

from __future__ import annotations

import statistics

from bench.bench_foundation import _seconds
from xai_core.analysis import text_attention as text
from xai_core.figures import text as ft
from xai_core.metrics import text_heads as tm

SENTENCE = "The animal didn't cross the street because it was too tired (take {k})."
REFERENCE = "The animal was exhausted."
LONG = "The quick brown fox jumps over the lazy dog number {k}. " * 40


def page_computation(model, sentence: str) -> int:
    capture = text.text_capture(model, sentence)
    tokens, attentions = capture.tokens, capture.attentions
    cls, seps = capture.cls_index, capture.sep_indices
    layer = capture.num_layers - 1
    figures = [ft.attention_heatmap(attentions[layer, 0], tokens, "heat"),
               ft.attention_lines(attentions[layer, 0], tokens, "lines",
                                  top_k=8 if capture.num_tokens > 64 else None)]
    rows = tm.specialisation_rows(attentions, cls, seps)
    tm.find_heads(rows, "look at the previous token")
    metrics = tm.head_metrics(attentions, cls, seps)
    figures.append(ft.head_metric_heatmap(metrics["self"], "m", "m"))
    figures.append(ft.layer_progression_figure(tm.layer_progression(attentions, cls, seps), "p"))
    rollout = tm.text_rollout(attentions)
    raw = attentions[-1].mean(0)[cls]
    figures.append(ft.token_bars(tokens, {"raw": raw, "rollout": rollout[cls]}, "r", "w"))
    importance = text.gradient_importance(model, sentence, REFERENCE)
    keep = list(capture.word_indices)
    attention = tm.token_attention(attentions, "cls_last", cls)[keep]
    agreement = tm.spearman(attention, importance.importance[keep])
    figures.append(ft.attention_vs_gradient_figure([tokens[i] for i in keep], attention,
                                                   importance.importance[keep], "cls",
                                                   agreement.rho))
    return sum(len(figure.to_json()) for figure in figures)


def run(smoke: bool = False) -> list[dict]:
    model = text.default_text_model()
    page_computation(model, SENTENCE.format(k="warm-up"))  # first forward, tokenizer load
    rows = []
    for name, template, repeats in (("short sentence", SENTENCE, 1 if smoke else 5),
                                    ("2,000+ characters cut to 256 tokens", LONG,
                                     1 if smoke else 3)):
        cold = [_seconds(lambda k=k: page_computation(model, template.format(k=k)))
                for k in range(repeats)]
        last = template.format(k=repeats - 1)
        warm = [_seconds(lambda: page_computation(model, last)) for _ in range(repeats)]
        capture = text.text_capture(model, last)
        size = page_computation(model, last)
        grad = text.gradient_importance(model, last, REFERENCE)
        rows += [
            {"name": f"page, new {name} ({capture.num_tokens} tokens)",
             "value": statistics.median(cold), "unit": "s",
             "note": f"median of {repeats}; figures {size / 1e6:.2f} MB JSON"},
            {"name": f"page, cached rerun, {name}", "value": statistics.median(warm),
             "unit": "s", "note": "captures from CAPTURE_CACHE; metrics + figures only"},
            {"name": f"capture forward, {name}", "value": capture.seconds, "unit": "s"},
            {"name": f"gradient x input backward, {name}", "value": grad.seconds, "unit": "s"},
        ]
    return rows


if __name__ == "__main__":
    for row in run():
        print(f"{row['name']:<58} {row['value']:8.3f} {row['unit']}  {row.get('note', '')}")
