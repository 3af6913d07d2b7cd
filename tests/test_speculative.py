"""Speculative decoding closed forms, checked against Monte Carlo, sympy and published values."""

import numpy as np
import pytest
from hypothesis import given, settings
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
    family_alphas,
    fit_acceptance,
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
    assert g.alpha_at(5) == pytest.approx(0.926) and g.alpha_at(40) == pytest.approx(0.962)
    assert 0.926 < g.alpha_at(20) < 0.962 and g.alpha_at(0) == g.params[0]


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


# --- the fitted positional family (docs/theory.md §4.12) ---

GIMLET = {5: 0.926, 40: 0.962}   # per-token alpha at two draft lengths (docs/gimlet.md §1.4)


def _gains(acc, up_to=200):
    return np.diff(acc.expected_tokens(np.arange(up_to + 1)))


def test_alpha_by_gamma_is_a_fit_whose_gain_never_rises():
    acc = Acceptance.alpha_by_gamma(GIMLET)
    assert acc.kind == "fitted" and acc.params[1] > 0   # rising conditional acceptance (beta-geometric)
    # both points are met: E = 4.99 at gamma 5, 20.94 at gamma 40 (docs/gimlet.md §1.4)
    assert acc.expected_tokens([5, 40]) == pytest.approx([float(expected_tokens(0.926, 5)),
                                                          float(expected_tokens(0.962, 40))], rel=1e-9)
    gains = _gains(acc)
    assert np.all(np.diff(gains) <= 1e-15) and np.all((gains >= 0) & (gains <= 1))
    # interpolating alpha in gamma gave gains 0.391 at gamma 23 and 0.531 at gamma 40; the fit falls throughout
    assert gains[39] < gains[22] < gains[9] < gains[4]
    # the fit's values between and beyond the points (our fit, not published: a regression guard)
    assert acc.expected_tokens([10, 23]) == pytest.approx([8.118, 14.471], abs=1e-3)


def test_fit_follows_published_positional_rates():
    # gpt-oss-120b + EAGLE-3: unconditional rates 0.58, 0.31, 0.16, 0.08 (docs/theory.md §4.7) give tau(gamma) =
    # 1.58, 1.89, 2.05, 2.13; conditional acceptance decays, so the fit takes the decaying branch
    acc = Acceptance.fitted({1: 1.58, 2: 1.89, 3: 2.05, 4: 2.13})
    assert acc.params[1] < 0
    assert acc.expected_tokens([1, 2, 3, 4]) == pytest.approx([1.58, 1.89, 2.05, 2.13], rel=0.005)
    # DeepSeek-R1 MTP on B200 (TensorRT-LLM blog, validation DS03/DS05): two points met exactly
    assert Acceptance.fitted({2: 2.58, 4: 2.99}).expected_tokens([2, 4]) == pytest.approx([2.58, 2.99], rel=1e-9)


@st.composite
def positional_points(draw):
    """Acceptance lengths at 2-4 draft lengths of an arbitrary positional acceptance (every alpha_i in [0, 1])."""
    gs = sorted(draw(st.sets(st.integers(1, 48), min_size=2, max_size=4)))
    a = np.array(draw(st.lists(alphas, min_size=gs[-1], max_size=gs[-1])))
    cum = np.concatenate([[1.0], 1.0 + np.cumsum(np.cumprod(a))])
    return {g: float(cum[g]) for g in gs}


@settings(max_examples=40, deadline=None)
@given(positional_points())
def test_gain_per_drafted_token_never_rises_for_any_fit(points):
    params = fit_acceptance(points)   # the least-squares fit, however far the family is from these points
    acc = Acceptance("fitted", table=points, params=params)
    gains = _gains(acc, 128)
    assert np.all(np.diff(gains) <= 1e-12) and np.all((gains >= -1e-15) & (gains <= 1 + 1e-15))
    assert np.all((family_alphas(*params, 128) >= 0) & (family_alphas(*params, 128) <= 1))


def test_fit_refuses_points_the_family_cannot_follow():
    # every draft up to 5 accepted, then one more token in 35: valid, but no (alpha1, h) comes within 5%
    with pytest.raises(WorkloadError, match="misses E\\[N\\] = 6 at gamma 5"):
        Acceptance.fitted({5: 6.0, 40: 7.0})


@settings(max_examples=40, deadline=None)
@given(st.floats(0.05, 0.99), st.floats(-0.9, 0.9), st.sets(st.integers(1, 64), min_size=2, max_size=3))
def test_fit_recovers_points_of_the_family(alpha1, u, gs):
    h = u / (1 - u) if u >= 0 else np.log1p(u)
    gs = sorted(gs)
    taus = np.concatenate([[1.0], 1.0 + np.cumsum(np.cumprod(family_alphas(alpha1, h, gs[-1])))])[gs]
    acc = Acceptance.fitted(dict(zip(gs, taus)))
    assert acc.expected_tokens(gs) == pytest.approx(taus, rel=1e-7)


def test_family_matches_monte_carlo_of_positional_acceptance():
    acc = Acceptance.alpha_by_gamma(GIMLET)
    a1, h = acc.params
    rng = np.random.default_rng(2026)
    trials, gamma = 200_000, 40
    # (1) draft i accepted with probability alpha_i given all before it were
    accept = rng.random((trials, gamma)) < family_alphas(a1, h, gamma)
    # (2) the mechanism behind h > 0: each round's alpha ~ Beta(a1/h, (1-a1)/h), then i.i.d. Bernoulli acceptance
    accept_beta = rng.random((trials, gamma)) < rng.beta(a1 / h, (1 - a1) / h, trials)[:, None]
    for acc_draws in (accept, accept_beta):
        for g in (5, 23, 40):
            prefix = np.where(acc_draws[:, :g].all(axis=1), g, np.argmin(acc_draws[:, :g], axis=1))
            samples = prefix + 1   # accepted drafts plus the correction or bonus token
            se = samples.std(ddof=1) / np.sqrt(trials)
            assert abs(samples.mean() - float(acc.expected_tokens(g))) < 4 * se


def test_beta_geometric_closed_form_sympy():
    sp = pytest.importorskip("sympy")
    a, b, k = sp.symbols("a b k", positive=True)
    # alpha_i = E[alpha^i] / E[alpha^(i-1)] under alpha ~ Beta(a, b): (a+i-1)/(a+b+i-1) (Weinberg & Gladen 1982)
    ratio = sp.gammasimp(sp.beta(a + k, b) / sp.beta(a + k - 1, b))
    assert sp.simplify(ratio - (a + k - 1) / (a + b + k - 1)) == 0
    # E = 1 + sum_k (a)_k/(a+b)_k telescopes: u_k = (a)_k/(a+b-1)_k has u_k - u_(k+1) = (b-1)/(a+b-1) (a)_k/(a+b)_k.
    # With P = (a)_k, Q = (a+b-1)_k: (a)_(k+1) = P (a+k), (a+b-1)_(k+1) = Q (a+b-1+k), (a+b)_k = Q (a+b-1+k)/(a+b-1)
    P, Q = sp.symbols("P Q", positive=True)
    step = P / Q - P * (a + k) / (Q * (a + b - 1 + k)) - (b - 1) / (a + b - 1) * P / (Q * (a + b - 1 + k) / (a + b - 1))
    assert sp.simplify(step) == 0
    G = sp.gamma   # (x)_k = Gamma(x+k)/Gamma(x)
    assert sp.simplify(sp.gammasimp(G(a + b + k) / G(a + b) * G(a + b - 1) / G(a + b - 1 + k))
                       - (a + b - 1 + k) / (a + b - 1)) == 0
    closed = (a + b - 1) / (b - 1) * (1 - sp.rf(a, k + 1) / sp.rf(a + b - 1, k + 1))   # E at gamma = k
    for av, bv in ((sp.Rational(3, 2), sp.Rational(5, 2)), (sp.Rational(47, 10), sp.Rational(2, 5)), (9, 1 / sp.Integer(3))):
        for g in (0, 1, 5, 40):
            exact = closed.subs({a: av, b: bv, k: g})
            numeric = Acceptance("fitted", table={1: 1.5, 2: 1.8}, params=(float(av / (av + bv)), float(1 / (av + bv))))
            assert float(numeric.expected_tokens(g)) == pytest.approx(float(exact), rel=1e-12)


def test_fitted_broadcasts_like_a_stack_of_scalar_calls():
    acc = Acceptance.alpha_by_gamma(GIMLET)
    g = np.array([[0, 1, 5], [12, 40, 64]])
    assert acc.expected_tokens(g).shape == g.shape == acc.alpha_at(g).shape
    assert acc.expected_tokens(g) == pytest.approx(np.vectorize(lambda x: float(acc.expected_tokens(x)))(g))
    assert acc.shape == () and "fitted through" in acc.describe()


@pytest.mark.parametrize("points,match", [
    ({4: 3.0}, "two or more"),
    ({}, "two or more"),
    ({2: 2.5, 4: 2.2}, "fall as gamma grows"),
    ({2: 3.5, 4: 4.0}, "exceeds gamma"),
    ({2: float("nan"), 4: 3.0}, "tau must be >= 1"),
    ({2: float("inf"), 4: 3.0}, "tau must be >= 1"),
    ({2: 1.5, 10: 6.0}, "gain more"),
    ({0: 1.0, 4: 3.0}, "draft lengths >= 1"),
    ([(2, 2.5), (4, 3.0)], "mapping"),
])
def test_fit_refuses_points_no_acceptance_gives(points, match):
    with pytest.raises(WorkloadError, match=match):
        Acceptance.fitted(points)
    if isinstance(points, dict) and len(points) >= 2:
        with pytest.raises(WorkloadError, match=match):
            fit_acceptance(points)


@pytest.mark.parametrize("table,match", [
    ({5: 0.9}, "two or more"), ({5: 0.9, 40: 1.2}, r"alpha must be in \[0, 1\]"),
    ({5: 0.95, 40: 0.5}, "fall as gamma grows"), ({2: 0.3, 20: 0.9}, "gain more"),
])
def test_alpha_by_gamma_refuses(table, match):
    with pytest.raises(WorkloadError, match=match):
        Acceptance.alpha_by_gamma(table)
