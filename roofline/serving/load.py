"""Served load: an arrival rate in, percentiles of TTFT, ITL, TPOT and end-to-end latency out.

The physics (:mod:`roofline.physics.stages`) prices one decode step at each batch and each prompt's prefill;
this module turns them into an :class:`Engine` (the step time as a function of the batch, the slots memory
holds, the step's token budget, what each prompt token adds to a step) and the engine into queues
(:mod:`roofline.serving.queueing`), vectorised over arrival rates. The model, per replica:

* **Batch.** Requests decode for osl - 1 steps after their prompt. With steps of mean length
  E[T] = d(B) / (1 - rho_a) (rho_a = lambda E[a], the share of time spent on prompt tokens, a a prompt's
  cost) Little's law B = lambda (E[osl] - 1) E[T] gives the rate that sustains a mean batch B:
  lambda(B) = B / ((E[osl] - 1) d(B) + B E[a]), increasing in B; inverted on a grid. The capacity is
  lambda at the largest batch memory holds (Little, https://doi.org/10.1287/opre.9.3.383), or lower where the
  token budget binds first: a larger batch leaves prompts less room (:meth:`Engine.capacity_per_s`).
* **Slots and the batch's spread.** The slots taken (a request holds one from its prompt's first chunk to its last
  token) follow the birth-death chain that matches a diffusion's drift and variance: arrivals, departures and the
  prompts' cost slowing everyone's steps, burstier arrivals widening it (:func:`_steady`); beyond the slots a
  GI/M/c line, so a request that finds every slot taken waits an exponential time. Every step an arrival waits
  through is d(N) - d(mean) longer for the batch N it finds.
* **Steps.** Prompt tokens ride the decode steps (Sarathi-Serve's chunked prefill,
  https://arxiv.org/abs/2403.02310): a step carries min(backlog, room) of them, room = budget - B, FCFS, and
  lasts d(B) plus their cost. The backlog at each step's start is a Markov chain (:func:`queueing.step_chain`)
  whose stationary law gives the step law: the **ITL** (the gaps between a request's tokens, as vLLM's benchmark
  and MLPerf define ITL) is the step each running request waits through.
* **TTFT**: an arrival lands in a step (length-biased: long steps catch more arrivals) at a uniform point, waits
  for its end, then for the tokens ahead of it (the step's leftover and the prompts that arrived earlier in the
  step, Palm counts: :func:`queueing.backward_counts`), then ceil((ahead + n) / room) steps, the last also
  carrying those that arrived behind it; plus the slot wait and the stack's fixed per-request time.
* **TPOT** (per request, excluding the first token: (E2E - TTFT) / (osl - 1), the benchmarks' definition):
  d(B) plus the prompt cost its own osl - 1 steps carry (:class:`_Life`): the prompts still waiting when its
  prompt completes and those arriving while it decodes, a busy period started by its decode time (a Gamma of
  the busy period's mean and variance, with the atom of meeting none), at most a full room a step.
* **E2E** = TTFT + (osl - 1) d(B) + that cost.

Disaggregated placements run the prompts on a pool of prefill groups (a GI/G/c queue of whole prefills,
then the KV transfer) and decode on the decode group, whose steps then carry no prompts.

Not modelled: preemption, priorities other than FCFS, speculative decoding under load. docs/load.md compares
every percentile with a simulation of the same engine and says where the closed forms are wrong.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar, cast

import attrs
import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..errors import InfeasibleError, WorkloadError
from ..physics.stages import decode_step, max_batch, prefill
from ..records import ArrayRecord
from ..specs.execution import resolve_profile
from ..specs.formats import Formats, check_format_keys
from ..specs.groups import DeviceGroup
from ..specs.lengths import Lengths
from ..specs.models import ModelSpec
from ..specs.params import EngineParams, default_params
from ..workload import check_instance, check_whole
from .admission import Admission, admission_wait, check_admission, with_wait
from .limits import PERCENTILES, check_limits
from .queueing import (
    StepChain,
    WaitTail,
    arrival_wait_share,
    at_position,
    atoms,
    check_cv2,
    check_rates,
    gim_ratio,
    quantiles_with_wait,
    renewal_mean,
    split_cv2,
    spread_quantiles,
    step_chain,
    wait_tail,
    wait_then_wait,
    weighted_quantiles,
)
from .serve import DEFAULT_TOKEN_BUDGET, Placement, kv_transfer_s

Array = NDArray[np.float64]
#: Points of the midpoint rule over the residual step an arrival lands in.
RESIDUAL_POINTS = 4


@attrs.frozen(kw_only=True)
class Engine:
    """One replica as the queues see it. ``batch`` and ``step_s`` tabulate the decode step time d(B) (B >= 1,
    increasing); ``slots`` is the largest batch memory holds; ``budget`` the tokens a step may carry;
    ``prompt_tokens`` and ``prompt_cost_s`` give, per length atom, the tokens a prompt adds to the steps (after
    any cached prefix) and the time they add; ``whole_prompts``: the engine never splits a prompt over steps."""

    batch: Array
    step_s: Array
    slots: int
    budget: int
    prompt_tokens: Array
    prompt_cost_s: Array
    whole_prompts: bool = False
    #: the serving stack's fixed time per request (its API server, tokenizer): added to TTFT and E2E
    overhead_s: float = 0.0
    #: per length atom, the least time to a prompt's first token, its prefill alone, where riding the steps would
    #: price it below that: a compiled pipeline that streams prompts (the SRAM families), whose riding tokens add
    #: 1/pp of their serial cost to a step but whose own chunks still cross every stage. None: no floor
    prompt_floor_s: Array | None = None
    #: when the scheduler lets waiting prompts in (every step unless it polls or balances attention-DP ranks)
    admission: Admission = attrs.field(factory=Admission)

    def held_steps(self, lengths: Lengths, batch: ArrayLike) -> Array:
        """The steps a request holds its slot at mean batch ``batch``: its E[osl] - 1 decode steps and the steps that
        carry its prompt (its KV is reserved from its first chunk), 1 + E[n] / room for a prompt that starts at a
        uniform point of a step's room (E[ceil(U + x)] = 1 + x), room = budget - B (at least a mean prompt, so at
        most two steps where a prompt and the batch crowd the budget); none where prompts do not ride the steps
        (a disaggregated decode replica receives the prompt's KV)."""
        decode = max(lengths.mean_output_tokens - 1.0, 1e-9)
        if not np.any(self.prompt_cost_s > 0):
            return np.full(np.shape(batch), decode)
        en = float(np.sum(lengths.weights * self.prompt_tokens))
        room = np.maximum(self.budget - np.asarray(batch, dtype=float), en)
        return decode + 1.0 + en / room

    def slot_capacity_per_s(self, lengths: Lengths) -> float:
        """The rate every slot running sustains: lambda = c / (d(c) h + c E[a]) with h the steps a request holds
        its slot (:meth:`held_steps`; Little's law at the full batch, https://doi.org/10.1287/opre.9.3.383). It is
        also the rate requests leave while every slot is taken: each departure admits one prompt, so prompts then
        take c E[a] of each request's h steps."""
        c = float(self.slots)
        ea = float(np.sum(lengths.weights * self.prompt_cost_s))
        return c / (float(self.d(c)) * float(self.held_steps(lengths, c)) + c * ea)

    def capacity_per_s(self, lengths: Lengths) -> float:
        """The largest rate the engine sustains: the lower of the slots' (:meth:`slot_capacity_per_s`) and the token
        budget's. At mean batch B (Little: lambda(B) = B / ((E[osl] - 1) d(B) + B E[a])) a step leaves room =
        budget - B tokens to prompts and a full step lasts d(B) + c room (c: a prompt token's cost); the prompts'
        tokens arrive at lambda E[n] per second and full steps carry room / (d(B) + c room) of them, so the budget
        binds at the batch where lambda(B) E[n] (d(B) + c room) = room (the stability of
        :func:`queueing.step_chain`). A longer batch leaves less room, so prompt-heavy workloads meet the budget
        before the slots fill."""
        slots = self.slot_capacity_per_s(lengths)
        en = float(np.sum(lengths.weights * self.prompt_tokens))
        ea = float(np.sum(lengths.weights * self.prompt_cost_s))
        if en <= 0 or ea <= 0:
            return slots
        b = np.linspace(1.0, float(self.slots), 4097)
        d = self.d(b)
        lam = b / (d * max(lengths.mean_output_tokens - 1.0, 1e-9) + b * ea)
        room = np.maximum(self.budget - b, 0.0)
        if self.whole_prompts:
            room = np.maximum(room, en)
        budget = room / (en * (d + ea / en * room))           # the rate full steps carry at each batch
        over = lam >= budget
        if not over.any():
            return slots
        i = int(np.argmax(over))
        if i == 0:
            return float(budget[0])
        # the crossing, linear between the two grid batches around it
        f = (budget[i - 1] - lam[i - 1]) / ((budget[i - 1] - lam[i - 1]) - (budget[i] - lam[i]))
        return float(min(lam[i - 1] + f * (lam[i] - lam[i - 1]), slots))

    def d(self, b: ArrayLike) -> Array:
        """The decode step time at (mean) batch b, linear between the tabulated batches, d(1) below 1."""
        return np.interp(np.maximum(np.asarray(b, dtype=float), 1.0), self.batch, self.step_s)


@attrs.frozen(kw_only=True, repr=False)
class LoadResult(ArrayRecord):
    """Latency percentiles and utilisation at each arrival rate (arrays over ``rate_per_s``); infeasible
    (unstable) rates are NaN with ``stable`` False."""

    headline: ClassVar[tuple[str, ...]] = ("rate_per_s", "utilisation", "batch_mean", "ttft_p50_s", "ttft_p99_s",
                                           "itl_p50_s", "itl_p99_s", "tpot_p99_s", "e2e_p99_s", "stable")
    workload: ClassVar[tuple[str, ...]] = ("rate_per_s",)

    rate_per_s: Array
    #: the load over the capacity: lambda / lambda_max of the replicas (the lower of the slots' and the token
    #: budget's, :meth:`Engine.capacity_per_s`), or the prefill pool's busy share where that is higher
    utilisation: Array
    decode_utilisation: Array
    prefill_utilisation: Array
    batch_mean: Array
    capacity_per_s: float
    ttft_mean_s: Array
    ttft_p50_s: Array
    ttft_p90_s: Array
    ttft_p99_s: Array
    itl_mean_s: Array
    itl_p50_s: Array
    itl_p90_s: Array
    itl_p99_s: Array
    tpot_mean_s: Array
    tpot_p50_s: Array
    tpot_p90_s: Array
    tpot_p99_s: Array
    e2e_mean_s: Array
    e2e_p50_s: Array
    e2e_p90_s: Array
    e2e_p99_s: Array
    output_tokens_per_s: Array
    stable: NDArray[np.bool_]
    #: the share of arrivals that find every decode slot taken, and their mean wait for one (in TTFT and E2E)
    slot_wait_share: Array
    slot_wait_mean_s: Array
    lengths: str = ""
    arrival_cv2: float = 1.0

    def at(self, name: str, pct: int) -> Array:
        return getattr(self, f"{name}_p{pct}_s")


@attrs.frozen(kw_only=True)
class _State:
    """The engine's steady state at each rate: the mean running batch, its decode step, the prompts' share of
    time, the room a step leaves prompts, and the wait for a slot (a :class:`WaitTail`)."""

    lam: Array
    batch: Array
    d: Array
    rho_a: Array
    room: Array
    capacity: float
    stable: NDArray[np.bool_]
    slot: WaitTail
    #: the law of the slots taken, N = 0..slots (N >= slots lumped at slots)
    n_pmf: Array


def _steady(engine: Engine, lengths: Lengths, lam: Array, cv2: float = 1.0) -> _State:
    """The running batch and the law of the slots taken, N = 0..c (N >= c lumped at c), at each rate.

    * **Batch.** Every running request gets one token per step, so the engine is a processor-sharing server whose
      rate with k running is k / T(k) tokens/s, T(k) = d(k) / (1 - rho_a), rho_a = lambda E[a] the prompts' share
      of time. Processor sharing is insensitive to the service law (Kelly, *Reversibility and Stochastic
      Networks*, 1979, §3.3; Bonald and Proutiere 2002, https://doi.org/10.1016/S0166-5316(02)00129-6): the law
      prod_k lambda / mu(k), mu(k) = k / (T(k) (E[osl] - 1)), gives the mean batch (Little's law holds there).
    * **Slots.** A request holds a slot for h steps (:meth:`Engine.held_steps`). With n slots taken the engine
      advances decoding at kappa(n) = n / (h d(n)) requests per second of decode time, and every arrival adds one
      request and a prompt that takes a of that time: over dt the slots taken change by the arrivals minus
      kappa (dt - their prompts' cost) minus the departures' own noise. Its drift m(n) = lambda - kappa (1 - rho_a)
      and variance v(n) = lambda (E[(1 + kappa a)^2] + (c_a^2 - 1) (1 + kappa E[a])^2) + kappa (1 - rho_a) (a
      renewal count of variance c_a^2 lambda dt, each arrival a jump 1 + kappa a; the excess c_a^2 - 1 weighed
      by 2 E[min(O, O')] / E[O] for the decode lengths O, so that without prompts the law has the peakedness
      1 + (c_a^2 - 1) E[min(O, O')] / E[O] of renewal arrivals at infinite servers: Whitt, *Heavy-traffic
      approximations for service systems with blocking*, AT&T Bell Lab. Tech. J. 63(5), 1984; exponential
      lengths give the weight 1) make a diffusion whose
      stationary law is prop. to exp(int 2 m / v) / v (Browne and Whitt, *Piecewise-linear diffusion processes*,
      in Dshalalow (ed.), Advances in Queueing, CRC 1995, §2), taken as the birth-death chain with the same
      drift and variance: births (v + m) / 2, deaths (v - m) / 2 (Poisson arrivals and no prompts give the
      processor-sharing law exactly; burstier arrivals and costlier prompts widen it, the more the nearer
      capacity).
    * **The wait for a slot.** Beyond c a prompt starts only when a request leaves, so prompts take c E[a] of each
      request's c steps and requests leave at mu_c = :meth:`Engine.slot_capacity_per_s` (not at mu(c), whose
      steps carry prompts at the arrival rate); the line beyond c has drift lambda - mu_c and variance
      c_a^2 lambda + mu_c (the departures of many slots are close to Poisson on the scale of the wait: the
      Palm-Khintchine theorem, https://en.wikipedia.org/wiki/Palm%E2%80%93Khintchine_theorem), a geometric line of
      ratio q = births / deaths there. The arrivals that find every slot taken are the chain's share of time
      there times q / rho (rho = lambda / mu_c: Poisson arrivals see time averages, bursty ones arrive in
      clusters and see the slots full more often, :func:`queueing.arrival_wait_share`); each waits for the
      q-geometric line ahead of it and one more departure: an exponential wait of rate mu_c (1 - q) (for Poisson
      arrivals M/M/c's c mu - lambda; for Gamma gaps close to GI/M/c's mu_c (1 - sigma), :func:`queueing.gim_ratio`)."""
    ea = float(np.sum(lengths.weights * engine.prompt_cost_s))
    ea2 = float(np.sum(lengths.weights * engine.prompt_cost_s ** 2))
    decode_tokens = max(lengths.mean_output_tokens - 1.0, 1e-9)
    c = int(engine.slots)
    k = np.arange(1, c + 1, dtype=float)
    rho_a = lam * ea
    ok = rho_a < 1
    free = np.where(ok, 1 - rho_a, 1.0)[:, None]
    mu = k * free / (engine.d(k)[None, :] * decode_tokens)                   # departures/s with k running
    capacity = engine.capacity_per_s(lengths)
    departures = engine.slot_capacity_per_s(lengths)
    stable = ok & (lam < departures) & (lam < mu[:, -1])
    r = np.where(stable, lam / mu[:, -1], 0.5)
    batch = _birth_death(np.log(lam[:, None] / mu), r) @ np.arange(c + 1.0)
    # the slots taken: a birth-death chain matching the diffusion's drift and variance
    hold = engine.held_steps(lengths, batch)[:, None]
    n = np.arange(c + 1.0)
    kappa = n[None, :] / (hold * engine.d(n)[None, :])
    lam_ = lam[:, None]
    drift = lam_ - kappa * free
    o = np.maximum(lengths.output_tokens - 1.0, 0.0)
    peak = 2 * lengths.mean(np.minimum(o[:, None], o[None, :]) * lengths.weights[None, :]) / max(lengths.mean(o), 1e-300)
    jump2 = 1 + 2 * kappa * ea + kappa ** 2 * ea2 + peak * (cv2 - 1) * (1 + kappa * ea) ** 2
    var = lam_ * jump2 + kappa * free
    births, deaths = (var + drift) / 2, np.maximum((var - drift) / 2, 1e-300)
    q = np.where(stable, gim_ratio(np.where(stable, lam, 0.5 * departures), departures, cv2), 0.5)
    law = _birth_death(np.log(np.maximum(births[:, :-1], 1e-300) / deaths[:, 1:]), q)
    p_wait = arrival_wait_share(law[:, -1], q, np.where(stable, lam / departures, 1.0))
    theta = np.maximum(departures * (1 - q), 1e-12)
    slot = WaitTail(p=np.where(stable, p_wait, 1.0), theta_per_s=np.where(stable, theta, 0.0),
                    mean_s=np.where(stable, p_wait / theta, np.inf), rho=np.where(stable, lam / departures, 1.0))
    room = np.maximum(engine.budget - batch, 0.0)
    if engine.whole_prompts:   # at least one whole prompt per step: on average a mean prompt's tokens
        room = np.maximum(room, lengths.mean(engine.prompt_tokens))
    stable = stable & (room >= 1)
    return _State(lam=lam, batch=batch, d=engine.d(batch), rho_a=rho_a, room=np.maximum(room, 1.0),
                  capacity=capacity, stable=stable, slot=slot, n_pmf=law)


def _birth_death(log_ratios: Array, tail_ratio: Array) -> Array:
    """The law of N = 0..c (N >= c lumped at c) of a birth-death process with log(birth(k - 1) / death(k)) for
    k = 1..c and a geometric tail of ratio ``tail_ratio`` beyond c."""
    logp = np.concatenate([np.zeros((log_ratios.shape[0], 1)), np.cumsum(log_ratios, axis=1)], axis=1)
    p = np.exp(logp - logp.max(axis=1, keepdims=True))
    p[:, -1] = p[:, -1] / (1 - tail_ratio)                  # N >= c: p(c) (1 + r + r^2 + ...)
    return p / p.sum(axis=1, keepdims=True)


#: Atoms the prompt lengths are merged into for the TTFT (and the joint lengths for E2E).
PROMPT_ATOMS = 10
JOINT_ATOMS = 32


def _merged(key: Array, weights: Array, k: int, *values: Array) -> tuple[Array, ...]:
    """Atoms merged into at most k groups of equal probability along ``key`` (each group's weighted means of
    ``values``, so means are kept): (merged values..., merged weights)."""
    order = np.argsort(key, kind="stable")
    cum = np.cumsum(weights[order])
    group = np.minimum((cum - weights[order] / 2) / cum[-1] * k, k - 1).astype(int)
    w = cast(Array, np.bincount(group, weights=weights[order], minlength=k))   # numpy's stub: intp even with weights
    keep = w > 0
    out = [np.bincount(group, weights=weights[order] * v[order], minlength=k)[keep] / w[keep] for v in values]
    return (*out, w[keep])


@attrs.frozen(kw_only=True)
class _Points:
    """Weighted points of a latency per rate (last axis): its law as atoms."""

    values: Array
    weights: Array

    @classmethod
    def of(cls, pair: tuple[Array, Array]) -> _Points:
        return cls(values=pair[0], weights=pair[1])




#: Slices of probability the chain's states, the tokens ahead and the batch are cut into: finer in the upper
#: tail, where the 90th and 99th percentiles are read.
STATE_EDGES = (0.0, 0.2, 0.4, 0.6, 0.8, 0.9, 0.95, 0.98, 0.99, 0.996, 1.0)
AHEAD_EDGES = (0.0, 0.3, 0.6, 0.85, 0.95, 0.99, 1.0)
BATCH_EDGES = (0.0, 0.5, 0.9, 1.0)


def _batch_spread(engine: Engine, st: _State) -> tuple[Array, Array, Array, Array]:
    """The running batch's spread as atoms of its law: (d(N_k) - d(mean batch), weight) as an arrival sees it (the
    time average, PASTA) and as a token sees it (N tokens a step of d(N): the law weighted by N / d(N), its own
    atoms, so that at a light load, where the engine mostly idles, the tokens are the few steps that run)."""
    # the slots taken less those carrying their prompt (about constant): the running batch moves with N
    levels = np.arange(st.n_pmf.shape[-1], dtype=float)
    running = np.minimum(levels, engine.slots)[None, :] - (st.n_pmf @ levels - st.batch)[:, None]
    by_token = st.n_pmf * np.maximum(running, 0.0) / engine.d(np.maximum(running, 0.0))
    by_token = np.where(by_token.sum(axis=-1, keepdims=True) > 0, by_token, st.n_pmf)
    out: list[Array] = []
    for law in (st.n_pmf, by_token):
        pos, w = atoms(law, BATCH_EDGES)
        n = at_position(running, pos)
        out += [engine.d(n) - st.d[:, None], w]
    return out[0], out[1], out[2], out[3]




def _came_before(chain: StepChain, window_s: Array, rate_per_s: Array, en: float,
                 edges: tuple[float, ...] | None) -> tuple[Array, Array]:
    """The prompt tokens that arrived within ``window_s`` before an arrival, as atoms over slices of probability
    (their mean without ``edges``): (tokens, weights), on a new last axis."""
    if edges is None:
        return (renewal_mean(window_s, rate_per_s, chain.arrival_cv2) * en)[..., None], np.ones(window_s.shape + (1,))
    pos, w = atoms(chain.arrivals_before(window_s, rate_per_s), edges)
    return pos * chain.width.reshape(chain.width.shape + (1,) * (pos.ndim - 1)), w


def _ttft_points(st: _State, chain: StepChain, prompts: tuple[Array, Array, Array, Array], cost: float, en: float,
                 spread: tuple[Array, Array] | None, ahead: tuple[float, ...] | None = AHEAD_EDGES) -> _Points:
    """TTFT as weighted points over (the step an arrival lands in, where in it, what came before it in that
    step, its prompt[, the batch]); axes (rate, state, U, ahead, prompt[, batch]).

    A prompt of n tokens arriving a fraction U into a step of length T from backlog q waits for the step's end,
    then for the tokens ahead of it (the step's leftover and the prompts that came earlier in the step, a
    compound Poisson number) and its own: j = ceil((ahead + n) / room) steps, the first j - 1 full, the last
    also carrying the tokens that arrived behind it (at their mean). Steps are length-biased: an arrival lands
    in a long step more often. With ``spread`` every step it waits through is d(N) - d(mean) longer for the
    batch N it sees. No arrival's TTFT is below its prompt's floor (``prompts`` = tokens, cost, floor, weight)."""
    n, a, floor, w = prompts
    # states at the middle level (steps that occur: averaged, a 4,000/50 median fell 27% off the simulation)
    pos, qw = atoms(chain.pi * chain.step_s, STATE_EDGES, middle=True)
    u = (np.arange(RESIDUAL_POINTS) + 0.5) / RESIDUAL_POINTS
    T = at_position(chain.step_s, pos)
    came, cw = _came_before(chain, u[None, None, :] * T[..., None], st.lam[:, None, None], en, ahead)
    T, left = (at_position(x, pos)[..., None, None, None] for x in (chain.step_s, chain.left))
    U = u[None, None, :, None, None]
    lam, room, d, full = (v[:, None, None, None, None] for v in (st.lam, st.room, st.d, chain.full_s))
    queued = left + came[..., None]   # the tokens ahead of it
    steps = np.maximum(np.ceil((queued + n) / room - 1e-9), 1.0)
    later = renewal_mean((1 - U) * T + (steps - 1) * full, lam, chain.arrival_cv2) * en
    mine = queued + n - (steps - 1) * room
    behind = np.maximum(np.minimum(room, mine + later) - mine, 0.0)
    ttft = (1 - U) * T + steps * d + cost * (queued + behind) + a
    weights = qw[..., None, None, None] * cw[..., None] * w / RESIDUAL_POINTS
    if spread is not None:
        delta, dw = spread
        ttft = ttft[..., None] + (1 - U[..., None] + steps[..., None]) * delta[:, None, None, None, None, :]
        weights = weights[..., None] * dw[:, None, None, None, None, :]
        floor = floor[..., None]
    ttft = np.maximum(ttft, floor)
    lead = ttft.shape[:1]
    return _Points(values=ttft.reshape(lead + (-1,)),
                   weights=np.broadcast_to(weights, ttft.shape).reshape(lead + (-1,)))


#: Slices of probability the prompt cost a request meets during its decode is cut into (for E2E).
LIFE_EDGES = (0.0, 0.3, 0.6, 0.85, 0.95, 0.99, 1.0)


#: Slices of probability the backlog a request starts decoding behind is cut into.
BACKLOG_EDGES = (0.0, 0.5, 0.8, 0.95, 0.99, 1.0)


@attrs.frozen(kw_only=True)
class _Life:
    """The prompt cost Y a request's decode steps carry (osl - 1 steps, per output atom and rate).

    * The prompts that arrive during its x = (osl - 1) d of decode steps lengthen them, more prompts arrive during
      that extra time, and so on: their cost Y_a is that of a busy period started by the work x, with prompts
      (cost a) for customers. With N(x) arrivals, Y_a = sum_i B_i over the busy periods B_i each starts,
      E[B] = E[a] / (1 - rho), E[B^2] = E[a^2] / (1 - rho)^3, rho = lambda E[a] (the M/G/1 busy period's
      moments, Kleinrock, *Queueing Systems* vol. 1, 1975, §5.8; https://en.wikipedia.org/wiki/M/G/1_queue#Busy_period),
      so E[Y_a] = lambda x E[B] and Var Y_a = E[N] Var B + Var N E[B]^2 = lambda x (E[B^2] + (c_a^2 - 1) E[B]^2)
      (the count's variance c_a^2 lambda x for renewal arrivals): a Gamma of that mean and variance besides the
      atom P(N(x) = 0). A compound sum over a window of fixed length would miss the factor 1 / (1 - rho)^2 in
      the variance: the more prompts a request meets, the longer it stays to meet more.
    * It starts behind the prompt tokens V0 still waiting when its own prompt completes
      (:meth:`queueing.StepChain.after_completion`), and its steps carry at most a full room each: Y =
      min(c V0 + Y_a, (osl - 1)(T_full - d)). What a full window leaves waiting is the next request's V0, so the
      cap and V0 keep the mean; near the budget's capacity most windows are full steps throughout."""

    values: Array
    weights: Array

    @classmethod
    def of(cls, engine: Engine, lengths: Lengths, st: _State, chain: StepChain, outputs: Array,
           cv2: float = 1.0) -> _Life:
        from scipy.special import gammaincinv  # lazily: import roofline stays free of scipy
        ea = float(np.sum(lengths.weights * engine.prompt_cost_s))
        ea2 = float(np.sum(lengths.weights * engine.prompt_cost_s ** 2))
        cost = ea / max(float(np.sum(lengths.weights * engine.prompt_tokens)), 1e-300)
        rho = np.where(st.stable, st.rho_a, 0.0)[..., None]
        m = np.maximum(outputs - 1, 1)
        count = st.lam[..., None] * m * np.where(st.stable, st.d, 0.0)[..., None]
        eb, eb2 = ea / (1 - rho), ea2 / (1 - rho) ** 3
        mean, var = count * eb, count * (eb2 + (cv2 - 1) * eb * eb)
        p0 = np.exp(-count) if abs(cv2 - 1) < 1e-9 else np.exp(-count * math.log(cv2) / (cv2 - 1))
        cond_mean = mean / np.maximum(1 - p0, 1e-300)
        cond_var = np.maximum(var / np.maximum(1 - p0, 1e-300) - p0 * cond_mean ** 2, 1e-300)
        shape, scale = np.maximum(cond_mean ** 2 / cond_var, 1e-12), cond_var / np.maximum(cond_mean, 1e-300)
        e = np.asarray(LIFE_EDGES)
        y = np.concatenate([np.zeros(p0.shape + (1,)),
                            gammaincinv(shape[..., None], (e[:-1] + e[1:]) / 2) * scale[..., None]], axis=-1)
        yw = np.concatenate([p0[..., None], (1 - p0)[..., None] * np.diff(e)], axis=-1)
        pos, vw = atoms(chain.after_completion(), BACKLOG_EDGES)                     # (rate, k)
        v0 = pos * chain.width[..., None] * cost
        cap = (m * (chain.full_s - st.d)[..., None])[..., None, None]               # (rate, atom, 1, 1)
        values = np.minimum(v0[:, None, :, None] + y[:, :, None, :], cap)
        weights = vw[:, None, :, None] * yw[:, :, None, :]
        lead = values.shape[:2]
        return cls(values=values.reshape(lead + (-1,)), weights=weights.reshape(lead + (-1,)))

    def atoms(self) -> tuple[Array, Array]:
        """Y as atoms (values, weights) on the last axis, per rate and output atom."""
        return self.values, self.weights

    def slices(self) -> tuple[Array, Array]:
        """Y as one atom per slice of probability between LIFE_EDGES (its quantile at the slice's middle level,
        weighted by the slice's width): fewer points where Y only adds to a longer time (E2E)."""
        e = np.asarray(LIFE_EDGES)
        values = weighted_quantiles(self.values, self.weights, (e[:-1] + e[1:]) / 2)
        return values, np.broadcast_to(np.diff(e), values.shape)

    @property
    def mean(self) -> Array:
        return np.sum(self.values * self.weights, axis=-1)


def _tpot_points(life: _Life, outputs: Array, weights: Array, d: Array) -> _Points:
    """Per-request TPOT, d + Y / (osl - 1) (:class:`_Life`), as points over the output atoms (osl > 1) and Y's
    atoms."""
    w = np.where(outputs > 1, weights, 0.0)
    w = w / w.sum() if w.sum() > 0 else weights
    y, yw = life.atoms()
    values = d[:, None, None] + y / np.maximum(outputs - 1, 1)[None, :, None]
    return _Points(values=values.reshape(d.size, -1), weights=(w[None, :, None] * yw).reshape(d.size, -1))


def _percentiles(points: _Points, wait: WaitTail) -> dict[int, Array]:
    """Percentiles of a latency given as points plus an independent wait (:func:`queueing.quantiles_with_wait`)."""
    qs = quantiles_with_wait(points.values, points.weights, wait, [q / 100 for q in PERCENTILES])
    return {q: qs[..., i] for i, q in enumerate(PERCENTILES)}


def engine_load(engine: Engine, lengths: Lengths, rate_per_s: ArrayLike, *, arrival_cv2: float = 1.0) -> LoadResult:
    """Percentiles of TTFT, ITL, TPOT and E2E of one aggregated replica at each rate (module docstring)."""
    lam = check_rates(rate_per_s)
    cv2 = check_cv2(arrival_cv2)
    if engine.prompt_tokens.shape != lengths.weights.shape:
        raise WorkloadError("the engine's prompt atoms and the lengths' atoms differ")
    shape = lam.shape
    lam = lam.ravel()
    st = _steady(engine, lengths, lam, cv2)
    cost = float(np.sum(lengths.weights * engine.prompt_cost_s) / np.sum(lengths.weights * engine.prompt_tokens))
    floor = engine.prompt_floor_s if engine.prompt_floor_s is not None else np.zeros_like(engine.prompt_cost_s)
    n_u, a_u, f_u, w_u = _merged(engine.prompt_tokens, lengths.weights, PROMPT_ATOMS, engine.prompt_tokens,
                                 engine.prompt_cost_s, floor)
    chain = step_chain(np.where(st.stable, lam, 0.0), st.d, st.room, cost, n_u, w_u, arrival_cv2=cv2)
    stable = st.stable & chain.stable
    step_mean = chain.mean_step_s
    en = lengths.mean(engine.prompt_tokens)
    delta, w_time, delta_tok, w_tok = _batch_spread(engine, st)
    ttft = _ttft_points(st, chain, (n_u, a_u, f_u, w_u), cost, en, (delta, w_time))
    ttft = attrs.evolve(ttft, values=ttft.values + engine.overhead_s)
    wait = None if engine.admission.immediate else admission_wait(
        engine.admission, rate_per_s=lam, step_s=step_mean, decode_step_s=st.d, room_tokens=st.room, token_cost_s=cost,
        prompt_tokens=(lengths.mean(engine.prompt_tokens), lengths.mean(engine.prompt_tokens ** 2)), cv2=cv2,
        at_once=engine.admission.at_once_share(st.n_pmf))
    if wait is not None:   # prompts let in only at some steps (roofline.serving.admission)
        ttft = _Points.of(with_wait(ttft.values, ttft.weights, wait))
    slot = st.slot
    n_j, a_j, f_j, o, w_j = _merged(lengths.output_tokens, lengths.weights, JOINT_ATOMS, engine.prompt_tokens,
                                    engine.prompt_cost_s, floor, lengths.output_tokens)
    life = _Life.of(engine, lengths, st, chain, o, cv2)
    tpot = _tpot_points(life, o, w_j, st.d)
    tpot_mean = st.d + np.sum(np.where(o > 1, w_j, 0.0) * life.mean / np.maximum(o - 1, 1), axis=-1) / max(
        float(np.sum(np.where(o > 1, w_j, 0.0))), 1e-300)
    joint = _ttft_points(st, chain, (n_j, a_j, f_j, w_j), cost, en, None, ahead=None)
    y, yw = life.slices()                                                               # (rate, atom, k)
    lead = (lam.size, len(STATE_EDGES) - 1, RESIDUAL_POINTS, 1)
    decode = ((o - 1)[None, :, None] * st.d[:, None, None] + y)[:, None, None, None, :, :]
    e2e = _Points(values=(joint.values.reshape(lead + (o.size, 1)) + decode + engine.overhead_s).reshape(lam.size, -1),
                  weights=(joint.weights.reshape(lead + (o.size, 1)) * yw[:, None, None, None, :, :]).reshape(
                      lam.size, -1))
    if wait is not None:
        e2e = _Points.of(with_wait(e2e.values, e2e.weights, wait))
    itl = _Points(values=(chain.step_s[..., :, None] + delta_tok[..., None, :]).reshape(lam.size, -1),
                  weights=(chain.pi[..., :, None] * w_tok[..., None, :]).reshape(lam.size, -1))
    # a backlog cell between empty and a full room spans its width of prompt tokens: a step cost x width wide
    cell = np.where((chain.tokens > 0) & (chain.tokens < st.room[:, None]), cost * chain.width.reshape(-1, 1) / 2, 0.0)
    itl_half = np.broadcast_to(cell[..., :, None], chain.step_s.shape + delta_tok.shape[-1:]).reshape(lam.size, -1)
    out: dict[str, Array] = {}
    for name, pts in (("ttft", ttft), ("e2e", e2e)):
        for pct, v in _percentiles(pts, slot).items():
            out[f"{name}_p{pct}_s"] = v
    gaps = 1.0 if np.any(o > 1) else np.nan   # one-token outputs have no gap between tokens to measure
    for name, qs in (("itl", spread_quantiles(itl.values, itl_half, itl.weights, [p / 100 for p in PERCENTILES])),
                     ("tpot", weighted_quantiles(tpot.values, tpot.weights, [p / 100 for p in PERCENTILES]))):
        out.update({f"{name}_p{p}_s": qs[..., i] * gaps for i, p in enumerate(PERCENTILES)})
    nan = np.where(stable, 1.0, np.nan)
    # the running batch by Little's law on the decode phase: a request decodes (osl - 1) d plus the prompt cost
    # its steps carry (the chain's mean batch leaves out that a request's steps carry more prompts than the mean step)
    decoding = np.sum(w_j * ((o - 1) * st.d[:, None] + life.mean), axis=-1)
    ttft_mean = np.sum(ttft.values * ttft.weights, axis=-1) / ttft.weights.sum(axis=-1) + slot.mean_s
    out = {k: (v * nan).reshape(shape) for k, v in out.items()}
    return LoadResult(rate_per_s=lam.reshape(shape), utilisation=(lam / st.capacity).reshape(shape),
                      decode_utilisation=(lam / st.capacity).reshape(shape),
                      prefill_utilisation=(np.where(stable, 1 - chain.pi[..., 0], np.nan)).reshape(shape),
                      batch_mean=(lam * decoding * nan).reshape(shape), capacity_per_s=st.capacity,
                      ttft_mean_s=(ttft_mean * nan).reshape(shape), itl_mean_s=(step_mean * nan * gaps).reshape(shape),
                      tpot_mean_s=(tpot_mean * nan * gaps).reshape(shape),
                      e2e_mean_s=((ttft_mean + lengths.mean(lengths.output_tokens - 1) * tpot_mean) * nan).reshape(shape),
                      output_tokens_per_s=(lam * lengths.mean_output_tokens * nan).reshape(shape),
                      slot_wait_share=(slot.p * nan).reshape(shape),
                      slot_wait_mean_s=(slot.mean_s * nan).reshape(shape),
                      stable=stable.reshape(shape), lengths=lengths.name, arrival_cv2=cv2, **out)


def meets(result: LoadResult, limits: Mapping[str, float]) -> NDArray[np.bool_]:
    """Where every limit holds (and the rate is stable)."""
    ok = np.asarray(result.stable).copy()
    for k, v in limits.items():
        ok &= np.nan_to_num(getattr(result, k), nan=np.inf) <= v
    return ok


# ---- the physics: an Engine per replica, pools, and the public door ---------------------------------------------

#: Batches at which the decode step is tabulated (geometric from 1 to the slots, plus the slots).
BATCH_POINTS = 64


def decode_context(lengths: Lengths) -> float:
    """The mean context a running sequence holds while decoding, token-weighted: a request of input n and
    output o spends o - 1 steps at contexts n .. n + o - 2, so E[(o - 1)(n + (o - 2) / 2)] / E[o - 1]
    (long outputs are in the batch longer: the time average is length-biased)."""
    o = np.maximum(lengths.output_tokens - 1.0, 0.0)
    if lengths.mean(o) <= 0:
        return lengths.mean(lengths.input_tokens)
    return lengths.mean(o * (lengths.input_tokens + np.maximum(o - 1.0, 0.0) / 2)) / lengths.mean(o)


def engine_for(model: ModelSpec, group: DeviceGroup, lengths: Lengths, *, params: EngineParams, formats: Formats,
               token_budget: int = DEFAULT_TOKEN_BUDGET, prefix_hit: float = 0.0, max_slots: int | None = None,
               prompts_ride: bool = True, admission: Admission | None = None) -> Engine:
    """The :class:`Engine` of one replica on ``group``: d(B) from :func:`decode_step` at the mean decode context,
    the slots from :func:`max_batch` there (capped at ``max_slots``, the scheduler's max_num_seqs), and each length
    atom's prompt: its uncached tokens (1 - prefix_hit of it; the cached prefix is read, not recomputed) and the
    time they add to a step: their :func:`prefill` pass's compute, KV traffic and collectives, not its weight reads
    or fixed costs, which the decode step it rides pays anyway (Sarathi-Serve's piggybacking). ``prompts_ride``
    False: prompts run elsewhere
    (a disaggregated prefill pool), the steps carry none. ``admission``: when the scheduler lets waiting prompts in
    (:mod:`roofline.serving.admission`; default every step)."""
    fmt: dict[str, Any] = formats.names()
    ctx = float(round(decode_context(lengths)))
    # on a pipeline the batch runs as pp microbatches in flight, each scheduled against the whole budget (as
    # :func:`roofline.serving.serve._token_budget` says): a step of the pipeline carries pp budgets of tokens
    budget = int(token_budget) * group.pp
    slots = int(max_batch(model, group, context=ctx, params=params, **fmt))
    if max_slots is not None:
        slots = min(slots, int(max_slots))
    if slots < 1:
        decode_step(model, group, batch=1, context=ctx, params=params, on_infeasible="raise", **fmt)
        raise InfeasibleError(f"{model.id} on {group.shape}: no room for a sequence at context {ctx:.0f}")
    grid = np.unique(np.round(np.geomspace(1, slots, min(BATCH_POINTS, slots))))
    step = decode_step(model, group, batch=grid, context=ctx, params=params, **fmt).time_s
    overhead = resolve_profile(group.device, params).request_overhead_s
    if not prompts_ride:
        n = np.ones_like(lengths.input_tokens)
        return Engine(batch=grid, step_s=np.asarray(step, dtype=float), slots=slots, budget=budget,
                      prompt_tokens=n, prompt_cost_s=np.zeros_like(n), overhead_s=overhead,
                      admission=admission or Admission())
    new = np.maximum(np.round(lengths.input_tokens * (1 - prefix_hit)), 1.0)
    chunk = int(token_budget) if params.chunked_prefill is not False else None
    alone = prefill(model, group, prompt=new, prefix=lengths.input_tokens - new,
                    chunk=chunk if chunk and new.max() > chunk else None, params=params, **fmt)
    # riding a decode step, a prompt adds its own work (matmul and attention compute, its KV traffic, its
    # share of the collectives); the step already reads the weights and pays the fixed costs. On a pipeline the
    # chunks of the pp microbatches in flight overlap across the stages: each token adds 1/pp of its serial cost
    cost = np.asarray(alone.compute_s + alone.kv_memory_s + alone.communication_s, dtype=float) / group.pp
    floor = None
    if group.pp > 1 and resolve_profile(group.device, params).prefill_stream_tokens:   # a streaming pipeline
        floor = np.asarray(prefill(model, group, prompt=new, prefix=lengths.input_tokens - new, params=params,
                                   **fmt).time_s, dtype=float)
    return Engine(batch=grid, step_s=np.asarray(step, dtype=float), slots=slots, budget=budget,
                  prompt_tokens=new, prompt_cost_s=cost, whole_prompts=params.chunked_prefill is False,
                  overhead_s=overhead, prompt_floor_s=floor, admission=admission or Admission())


@attrs.frozen(kw_only=True)
class Workload:
    """What arrives at a deployment: request lengths (:class:`Lengths`), the burstiness of arrivals (squared
    CV of the gaps: 1 Poisson, as MLPerf's Server scenario and most serving benchmarks send them; above 1
    burstier Gamma gaps) and the share of each prompt found in a prefix cache."""

    lengths: Lengths = attrs.field(validator=attrs.validators.instance_of(Lengths))
    arrival_cv2: float = attrs.field(default=1.0, converter=check_cv2)
    prefix_hit: float = attrs.field(default=0.0)

    @prefix_hit.validator
    def _hit(self, _a: attrs.Attribute, v: float) -> None:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1:
            raise WorkloadError(f"prefix_hit (the cached share of each prompt) must be in [0, 1), got {v!r}")


@attrs.frozen(kw_only=True)
class Deployment:
    """A placement's replicas (and prefill pool) priced once for a workload: :meth:`at` answers any rates."""

    placement: Placement
    workload: Workload
    replicas: int
    prefill_groups: int
    engine: Engine
    #: a disaggregated pool's per-atom prefill time, and the whole time a prompt spends there (prefill, KV
    #: transfer, the stack's overhead); empty when prompts ride the decode steps
    prefill_s: Array = attrs.field(factory=lambda: np.zeros(0))
    prompt_s: Array = attrs.field(factory=lambda: np.zeros(0))

    @property
    def capacity_per_s(self) -> float:
        """The largest rate the decode replicas (and the prefill pool) sustain."""
        top = self.engine.capacity_per_s(self.workload.lengths) * self.replicas
        if self.prefill_s.size:
            top = min(top, self.prefill_groups / self.workload.lengths.mean(self.prefill_s))
        return float(top)

    def at(self, rate_per_s: ArrayLike) -> LoadResult:
        """The percentiles at each rate (total requests/s over the replicas)."""
        lam = check_rates(rate_per_s)
        L, R = self.workload.lengths, self.replicas
        decode = engine_load(self.engine, L, lam / R, arrival_cv2=split_cv2(self.workload.arrival_cv2, R))
        decode = attrs.evolve(decode, rate_per_s=lam, output_tokens_per_s=decode.output_tokens_per_s * R,
                              capacity_per_s=decode.capacity_per_s * R)
        return decode if not self.prefill_s.size else self._disaggregated(decode, lam)

    def _disaggregated(self, decode: LoadResult, lam: Array) -> LoadResult:
        """The decode replicas' result with TTFT and E2E from the pool of prefill groups (GI/G/c on whole
        prefills) and the wait for a decode slot once the prompt is in (a request is not served until a decode
        replica takes it: a full decode pool holds its KV, :func:`queueing.wait_then_wait`)."""
        L, own = self.workload.lengths, self.prompt_s
        pool = wait_tail(lam, self.prefill_s, L.weights, servers=self.prefill_groups,
                         arrival_cv2=self.workload.arrival_cv2)
        wait, fast, fast_w = wait_then_wait(pool, decode.slot_wait_share, decode.slot_wait_mean_s)
        stable = decode.stable & (pool.rho < 1)
        tpot = np.nan_to_num(decode.tpot_mean_s)
        decode_s = (L.output_tokens - 1)[None, :] * tpot[..., None]
        nan = np.where(stable, 1.0, np.nan)
        points = (("ttft", np.broadcast_to(own, decode_s.shape)), ("e2e", own[None, :] + decode_s))
        weights = (L.weights[None, :, None] * fast_w[:, None, :]).reshape(lam.size, -1)
        out: dict[str, Any] = {f"{name}_p{p}_s": v * nan for name, values in points
                               for p, v in _percentiles(_Points(values=(values[:, :, None] + fast[:, None, :]).reshape(
                                   lam.size, -1), weights=weights), wait).items()}
        ttft_mean = pool.mean_s + np.nan_to_num(np.ravel(decode.slot_wait_mean_s), nan=0.0) + L.mean(own)
        return attrs.evolve(decode, **out, ttft_mean_s=ttft_mean * nan, stable=stable,
                            e2e_mean_s=(ttft_mean + L.mean(L.output_tokens - 1) * tpot) * nan,
                            prefill_utilisation=pool.rho * nan,
                            utilisation=np.maximum(decode.decode_utilisation, pool.rho) * nan)


def deployment(model: ModelSpec, placement: Placement, workload: Workload, *, replicas: int = 1,
               prefill_groups: int = 1, token_budget: int = DEFAULT_TOKEN_BUDGET, max_slots: int | None = None,
               params: EngineParams | None = None, formats: Mapping[str, Any] | None = None,
               admission: Admission | None = None) -> Deployment:
    """``replicas`` copies of ``placement`` serving ``workload``, priced once (:func:`serve_at_rate`)."""
    m = check_instance("model", model, ModelSpec, optional=False)
    if not isinstance(placement, Placement):
        raise WorkloadError(f"placement must be a Placement, got {type(placement).__name__}")
    if not isinstance(workload, Workload):
        raise WorkloadError(f"workload must be a Workload, got {type(workload).__name__}")
    if placement.speculative:
        raise WorkloadError(f"placement {placement.name!r} speculates: served-load percentiles assume one token per "
                            "step (speculative decoding under load is not modelled)")
    for name, v in (("replicas", replicas), ("prefill_groups", prefill_groups), ("token_budget", token_budget)):
        check_whole(name, v)
    check_admission(admission, placement)
    p = params if params is not None else default_params()
    fmt = Formats.for_model(m, **check_format_keys(formats), devices=placement.target_devices)
    L = workload.lengths
    engine = engine_for(m, placement.decode, L, params=p, formats=fmt, token_budget=token_budget,
                        prefix_hit=workload.prefix_hit, max_slots=max_slots, prompts_ride=placement.prefill is None,
                        admission=admission)
    out = Deployment(placement=placement, workload=workload, replicas=replicas, prefill_groups=prefill_groups,
                     engine=engine)
    if placement.prefill is None:
        return out
    new = np.maximum(np.round(L.input_tokens * (1 - workload.prefix_hit)), 1.0)
    names: dict[str, Any] = fmt.names()
    pre = np.asarray(prefill(m, placement.prefill, prompt=new, prefix=L.input_tokens - new, params=p,
                             **names).time_s, dtype=np.float64)
    own = (pre + kv_transfer_s(m, placement, fmt.kv, L.input_tokens, pre)
           + resolve_profile(placement.prefill.device, p).request_overhead_s)
    return attrs.evolve(out, prefill_s=pre, prompt_s=own)


def serve_at_rate(model: ModelSpec, placement: Placement, workload: Workload, rate_per_s: ArrayLike,
                  **kw: Any) -> LoadResult:
    """TTFT, ITL, TPOT and E2E percentiles and each pool's utilisation when ``rate_per_s`` requests/s (an array
    sweeps) arrive at ``replicas`` copies of ``placement`` (module docstring). Aggregated: prompts ride each
    replica's decode steps. Disaggregated (``placement.prefill`` set): ``prefill_groups`` groups of its shape
    serve every prompt, then the KV moves to a decode replica. ``max_slots``: the scheduler's cap on running
    requests (vLLM's max_num_seqs), below what memory holds; ``token_budget``: tokens a step may carry.
    Speculative placements are refused: the queues here assume one token per step."""
    return deployment(model, placement, workload, **kw).at(rate_per_s)


#: Bisection steps of :func:`best_rate` over [capacity / 1000, capacity] in log space (2^-12 of a factor 1000:
#: the rate to 0.17%).
RATE_BISECTIONS = 12


def max_rate(model: ModelSpec, placement: Placement, workload: Workload, limits: Mapping[str, float],
             **kw: Any) -> tuple[float, LoadResult]:
    """The largest request rate whose percentiles meet ``limits`` (``{"ttft_p99_s": 2.0, "tpot_p99_s": 0.2}``)
    and its result (:func:`best_rate`); 0 (and the result at the lowest rate tried) where none does."""
    want = check_limits(limits)
    d = deployment(model, placement, workload, **kw)
    return best_rate(d, want)


def best_rate(d: Deployment, limits: Mapping[str, float]) -> tuple[float, LoadResult]:
    """:func:`max_rate` on a priced deployment: the limits checked at a thousandth of the capacity and at the
    capacity, then bisected in log space between the last rate that meets them and the first that does not (a
    higher rate never lowers a percentile)."""
    top = d.capacity_per_s * 0.9999
    lo, hi = top * 1e-3, top
    r_lo, r_hi = d.at([lo]), d.at([hi])
    if not bool(meets(r_lo, limits)[0]):
        return 0.0, r_lo
    if bool(meets(r_hi, limits)[0]):
        return hi, r_hi
    for _ in range(RATE_BISECTIONS):
        mid = math.sqrt(lo * hi)
        r = d.at([mid])
        if bool(meets(r, limits)[0]):
            lo, r_lo = mid, r
        else:
            hi = mid
    return lo, r_lo
