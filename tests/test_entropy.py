"""The one entropy function (xai_core.analysis.entropy) against hand values and SciPy."""

import math

import numpy as np
import pytest
from scipy.stats import entropy as scipy_entropy

from xai_core.analysis.entropy import entropy


@pytest.mark.parametrize("n", [1, 2, 5, 8, 197])
def test_uniform_over_n_is_log_n(n):
    uniform = np.full(n, 1 / n)
    assert entropy(uniform) == pytest.approx(math.log(n), abs=1e-12)
    assert entropy(uniform, base=2) == pytest.approx(math.log2(n), abs=1e-12)


def test_one_hot_is_zero_and_zero_terms_count_as_zero():
    assert entropy(np.array([1.0, 0.0, 0.0])) == 0.0
    assert entropy(np.array([0.0, 0.5, 0.0, 0.5]), base=2) == pytest.approx(1.0)


def test_worked_number():
    # (1/2, 1/4, 1/4): 1/2 * 1 bit + 2 * 1/4 * 2 bits = 1.5 bits = 1.5 ln 2 nats
    p = np.array([0.5, 0.25, 0.25])
    assert entropy(p, base=2) == pytest.approx(1.5, abs=1e-12)
    assert entropy(p) == pytest.approx(1.0397207708399179, abs=1e-12)


def test_rows_of_a_stack_match_scipy_along_any_axis():
    rng = np.random.default_rng(0)
    stack = rng.dirichlet(np.full(7, 0.3), size=(3, 4))  # (3, 4, 7), rows sum to 1
    stack[0, 0] = np.eye(7)[2]  # a one-hot row among them
    np.testing.assert_allclose(entropy(stack), scipy_entropy(stack, axis=-1), rtol=1e-12)
    columns = np.moveaxis(stack, -1, 0)  # the distributions down axis 0
    np.testing.assert_allclose(entropy(columns, axis=0, base=2),
                               scipy_entropy(columns, axis=0, base=2), rtol=1e-12)
    assert entropy(stack).shape == (3, 4)
