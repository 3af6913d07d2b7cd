"""Speculative decoding: closed forms (numpy, broadcasting).

Notation (Leviathan, Kalman, Matias, "Fast Inference from Transformers via
Speculative Decoding", ICML 2023, arXiv 2211.17192): per-token acceptance
probability alpha, draft length gamma, draft/target step-cost ratio c. The
expected tokens per verification round *include the bonus token*: a round
always yields at least one token, and gamma + 1 when every draft is accepted
(GenZ caps it at gamma: that is the bug this module's tests guard against).
Symbolic derivations of the same formulas live in :mod:`roofline.symbolic`; the tests check
the two against each other and against a Monte-Carlo simulation of Bernoulli acceptance.
Acceptance measured at several draft lengths is joined by a fitted positional family
(:func:`family_alphas`, docs/theory.md §4.12) whose gain per drafted token never increases.
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


#: The most a fitted acceptance may miss any of its points, relative (two points the family reaches are met
#: exactly; three or more noisy ones are met in least squares).
MAX_FIT_MISS = 0.05


def _alpha_table(alpha1: ArrayLike, h: ArrayLike, n: int) -> Array:
    """alpha_i, i = 1..n, on the last axis, for parameters that broadcast (the fit's grid); see family_alphas."""
    m, h = np.asarray(alpha1, dtype=float)[..., None], np.asarray(h, dtype=float)[..., None]
    j = np.arange(n, dtype=float)           # i - 1
    hp, hn = np.maximum(h, 0.0), np.minimum(h, 0.0)
    return np.where(h >= 0, (m + hp * j) / (1 + hp * j), m * np.exp(hn * j))


def family_alphas(alpha1: float, h: float, n: int) -> Array:
    """Conditional acceptance alpha_i of draft positions i = 1..n in the fitted two-parameter family.

    * h >= 0, rising: alpha_i = (alpha1 + h (i-1)) / (1 + h (i-1)). Acceptance is i.i.d. within a round at a rate
      that varies between rounds (contexts) as Beta(a, b), a = alpha1/h, b = (1-alpha1)/h: the chance that the
      first k drafts are accepted is E[alpha^k] = prod_{i<=k} (a+i-1)/(a+b+i-1), the beta-geometric distribution
      (Weinberg & Gladen, "The beta-geometric distribution applied to comparative fecundability studies",
      Biometrics 38:63-71, 1982). A round that got far is an easy one, so alpha_i rises towards 1 (the Jensen
      effect of docs/theory.md §4.9). Closed form (b != 1; docs/theory.md §4.12, sympy-checked in the tests):
      E[N] = (a+b-1)/(b-1) (1 - (a)_{gamma+1} / (a+b-1)_{gamma+1}), (x)_n the rising factorial.
    * h < 0, decaying: alpha_i = alpha1 exp(h (i-1)): the draft drifts from the target with position (the
      conditional rates vLLM reports for EAGLE-3 fall 0.58, 0.53, 0.52, 0.50; docs/theory.md §4.7).

    h = 0 is i.i.d. alpha1 (Leviathan Eq. 1). Every alpha_i is in [0, 1], so the gain of the k-th drafted token,
    E(k) - E(k-1) = prod_{i<=k} alpha_i, never increases with k.
    """
    return _alpha_table(alpha1, h, n)


def _family_tokens(alpha1: ArrayLike, h: ArrayLike, gamma: Array) -> Array:
    """E[N] = 1 + sum_{k<=gamma} prod_{i<=k} alpha_i (docs/theory.md §4.6) of the family, gamma on a new last axis
    after the parameters' shape."""
    n = max(int(np.max(gamma)), 1)
    cum = 1.0 + np.cumsum(np.cumprod(_alpha_table(alpha1, h, n), axis=-1), axis=-1)
    cum = np.concatenate([np.ones(cum.shape[:-1] + (1,)), cum], axis=-1)
    return cum[..., gamma.astype(int)]


def _check_points(points: Mapping[int, float]) -> tuple[Array, Array]:
    """Draft lengths and acceptance lengths (bonus counted) that some acceptance model can produce: two or more,
    1 <= tau <= gamma + 1, and gains (chord slopes from (0, 1)) that neither go negative nor rise."""
    if not isinstance(points, Mapping):
        raise WorkloadError(f"fitting takes a mapping {{gamma: acceptance length}}, got {type(points).__name__}")
    if len(points) < 2:
        raise WorkloadError(f"fitting acceptance takes two or more draft lengths, got {len(points)}; for one, use "
                            "Acceptance.geometric(alpha) (alpha_from_acceptance_length(tau, gamma) converts a tau)")
    pairs = sorted((int(scalar(check_gamma(g), "gamma")), scalar(as_array("acceptance length", t), "acceptance length"))
                   for g, t in points.items())
    g, t = np.array([p[0] for p in pairs], dtype=float), np.array([p[1] for p in pairs])
    if np.any(g < 1):
        raise WorkloadError(f"fitting acceptance needs draft lengths >= 1, got {show(g)}")
    alpha_from_acceptance_length(t, g)   # finite, 1 <= tau <= gamma + 1
    slope = np.diff(np.concatenate([[1.0], t])) / np.diff(np.concatenate([[0.0], g]))
    for k in range(len(g)):
        where = f"E[N] = {t[k]:.4g} at gamma {g[k]:g}" + (f" after {t[k - 1]:.4g} at gamma {g[k - 1]:g}" if k else "")
        if slope[k] < -1e-12:
            raise WorkloadError(f"expected tokens per round fall as gamma grows ({where}): no acceptance model does that")
        if k and slope[k] > slope[k - 1] * (1 + 1e-9) + 1e-12:
            raise WorkloadError(f"{where} needs each extra drafted token to gain more ({slope[k]:.3g}) than the ones "
                                f"before ({slope[k - 1]:.3g}); a draft is only tried when all before it were accepted, "
                                "so no acceptance model gives that")
    return g, t


def fit_acceptance(points: Mapping[int, float]) -> tuple[float, float]:
    """Least-squares (alpha1, h) of :func:`family_alphas` through ``{gamma: tau}`` (tau counts the bonus token).

    Minimises sum (E_fit(gamma)/tau - 1)^2. The shape is searched as u = h/(1+h) for h >= 0 and u = e^h - 1
    below, u in (-1, 1): on a grid of u, each u's best alpha1 in [0, 1] by golden section (E rises with alpha1
    at fixed h), then the grid is narrowed around the best u (numpy only; two points that the family reaches
    are met to ~1e-9). Raises WorkloadError for points no acceptance model gives (see _check_points).
    """
    g, t = _check_points(points)
    edge = 1 - 1e-9

    def sse(m: Array, u: Array) -> Array:
        return np.sum((_family_tokens(m, _h_of(u), g) / t - 1) ** 2, axis=-1)

    u = np.linspace(-edge, edge, 201)
    for _ in range(10):
        m = _golden(lambda m: sse(m, u), np.zeros_like(u), np.ones_like(u))
        k = int(np.argmin(sse(m, u)))
        best, step = (float(m[k]), float(u[k])), u[1] - u[0]
        u = np.linspace(max(best[1] - step, -edge), min(best[1] + step, edge), 21)
    return best[0], float(_h_of(best[1]))


def _golden(f: Any, lo: Array, hi: Array, iterations: int = 60) -> Array:
    """Golden-section minimum of the elementwise function ``f`` on [lo, hi] (Kiefer, Proc. AMS 4:502, 1953)."""
    r = (np.sqrt(5) - 1) / 2
    a, b = lo.copy(), hi.copy()
    c, d = b - r * (b - a), a + r * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(iterations):
        left = fc <= fd   # the minimum is in [a, d]: d becomes the new c; else in [c, b]: c becomes the new d
        a, b = np.where(left, a, c), np.where(left, d, b)
        c, d = np.where(left, b - r * (b - a), d), np.where(left, c, a + r * (b - a))
        fresh = f(np.where(left, c, d))
        fc, fd = np.where(left, fresh, fd), np.where(left, fc, fresh)
    return (a + b) / 2


def _h_of(u: ArrayLike) -> Array:
    """The fit's coordinate u in (-1, 1) as the family's h: u / (1 - u) at and above 0, ln(1 + u) below."""
    u = np.asarray(u, dtype=float)
    return np.where(u >= 0, u / (1 - np.maximum(u, 0)), np.log1p(np.minimum(u, 0)))


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
    * ``Acceptance.fitted({gamma: tau})``: positional acceptance fitted through
      two or more mean acceptance lengths (tau counts the bonus token, as EAGLE's
      "average acceptance length" and vLLM's ``mean_acceptance_length`` do; add 1
      to an engine's accepted drafts per round); any gamma can be evaluated, and
      the gain per extra drafted token never increases (:func:`family_alphas`).
    * ``Acceptance.alpha_by_gamma({5: 0.926, 40: 0.962})``: the same fit through
      a per-token alpha measured (or fitted) at each draft length, each read as
      tau = expected_tokens(alpha, gamma).
    * ``Acceptance.measured({gamma: tau})``: measured mean acceptance lengths;
      only the measured gammas can be evaluated.
    """

    kind: str = attrs.field(validator=one_of(("geometric", "positional", "fitted", "measured")))
    #: the per-token alpha of the geometric kind: a number, or a read-only array that broadcasts against the
    #: workload grid (one result point per alpha: ``alpha=np.array([0.6, 0.8])[:, None]`` against a gamma axis)
    alpha: float | NDArray[np.float64] | None = attrs.field(default=None, converter=_alpha_value,
                                                            eq=attrs.cmp_using(eq=_same_alpha), hash=False)
    alphas: tuple[float, ...] = ()
    table: Mapping[int, float] = attrs.field(factory=dict)
    #: the fitted kind's (alpha1, h) of :func:`family_alphas`
    params: tuple[float, ...] = ()

    def __attrs_post_init__(self) -> None:
        given = {"geometric": self.alpha is not None, "positional": bool(self.alphas),
                 "fitted": bool(self.table) and len(self.params) == 2}.get(self.kind, bool(self.table))
        if not given:   # Acceptance("geometric") without an alpha: say how to build one, not fail later
            raise WorkloadError(f"an Acceptance of kind {self.kind!r} needs its values: build it with "
                                "Acceptance.geometric(alpha), .positional([...]), .fitted({...}), "
                                ".alpha_by_gamma({...}) or .measured({...})")
        # a record built by hand is checked as the constructors check theirs
        if self.kind == "geometric" and self.alpha is not None:   # given: it is
            check_probability(self.alpha)
        elif self.kind == "positional":
            check_probability(list(self.alphas), "alphas")
        elif self.kind == "fitted":
            _check_points(self.table)
            check_probability(self.params[0], "alpha1")
            if not np.all(np.isfinite(as_array("h", self.params[1]))):
                raise WorkloadError(f"the fitted acceptance's h must be finite, got {self.params[1]!r}")
        for g, v in self.table.items():   # measured: 1 <= tau <= gamma + 1
            alpha_from_acceptance_length(v, int(scalar(check_gamma(g), "gamma")))

    @classmethod
    def geometric(cls, alpha: ArrayLike) -> Acceptance:
        """i.i.d. per-token acceptance ``alpha``: one number, or an array of them that broadcasts against the
        workload grid (each alpha its own result points)."""
        return cls("geometric", alpha=check_probability(alpha))

    @property
    def shape(self) -> tuple[int, ...]:
        """The grid shape the acceptance adds to a workload's (an array of alphas; () otherwise)."""
        return np.shape(self.alpha) if self.kind == "geometric" and self.alpha is not None else ()

    @classmethod
    def positional(cls, alphas: ArrayLike) -> Acceptance:
        a = check_probability(alphas, "alphas")
        if a.ndim != 1 or a.size == 0:
            raise WorkloadError("alphas must be a non-empty list, one per draft position")
        return cls("positional", alphas=tuple(float(x) for x in a))

    @classmethod
    def fitted(cls, table: Mapping[int, float]) -> Acceptance:
        """Positional acceptance of :func:`family_alphas` fitted (:func:`fit_acceptance`) through two or more
        ``{gamma: tau}``, tau the mean acceptance length *including* the bonus token (1 <= tau <= gamma + 1)."""
        g, t = _check_points(table)
        params = fit_acceptance(table)
        miss = _family_tokens(*params, g) / t - 1
        if np.max(np.abs(miss)) > MAX_FIT_MISS:
            k = int(np.argmax(np.abs(miss)))
            raise WorkloadError(f"the fitted acceptance family misses E[N] = {t[k]:.4g} at gamma {g[k]:g} by "
                                f"{miss[k]:+.1%} (over {MAX_FIT_MISS:.0%}): these points need acceptance it cannot "
                                "follow; give Acceptance.positional([...]) or Acceptance.measured({...})")
        return cls("fitted", table={int(x): float(y) for x, y in zip(g, t)}, params=params)

    @classmethod
    def alpha_by_gamma(cls, table: Mapping[int, float]) -> Acceptance:
        """:meth:`fitted` through a per-token alpha given at each of two or more draft lengths, each read as the
        acceptance length it gives under i.i.d. acceptance, tau = expected_tokens(alpha, gamma) (Leviathan Eq. 1).

        Not an interpolation of alpha in gamma: that lets the gain per drafted token rise again (between 5: 0.926
        and 40: 0.962 it fell to 0.39 at gamma 23 and rose to 0.53 at 40), which no acceptance model does.
        """
        if not isinstance(table, Mapping):
            raise WorkloadError(f"alpha_by_gamma takes a mapping {{gamma: alpha}}, got {type(table).__name__}")
        pairs = {int(scalar(check_gamma(g), "gamma")): scalar(check_probability(a), "alpha") for g, a in table.items()}
        if len(pairs) < 2:
            raise WorkloadError(f"alpha_by_gamma fits two or more {{gamma: alpha}} entries, got {len(pairs)}; "
                                "for one alpha, use Acceptance.geometric(alpha)")
        taus = {g: float(expected_tokens(a, g)) for g, a in pairs.items()}
        try:
            return cls.fitted(taus)
        except WorkloadError as e:
            raise WorkloadError(f"alpha_by_gamma {pairs}: {e}") from None

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
        """Per-token alpha at draft length gamma: the geometric kind's alpha; for the fitted kind the i.i.d. alpha
        giving the same expected tokens at that gamma (alpha_from_acceptance_length; alpha_1 at gamma 0)."""
        g = check_gamma(gamma)
        if self.kind == "geometric":
            return np.asarray(self.alpha, dtype=float) + np.zeros_like(g)
        if self.kind == "fitted":
            return np.where(g == 0, self.params[0], alpha_from_acceptance_length(self.expected_tokens(g), g))
        raise WorkloadError(f"{self.kind} acceptance has no single alpha")

    def alpha_or_nan(self, gamma: ArrayLike) -> Array:
        """Each point's per-token alpha where this acceptance has one (geometric, fitted), NaN for a
        positional or measured table: what results report beside their points."""
        if self.kind in ("geometric", "fitted"):
            return self.alpha_at(gamma)
        return np.full(np.shape(check_gamma(gamma)), np.nan)

    def expected_tokens(self, gamma: ArrayLike) -> Array:
        """Expected tokens per verification round (bonus included) at draft length gamma."""
        g = check_gamma(gamma)
        if self.kind == "geometric":
            return expected_tokens(self.alpha_at(g), g)
        if self.kind == "fitted":
            return _family_tokens(self.params[0], self.params[1], g)
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
        if self.kind == "fitted":
            a1, h = self.params
            shape = "rising, beta-geometric" if h > 0 else "decaying" if h < 0 else "i.i.d."
            g, t = np.array(list(self.table), dtype=float), np.array(list(self.table.values()))
            miss = float(np.max(np.abs(_family_tokens(a1, h, g) / t - 1)))
            return (f"alpha by position from {a1:.4g} ({shape}, h = {h:.3g}) fitted through tokens per round "
                    + ", ".join(f"{v:.4g} at gamma={k}" for k, v in self.table.items())
                    + (f" (largest miss {miss:.1%})" if miss > 5e-4 else ""))
        return "measured acceptance length " + ", ".join(f"{t:g} at gamma={g}" for g, t in self.table.items())
