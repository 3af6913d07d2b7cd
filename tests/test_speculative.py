"""Speculative decoding closed forms, checked against Monte Carlo, sympy and published values."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from roofline.errors import WorkloadError
from roofline.physics.speculative import (
    Acceptance,
    acceptance_length_from_rate,
    acceptance_rate_from_length,
    alpha_from_acceptance_length,
    compute_increase_factor,
    expected_tokens,
    expected_tokens_positional,
    optimal_gamma_closed_form,
    speedup_closed_form,
)

alphas = st.floats(0, 1, allow_nan=False)
gammas = st.integers(0, 64)


def test_done_when_values():
    assert round(float(expected_tokens(0.926, 5)), 2) == 4.99   # docs/gimlet.md §1.4
    assert expected_tokens(1.0, 5) == 6                         # all drafts plus the bonus token
    assert expected_tokens(0.8, 4) == pytest.approx(3.3616)     # docs/theory.md §4.2 check value
    assert expected_tokens(0.962, 40) == pytest.approx(20.94, abs=0.01)


def test_stable_near_one():
    for eps in (1e-6, 1e-9, 1e-12, 1e-15):
        assert expected_tokens(1 - eps, 10) == pytest.approx(11 - 55 * eps, rel=1e-6)


@given(alphas, gammas)
def test_bounds_and_limits(a, g):
    e = float(expected_tokens(a, g))
    assert 1 - 1e-12 <= e <= g + 1 + 1e-9
    assert expected_tokens(a, 0) == 1
    assert e == pytest.approx(sum(a**j for j in range(g + 1)), rel=1e-9)


@given(alphas, alphas, gammas)
def test_increasing_in_alpha(a1, a2, g):
    lo, hi = sorted((a1, a2))
    assert expected_tokens(lo, g) <= expected_tokens(hi, g) * (1 + 1e-12)


@given(alphas, gammas)
def test_increasing_in_gamma(a, g):
    assert expected_tokens(a, g) <= expected_tokens(a, g + 1) * (1 + 1e-12)


@pytest.mark.parametrize("alpha,gamma", [(0.926, 5), (0.6, 3), (0.962, 40), (0.3, 8)])
def test_matches_monte_carlo_of_bernoulli_acceptance(alpha, gamma):
    rng = np.random.default_rng(2026)
    trials = 200_000
    accept = rng.random((trials, gamma)) < alpha
    # tokens per round = accepted prefix length + 1 (correction or bonus token)
    prefix = np.where(accept.all(axis=1), gamma, np.argmin(accept, axis=1))
    samples = prefix + 1
    mean, se = samples.mean(), samples.std(ddof=1) / np.sqrt(trials)
    assert abs(mean - float(expected_tokens(alpha, gamma))) < 4 * se


def test_positional_and_tables():
    assert expected_tokens_positional([0.8] * 4) == pytest.approx(float(expected_tokens(0.8, 4)))
    # docs/theory.md §4.7: unconditional per-position rates 0.58, 0.31, 0.16, 0.08 give tau(gamma=4) = 2.13
    r = np.array([0.58, 0.31, 0.16, 0.08])
    conditional = r / np.concatenate([[1.0], r[:-1]])
    assert expected_tokens_positional(conditional) == pytest.approx(2.13)
    acc = Acceptance.positional(conditional)
    assert acc.expected_tokens(4) == pytest.approx(2.13) and acc.expected_tokens(0) == 1
    with pytest.raises(WorkloadError):
        acc.expected_tokens(5)
    m = Acceptance.measured({2: 2.58, 4: 2.99})   # DeepSeek-R1 MTP on B200, TensorRT-LLM blog (validation DS03/DS05)
    assert list(m.expected_tokens([2, 4])) == [2.58, 2.99]
    with pytest.raises(WorkloadError, match="no measured acceptance length for gamma \\[3\\]"):
        m.expected_tokens(3)
    g = Acceptance.alpha_by_gamma({5: 0.926, 40: 0.962})
    assert g.expected_tokens(5) == pytest.approx(4.99, abs=0.01) and g.expected_tokens(40) == pytest.approx(20.94, abs=0.01)
    assert g.alpha_at(1) == 0.926 and g.alpha_at(60) == 0.962 and 0.926 < g.alpha_at(20) < 0.962


@pytest.mark.parametrize("tau,gamma,alpha", [(3.5, 5, 0.7773), (2.5, 3, 0.6914), (3.0, 4, 0.7413), (6.0, 7, 0.9158),
                                             (2.0, 2, 0.6180)])
def test_alpha_from_acceptance_length(tau, gamma, alpha):
    # docs/theory.md §4.7 inversion table
    assert alpha_from_acceptance_length(tau, gamma) == pytest.approx(alpha, abs=1e-4)


@given(alphas, st.integers(1, 40))
def test_inversion_roundtrip(a, g):
    tau = float(expected_tokens(a, g))
    assert float(expected_tokens(alpha_from_acceptance_length(tau, g), g)) == pytest.approx(tau, abs=1e-9)


def test_engine_acceptance_rate_is_not_alpha():
    # alpha = 0.8, gamma = 4 shows as a 0.590 "acceptance rate" (docs/theory.md §4.7)
    tau = expected_tokens(0.8, 4)
    assert acceptance_rate_from_length(tau, 4) == pytest.approx(0.590, abs=1e-3)
    assert acceptance_length_from_rate(0.590, 4) == pytest.approx(3.36)


def test_speedup_and_compute_factor():
    assert speedup_closed_form(0.8, 4, 0.1) == pytest.approx(2.401, abs=1e-3)   # docs/theory.md §4.3
    assert compute_increase_factor(0.8, 4, 0.1) == pytest.approx(1.606, abs=1e-3)  # docs/theory.md §4.5
    assert speedup_closed_form(0.5, 0, 0.3) == 1


@pytest.mark.parametrize("alpha,c,g_c,g_int", [(0.6, 0.01, 6.87, 7), (0.8, 0.05, 7.86, 8), (0.8, 0.1, 5.76, 6),
                                               (0.9, 0.2, 6.56, 7), (0.6, 0.2, 1.97, 2)])
def test_optimal_gamma_closed_form_matches_table_and_scan(alpha, c, g_c, g_int):
    cont, best = optimal_gamma_closed_form(alpha, c)
    assert cont == pytest.approx(g_c, abs=0.01) and best == g_int
    scan = np.arange(0, 200)
    assert best == int(scan[np.argmax(speedup_closed_form(alpha, scan, c))])


@pytest.mark.parametrize("call", [
    lambda: expected_tokens(1.01, 3), lambda: expected_tokens(-0.1, 3), lambda: expected_tokens(float("nan"), 3),
    lambda: expected_tokens(0.5, -1), lambda: expected_tokens(0.5, 2.5), lambda: alpha_from_acceptance_length(0.5, 3),
    lambda: alpha_from_acceptance_length(5.1, 4), lambda: Acceptance.geometric(2), lambda: optimal_gamma_closed_form(1, 0.1),
    lambda: Acceptance.measured({3: 9.0}), lambda: expected_tokens("x", 1),
])
def test_bad_input_raises_workload_error(call):
    with pytest.raises(WorkloadError):
        call()
