"""A discrete-event simulation of one continuous-batching engine and of a disaggregated prefill pool: the oracle
the closed forms of ``roofline.serving.load`` are checked against (tests only, never the library).

The engine runs back-to-back steps. A step carries one token for every running sequence and, FCFS, up to
``budget - B`` prompt tokens of the waiting requests that hold a slot (at most ``slots`` requests run or
prefill at once); it lasts ``step_s(B) + sum of the prompt tokens' cost``. A prompt's first token comes at the
end of the step that finishes its prompt; each later token at the end of each following step. Requests arriving
during a step are scheduled from the next. The prefill pool is c FCFS servers, each one prompt at a time.
"""

from __future__ import annotations

import functools
import heapq
import math
from collections import defaultdict, deque
from collections.abc import Callable
from typing import Any

import attrs
import numpy as np


@attrs.frozen
class Simulated:
    ttft_s: np.ndarray
    tpot_s: np.ndarray
    e2e_s: np.ndarray
    itl_s: np.ndarray          # one entry per step with its token count in itl_weight
    itl_weight: np.ndarray
    batch_mean: float

    def itl_quantile(self, q: float) -> float:
        """The q-quantile of the gaps between a request's tokens (each step's gap counted once per running token)."""
        order = np.argsort(self.itl_s)
        cum = np.cumsum(self.itl_weight[order]) / self.itl_weight.sum()
        return float(self.itl_s[order][np.searchsorted(cum, q)])


def arrivals(rng: np.random.Generator, rate_per_s: float, n: int, cv2: float = 1.0) -> np.ndarray:
    """Arrival times with Gamma inter-arrival times of mean 1/rate and squared CV ``cv2`` (1: Poisson)."""
    return np.cumsum(rng.gamma(1.0 / cv2, cv2 / rate_per_s, size=n))


def simulate_engine(*, rate_per_s: float, inputs: np.ndarray, outputs: np.ndarray, token_cost_s: np.ndarray,
                    step_s: Callable[[int], float], budget: int, slots: int, n: int = 20000, cv2: float = 1.0,
                    seed: int = 0, warmup: float = 0.1, whole: bool = False,
                    weights: np.ndarray | None = None, poll_steps: int = 1) -> Simulated:
    """Aggregated continuous batching. ``inputs``/``outputs`` are the lengths each request is drawn from (by
    ``weights``, else equally); ``token_cost_s`` the cost of one prompt token of each (same index). ``whole``:
    prompts are never split; a step takes whole prompts FCFS while they fit its room, and always at least one.
    ``poll_steps``: arrivals join the queue only at every poll_steps-th step (or when the engine is idle)."""
    rng = np.random.default_rng(seed)
    arrive = arrivals(rng, rate_per_s, n, cv2)
    steady_until = arrive[int((1 - warmup / 2) * n) - 1]
    pick = rng.choice(len(inputs), size=n, p=weights)
    # plain lists in the loop (a numpy scalar per access costs several times a list's)
    at, need = arrive.tolist(), inputs[pick].astype(float).tolist()
    left, per_token, rests = list(need), token_cost_s[pick].tolist(), (outputs[pick].astype(int) - 1).tolist()
    first, done = [math.nan] * n, [math.nan] * n
    waiting: deque[int] = deque()
    finish_at: dict[int, list[int]] = defaultdict(list)
    t, step, nxt, running, prefilling = 0.0, 0, 0, 0, 0
    itl, weight, start = [], [], []
    steady_from = arrive[int(warmup * n)]
    while nxt < n or waiting or running:
        while nxt < n and at[nxt] <= t and (step % poll_steps == 0 or not running):
            waiting.append(nxt)
            nxt += 1
        if not waiting and not running:
            t = at[nxt]
            continue
        room, cost, started = budget - running, 0.0, []
        for r in waiting:   # not changed inside the loop
            if room <= 0 and not (whole and not started):
                break
            fresh = left[r] == need[r]
            if fresh and running + prefilling >= slots:
                break   # no slot to start a new prompt
            if whole and left[r] > room and started:
                break   # a whole prompt that does not fit waits for the next step
            if fresh:
                prefilling += 1
            take = left[r] if whole else min(room, left[r])
            left[r] -= take
            room -= take
            cost += take * per_token[r]
            started.append(r)
        dt = step_s(running if running > 1 else 1) + cost
        if running and steady_from <= t <= steady_until:   # no warm-up from empty, no drain after the last arrivals
            itl.append(dt)
            weight.append(running)
            start.append(t)
        t += dt
        step += 1
        for r in finish_at.pop(step, ()):
            done[r] = t
            running -= 1
        for r in started:   # the started prompts lead the queue, all but the last taken whole
            if left[r] == 0:
                waiting.popleft()
                prefilling -= 1
                first[r] = t
                if rests[r] == 0:
                    done[r] = t
                else:
                    running += 1
                    finish_at[step + rests[r]].append(r)
    first, done = np.array(first), np.array(done)
    keep = slice(int(warmup * n), int((1 - warmup / 2) * n))   # no warm-up from empty, no drain at the end
    ttft = (first - arrive)[keep]
    e2e = (done - arrive)[keep]
    o = outputs[pick][keep]
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(o > 1, (done - first)[keep] / (o - 1), np.nan)
    gaps, batch = np.array(itl), np.array(weight, dtype=float)
    # the running batch's time average over the steady window (idle time and steps with none running count as 0)
    inside = np.minimum(np.array(start) + gaps, steady_until) - np.array(start)
    return Simulated(ttft_s=ttft, tpot_s=tpot[np.isfinite(tpot)], e2e_s=e2e, itl_s=gaps, itl_weight=batch,
                     batch_mean=float(np.sum(batch * inside) / (steady_until - steady_from)))


def simulate_pool(*, rate_per_s: float, service_s: np.ndarray, servers: int, n: int = 40000, cv2: float = 1.0,
                  seed: int = 0, warmup: float = 0.1) -> np.ndarray:
    """Waiting times of a FCFS GI/G/c pool whose service times are drawn from ``service_s`` (equal weight)."""
    rng = np.random.default_rng(seed)
    arrive = arrivals(rng, rate_per_s, n, cv2)
    s = service_s[rng.integers(0, len(service_s), size=n)]
    free = [0.0] * servers
    wait = np.empty(n)
    for i in range(n):
        start = max(arrive[i], heapq.heappop(free))
        wait[i] = start - arrive[i]
        heapq.heappush(free, start + s[i])
    return wait[int(warmup * n):]


# ---- the cases the closed forms are checked on, and samples pooled over runs ------------------------------------

#: A synthetic engine's decode step: 20 ms + 50 us per running sequence.
BATCH = np.arange(1, 257, dtype=float)


def synthetic(lengths: Any, *, cost_s: float = 20e-6, budget: int = 2048, slots: int = 256, whole: bool = False) -> Any:
    """An engine whose decode step is 20 ms + 50 us per sequence and whose prompt tokens cost ``cost_s`` each."""
    from roofline.serving.load import Engine
    return Engine(batch=BATCH[:slots], step_s=0.020 + 0.00005 * BATCH[:slots], slots=slots, budget=budget,
                  prompt_tokens=lengths.input_tokens, prompt_cost_s=lengths.input_tokens * cost_s, whole_prompts=whole)


def physics_engine() -> tuple[Any, Any]:
    """Llama-2-70B FP8 on two H100s (the physics' step times and prompt costs) and the MLPerf Llama-2 lengths,
    without the stack's fixed per-request time (not simulated)."""
    from roofline.serving.load import Workload
    from roofline.serving.serve import Placement
    from roofline.serving_api import deployment
    from roofline.specs.lengths import shipped_lengths
    lengths = shipped_lengths("mlperf-llama2-70b")
    d = deployment("llama-2-70b", Placement.build("h100", decode="h100-sxm:2"), Workload(lengths=lengths),
                   formats={"weights": "fp8", "kv": "fp8"})
    return attrs.evolve(d.engine, overhead_s=0.0), lengths


@functools.cache
def cases() -> dict[str, tuple[Any, Any, float]]:
    """name -> (engine, lengths, squared CV of the arrivals' gaps)."""
    from roofline.specs.lengths import Lengths
    lognormal, fixed, long_prompts = Lengths.lognormal(400, 200, cv=1.0), Lengths.fixed(1000, 100), Lengths.fixed(4000, 50)
    return {
        "lognormal 400/200 (CV 1), decode-heavy": (synthetic(lognormal), lognormal, 1.0),
        "fixed 1000/100, prefill-heavy": (synthetic(fixed), fixed, 1.0),
        "lognormal 400/200, bursty arrivals (c_a^2 = 4)": (synthetic(lognormal), lognormal, 4.0),
        "fixed 4000/50, prefill-dominated": (synthetic(long_prompts), long_prompts, 1.0),
        "Llama-2-70B FP8 on h100-sxm:2 (physics), MLPerf lengths": (*physics_engine(), 1.0),
    }


def run(engine: Any, lengths: Any, rate_per_s: float, *, cv2: float = 1.0, n: int = 30000, seed: int = 0) -> Simulated:
    """One run of :func:`simulate_engine` on an engine as the closed forms see it (each request's lengths drawn
    from the length atoms by their weights)."""
    table = [float(engine.d(b)) for b in range(engine.slots + 1)]
    return simulate_engine(rate_per_s=rate_per_s, inputs=engine.prompt_tokens, outputs=lengths.output_tokens,
                           token_cost_s=engine.prompt_cost_s / engine.prompt_tokens, weights=lengths.weights,
                           step_s=table.__getitem__, budget=engine.budget, slots=engine.slots, n=n, cv2=cv2,
                           whole=engine.whole_prompts, seed=seed, poll_steps=engine.admission.poll_steps)


#: Log-spaced bins the samples of many runs are pooled in: 1e-4 s to 1e4 s, 2,000 a decade (0.12% wide).
EDGES = np.geomspace(1e-4, 1e4, 16001)
METRICS = ("ttft", "tpot", "e2e", "itl")


def histograms(s: Simulated) -> dict[str, np.ndarray]:
    """Each metric's samples counted in :data:`EDGES` (the ITL's steps weighted by the tokens they carry)."""
    out = {k: np.histogram(getattr(s, f"{k}_s"), EDGES)[0].astype(float) for k in METRICS if k != "itl"}
    out["itl"] = np.histogram(s.itl_s, EDGES, weights=s.itl_weight)[0]
    return out


def quantile(counts: np.ndarray, q: float) -> float:
    """The q-quantile of pooled counts in :data:`EDGES`, geometric within its bin."""
    cum = np.cumsum(counts) / counts.sum()
    i = int(np.searchsorted(cum, q))
    below = cum[i - 1] if i else 0.0
    f = (q - below) / max(cum[i] - below, 1e-300)
    return float(EDGES[i] * (EDGES[i + 1] / EDGES[i]) ** min(max(f, 0.0), 1.0))


#: The ITL (the step law) has atoms (steps with and without prompts), so its quantile is read within a band of
#: levels around each percentile, [q - 0.03, q + 0.005], and 10% either side of it.
ITL_BAND = (-0.03, 0.005)


def model_errors(point: dict, engine: Any, lengths: Any) -> dict[str, float]:
    """Relative errors of the closed forms (roofline.serving.load) against one pooled oracle point as
    scripts/load_oracle.py stores it (the ITL within its band counts as 0), and of the mean batch."""
    from roofline.serving.load import engine_load
    r = engine_load(engine, lengths, [point["rate_per_s"]], arrival_cv2=point["arrival_cv2"])
    out = {}
    for key, sim in point["pooled"].items():
        name, p = key.split("_p")
        got = float(r.at(name, int(p))[0])
        if name == "itl":
            lo, hi = point["itl_band"][key]
            out[key] = 0.0 if lo * 0.9 <= got <= hi * 1.1 else got / sim - 1
        else:
            out[key] = got / sim - 1
    out["batch"] = float(r.batch_mean[0]) / point["batch_mean"] - 1
    return out


def simulate_gim_busy(*, rate_per_s: float, servers: int, n: int = 200000, cv2: float = 1.0,
                      seed: int = 0) -> tuple[float, float]:
    """(share of arrivals that find every server busy, share of time every server is busy) of a GI/M/c queue with
    unit-rate exponential services and Gamma gaps of squared CV ``cv2``: between arrivals the queue empties at
    rate min(N, c), memoryless, so only the count is tracked."""
    rng = np.random.default_rng(seed)
    gaps = rng.gamma(1.0 / cv2, cv2 / rate_per_s, size=n)
    count, seen, busy_s = 0, 0, 0.0
    for gap in gaps:
        seen += count >= servers
        count += 1
        left = gap
        while count:
            d = rng.exponential(1.0 / min(count, servers))
            if d >= left:
                break
            busy_s += d if count >= servers else 0.0
            left -= d
            count -= 1
        busy_s += left if count >= servers else 0.0
    return seen / n, busy_s / float(np.sum(gaps))
