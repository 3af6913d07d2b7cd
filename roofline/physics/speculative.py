"""Speculative decoding: closed forms (numpy, broadcasting).

Notation (Leviathan, Kalman, Matias, "Fast Inference from Transformers via
Speculative Decoding", ICML 2023, arXiv 2211.17192): per-token acceptance
probability alpha, draft length gamma, draft/target step-cost ratio c. The
expected tokens per verification round *include the bonus token*: a round
always yields at least one token, and gamma + 1 when every draft is accepted
(GenZ caps it at gamma: that is the bug this module's tests guard against).
Symbolic derivations of the same formulas live in :mod:`roofline.symbolic`; the tests check
the two against each other and against a Monte-Carlo simulation of Bernoulli acceptance.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..errors import WorkloadError, broadcast_errors
from ..workload import as_array, check_gamma, check_probability, one_of, scalar, show

Array = NDArray[np.float64]


@broadcast_errors
def expected_tokens(alpha: ArrayLike, gamma: ArrayLike) -> Array:
    """Expected tokens per verification round under i.i.d. acceptance.

    E[N] = (1 - alpha^(gamma+1)) / (1 - alpha) = sum_{j=0}^{gamma} alpha^j
    (Leviathan et al. Eq. 1). Computed as expm1((gamma+1) ln alpha) / expm1(ln alpha),
    which is accurate as alpha -> 1, with the limits E = gamma + 1 at alpha = 1 and
    E = 1 at alpha = 0. Broadcasts over alpha and gamma.
    """
    a, g = np.broadcast_arrays(check_probability(alpha), check_gamma(gamma))
    with np.errstate(divide="ignore", invalid="ignore"):
        la = np.log(a)
        ratio = np.expm1((g + 1) * la) / np.expm1(la)
    return np.where(a == 1.0, g + 1, np.where(a == 0.0, 1.0, ratio))


@broadcast_errors
def expected_tokens_positional(alphas: ArrayLike) -> Array:
    """Expected tokens per round with conditional acceptance alpha_i at draft position i.

    E[N] = 1 + sum_{k=1}^{gamma} prod_{i<=k} alpha_i (docs/theory.md §4.6); the last
    axis of ``alphas`` is the position. Constant alpha_i = alpha reproduces Eq. 1.
    """
    a = check_probability(alphas, "alphas")
    if a.ndim == 0:
        raise WorkloadError("alphas must list one acceptance probability per draft position")
    return 1.0 + np.sum(np.cumprod(a, axis=-1), axis=-1)


@broadcast_errors
def alpha_from_acceptance_length(tau: ArrayLike, gamma: ArrayLike) -> Array:
    """The per-token alpha whose chain of ``gamma`` drafts yields mean acceptance length ``tau``.

    tau counts the bonus token (EAGLE's "average acceptance length", vLLM's
    ``mean_acceptance_length``), so 1 <= tau <= gamma + 1. E[N] is strictly
    increasing in alpha, so the inverse is found by bisection (docs/theory.md §4.7;
    e.g. tau = 2, gamma = 2 gives the golden ratio 0.618). tau = gamma + 1 gives 1.
    """
    g = check_gamma(gamma)
    t, g = np.broadcast_arrays(as_array("tau", tau), g)
    if not np.all(np.isfinite(t)) or np.any(t < 1):
        raise WorkloadError(f"acceptance length tau must be >= 1 (it counts the bonus token), got {show(t)}")
    if np.any(t > g + 1 + 1e-12):
        raise WorkloadError(f"acceptance length tau = {show(t)} exceeds gamma + 1 = {show(g + 1)}: impossible for a "
                            "chain of drafts (a tree's acceptance length has no unique chain alpha)")
    lo, hi = np.zeros_like(t), np.ones_like(t)
    for _ in range(60):
        mid = (lo + hi) / 2
        below = expected_tokens(mid, g) < t
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return np.where(t >= g + 1, 1.0, np.where(t <= 1, 0.0, (lo + hi) / 2))


@broadcast_errors
def acceptance_rate_from_length(tau: ArrayLike, gamma: ArrayLike) -> Array:
    """Serving engines' "draft acceptance rate" = accepted drafts / drafted = (tau - 1) / gamma.

    Not Leviathan's alpha: under i.i.d. acceptance it equals
    alpha (1 - alpha^gamma) / (gamma (1 - alpha)) (NVIDIA AIPerf / vLLM metrics; docs/theory.md §4.7).
    """
    g = check_gamma(gamma)
    if np.any(g == 0):
        raise WorkloadError("gamma must be >= 1 for an acceptance rate")
    t, g = np.broadcast_arrays(as_array("tau", tau), g)
    if not np.all(np.isfinite(t)) or np.any(t < 1) or np.any(t > g + 1 + 1e-12):
        raise WorkloadError(f"acceptance length tau must be in [1, gamma + 1] (it counts the bonus token), "
                            f"got tau = {show(t)} at gamma = {show(g)}")
    return (t - 1) / g


@broadcast_errors
def acceptance_length_from_rate(rate: ArrayLike, gamma: ArrayLike) -> Array:
    """tau = 1 + rate * gamma: the acceptance length from an engine's acceptance rate."""
    return 1 + check_probability(rate, "acceptance rate") * check_gamma(gamma)


@broadcast_errors
def speedup_closed_form(alpha: ArrayLike, gamma: ArrayLike, c: ArrayLike) -> Array:
    """Expected walltime improvement S = E[N] / (gamma c + 1) (Leviathan Thm 3.8).

    Assumes verifying gamma + 1 tokens costs one target step and a draft step c
    target steps; :func:`roofline.serving.speculation.speculative_round` replaces both with
    roofline stage times.
    """
    c = as_array("c", c)
    if not np.all(np.isfinite(c)) or np.any(c < 0):
        raise WorkloadError(f"c (draft/target cost ratio) must be >= 0, got {show(c)}")
    return expected_tokens(alpha, gamma) / (check_gamma(gamma) * c + 1)


@broadcast_errors
def compute_increase_factor(alpha: ArrayLike, gamma: ArrayLike, c_hat: ArrayLike) -> Array:
    """Arithmetic operations per token relative to plain decoding (Leviathan Thm 3.11).

    Phi = (gamma c_hat + gamma + 1) / E[N], with c_hat the draft/target FLOP ratio per token.
    """
    c = as_array("c_hat", c_hat)
    if not np.all(np.isfinite(c)) or np.any(c < 0):
        raise WorkloadError(f"c_hat (draft/target FLOP ratio) must be >= 0, got {show(c)}")
    return (check_gamma(gamma) * c + check_gamma(gamma) + 1) / expected_tokens(alpha, gamma)


@broadcast_errors
def optimal_gamma_closed_form(alpha: float, c: float) -> tuple[float, int]:
    """Continuous and integer optimum of :func:`speedup_closed_form` over gamma.

    Setting dS/dgamma = 0 with a = -ln alpha gives (docs/theory.md §4.4)
    y = -c W_{-1}(-exp(-1 - a(1/c - 1))), gamma_c = (y - c - a + a c)/(a c) - 1,
    with W_{-1} the lower Lambert-W branch; S is quasi-concave in gamma, so the
    integer optimum is the better of floor and ceil. Valid for 0 < alpha < 1,
    0 < c < 1. Uses scipy (imported here only).
    """
    if any(np.ndim(v) or isinstance(v, bool) or not isinstance(v, numbers.Real) for v in (alpha, c)):
        raise WorkloadError(f"closed-form optimum takes one alpha and one c (numbers), got {alpha!r} and {c!r}; "
                            "for many, call it per pair or scan gamma with speculative_round and optimal_gamma")
    if not (0 < alpha < 1) or not (0 < c < 1):
        raise WorkloadError(f"closed-form optimum needs 0 < alpha < 1 and 0 < c < 1, got alpha={alpha}, c={c}")
    from scipy.special import lambertw

    a = -np.log(alpha)
    y = float(np.real(-c * lambertw(-np.exp(-1 - a * (1 / c - 1)), -1)))
    g_c = (y - c - a + a * c) / (a * c) - 1
    candidates = [max(0, int(np.floor(g_c))), max(0, int(np.ceil(g_c)))]
    best = max(candidates, key=lambda g: float(speedup_closed_form(alpha, g, c)))
    return g_c, best


def _alpha_value(alpha: Any) -> Any:
    """A geometric alpha as the record keeps it: a float, or a read-only copy of an array of them (a caller's
    later writes never reach it); anything else as given, for the post-init check to name."""
    if isinstance(alpha, (bool, str)) or alpha is None:
        return alpha
    try:
        a = np.array(alpha, dtype=float)
    except (TypeError, ValueError):
        return alpha
    if a.ndim == 0:
        return float(a)
    a.flags.writeable = False
    return a


def _same_alpha(a: Any, b: Any) -> bool:
    """Two geometric alphas are the same: equal numbers, or arrays of one shape and equal values."""
    return np.shape(a) == np.shape(b) and bool(np.all(np.asarray(a) == np.asarray(b)))


@attrs.frozen
class Acceptance:
    """How a draft's tokens are accepted; gives expected tokens per round for any gamma.

    Build with one of:

    * ``Acceptance.geometric(alpha)``: i.i.d. per-token alpha (Leviathan).
    * ``Acceptance.positional([a1, a2, ...])``: conditional alpha per position
      (gamma may not exceed the list).
    * ``Acceptance.alpha_by_gamma({5: 0.926, 40: 0.962})``: a per-token alpha
      measured (or fitted) at each draft length, linearly interpolated in gamma
      between the given lengths and held constant outside them.
    * ``Acceptance.measured({gamma: tau})``: measured mean acceptance lengths;
      only the measured gammas can be evaluated.
    """

    kind: str = attrs.field(validator=one_of(("geometric", "positional", "alpha_by_gamma", "measured")))
    #: the per-token alpha of the geometric kind: a number, or a read-only array that broadcasts against the
    #: workload grid (one result point per alpha: ``alpha=np.array([0.6, 0.8])[:, None]`` against a gamma axis)
    alpha: float | NDArray[np.float64] | None = attrs.field(default=None, converter=_alpha_value,
                                                            eq=attrs.cmp_using(eq=_same_alpha), hash=False)
    alphas: tuple[float, ...] = ()
    table: Mapping[int, float] = attrs.field(factory=dict)

    def __attrs_post_init__(self) -> None:
        given = {"geometric": self.alpha is not None, "positional": bool(self.alphas)}.get(self.kind, bool(self.table))
        if not given:   # Acceptance("geometric") without an alpha: say how to build one, not fail later
            raise WorkloadError(f"an Acceptance of kind {self.kind!r} needs its values: build it with "
                                "Acceptance.geometric(alpha), .positional([...]), .alpha_by_gamma({...}) or "
                                ".measured({...})")
        # a record built by hand is checked as the constructors check theirs
        if self.kind == "geometric":
            check_probability(self.alpha)
        elif self.kind == "positional":
            check_probability(list(self.alphas), "alphas")
        for g, v in self.table.items():
            gamma = int(scalar(check_gamma(g), "gamma"))
            if self.kind == "measured":
                alpha_from_acceptance_length(v, gamma)   # 1 <= tau <= gamma + 1
            else:
                scalar(check_probability(v), "alpha")

    @classmethod
    def geometric(cls, alpha: ArrayLike) -> Acceptance:
        """i.i.d. per-token acceptance ``alpha``: one number, or an array of them that broadcasts against the
        workload grid (each alpha its own result points)."""
        return cls("geometric", alpha=check_probability(alpha))

    @property
    def shape(self) -> tuple[int, ...]:
        """The grid shape the acceptance adds to a workload's (an array of alphas; () otherwise)."""
        return np.shape(self.alpha) if self.kind == "geometric" else ()

    @classmethod
    def positional(cls, alphas: ArrayLike) -> Acceptance:
        a = check_probability(alphas, "alphas")
        if a.ndim != 1 or a.size == 0:
            raise WorkloadError("alphas must be a non-empty list, one per draft position")
        return cls("positional", alphas=tuple(float(x) for x in a))

    @classmethod
    def alpha_by_gamma(cls, table: Mapping[int, float]) -> Acceptance:
        if not isinstance(table, Mapping):
            raise WorkloadError(f"alpha_by_gamma takes a mapping {{gamma: alpha}}, got {type(table).__name__}")
        if not table:
            raise WorkloadError("alpha_by_gamma needs at least one {gamma: alpha} entry")
        pairs = [(int(scalar(check_gamma(g), "gamma")), scalar(check_probability(a), "alpha")) for g, a in table.items()]
        return cls("alpha_by_gamma", table=dict(sorted(pairs)))

    @classmethod
    def measured(cls, table: Mapping[int, float]) -> Acceptance:
        if not isinstance(table, Mapping):
            raise WorkloadError(f"measured takes a mapping {{gamma: acceptance length}}, got {type(table).__name__}")
        if not table:
            raise WorkloadError("measured needs at least one {gamma: acceptance length} entry")
        checked = {}
        for g, tau in table.items():
            gamma = int(scalar(check_gamma(g), "gamma"))
            alpha_from_acceptance_length(tau, gamma)  # validates 1 <= tau <= gamma + 1
            checked[gamma] = scalar(as_array("acceptance length", tau), "acceptance length")
        return cls("measured", table=dict(sorted(checked.items())))

    def alpha_at(self, gamma: ArrayLike) -> Array:
        """Per-token alpha used at draft length gamma (geometric and alpha_by_gamma kinds)."""
        g = check_gamma(gamma)
        if self.kind == "geometric":
            return np.asarray(self.alpha, dtype=float) + np.zeros_like(g)
        if self.kind == "alpha_by_gamma":
            xs = np.array(list(self.table), dtype=float)
            return np.interp(g, xs, np.array(list(self.table.values())))
        raise WorkloadError(f"{self.kind} acceptance has no single alpha")

    def alpha_or_nan(self, gamma: ArrayLike) -> Array:
        """Each point's per-token alpha where this acceptance has one (geometric, alpha-by-gamma), NaN for a
        positional or measured table: what results report beside their points."""
        if self.kind in ("geometric", "alpha_by_gamma"):
            return self.alpha_at(gamma)
        return np.full(np.shape(check_gamma(gamma)), np.nan)

    def expected_tokens(self, gamma: ArrayLike) -> Array:
        """Expected tokens per verification round (bonus included) at draft length gamma."""
        g = check_gamma(gamma)
        if self.kind in ("geometric", "alpha_by_gamma"):
            return expected_tokens(self.alpha_at(g), g)
        if self.kind == "positional":
            if np.any(g > len(self.alphas)):
                raise WorkloadError(f"positional acceptance covers gamma <= {len(self.alphas)}, got {show(g)}")
            cum = np.concatenate([[1.0], 1.0 + np.cumsum(np.cumprod(self.alphas))])
            return cum[g.astype(int)]
        missing = sorted({int(x) for x in np.ravel(g)} - set(self.table) - {0})
        if missing:
            raise WorkloadError(f"no measured acceptance length for gamma {missing}; measured: {sorted(self.table)}")
        lookup = np.vectorize(lambda x: 1.0 if x == 0 else self.table[int(x)], otypes=[float])
        return lookup(g)

    def describe(self) -> str:
        if self.kind == "geometric":
            a = np.asarray(self.alpha)
            if a.ndim:
                values = (", ".join(f"{x:g}" for x in a.ravel()) if a.size <= 8
                          else f"{a.size} values from {a.min():g} to {a.max():g}")
                return f"alpha = {values} per token (i.i.d.)"
            return f"alpha = {float(a):g} per token (i.i.d.)"
        if self.kind == "positional":
            return "alpha by position " + ", ".join(f"{a:g}" for a in self.alphas)
        if self.kind == "alpha_by_gamma":
            return "alpha " + ", ".join(f"{a:g} at gamma={g}" for g, a in self.table.items()) + " (interpolated)"
        return "measured acceptance length " + ", ".join(f"{t:g} at gamma={g}" for g, t in self.table.items())
