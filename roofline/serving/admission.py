"""When a scheduler lets waiting prompts in: the wait before a prompt can join the steps at all.

The queues of :mod:`roofline.serving.load` let an arriving prompt ride the next step. Three schedulers admit new
prompts only at some steps, and the wait to the next admission adds to TTFT (and E2E), not to the steps:

* **Multi-step scheduling** (vLLM's V0 ``num_scheduler_steps``, "the scheduler is invoked once every N steps",
  https://docs.vllm.ai/en/v0.6.3.post1/models/engine_args.html; AMD's MLPerf v5.1 Llama-2-70B and Mixtral Server
  harnesses run 8 to 10) and **polling** (SGLang's ``--scheduler-recv-interval``): prompts are let in every P steps.
* **TensorRT-LLM's attention-DP balance** (``attention_dp_config``: ``enable_balance``, ``timeout_iters`` default
  50, ``batching_wait_iters`` default 10: https://github.com/NVIDIA/TensorRT-LLM/blob/main/tensorrt_llm/llmapi/llm_args.py;
  the rule in ``PyExecutor._balance_adp_requests`` and tech blog 10, "ADP Balance Strategy",
  docs/source/blogs/tech_blog/blog10_ADP_Balance_Strategy.md): context requests are held until every one of the
  N attention-DP ranks has one, then ``batching_wait_iters`` iterations more; a counter of the iterations in which
  not every rank has one releases whatever waits after ``timeout_iters`` and starts again (it counts even when
  nothing waits). With Poisson arrivals at lambda and steps of d the releases come every
  P = min(timeout, N / (lambda d) + batching_wait) steps (the N-th arrival after a release comes N / lambda later
  on average).

An arrival that finds fewer running sequences than ranks (none, without the balance) is let in at once: vLLM's V0
engine schedules as soon as it has nothing running, and the balance releases whenever a rank has no generation
request (``not all_ranks_have_gen_requests``). So at a light load the wait vanishes, and under the balance the
wait can fall as the rate rises (the ranks fill sooner): TTFT need not grow with the rate there.

Otherwise the admissions are periodic with period P steps and an arrival lands at a uniform point between two:
beyond the step it lands in (which the queues already charge) it waits a uniform U (P - 1) steps, mean
(P - 1) d / 2 (the poll delay :func:`roofline.serving.serve.evaluate_serving` charges at a fixed concurrency), and
the prompts that arrived before it in the same period are let in with it, ahead of it (:meth:`Admission.wait_atoms`).
The tests check the mean against a simulation of the balance rule (within 10% at 2-200 requests/s) and the
percentiles against the event simulation of the engine with polling. Not modelled: the burst of prompts each
admission releases lengthens the step that carries them more than the same prompts spread out would.
"""

from __future__ import annotations

import attrs
import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..errors import WorkloadError
from .queueing import weighted_quantiles

Array = NDArray[np.float64]

#: Slices of probability the uniform admission wait is cut into: finer in the upper tail, where p90 and p99 sit.
WAIT_EDGES = (0.0, 0.2, 0.4, 0.6, 0.8, 0.9, 0.95, 0.98, 0.99, 0.996, 1.0)
#: Slices of probability the prompts let in ahead of an arrival are cut into.
BURST_EDGES = (0.0, 0.5, 0.8, 0.95, 0.99, 1.0)
#: TensorRT-LLM's ``AttentionDpConfig`` defaults (llm_args.py): ``timeout_iters`` and ``batching_wait_iters``.
TRTLLM_BALANCE_TIMEOUT_STEPS = 50
TRTLLM_BALANCE_WAIT_STEPS = 10


def _whole(name: str, v: object, least: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < least:
        raise WorkloadError(f"{name} must be a whole number >= {least}, got {v!r}")
    return int(v)


@attrs.frozen(kw_only=True)
class Admission:
    """How often a scheduler lets waiting prompts in (module docstring). ``poll_steps``: every this many steps
    (1: every step); ``balance_ranks`` > 1: TensorRT-LLM's attention-DP balance over that many ranks, with
    ``balance_timeout_steps`` and ``balance_wait_steps`` (its ``timeout_iters`` and ``batching_wait_iters``)."""

    poll_steps: int = attrs.field(default=1, converter=lambda v: _whole("poll_steps", v, 1))
    balance_ranks: int = attrs.field(default=1, converter=lambda v: _whole("balance_ranks", v, 1))
    balance_timeout_steps: int = attrs.field(default=TRTLLM_BALANCE_TIMEOUT_STEPS,
                                             converter=lambda v: _whole("balance_timeout_steps", v, 1))
    balance_wait_steps: int = attrs.field(default=TRTLLM_BALANCE_WAIT_STEPS,
                                          converter=lambda v: _whole("balance_wait_steps", v, 0))

    @property
    def immediate(self) -> bool:
        """Whether every step admits (no wait beyond the queues')."""
        return self.poll_steps == 1 and self.balance_ranks == 1

    def period_steps(self, rate_per_s: ArrayLike, step_s: ArrayLike) -> Array:
        """Steps between admissions at each rate (requests/s into this replica) with steps of ``step_s``."""
        lam, d = np.asarray(rate_per_s, dtype=float), np.asarray(step_s, dtype=float)
        period = np.full(np.broadcast_shapes(lam.shape, d.shape), float(self.poll_steps))
        if self.balance_ranks > 1:
            with np.errstate(divide="ignore", invalid="ignore"):
                fill = np.where(lam * d > 0, self.balance_ranks / (lam * d), np.inf) + self.balance_wait_steps
            period = np.maximum(period, np.minimum(float(self.balance_timeout_steps), fill))
        return np.maximum(period, 1.0)

    def wait_atoms(self, rate_per_s: ArrayLike, step_s: ArrayLike, ahead: tuple[ArrayLike, ArrayLike] = (0.0, 0.0),
                   behind: tuple[ArrayLike, ArrayLike] = (0.0, 0.0)) -> tuple[Array, Array]:
        """The wait beyond the step an arrival lands in, as atoms: (values per rate on a new last axis, weights on
        that axis). An arrival a fraction q of the way from the end of a period (q uniform) waits q (P - 1) d for
        the next admission. The prompts of the same period are let in with it: those of the (1 - q) (P - 1) steps
        before it go ahead of it, and those of the q (P - 1) steps after it ride the step that finishes its prompt
        (its first token comes when that step ends). ``ahead`` and ``behind`` are the mean and variance of the time
        the prompts arriving during one step add to its first token, each way (a compound sum over the arrivals:
        the prompts ahead add their cost and the steps their tokens fill, those behind their cost), so the wait
        is q (P - 1) d plus a sum of mean and variance k_a ahead + k_b behind, taken as a Gamma (its quantiles at
        the middle of each slice of :data:`BURST_EDGES`). q at the middle of each slice of :data:`WAIT_EDGES`."""
        from scipy.special import gammaincinv  # lazily: import roofline stays free of scipy
        e, f = np.asarray(WAIT_EDGES), np.asarray(BURST_EDGES)
        q, qw = (e[:-1] + e[1:]) / 2, np.diff(e)
        g, gw = (f[:-1] + f[1:]) / 2, np.diff(f)
        d = np.asarray(step_s, dtype=float)
        span = (self.period_steps(rate_per_s, d) - 1.0)[..., None]
        k_a, k_b = span * (1 - q), span * q                                      # (rate, q)
        (a_m, a_v), (b_m, b_v) = ((np.asarray(x, dtype=float)[..., None] for x in pair) for pair in (ahead, behind))
        mean, var = k_a * a_m + k_b * b_m, np.maximum(k_a * a_v + k_b * b_v, 1e-300)
        shape, scale = np.maximum(mean ** 2 / var, 1e-12), var / np.maximum(mean, 1e-300)
        burst = np.where(mean[..., None] > 0, gammaincinv(shape[..., None], g) * scale[..., None], 0.0)
        values = (span * q * d[..., None])[..., None] + burst                    # (rate, q, g)
        lead = values.shape[:-2]
        return values.reshape(lead + (-1,)), (qw[:, None] * gw[None, :]).reshape(-1)

    def at_once_share(self, slots_pmf: ArrayLike) -> Array:
        """The share of arrivals let in at once, from the law of the slots taken (N = 0.. on the last axis):
        P(N < ranks), the running sequences too few to give every rank one (P(N = 0) without the balance)."""
        pmf = np.asarray(slots_pmf, dtype=float)
        return np.sum(pmf[..., : max(1, self.balance_ranks)], axis=-1)

    def mean_wait_s(self, rate_per_s: ArrayLike, step_s: ArrayLike) -> Array:
        """The mean wait for the next admission alone, (P - 1) d / 2 (no prompts let in with it)."""
        d = np.asarray(step_s, dtype=float)
        return (self.period_steps(rate_per_s, d) - 1.0) * d / 2


def admission_wait(admission: Admission, *, rate_per_s: Array, step_s: Array, decode_step_s: Array,
                   room_tokens: Array, token_cost_s: float, prompt_tokens: tuple[float, float],
                   at_once: ArrayLike = 0.0, cv2: float = 1.0) -> tuple[Array, Array]:
    """:meth:`Admission.wait_atoms` for an engine at each rate, as an atom at 0 of weight ``at_once`` (the share let
    in at once: :meth:`Admission.at_once_share`) and the wait's quantiles at the middle of each slice of
    :data:`WAIT_EDGES` (fewer points than the wait's own atoms: each multiplies TTFT's and E2E's). Steps of mean
    ``step_s`` (decode ``decode_step_s`` and the prompts they carry), ``room_tokens`` left to prompts a step, a
    prompt token costing ``token_cost_s``, prompts of mean and mean-square tokens ``prompt_tokens``, arrivals of
    squared CV ``cv2``. A token let in ahead adds its cost and its share of a step (d / room); one behind adds its
    cost, for as many as the step's room holds beside the period's other prompts (a share min(1, room / the
    prompt tokens of the P steps' arrivals))."""
    lam, T, room = (np.asarray(x, dtype=float) for x in (rate_per_s, step_s, room_tokens))
    en, en2 = prompt_tokens
    period = admission.period_steps(lam, T)
    rides = np.minimum(1.0, room / np.maximum(period * lam * T * en, 1e-300))
    pair = [(lam * T * en * c, cv2 * lam * T * en2 * c ** 2)
            for c in (token_cost_s + np.asarray(decode_step_s, dtype=float) / room, token_cost_s * rides)]
    values, weights = admission.wait_atoms(lam, T, pair[0], pair[1])
    e = np.asarray(WAIT_EDGES)
    slices = weighted_quantiles(values, weights, (e[:-1] + e[1:]) / 2)
    p = np.broadcast_to(np.asarray(at_once, dtype=float), lam.shape)[..., None]
    return (np.concatenate([np.zeros(slices.shape[:-1] + (1,)), slices], axis=-1),
            np.concatenate([p, (1 - p) * np.diff(e)], axis=-1))


def check_admission(admission: Admission | None, placement: object) -> None:
    """Refuse an admission wait on a placement whose prompts run on a prefill pool: the wait is modelled on an
    aggregated engine's steps (a pool's own queue replaces them)."""
    if admission is not None and not admission.immediate and getattr(placement, "prefill", None) is not None:
        raise WorkloadError(f"placement {getattr(placement, 'name', '')!r} prefills on a separate pool: the scheduler's "
                            "admission wait (polling, attention-DP balance) is modelled for aggregated engines only")


def with_wait(values: Array, weights: Array, wait: tuple[Array, Array]) -> tuple[Array, Array]:
    """Points of a latency per rate (last axis) plus an independent wait given as atoms per rate (values and
    weights, each per rate or shared): every pair, flattened to the last axis again."""
    w_values, w_weights = wait
    v = values[..., :, None] + w_values[..., None, :]
    w = np.broadcast_to(weights, values.shape)[..., :, None] * np.asarray(w_weights)[..., None, :]
    lead = v.shape[:-2]
    return v.reshape(lead + (-1,)), np.broadcast_to(w, v.shape).reshape(lead + (-1,))
