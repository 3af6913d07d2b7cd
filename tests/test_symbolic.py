"""sympy derivations against the numeric closed forms (three-way check with the Monte Carlo in test_speculative)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

sympy = pytest.importorskip("sympy")

from roofline import symbolic  # noqa: E402
from roofline.physics.speculative import expected_tokens, speedup_closed_form  # noqa: E402

E = symbolic.lambdified("expected-tokens")       # args: alpha, gamma
S = symbolic.lambdified("speedup")               # args: alpha, c, gamma


def test_limits():
    s = symbolic.symbols()
    assert symbolic.expected_tokens_limit_alpha_1() == s["gamma"] + 1
    assert symbolic.expected_tokens().subs(s["alpha"], 0) == 1
    assert sympy.simplify(symbolic.expected_tokens().subs(s["gamma"], 0)) == 1


@given(st.floats(0.0, 0.999999), st.integers(0, 60))
def test_sympy_equals_numeric(a, g):
    assert float(E(a, g)) == pytest.approx(float(expected_tokens(a, g)), rel=1e-9)


@given(st.floats(0.01, 0.99), st.floats(0.0, 2.0), st.integers(0, 40))
def test_speedup_sympy_equals_numeric(a, c, g):
    assert float(S(a, c, g)) == pytest.approx(float(speedup_closed_form(a, g, c)), rel=1e-9)


def test_ridge_batch_matches_worked_table():
    # docs/theory.md §3.3: Llama-70B BF16 on H100: B* ~ 300 at L = 0, ~979 at L = 1,024, infinite at 8,192
    rb = symbolic.formula("ridge-batch")
    s = symbolic.symbols()
    P, nh, dh, nL = 69.502e9, 64, 128, 80
    for L, expected in ((0, 300), (1024, 979)):
        F = 2 * P + nL * 4 * nh * dh * L
        kv = 327_680 * L
        val = float(rb.subs({s["pi"]: 989.4e12, s["beta"]: 3.35e12, s["Q_w"]: 141.1e9, s["F_seq"]: F, s["KV_seq"]: kv}))
        assert val == pytest.approx(expected, rel=0.02)
    F, kv = 2 * P + nL * 4 * nh * dh * 8192, 327_680 * 8192
    assert F / kv < 989.4e12 / 3.35e12   # per-sequence intensity below the ridge: never compute-bound


def test_formula_cli(run_cli):
    code, out, _ = run_cli("formula", "expected-tokens")
    assert code == 0 and "gamma + 1" in out
    code, out, _ = run_cli("formula", "speedup", "--latex")
    assert code == 0 and "\\frac" in out
    code, _, err = run_cli("formula", "nope")   # a name outside the listed choices: a usage error
    assert code == 2 and "unknown name 'nope'" in err and "expected-tokens" in err
