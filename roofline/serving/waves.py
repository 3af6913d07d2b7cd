"""Lock-step waves: the prefill of a wave of prompts that arrive together (docs/theory.md §6).

A closed-loop benchmark of B clients with exact lengths and EOS ignored (``bench_serving --max-concurrency B
--random-range-ratio 1``) on a scheduler that runs waiting prompts before any decode step keeps its requests in
waves: all B end on the same step, and the next B arrive together and wait for one another's prefill. Such
schedulers: SGLang's and SGLang-JAX's ``get_next_batch_to_run`` ("Run prefill first if possible",
python/sglang/srt/managers/scheduler.py; mixed chunks off by default), ROCm ATOM's at 2f713064 (a prefill batch
whenever a prompt waits: https://github.com/ROCm/ATOM/blob/2f7130649/atom/model_engine/scheduler.py), vLLM's V0
engine without chunked prefill (its default scheduler runs prefills before decodes).

How a prefill step is filled is the scheduler's: SGLang cuts the next prompt to the budget left
(``PrefillAdder.add_one_req``: ``trunc_len = self.rem_chunk_tokens``), so every step but the last carries the whole
token budget T_b; ATOM and vLLM V0 take whole prompts while they fit (``if num_batched_tokens + num_new_tokens >
max_num_batched_tokens: break``), k = floor(T_b / ISL) a step. Prompt j (1..B) then gets its first token when step
s_j = ceil(j / p) ends, p = k whole prompts or T_b / ISL packed ones a step.
"""

from __future__ import annotations

import math
from typing import Any

import attrs
import numpy as np
from numpy.typing import NDArray

from ..physics.stages import prefill
from ..physics.timing import StageResult
from ..specs.groups import DeviceGroup
from ..specs.models import ModelSpec
from ..workload import Array


@attrs.frozen(kw_only=True)
class Wave:
    """A wave's prefill: one full step (its stage), the wave's prefill time W and its prompts' mean first token."""

    step: StageResult
    time_s: Array
    ttft_s: Array
    fits: NDArray[np.bool_]
    prompts_per_step: float


def wave_prefill(model: ModelSpec, group: DeviceGroup, *, prompt_tokens: int, batch: Array, budget_tokens: int,
                 whole: bool, kw: dict[str, Any]) -> Wave:
    """The prefill of ``batch`` prompts of ``prompt_tokens`` arriving at once, in steps of ``budget_tokens``:
    whole prompts a step (``whole``) or the budget filled with the next prompt cut to fit (module docstring).
    With n steps of time T and a last of time T_n, W = (n - 1) T + T_n and the mean TTFT is
    (T sum_{s_j < n} s_j + W #{s_j = n}) / B: about W / 2, where a staggered arrival waits for one prompt's
    prefill. A step whose prompts' activations do not fit runs one prompt a step instead (as a static batch falls
    back to). Counted exactly per batch; the tests replay a wave step by step."""
    isl, per_step = prompt_tokens, _prompts_per_step(prompt_tokens, budget_tokens, whole)
    step = _step(model, group, isl, per_step, budget_tokens, kw)
    if per_step > 1 and not np.all(step.fits):
        per_step, whole = 1.0, True
        step = _step(model, group, isl, per_step, budget_tokens, kw)
    n, below, in_last = _counts(batch, per_step)
    if whole:
        last_s = prefill(model, group, prompt=isl, batch=np.maximum(in_last, 1.0), **kw).time_s
    else:   # the last step carries what is left of the wave's tokens
        left = batch * isl - (n - 1) * per_step * isl
        last_s = step.time_s * left / (per_step * isl)
    wave_s = (n - 1) * step.time_s + last_s
    ttft_s = (step.time_s * below + wave_s * in_last) / batch
    return Wave(step=step, time_s=wave_s, ttft_s=ttft_s, fits=np.broadcast_to(step.fits, np.shape(batch)).copy(),
                prompts_per_step=per_step)


def _prompts_per_step(isl: int, budget: int, whole: bool) -> float:
    """Prompts a prefill step holds: whole ones (at least one, the engine admitting a longer prompt alone) or
    the budget's share of one prompt (below 1 when a prompt spans several steps)."""
    return float(max(1, budget // isl)) if whole else budget / isl


def _step(model: ModelSpec, group: DeviceGroup, isl: int, per_step: float, budget: int,
          kw: dict[str, Any]) -> StageResult:
    """One full prefill step: ``per_step`` prompts in one pass (a packed step's fraction of a prompt interpolated
    between the whole counts either side), or one chunk of a prompt longer than a step (its chunked prefill's time
    over its chunks)."""
    if per_step >= 1:
        lo, hi = math.floor(per_step), math.ceil(per_step)
        upper = prefill(model, group, prompt=isl, batch=hi, **kw)
        if hi == lo:
            return upper
        lower = prefill(model, group, prompt=isl, batch=lo, **kw)
        return attrs.evolve(upper, time_s=lower.time_s + (per_step - lo) * (upper.time_s - lower.time_s))
    whole = prefill(model, group, prompt=isl, batch=1, chunk=budget, **kw)
    return attrs.evolve(whole, time_s=whole.time_s / math.ceil(isl / budget))


def _counts(batch: Array, per_step: float) -> tuple[Array, Array, Array]:
    """(steps n, sum of s_j over the prompts done before the last step, prompts done in the last) for each batch:
    s_j = ceil(j / per_step), counted exactly for every distinct batch."""
    b = np.rint(np.asarray(batch, dtype=float))
    n, below, in_last = (np.empty(b.shape) for _ in range(3))
    for value in np.unique(b):
        s = np.ceil(np.arange(1.0, value + 1.0) / per_step - 1e-9)
        at = b == value
        n[at], below[at], in_last[at] = s[-1], s[s < s[-1]].sum(), np.count_nonzero(s == s[-1])
    return n, below, in_last
