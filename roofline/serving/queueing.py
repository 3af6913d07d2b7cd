"""Queues in closed form: waiting-time tails of GI/G/c pools and the distributions built on them.

Pure numpy, vectorised over arrival rates (the physics that gives service times is in
:mod:`roofline.serving.load`). Every function takes rates as an array and answers for each.

* Mean wait: Allen-Cunneen, W_q = C(c, a) E[S] / (c (1 - rho)) (c_a^2 + c_s^2) / 2, with C the Erlang C
  probability of waiting (Allen, *Probability, Statistics and Queueing Theory*, 2nd ed. 1990, §6.3;
  https://en.wikipedia.org/wiki/Erlang_(unit)#Erlang_C_formula). It is exact for M/M/c and, at c = 1 with
  Poisson arrivals, it is the Pollaczek-Khinchine mean lambda E[S^2] / (2 (1 - rho))
  (https://en.wikipedia.org/wiki/Pollaczek%E2%80%93Khinchine_formula).
* Tail: P(W > x) = p exp(-theta x). theta is the Cramer-Lundberg decay rate, the positive root of
  E[exp(theta S / c)] E[exp(-theta A)] = 1 with A the inter-arrival time (Asmussen, *Applied Probability and
  Queues*, 2nd ed. 2003, XIII.5; for M/M/c it gives c mu - lambda, the exact rate), and p = theta W_q so
  the tail carries the Allen-Cunneen mean (for M/M/c, p = C exactly).
* Arrivals are Poisson (c_a^2 = 1) or renewal with Gamma inter-arrival times of squared coefficient of
  variation c_a^2 (burstier above 1), whose Laplace transform is (1 + theta c_a^2 / lambda)^(-1 / c_a^2).

Checked against a discrete-event simulation of the same pools in ``tests/test_load.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import attrs
import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..errors import WorkloadError

Array = NDArray[np.float64]
Index = NDArray[np.integer[Any]]
#: Bisection steps of the root solver (2^-44 of the bracket).
BISECTIONS = 44


def check_rates(rate_per_s: ArrayLike) -> Array:
    """Arrival rates: finite and > 0."""
    r = np.asarray(rate_per_s, dtype=float)
    if r.size == 0 or not np.all(np.isfinite(r)) or np.any(r <= 0):
        raise WorkloadError(f"the arrival rate must be a positive finite number of requests/s, got {rate_per_s!r}")
    return r


def check_cv2(cv2: Any) -> float:
    if isinstance(cv2, bool) or not isinstance(cv2, (int, float)) or not math.isfinite(cv2) or not 0.01 <= cv2 <= 100:
        raise WorkloadError(f"the inter-arrival times' squared coefficient of variation must be in [0.01, 100] "
                            f"(1: Poisson), got {cv2!r}")
    return float(cv2)


def erlang_c(servers: int, offered: Array) -> Array:
    """Erlang C: the probability an arrival waits in M/M/c with ``servers`` and offered load a = lambda E[S]
    (erlangs), from the Erlang B recursion B_k = a B_{k-1} / (k + a B_{k-1}) (stable for any c) and
    C = B / (1 - rho (1 - B)), rho = a / c. 1 where rho >= 1."""
    a = np.asarray(offered, dtype=float)
    b = np.ones_like(a)
    for k in range(1, int(servers) + 1):
        b = a * b / (k + a * b)
    rho = a / servers
    with np.errstate(invalid="ignore", divide="ignore"):
        c = b / (1.0 - rho * (1.0 - b))
    return np.where(rho < 1, np.clip(c, 0.0, 1.0), 1.0)


def _logmean_exp(x: Array, w: Array) -> Array:
    """log sum_j w_j exp(x_j) over the last axis, without overflow."""
    m = np.max(x, axis=-1, keepdims=True)
    return np.squeeze(m, -1) + np.log(np.sum(w * np.exp(x - m), axis=-1))


def _bisect(f: Callable[[Array], Array], lo: Array, hi: Array) -> Array:
    """The root of an increasing ``f`` in [lo, hi], elementwise."""
    lo, hi = np.array(lo, dtype=float), np.array(hi, dtype=float)
    for _ in range(BISECTIONS):
        mid = 0.5 * (lo + hi)
        up = f(mid) > 0
        hi, lo = np.where(up, mid, hi), np.where(up, lo, mid)
    return 0.5 * (lo + hi)


@attrs.frozen(kw_only=True)
class WaitTail:
    """A waiting time W with P(W > x) = p exp(-theta x) for x >= 0 (an atom 1 - p at 0); arrays over rates.
    Unstable points (rho >= 1) have p = 1, theta = 0 and an infinite mean."""

    p: Array
    theta_per_s: Array
    mean_s: Array
    rho: Array


def wait_tail(rate_per_s: ArrayLike, service_s: ArrayLike, weights: ArrayLike, *, servers: int = 1,
              arrival_cv2: float = 1.0) -> WaitTail:
    """The waiting time of a GI/G/c queue (module docstring): ``service_s`` and ``weights`` are the atoms of the
    service time (the same for every rate, or an array with the rates' shape plus one atom axis)."""
    lam = check_rates(rate_per_s)
    s = np.asarray(service_s, dtype=float)
    w = np.broadcast_to(np.asarray(weights, dtype=float), s.shape)
    c = int(servers)
    if c < 1:
        raise WorkloadError(f"a queue needs at least one server, got {servers!r}")
    es = np.sum(w * s, axis=-1)
    es2 = np.sum(w * s * s, axis=-1)
    cs2 = np.where(es > 0, es2 / np.maximum(es * es, 1e-300) - 1.0, 0.0)
    rho = lam * es / c
    stable = rho < 1
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = erlang_c(c, lam * es) * es / (c * (1.0 - rho)) * (arrival_cv2 + cs2) / 2.0
    mean = np.where(stable, mean, np.inf)
    lam_b = np.broadcast_to(lam, rho.shape)
    theta = _lundberg(lam_b, s / c, w, arrival_cv2, stable)
    p = np.where(stable, np.clip(theta * np.where(stable, mean, 0.0), 0.0, 1.0), 1.0)
    return WaitTail(p=p, theta_per_s=np.where(stable, theta, 0.0), mean_s=mean, rho=np.broadcast_to(rho, p.shape))


def _lundberg(lam: Array, s: Array, w: Array, cv2: float, stable: NDArray[np.bool_]) -> Array:
    """The positive root theta of log E[exp(theta S)] - log E[exp(-theta A)]^-1 = 0 (A: Gamma inter-arrivals of
    mean 1/lambda and squared CV cv2): the Cramer-Lundberg decay rate of the waiting-time tail."""
    lam = np.where(stable, lam, 1.0)
    s_max = np.max(np.broadcast_to(s, np.broadcast_shapes(s.shape, lam.shape + (s.shape[-1],))), axis=-1)

    def f(theta: Array) -> Array:
        return _logmean_exp(theta[..., None] * s, w) - np.log1p(theta * cv2 / lam) / cv2

    # f(0) = 0, f'(0) = E[S] - 1/lambda < 0 when stable, f convex: one positive root; beyond it f > 0. The root
    # lies below the theta where the service term alone reaches the arrival term's bound.
    hi = np.full(lam.shape, 1.0) / np.maximum(s_max, 1e-12)
    for _ in range(200):
        grow = (f(hi) <= 0) & stable
        if not grow.any():
            break
        hi = np.where(grow, hi * 2.0, hi)
    # f < 0 on (0, root) and f > 0 beyond it: bisection on the sign finds the root
    return np.where(stable, _bisect(f, np.zeros(lam.shape), hi), 0.0)


def gim_ratio(rate_per_s: ArrayLike, service_per_s: ArrayLike, cv2: float) -> Array:
    """The geometric ratio sigma of the GI/M/c queue's waiting line: with every server busy, departures at total rate
    mu and renewal arrivals whose gaps have the Laplace transform A*, an arrival finds k others waiting with
    probability (1 - sigma) sigma^k, sigma the root in (0, 1) of sigma = A*(mu (1 - sigma)), and waits an
    exponential time of rate mu (1 - sigma) (Kleinrock, *Queueing Systems* vol. 1, 1975, §6.4; Gross and Harris,
    *Fundamentals of Queueing Theory*, §5.3). Gamma gaps of squared CV cv2: A*(s) = (1 + s cv2 / lambda)^(-1/cv2);
    Poisson gives sigma = lambda / mu; burstier arrivals wait in longer lines."""
    lam, mu = np.broadcast_arrays(np.asarray(rate_per_s, dtype=float), np.asarray(service_per_s, dtype=float))
    if abs(cv2 - 1.0) < 1e-12:
        return np.clip(lam / mu, 0.0, 1.0)
    ok = lam < mu
    lam_ok = np.where(ok, lam, 0.5 * mu)

    def f(s: Array) -> Array:   # concave, < 0 at 0, 0 at 1 and > 0 just below it: one root in (0, 1)
        return s - (1.0 + mu * (1.0 - s) * cv2 / lam_ok) ** (-1.0 / cv2)
    return np.where(ok, _bisect(f, np.zeros(lam.shape), np.full(lam.shape, 1.0 - 1e-12)), 1.0)


def arrival_wait_share(time_share: ArrayLike, sigma: ArrayLike, rho: ArrayLike) -> Array:
    """The share of arrivals that find every server busy, from the share of *time* every server is busy: x
    sigma / rho (capped at 1). In the GI/M/c queue the arrivals see j others with probability C sigma^j for
    j >= c - 1, and the time the queue holds j >= c is rho times what arrivals see at j - 1 (a transition up
    from j - 1 for every one down from j: lambda q_(j-1) = c mu p_j), so the two shares of j >= c differ by
    sigma / rho (Gross and Harris, *Fundamentals of Queueing Theory*, §5.3, the GI/M/c arrival-point and
    general-time probabilities). Poisson arrivals see time averages (sigma = rho, PASTA); bursty ones arrive in
    clusters and find the servers busy more often (Gamma gaps, c_a^2 = 4, rho = 0.9: sigma / rho = 1.066,
    1.37 at rho = 0.6; checked by tests/test_load.py against a simulation)."""
    s, r = np.broadcast_arrays(np.asarray(sigma, dtype=float), np.asarray(rho, dtype=float))
    ratio = np.where(r > 0, s / np.maximum(r, 1e-300), 1.0)
    return np.minimum(np.asarray(time_share, dtype=float) * ratio, 1.0)


#: States of the step chain's backlog grid (tokens waiting at a step's start).
CHAIN_STATES = 160


@attrs.frozen(kw_only=True)
class StepChain:
    """The steps of a continuous-batching engine whose steps carry waiting prompt tokens, as a Markov chain on
    the backlog at each step's start (arrays over rates, then states). ``pi``: the stationary probability of
    each backlog ``tokens``; ``step_s``: the step's length from that state (d + cost x carried); ``left``: the
    tokens still waiting after it; ``full_s``: a step carrying a full room."""

    tokens: Array
    pi: Array
    step_s: Array
    left: Array
    full_s: Array
    stable: NDArray[np.bool_]
    #: one prompt's tokens on the grid (pmf over cells of ``width`` tokens, padded to twice the states)
    one: Array
    width: Array
    #: the transition matrix (rates, states, states)
    transition: Array
    arrival_cv2: float = 1.0

    def arrivals_before(self, window_s: Array, rate_per_s: Array) -> Array:
        """pmf on the grid of the prompt tokens that arrived within ``window_s`` before an arrival (Palm: the
        count is that of :func:`backward_counts`, exact for renewal arrivals)."""
        one = np.expand_dims(self.one, tuple(range(1, window_s.ndim - self.one.ndim + 2)))
        if abs(self.arrival_cv2 - 1.0) < 1e-12:   # Poisson: the window's count is Poisson, Palm or not
            return _arrivals_pmf(np.asarray(window_s * rate_per_s, dtype=float), one)
        counts = backward_counts(window_s, rate_per_s, self.arrival_cv2)
        phi = np.fft.rfft(one)
        powers = phi[..., None, :] ** np.arange(counts.shape[-1])[:, None]
        return np.clip(np.fft.irfft(np.sum(counts[..., None] * powers, axis=-2), n=one.shape[-1]), 0, None)

    @property
    def mean_step_s(self) -> Array:
        return np.sum(self.pi * self.step_s, axis=-1)

    def after_completion(self) -> Array:
        """The law of the backlog at the step after one in which a prompt completes (rates, states): the steps are
        weighted by the prompt tokens they carry (a prompt completes in a step in proportion to them, the Palm
        law of completions), then moved one transition on."""
        carried = self.pi * (self.step_s - self.step_s[..., :1])
        carried = carried / np.maximum(carried.sum(axis=-1, keepdims=True), 1e-300)
        return np.einsum("...q,...qr->...r", carried, self.transition)


#: The most arrivals :func:`backward_counts` tells apart (the rest are lumped into the last).
MAX_BACKWARD = 48


def backward_counts(window_s: Array, rate_per_s: Array, cv2: float) -> Array:
    """P(k arrivals in the ``window_s`` before an arrival), k = 0..MAX_BACKWARD, for renewal arrivals with Gamma
    gaps (shape 1/cv2, mean 1/rate): the k-th previous arrival is k gaps back, so P(N >= k) = P(Gamma(k/cv2,
    cv2/rate) <= w) (Cox, *Renewal Theory*, 1962, §3.1). Poisson (cv2 = 1) gives Poisson(rate w); burstier
    arrivals come in clusters, so an arrival finds others just before it far more often than rate x w says."""
    w = np.maximum(np.asarray(window_s, dtype=float), 0.0)
    if abs(cv2 - 1.0) < 1e-12:   # Poisson: the pmf by its recursion p_k = p_{k-1} m / k
        m = (w * np.asarray(rate_per_s, dtype=float))[..., None]
        k = np.arange(MAX_BACKWARD + 1)
        logp = -m + k * np.log(np.maximum(m, 1e-300)) - np.cumsum(np.log(np.maximum(k, 1)))
        p = np.where(m > 0, np.exp(logp), (k == 0).astype(float))
        return np.concatenate([p[..., :-1], 1.0 - p[..., :-1].sum(axis=-1, keepdims=True)], axis=-1)
    from scipy.special import gammainc  # lazily: import roofline stays free of scipy
    k = np.arange(1, MAX_BACKWARD + 1)
    x = (w * np.asarray(rate_per_s, dtype=float) / cv2)[..., None]
    at_least = np.concatenate([np.ones(w.shape + (1,)), gammainc(k / cv2, np.broadcast_to(x, w.shape + (k.size,)))],
                              axis=-1)
    return np.concatenate([at_least[..., :-1] - at_least[..., 1:], at_least[..., -1:]], axis=-1)


def renewal_mean(window_s: Array, rate_per_s: Array, cv2: float) -> Array:
    """The mean number of arrivals within ``window_s`` after (or before) an arrival: the renewal function
    sum_k P(Gamma(k/cv2, cv2/rate) <= w) (rate x w for Poisson). The counts' pmf lumps every count beyond
    MAX_BACKWARD into its last; where that lump holds mass the window is long against the gaps, and the renewal
    function's asymptote m(w) = rate w + (cv2 - 1) / 2 (Cox, *Renewal Theory*, 1962, §4.5; within 0.2% of the
    full sum once the lump exceeds 1e-6, for cv2 from 0.3 to 4) takes over."""
    m = np.maximum(np.asarray(window_s, dtype=float), 0.0) * np.asarray(rate_per_s, dtype=float)
    if abs(cv2 - 1.0) < 1e-12:   # Poisson: exactly rate x w
        return m
    counts = backward_counts(window_s, rate_per_s, cv2)
    head = np.sum(counts * np.arange(counts.shape[-1]), axis=-1)
    return np.where(counts[..., -1] > 1e-6, np.maximum(m + (cv2 - 1.0) / 2, head), head)


def _arrivals_pmf(count_mean: Array, one: Array, cv2: float = 1.0) -> Array:
    """pmf of a compound sum on a token grid by FFT (``one``: one draw's pmf, padded): the count is Poisson
    (pgf exp(m (z - 1))) or, for arrivals of squared CV ``cv2``, a count of the same mean and variance cv2 m
    (negative binomial above 1, binomial below: pgf exp(-m log(cv2 - (cv2 - 1) z) / (cv2 - 1)), the counts a
    renewal process gives over windows long against its gaps; Cox and Lewis, *The Statistical Analysis of
    Series of Events*, 1966, §4.5)."""
    phi = np.fft.rfft(one)
    log_pgf: NDArray[Any]   # complex
    if cv2 < 1.0 - 1e-9:   # smoother than Poisson: a binomial, whose trials must be a whole number
        return np.clip(np.fft.irfft(np.exp(_binomial_log_pgf(count_mean, cv2, phi)), n=one.shape[-1]), 0, None)
    if abs(cv2 - 1.0) < 1e-9:
        log_pgf = phi - 1.0
    else:
        log_pgf = -np.log(cv2 - (cv2 - 1.0) * phi.astype(complex)) / (cv2 - 1.0)
    return np.clip(np.fft.irfft(np.exp(count_mean[..., None] * log_pgf), n=one.shape[-1]), 0, None)


def _binomial_log_pgf(count_mean: Array, cv2: float, phi: NDArray[Any]) -> NDArray[Any]:
    """log of the pgf, at ``phi``, of a count of mean m and variance as near cv2 m as a count allows (cv2 < 1):
    Binomial(n, m / n) with n = max(ceil(m), round(m / (1 - cv2))) whole trials, variance m (1 - m / n). A count
    of mean m below 1 is at least as variable as Bernoulli(m) (a window short against the gaps sees at most one
    arrival), and a binomial of fractional trials is no distribution (its pgf takes the wrong branch once cv2 <
    0.5: the count of smooth arrivals came out as noise)."""
    m = np.asarray(count_mean, dtype=float)
    n = np.maximum(np.ceil(m - 1e-9), np.round(m / (1.0 - cv2)))
    p = np.where(n > 0, m / np.maximum(n, 1.0), 0.0)
    return n[..., None] * np.log(1.0 - p[..., None] + p[..., None] * phi.astype(complex))


def step_chain(rate_per_s: Array, decode_s: Array, room: Array, cost_per_token_s: float, prompt_tokens: Array,
               weights: Array, *, arrival_cv2: float = 1.0, states: int = CHAIN_STATES) -> StepChain:
    """The stationary backlog of prompt tokens at step starts (vectorised over rates).

    Q_{k+1} = Q_k - X_k + A_k with X_k = min(room, Q_k) the tokens step k carries, its length
    T_k = d + c X_k, and A_k the tokens of the prompts arriving during it: a compound Poisson sum with
    lambda T_k prompts drawn from the length atoms (a count of variance cv2 lambda T_k for renewal
    arrivals). The transition matrix on a grid of ``states`` backlogs
    (width set by the room, the longest prompt and the mean backlog) is solved for its stationary law; mass
    beyond the grid is kept in its last state. Stable only where tokens arrive slower than full steps
    carry them: lambda E[n] (d + c room) < room."""
    lam, d, room = (np.asarray(v, dtype=float) for v in (rate_per_s, decode_s, room))
    n, w = np.asarray(prompt_tokens, dtype=float), np.asarray(weights, dtype=float)
    full = d + cost_per_token_s * room
    load = lam * float(np.sum(w * n)) * full / room
    stable = load < 1
    safe = np.where(stable, load, 0.5)
    reach = room + n.max() + 8 * safe / (1 - safe) * (room + float(np.sum(w * n * n) / np.sum(w * n)))
    width = room / np.ceil(room / np.maximum(reach / states, 1.0))     # tokens per state; the room a whole number of them
    q = np.arange(states) * width[..., None]
    carried = np.minimum(q, room[..., None])
    step = d[..., None] + cost_per_token_s * carried
    left_idx = np.round((q - carried) / width[..., None]).astype(int)
    pad = 2 * states
    one: Array = np.zeros((int(np.prod(lam.shape)), pad))
    pos = (n / width.reshape(-1, 1))                        # each atom split over its two nearest cells (mean kept)
    low = np.minimum(np.floor(pos).astype(int), pad - 2)
    frac = np.clip(pos - low, 0.0, 1.0)
    rows = np.repeat(np.arange(one.shape[0]), n.size)
    np.add.at(one, (rows, low.ravel()), (w * (1 - frac)).ravel())
    np.add.at(one, (rows, low.ravel() + 1), (w * frac).ravel())
    one = one.reshape(lam.shape + (pad,))
    arrive = _arrivals_pmf(lam[..., None] * np.where(stable[..., None], step, 0.0), one[..., None, :], arrival_cv2)
    target = np.arange(states)[None, :] - left_idx[..., :, None]                            # (.., q, q')
    pmf = np.take_along_axis(arrive, np.clip(target, 0, pad - 1), axis=-1) * (target >= 0)
    tail = 1.0 - pmf[..., :-1].sum(axis=-1)
    pmf[..., -1] = np.maximum(tail, 0.0)
    # a step carries at most the room: from backlog cell i the chain falls to cell i - room / width at the lowest
    pi = _stationary(pmf, down=int(np.max(np.round(room / width))))
    return StepChain(tokens=q, pi=pi, step_s=step, left=left_idx * width[..., None], full_s=full, stable=stable,
                     one=one, width=width, transition=pmf, arrival_cv2=arrival_cv2)


def _stationary(p: Array, down: int | None = None) -> Array:
    """The stationary law of row-stochastic matrices (stacked over the leading axes) by the GTH state reduction
    (Grassmann, Taksar and Heyman, Operations Research 33(5), 1985, https://doi.org/10.1287/opre.33.5.1107):
    no subtractions, so it is exact to rounding even near capacity, and elementwise numpy only, so worker
    processes sharing the cores do not contend for a threaded BLAS (a LAPACK solve did: 2.6x slower under
    ``validate --jobs 2`` on two cores).

    ``down``: the chain falls at most this many states in one transition (p[i, j] = 0 for j < i - down; the
    step chain's backlog drops by at most the room a step carries). Reducing state n then adds p[i, n] p[n, j]
    only to the columns j in [n - down, n), so every reduced row keeps that band and each reduction touches an
    n x down block instead of n x n: the same sums, O(g^2 down) instead of O(g^3)."""
    a = np.array(p, dtype=float, copy=True)
    g = a.shape[-1]
    band = g if down is None else max(int(down), 1)
    flat = a.reshape(-1, g, g)   # the chains on one leading axis: explicit axes cost less per step than ``...``
    sums = np.ones(flat.shape[:2])
    for n in range(g - 1, 0, -1):
        lo = n - band if n > band else 0
        row = flat[:, n, lo:n]
        s = np.maximum(row.sum(axis=1), 1e-300)
        sums[:, n] = s
        flat[:, :n, lo:n] += flat[:, :n, n, None] * (row / s[:, None])[:, None, :]
    pi = np.zeros(flat.shape[:2])
    pi[:, 0] = 1.0
    for j in range(1, g):
        pi[:, j] = np.einsum("ki,ki->k", pi[:, :j], flat[:, :j, j]) / sums[:, j]
    pi = np.clip(pi, 0.0, None)
    return (pi / pi.sum(axis=1, keepdims=True)).reshape(a.shape[:-1])


def weighted_quantiles(values: Array, weights: Array, qs: ArrayLike) -> Array:
    """Quantiles of weighted points along the last axis (per row): the smallest value whose cumulative weight
    reaches q. Returns the quantiles on a new last axis."""
    order = np.argsort(values, axis=-1)
    v = np.take_along_axis(values, order, axis=-1)
    cum = np.cumsum(np.take_along_axis(np.broadcast_to(weights, values.shape), order, axis=-1), axis=-1)
    cum = cum / np.maximum(cum[..., -1:], 1e-300)
    levels = np.asarray(qs, dtype=float)
    idx = np.minimum(np.sum(cum[..., None, :] < levels[:, None] - 1e-12, axis=-1), v.shape[-1] - 1)
    return np.take_along_axis(v, idx, axis=-1)


def atoms(pmf: Array, edges: tuple[float, ...], middle: bool = False) -> tuple[Array, Array]:
    """Atoms of pmfs over an ordered axis (per row), one per slice of probability between ``edges``: the slice's
    mean position (the quantile function averaged over the slice, a fractional index; :func:`at_position` reads an
    array there), weighted by the slice's width. A slice's mean moves continuously, and never down as the law
    moves up (a stochastically larger law has a larger quantile function at every level, Shaked and
    Shanthikumar, *Stochastic Orders*, 2007, §1.A.1), where the index at the slice's middle level jumps a whole
    cell at a time and jumps back when the grid under it moves with the load (a p99 TTFT of 4,096-token prompts
    went 1,378 -> 1,541 -> 1,356 ms between 0.31 and 0.32 requests/s, a review found). ``middle``: the index at
    each slice's middle level instead (a cell that occurs, where averaging a lumpy law would make one that does
    not)."""
    cum = np.cumsum(pmf, axis=-1)
    cum = cum / np.maximum(cum[..., -1:], 1e-300)
    if middle:
        e = np.asarray(edges)
        levels = (e[:-1] + e[1:]) / 2
        idx = np.minimum(np.sum(cum[..., None, :] < levels[:, None], axis=-1), pmf.shape[-1] - 1).astype(float)
        return idx, np.broadcast_to(np.diff(e), idx.shape)
    before = np.concatenate([np.zeros(cum.shape[:-1] + (1,)), cum[..., :-1]], axis=-1)
    e = np.asarray(edges, dtype=float)
    lo, hi = e[:-1, None], e[1:, None]
    share = np.clip(np.minimum(cum[..., None, :], hi) - np.maximum(before[..., None, :], lo), 0.0, None)
    pos = (share @ np.arange(pmf.shape[-1], dtype=float)) / np.diff(e)
    return pos, np.broadcast_to(np.diff(e), pos.shape)


def at_position(values: Array, pos: Array) -> Array:
    """``values`` along their last axis read at the fractional positions ``pos`` (same leading axes), linearly
    between neighbouring cells."""
    top = values.shape[-1] - 1
    low = np.clip(np.floor(pos), 0, top).astype(int)
    high = np.minimum(low + 1, top)
    frac = np.clip(pos - low, 0.0, 1.0)
    return np.take_along_axis(values, low, axis=-1) * (1 - frac) + np.take_along_axis(values, high, axis=-1) * frac


#: Slices of probability the faster of two waits is read in (its atoms at their conditional means).
FAST_WAIT_EDGES = (0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.975, 0.99, 0.995, 0.999, 1.0)


def wait_then_wait(first: WaitTail, share: ArrayLike, mean_s: ArrayLike) -> tuple[WaitTail, Array, Array]:
    """One wait then another, independent (the second given by the share that waits and its mean: a prefill
    pool's, then a decode slot's): (the wait whose tail decays slower, kept exact as a :class:`WaitTail`; the
    other as atoms, values and weights over rates x (1 + slices): an atom at 0 for the share that does not wait,
    then the conditional means of :data:`FAST_WAIT_EDGES`' slices of its exponential). The high percentiles of
    the sum follow the slower tail; a single exponential of the same mean put the p99 of a frequent short wait
    plus a rare long one at half the sum's (1.5 s against 3.3 s in a simulation, tests/test_load.py)."""
    p2 = np.nan_to_num(np.ravel(np.asarray(share, dtype=float)), nan=0.0)
    m2 = np.nan_to_num(np.ravel(np.asarray(mean_s, dtype=float)), nan=0.0, posinf=0.0)
    t2 = np.where((p2 > 0) & (m2 > 0), p2 / np.maximum(m2, 1e-300), np.inf)
    t1 = np.where(first.p > 0, first.theta_per_s, np.inf)
    second_slow = t2 < t1
    slow = WaitTail(p=np.where(second_slow, p2, first.p), theta_per_s=np.where(second_slow, t2, first.theta_per_s),
                    mean_s=np.where(second_slow, m2, first.mean_s), rho=first.rho)
    p_f, t_f = np.where(second_slow, first.p, p2), np.where(second_slow, t1, t2)
    e = np.asarray(FAST_WAIT_EDGES)

    def g(u: Array) -> Array:   # the integral of -log(1 - u): (1 - u) log(1 - u) - (1 - u), 0 at u = 1
        rest = np.maximum(1.0 - u, 0.0)
        return np.where(rest > 0, rest * np.log(np.where(rest > 0, rest, 1.0)) - rest, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(np.isfinite(t_f) & (t_f > 0), 1.0 / t_f, 0.0)
    slices = (g(e[1:]) - g(e[:-1])) / np.diff(e)
    values = np.concatenate([np.zeros(p_f.shape + (1,)), scale[:, None] * slices[None, :]], axis=-1)
    weights = np.concatenate([(1.0 - p_f)[:, None], p_f[:, None] * np.diff(e)[None, :]], axis=-1)
    return slow, values, weights


def spread_quantiles(values: Array, half_widths: Array, weights: Array, qs: ArrayLike, steps: int = 40) -> Array:
    """Quantiles along the last axis (per row) of weighted atoms each spread evenly over value +- half width (0: a
    point), on a new last axis, by bisection of the mixture's distribution function. A grid that discretises a
    continuous quantity (the step chain's backlog, its cells ``width`` tokens apart) gives its cells' mass this
    way: as points, a quantile jumps a whole cell when the grid moves with the load (an ITL p99 fell 90 -> 80 ms
    between 9.5 and 9.6 requests/s, a cell being 13.6 ms of prefill)."""
    v, h = np.broadcast_arrays(np.asarray(values, dtype=float), np.asarray(half_widths, dtype=float))
    w = np.broadcast_to(np.asarray(weights, dtype=float), v.shape)
    w = w / np.maximum(w.sum(axis=-1, keepdims=True), 1e-300)
    levels = np.asarray(qs, dtype=float)
    lo = np.broadcast_to(np.min(v - h, axis=-1)[..., None], v.shape[:-1] + levels.shape).copy()
    hi = np.broadcast_to(np.max(v + h, axis=-1)[..., None], lo.shape).copy()
    spread = np.maximum(2.0 * h, 1e-300)
    for _ in range(steps):
        mid = (lo + hi) / 2
        t = mid[..., None]   # (..., level, atom)
        share = np.where(h[..., None, :] > 0, np.clip((t - (v - h)[..., None, :]) / spread[..., None, :], 0.0, 1.0),
                         (t >= v[..., None, :]).astype(float))
        below = np.sum(w[..., None, :] * share, axis=-1) < levels - 1e-12
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return hi


def quantiles_with_wait(values: Array, weights: ArrayLike, wait: WaitTail, qs: ArrayLike) -> Array:
    """Quantiles of a latency given as weighted points (last axis) plus an independent wait W (P(W > x) =
    p exp(-theta x)), exactly, on a new last axis. With the points sorted, x_0 <= x_1 <= ..., the sum's
    distribution function between x_k and x_k+1 is F(t) = C_k - p G_k exp(-theta (t - x_k)), C_k the points'
    cumulative weight and G_k = sum_(i <= k) w_i exp(-theta (x_k - x_i)) (the convolution of the points with W's
    atom at 0 and its exponential part); F is increasing, so each quantile is in the first stretch whose end
    reaches it, where t = x_k + log(p G_k / (C_k - q)) / theta, or at x_k itself where F jumps past it there.
    (Atoms for W's exponential part would put the 99th percentile on the top atom's conditional mean,
    3.1 / theta, wherever P(W > 0) is above about 8%.)"""
    levels = np.asarray(qs, dtype=float)
    p = np.where(np.isfinite(wait.p), wait.p, 1.0)
    if float(np.max(p, initial=0.0)) < 1e-4:   # a wait that touches no quantile asked for: the points alone
        return weighted_quantiles(values, np.asarray(weights, dtype=float), levels)
    theta = np.maximum(np.where(np.isfinite(wait.theta_per_s), wait.theta_per_s, 0.0), 1e-300)[..., None]
    order = np.argsort(values, axis=-1)
    x = np.take_along_axis(values, order, axis=-1)
    w = np.take_along_axis(np.broadcast_to(np.asarray(weights, dtype=float), values.shape), order, axis=-1)
    w = w / np.maximum(w.sum(axis=-1, keepdims=True), 1e-300)
    cum = np.cumsum(w, axis=-1)
    with np.errstate(divide="ignore"):
        g = np.exp(np.logaddexp.accumulate(np.log(w) + theta * (x - x[..., -1:]), axis=-1) - theta * (x - x[..., -1:]))
    pg = p[..., None] * g
    at = cum - pg                                                                   # F at x_k
    end = np.concatenate([cum[..., :-1] - pg[..., :-1] * np.exp(-theta * np.diff(x, axis=-1)),
                          np.ones(x.shape[:-1] + (1,))], axis=-1)                   # F just before x_k+1
    following = np.concatenate([x[..., 1:], np.full(x.shape[:-1] + (1,), np.inf)], axis=-1)
    out = []
    for q in levels:
        k = np.argmax(end >= q, axis=-1)[..., None]          # the stretch [x_k, x_k+1) where F reaches q
        xk, ck, gk, fk, nk = (np.take_along_axis(v, k, axis=-1)[..., 0] for v in (x, cum, pg, at, following))
        with np.errstate(divide="ignore", invalid="ignore"):
            t = xk + np.log(gk / (ck - q)) / theta[..., 0]
        out.append(np.where(fk >= q, xk, np.clip(np.nan_to_num(t, nan=np.inf), xk, nk)))
    return np.stack(out, axis=-1)


def split_cv2(cv2: float, replicas: int) -> float:
    """Squared CV of the gaps each of ``replicas`` replicas sees when requests are spread at random: thinning a
    renewal stream with probability p gives c^2 = p c_a^2 + 1 - p (Whitt, *The Queueing Network Analyzer*,
    Bell System Technical Journal 62(9), 1983, eq. 40)."""
    p = 1.0 / replicas
    return p * cv2 + 1.0 - p
