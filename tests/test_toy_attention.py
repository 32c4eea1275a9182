"""The self-attention toy: the seed's worked numbers, limits of the temperature, and
multi-head attention against torch's own implementation."""

import math

import numpy as np
import pytest
import torch
from scipy.special import softmax as scipy_softmax

from xai_core.analysis import toy_attention as toy
from xai_core.analysis.entropy import entropy

# The seed's printed tables ("Self-Attention 101"), rows = queries [CLS], Eye, Bg.
SEED_SCORES = [[3.00, 6.00, 0.50], [4.00, 8.75, -0.50], [0.20, -0.80, 4.10]]
SEED_WEIGHTS = [[0.15, 0.82, 0.03], [0.06, 0.94, 0.00], [0.09, 0.05, 0.86]]


def test_seed_scores_match_the_printed_table():
    steps = toy.seed_steps()
    np.testing.assert_allclose(steps.scores, SEED_SCORES, rtol=0, atol=1e-12)
    assert np.round(steps.scores, 2).tolist() == SEED_SCORES


def test_seed_weights_match_to_two_decimals_and_an_independent_oracle():
    steps = toy.seed_steps()
    assert steps.scale == pytest.approx(math.sqrt(3))  # d_k = 3 in the seed example
    assert np.round(steps.weights, 2).tolist() == SEED_WEIGHTS
    # Oracle: scipy's softmax of the printed scores / sqrt(3).
    oracle = scipy_softmax(np.array(SEED_SCORES) / np.sqrt(3), axis=1)
    np.testing.assert_allclose(steps.weights, oracle, rtol=0, atol=1e-9)
    np.testing.assert_allclose(steps.weights.sum(1), 1.0, atol=1e-12)


def test_seed_output_matches_torch_sdpa():
    steps = toy.seed_steps()
    q, k, v = (torch.tensor(m, dtype=torch.float64)[None] for m in
               (toy.SEED_Q, toy.SEED_K, toy.SEED_V))
    oracle = torch.nn.functional.scaled_dot_product_attention(q, k, v)[0].numpy()
    np.testing.assert_allclose(steps.output, oracle, rtol=0, atol=1e-12)


def test_edit_changes_weights_like_the_oracle():
    q = toy.SEED_Q.copy()
    q[0, 1] = 4.0  # [CLS] now cares about fur too
    steps = toy.attention_steps(q, toy.SEED_K, toy.SEED_V)
    oracle = scipy_softmax(q @ toy.SEED_K.T / np.sqrt(3), axis=1)
    np.testing.assert_allclose(steps.weights, oracle, atol=1e-12)
    assert not np.allclose(steps.weights[0], toy.seed_steps().weights[0])


@pytest.mark.parametrize("temperature", [0.05, 0.5, 2.0, 8.0, 200.0])
def test_rows_sum_to_one_at_every_temperature(temperature):
    scores = toy.TEMPERATURE_Q @ toy.TEMPERATURE_K.T
    weights = toy.softmax_with_temperature(scores, temperature)
    np.testing.assert_allclose(weights.sum(1), 1.0, atol=1e-12)
    assert (weights >= 0).all()


def test_temperature_limits_one_hot_and_uniform():
    scores = toy.TEMPERATURE_Q @ toy.TEMPERATURE_K.T
    n = scores.shape[1]
    one_hot = np.eye(n)[scores.argmax(1)]
    np.testing.assert_array_equal(toy.softmax_with_temperature(scores, 0.0), one_hot)
    np.testing.assert_allclose(toy.softmax_with_temperature(scores, 1e-3), one_hot, atol=1e-12)
    np.testing.assert_allclose(toy.softmax_with_temperature(scores, math.inf), 1.0 / n)
    np.testing.assert_allclose(toy.softmax_with_temperature(scores, 1e7), 1.0 / n, atol=1e-6)
    assert entropy(toy.softmax_with_temperature(scores, 1e-3), base=2) == pytest.approx(
        [0.0] * n, abs=1e-9)
    assert entropy(toy.softmax_with_temperature(scores, 1e7), base=2) == pytest.approx(
        [math.log2(n)] * n, abs=1e-9)


def test_temperature_zero_splits_ties():
    weights = toy.softmax_with_temperature(np.array([[1.0, 3.0, 3.0]]), 0.0)
    np.testing.assert_array_equal(weights, [[0.0, 0.5, 0.5]])


def test_entropy_is_monotone_in_temperature_for_the_four_token_example():
    scores = toy.TEMPERATURE_Q @ toy.TEMPERATURE_K.T
    temperatures = np.geomspace(0.01, 1000, 200)
    bits = toy.temperature_sweep(scores, temperatures)
    assert bits.shape == (200, 4)
    assert (np.diff(bits, axis=0) >= -1e-12).all()
    assert (bits[-1] - bits[0] > 1.9).all()  # from ~0 to ~log2(4) = 2 bits
    # At sqrt(d_k) = 2 it lies strictly between the extremes.
    weights = toy.attention_steps(toy.TEMPERATURE_Q, toy.TEMPERATURE_K).weights
    middle = entropy(weights, base=2)
    assert ((middle > 0.1) & (middle < 1.99)).all()


@pytest.mark.parametrize("heads", [1, 2, 4])
def test_multi_head_matches_torch_multihead_attention(heads):
    steps = toy.multi_head_attention(toy.MULTIHEAD_X, toy.MULTIHEAD_WQ, toy.MULTIHEAD_WK,
                                     toy.MULTIHEAD_WV, toy.MULTIHEAD_WO, heads)
    width = toy.MULTIHEAD_X.shape[1]
    assert steps.d_k == width // heads and len(steps.per_head) == heads
    mha = torch.nn.MultiheadAttention(width, heads, bias=False, batch_first=True,
                                      dtype=torch.float64)
    with torch.no_grad():  # torch computes x @ W^T, we compute x @ W
        mha.in_proj_weight.copy_(torch.tensor(np.concatenate(
            [toy.MULTIHEAD_WQ.T, toy.MULTIHEAD_WK.T, toy.MULTIHEAD_WV.T])))
        mha.out_proj.weight.copy_(torch.tensor(toy.MULTIHEAD_WO.T))
        x = torch.tensor(toy.MULTIHEAD_X)[None]
        out, weights = mha(x, x, x, need_weights=True, average_attn_weights=False)
    np.testing.assert_allclose(steps.output, out[0].numpy(), atol=1e-12)
    for h in range(heads):
        np.testing.assert_allclose(steps.per_head[h].weights, weights[0, h].numpy(), atol=1e-12)
        np.testing.assert_allclose(steps.per_head[h].weights.sum(1), 1.0, atol=1e-12)


def test_two_heads_attend_to_different_tokens():
    steps = toy.multi_head_attention(toy.MULTIHEAD_X, toy.MULTIHEAD_WQ, toy.MULTIHEAD_WK,
                                     toy.MULTIHEAD_WV, toy.MULTIHEAD_WO, 2)
    tokens = toy.MULTIHEAD_TOKENS
    first, second = (s.weights for s in steps.per_head)
    cls, ear, eye, paw = (tokens.index(t) for t in ("[CLS]", "Ear", "Eye", "Paw"))
    assert first[cls].argmax() == eye and first[eye].argmax() == ear
    assert second[cls, ear] == pytest.approx(second[cls, paw])
    assert second[cls, ear] + second[cls, paw] > 0.95


def test_heads_must_divide_the_width():
    with pytest.raises(toy.ToyInputError, match="divisor of 4"):
        toy.multi_head_attention(toy.MULTIHEAD_X, toy.MULTIHEAD_WQ, toy.MULTIHEAD_WK,
                                 toy.MULTIHEAD_WV, toy.MULTIHEAD_WO, 3)


@pytest.mark.parametrize("bad, words", [(None, "is empty"), ("", "is empty"),
                                        (float("nan"), "is empty"), ("abc", "not a number"),
                                        (float("inf"), "infinite")])
def test_bad_cells_name_the_cell(bad, words):
    cells = [[1.0, 2.0], [3.0, bad]]
    with pytest.raises(toy.ToyInputError, match=words) as info:
        toy.parse_matrix(cells, "Q", ("[CLS]", "Eye"), ("d1", "d2"))
    assert "Q[Eye, d2]" in str(info.value)


def test_text_cells_that_are_numbers_parse():
    np.testing.assert_array_equal(toy.parse_matrix([[" 1.5", "-2"], [3, "4e-1"]]),
                                  [[1.5, -2.0], [3.0, 0.4]])


def test_mismatched_shapes_are_refused():
    with pytest.raises(toy.ToyInputError, match="same number of columns"):
        toy.attention_steps(np.ones((3, 3)), np.ones((3, 2)))
    with pytest.raises(toy.ToyInputError, match="temperature must be >= 0"):
        toy.softmax_with_temperature(np.ones((2, 2)), -1.0)
