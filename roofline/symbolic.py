"""Symbolic derivations with sympy (imported only here, and only when used).

Each function derives a closed form from its model rather than typing it in,
so the numeric code in :mod:`roofline.speculative` and :mod:`roofline.stages`
can be checked against an independent derivation (tests lambdify these and
compare on hypothesis-drawn inputs).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _sp() -> Any:
    import sympy
    return sympy


def symbols() -> dict[str, Any]:
    sp = _sp()
    return {
        "alpha": sp.Symbol("alpha", positive=True),
        "gamma": sp.Symbol("gamma", integer=True, nonnegative=True),
        "c": sp.Symbol("c", positive=True),
        "j": sp.Symbol("j", integer=True, nonnegative=True),
        "pi": sp.Symbol("pi", positive=True),      # peak FLOP/s
        "beta": sp.Symbol("beta", positive=True),  # bandwidth, B/s
        "Q_w": sp.Symbol("Q_w", positive=True),    # weight bytes per step
        "F_seq": sp.Symbol("F_seq", positive=True),  # FLOP per sequence per step (2 P_mat + F_attn)
        "KV_seq": sp.Symbol("KV_seq", positive=True),  # KV bytes per sequence
        "B": sp.Symbol("B", positive=True),
    }


#: What each symbol of :func:`symbols` stands for (the legend `roofline formula` prints).
MEANINGS = {
    "alpha": "per-token acceptance probability of a draft token",
    "gamma": "draft tokens per speculative round",
    "c": "cost of one draft step relative to one verify step",
    "j": "summation index (accepted drafts)",
    "pi": "peak FLOP/s of the device (a symbol here, not 3.14159)",
    "beta": "memory bandwidth, bytes/s",
    "Q_w": "weight bytes read per decode step",
    "F_seq": "FLOP per sequence per decode step (2 x matmul parameters + attention)",
    "KV_seq": "KV-cache bytes read per sequence per decode step",
    "B": "decode batch (sequences)",
}


def legend(expr: Any) -> dict[str, str]:
    """The meaning of each free symbol of ``expr`` (:data:`MEANINGS`), in name order."""
    return {x.name: MEANINGS.get(x.name, "") for x in sorted(expr.free_symbols, key=lambda x: x.name)}


def expected_tokens() -> Any:
    """E[N] from the geometric acceptance model.

    Drafts are accepted one by one with probability alpha until the first
    rejection or gamma acceptances; the round then adds one token (the
    correction or the bonus). P(at least j accepted) = alpha^j, so
    E[N] = 1 + sum_{j=1}^{gamma} alpha^j, summed by sympy (Leviathan Eq. 1).
    """
    sp, s = _sp(), symbols()
    a, g, j = s["alpha"], s["gamma"], s["j"]
    expr = 1 + sp.summation(a**j, (j, 1, g))
    return sp.simplify(sp.piecewise_fold(expr))


def expected_tokens_limit_alpha_1() -> Any:
    """lim_{alpha -> 1} E[N] = gamma + 1 (every draft accepted, plus the bonus token)."""
    sp, s = _sp(), symbols()
    general = expected_tokens().args[-1][0]  # the alpha != 1 branch of the derived Piecewise
    return sp.limit(general, s["alpha"], 1)


def speedup() -> Any:
    """S = E[N] / (gamma c + 1): gamma draft steps of relative cost c plus one verify step (Leviathan Thm 3.8)."""
    s = symbols()
    return expected_tokens() / (s["gamma"] * s["c"] + 1)


def ridge_batch() -> Any:
    """Decode batch at which compute time equals memory time (docs/theory.md §3.3), solved by sympy.

    B F_seq / pi = (Q_w + B KV_seq) / beta  =>  B* = pi Q_w / (beta F_seq - pi KV_seq);
    finite only when the per-sequence intensity F_seq / KV_seq exceeds pi / beta.
    """
    sp, s = _sp(), symbols()
    B = s["B"]
    sol = sp.solve(sp.Eq(B * s["F_seq"] / s["pi"], (s["Q_w"] + B * s["KV_seq"]) / s["beta"]), B)
    return sp.simplify(sol[0])


FORMULAS: dict[str, Callable[[], Any]] = {
    "expected-tokens": expected_tokens,
    "expected-tokens-limit": expected_tokens_limit_alpha_1,
    "speedup": speedup,
    "ridge-batch": ridge_batch,
}


def formula(name: str) -> Any:
    from .errors import NotFoundError, did_you_mean
    if name not in FORMULAS:
        raise NotFoundError(f"unknown formula {name!r}{did_you_mean(name, FORMULAS)}; known: {', '.join(FORMULAS)}")
    return FORMULAS[name]()


def describe(name: str) -> str:
    """What a formula is: the first line of its derivation's docstring."""
    formula(name)   # an unknown name raises as formula() does
    return (FORMULAS[name].__doc__ or "").strip().splitlines()[0]


def lambdified(name: str) -> Callable[..., Any]:
    """A numpy function of the formula's free symbols, in sorted-name order."""
    sp = _sp()
    expr = formula(name)
    args = sorted(expr.free_symbols, key=lambda x: x.name)
    return sp.lambdify(args, expr, modules="numpy")


def latex(expr: Any) -> str:
    """The LaTeX form of a derived expression."""
    return str(_sp().latex(expr))
