"""A discrete-event simulation of one continuous-batching engine and of a disaggregated prefill pool: the oracle
the closed forms of ``roofline.serving.load`` are checked against (tests only, never the library).

The engine runs back-to-back steps. A step carries one token for every running sequence and, FCFS, up to
``budget - B`` prompt tokens of the waiting requests that hold a slot (at most ``slots`` requests run or
prefill at once); it lasts ``step_s(B) + sum of the prompt tokens' cost``. A prompt's first token comes at the
end of the step that finishes its prompt; each later token at the end of each following step. Requests arriving
during a step are scheduled from the next. The prefill pool is c FCFS servers, each one prompt at a time.
"""

from __future__ import annotations

import heapq
from collections import defaultdict, deque
from collections.abc import Callable

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
                    seed: int = 0, warmup: float = 0.1, whole: bool = False) -> Simulated:
    """Aggregated continuous batching. ``inputs``/``outputs`` are per-request lengths to sample from (equal
    weight); ``token_cost_s`` the cost of one prompt token of each (same index). ``whole``: prompts are never
    split; a step takes whole prompts FCFS while they fit its room, and always at least one."""
    rng = np.random.default_rng(seed)
    arrive = arrivals(rng, rate_per_s, n, cv2)
    steady_until = arrive[int((1 - warmup / 2) * n) - 1]
    pick = rng.integers(0, len(inputs), size=n)
    left = inputs[pick].astype(float)
    first, done = np.full(n, np.nan), np.full(n, np.nan)
    waiting: deque[int] = deque()
    finish_at: dict[int, list[int]] = defaultdict(list)
    t, step, nxt, running, prefilling = 0.0, 0, 0, 0, 0
    itl, weight, batches = [], [], []
    while nxt < n or waiting or running:
        while nxt < n and arrive[nxt] <= t:
            waiting.append(nxt)
            nxt += 1
        if not waiting and not running:
            t = arrive[nxt]
            continue
        room, cost, started = budget - running, 0.0, []
        for r in list(waiting):
            if room <= 0 and not (whole and not started):
                break
            if left[r] == inputs[pick[r]] and running + prefilling >= slots:
                break   # no slot to start a new prompt
            if whole and left[r] > room and started:
                break   # a whole prompt that does not fit waits for the next step
            if left[r] == inputs[pick[r]]:
                prefilling += 1
            take = left[r] if whole else min(room, left[r])
            left[r] -= take
            room -= take
            cost += take * token_cost_s[pick[r]]
            started.append(r)
        dt = step_s(max(running, 1)) + cost
        if running and t <= steady_until:   # the drain after the last arrivals is no steady state
            itl.append(dt)
            weight.append(running)
            batches.append(running)
        t += dt
        step += 1
        for r in finish_at.pop(step, []):
            done[r] = t
            running -= 1
        for r in started:
            if left[r] == 0:
                waiting.remove(r)
                prefilling -= 1
                first[r] = t
                rest = int(outputs[pick[r]]) - 1
                if rest == 0:
                    done[r] = t
                else:
                    running += 1
                    finish_at[step + rest].append(r)
    keep = slice(int(warmup * n), int((1 - warmup / 2) * n))   # no warm-up from empty, no drain at the end
    ttft = (first - arrive)[keep]
    e2e = (done - arrive)[keep]
    o = outputs[pick][keep]
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(o > 1, (done - first)[keep] / (o - 1), np.nan)
    cut = int(warmup * len(itl))
    return Simulated(ttft_s=ttft, tpot_s=tpot[np.isfinite(tpot)], e2e_s=e2e, itl_s=np.array(itl[cut:]),
                     itl_weight=np.array(weight[cut:], dtype=float),
                     batch_mean=float(np.average(batches[cut:], weights=itl[cut:])))


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
