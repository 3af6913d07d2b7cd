"""The result of a stage (:class:`StageResult`) and how results of several passes combine: passes in sequence
(:func:`combine`: chunked prefill, draft steps), the mean pass of a stream (:func:`mix`) and the first ``count``
of a run of passes (:func:`accumulate`); what one device computes, moves and holds is kept factored
(:class:`PassFootprint` and its kin) until read. :mod:`roofline.physics.timing` makes the results of single passes.
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar

import attrs
import numpy as np
from numpy.typing import NDArray

from ..errors import InfeasibleError, WorkloadError
from ..records import ArrayRecord
from ..specs.formats import Formats
from ..units import format_quantity
from .memory import Residency
from .work import Work, add

Array = NDArray[np.float64]
ON_INFEASIBLE = ("auto", "raise", "nan")


@attrs.frozen(kw_only=True, eq=False)
class PassFootprint:
    """What one device computes, moves and holds in one pass, kept in factored (small) arrays until read."""

    work: Work
    flop_scale: Any = 1.0          # FLOP per device = work.flop_total x flop_scale
    small_bytes: Any = 0.0         # weights + activations + KV writes per device (batch-shaped)
    kv_read_scale: Any = 0.0       # bytes per device += work.kv_read_bytes x kv_read_scale
    bytes_scale: Any = 1.0         # microbatches: weights are re-read for each
    residency: Residency

    def flop(self, zero: Array) -> Array:
        return self.work.flop_total * self.flop_scale

    def bytes_moved(self, zero: Array) -> Array:
        return add(self.small_bytes, self.work.kv_read_bytes * self.kv_read_scale) * self.bytes_scale

    def kv_held(self) -> Array:
        return self.residency.kv_bytes()

    def memory_held(self) -> Array:
        return self.residency.total_bytes()


@attrs.frozen(kw_only=True, eq=False)
class StagesFootprint:
    """The footprint of a stage made of several passes (chunked prefill, gamma draft steps: boolean masks say
    where each runs) or of the mean pass of a stream (shares: the fraction of passes of each kind): work is
    the mask- or share-weighted sum over the passes; memory held is the peak over those that run."""

    parts: tuple[StageResult, ...]
    masks: tuple[Any, ...]

    def _total(self, name: str, zero: Array) -> Array:
        return sum((np.asarray(m, dtype=float) * finite(getattr(r, name))
                    for r, m in zip(self.parts, self.masks)), zero)

    def _peak(self, name: str) -> Array:
        return np.maximum.reduce([np.where(np.asarray(m) > 0, getattr(r, name), 0.0)
                                  for r, m in zip(self.parts, self.masks)])

    def flop(self, zero: Array) -> Array:
        return self._total("flop_per_device", zero)

    def bytes_moved(self, zero: Array) -> Array:
        return self._total("bytes_per_device", zero)

    def kv_held(self) -> Array:
        return self._peak("kv_per_device_bytes")

    def memory_held(self) -> Array:
        return self._peak("memory_per_device_bytes")


def spread(x: Any, shape: tuple[int, ...]) -> NDArray[Any]:
    """``np.broadcast_to(x, shape)``: a read-only view of ``x`` at ``shape``, without broadcast_to's cost where
    ``x`` already has that shape (most points a serving evaluation builds are one number)."""
    a = np.asarray(x)
    if a.shape != shape:
        return np.broadcast_to(a, shape)
    view = a.view()
    view.flags.writeable = False
    return view


def finite(x: Any) -> Array:
    """``x`` as floats with NaN (a point that does not fit) as 0 and infinities as the largest finite float, as
    ``np.nan_to_num`` gives, without its cost where every value is finite already (the common case); for
    arithmetic only: the answer may be ``x`` itself."""
    a = np.asarray(x, dtype=float)
    return a if np.isfinite(a).all() else np.nan_to_num(a)


def prefix_sum(values: list[Any], count: Array, *, op: Any = np.add, initial: float = 0.0) -> Array:
    """``op``-accumulation of the first ``count`` of ``values`` at every point: values[0] op ... op values[count-1]
    (``initial`` where count is 0). ``values`` share a shape without the count axis; the result has count's shape
    broadcast with it, so memory stays O(steps x points without the count axis + points)."""
    base = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in values))
    acc = op.accumulate(np.stack([np.full_like(base[0], initial), *base]), axis=0)
    idx = np.asarray(count, dtype=np.intp)
    shape = np.broadcast_shapes(acc.shape[1:], idx.shape)
    acc = acc.reshape((acc.shape[0],) + (1,) * (len(shape) - acc.ndim + 1) + acc.shape[1:])
    full = np.broadcast_to(acc, (acc.shape[0], *shape))
    return np.take_along_axis(full, np.broadcast_to(idx, shape)[None], axis=0)[0]


@attrs.frozen(kw_only=True, eq=False)
class PrefixFootprint:
    """The footprint of the first ``count`` of a run of passes (gamma draft steps): work adds up, memory
    held is the peak over the steps that ran."""

    parts: tuple[StageResult, ...]
    count: Any

    def flop(self, zero: Array) -> Array:
        return prefix_sum([r.flop_per_device for r in self.parts], self.count)

    def bytes_moved(self, zero: Array) -> Array:
        return prefix_sum([r.bytes_per_device for r in self.parts], self.count)

    def kv_held(self) -> Array:
        return prefix_sum([r.kv_per_device_bytes for r in self.parts], self.count, op=np.maximum)

    def memory_held(self) -> Array:
        return prefix_sum([r.memory_per_device_bytes for r in self.parts], self.count, op=np.maximum)


@attrs.frozen(kw_only=True, repr=False)
class StageResult(ArrayRecord):
    """Time, bounds and memory of one stage; every numeric field broadcasts with the workload.

    Times are seconds for the whole stage (for ``draft``, all gamma steps).
    ``bound`` names the largest term: ``compute``, ``memory:<tier>``,
    ``communication`` or ``overhead`` (with ``kernel_overlap``, the terms of the
    matmuls' and the attention kernels' rooflines: matmul compute, weight and
    activation traffic, attention compute, KV traffic). Per-device quantities are for one device
    of the group. Infeasible points have ``fits`` False and NaN ``time_s`` and
    ``time_serial_s``; the component times there are what the pass would take
    if it fitted. Fields are read-only arrays of the broadcast workload shape.
    """

    headline: ClassVar[tuple[str, ...]] = ("time_s", "batch", "context", "compute_s", "memory_s", "communication_s",
                                           "overhead_s", "bound", "fits")
    workload: ClassVar[tuple[str, ...]] = ("batch", "context", "new_tokens")

    stage: str
    model_id: str
    group: str
    formats: Formats
    batch: Array
    new_tokens: Array
    context: Array
    time_s: Array
    compute_s: Array
    memory_s: Array
    memory_serial_s: Array
    memory_by_tier_s: dict[str, Array]
    communication_s: Array
    overhead_s: Array
    #: of compute_s and memory_s, the attention kernels' compute and the KV cache's traffic; a family that
    #: overlaps per kernel (``kernel_overlap``) times them as their own roofline beside the matmuls'
    attention_compute_s: Array
    kv_memory_s: Array
    kernel_overlap: bool
    #: unpacking weight-only formats on the vector units, in the weight stream: the matmuls' memory term is the
    #: longer of their weight traffic and this (0 where every format is multiplied natively)
    dequant_s: Array
    ridge_flop_per_byte: float
    weights_per_device_bytes: Array
    usable_per_device_bytes: float
    fits: NDArray[np.bool_]
    #: passes of the stage (prompt chunks of a chunked prefill): the largest over the workload when it varies
    passes: int = 1
    footprint: PassFootprint | StagesFootprint | PrefixFootprint = attrs.field(eq=False, repr=False)
    #: the execution family whose profile timed this stage, its busy power floor (fraction of TDP) and the
    #: shares of the idle-to-TDP range its saturated compute and memory draw (:mod:`roofline.physics.energy`)
    family: str = "gpu"
    busy_floor_fraction: float = 0.0
    compute_power_weight: float = 0.5
    memory_power_weight: float = 0.5

    def _full(self, value: Any) -> Array:
        return spread(np.asarray(value, dtype=float), self.time_s.shape)

    @functools.cached_property
    def time_serial_s(self) -> Array:
        """Upper bound: compute + memory from every tier in turn + communication + fixed (NaN where infeasible)."""
        t = self._full(add(self.compute_s, self.communication_s, self.overhead_s, self.memory_serial_s,
                           self.dequant_s))
        return t if self.fits.all() else np.where(self.fits, t, np.nan)

    @functools.cached_property
    def flop_per_device(self) -> Array:
        """FLOP one device executes in the stage."""
        return self._full(self.footprint.flop(np.zeros(self.time_s.shape)))

    @functools.cached_property
    def bytes_per_device(self) -> Array:
        """Bytes one device moves from memory in the stage."""
        return self._full(self.footprint.bytes_moved(np.zeros(self.time_s.shape)))

    @functools.cached_property
    def kv_per_device_bytes(self) -> Array:
        """KV cache held by one device."""
        return self._full(self.footprint.kv_held())

    @functools.cached_property
    def memory_per_device_bytes(self) -> Array:
        """Weights + KV + workspace held by one device."""
        return self._full(self.footprint.memory_held())

    def why_infeasible(self) -> str:
        """Why the first point that does not fit does not ("" where every point fits): the bytes it needs per device
        against those usable, as :class:`ServingResult.why_infeasible <roofline.serving.serve.ServingResult>` says."""
        try:
            require_feasible(self)
        except InfeasibleError as e:
            return str(e)
        return ""

    @functools.cached_property
    def bound(self) -> NDArray[np.str_]:
        """The largest term per point: ``compute``, ``memory:<tier>``, ``communication``, ``overhead``
        (``does not fit`` where the point is infeasible); computed on first use, not in sweeps that skip it."""
        tiers = list(self.memory_by_tier_s)
        if self.kernel_overlap:   # the largest term of the two kernel groups' rooflines (matmuls, attention)
            terms = [self.compute_s - self.attention_compute_s, self.memory_s - self.kv_memory_s,
                     self.attention_compute_s, self.kv_memory_s, self.communication_s, self.overhead_s,
                     self.dequant_s]
            labels = np.array(["compute", "memory", "compute", "memory", "communication", "overhead", "dequant"],
                              dtype=object)
        else:
            terms = [self.compute_s, *self.memory_by_tier_s.values(), self.communication_s, self.overhead_s,
                     self.dequant_s]
            labels = np.array(["compute", *(f"memory:{t}" for t in tiers), "communication", "overhead", "dequant"])
        best = np.nan_to_num(np.asarray(terms[0], dtype=float), nan=-1.0)
        code = np.zeros(best.shape, dtype=np.int8)
        for i, t in enumerate(terms[1:], start=1):
            t = np.asarray(t, dtype=float)
            bigger = t > best
            code = np.where(bigger, i, code)
            best = np.where(bigger, t, best)
        named = labels[code]
        if self.kernel_overlap:   # a memory term is named by the tier whose traffic takes longest at that point
            named = np.where(named == "memory", self._slowest_tier(), named)
        return np.where(self.fits, named, "does not fit").astype(str)

    def _slowest_tier(self) -> NDArray[np.str_]:
        """Per point, ``memory:<tier>`` of the tier whose traffic time is the largest (the first where none)."""
        tiers = list(self.memory_by_tier_s)
        if len(tiers) <= 1:
            return np.full(np.shape(self.fits), f"memory:{tiers[0] if tiers else 'memory'}", dtype=object)
        times = np.stack([np.broadcast_to(np.asarray(v, dtype=float), np.shape(self.fits))
                          for v in self.memory_by_tier_s.values()])
        names = np.array([f"memory:{t}" for t in tiers], dtype=object)
        return names[np.argmax(np.nan_to_num(times, nan=-1.0), axis=0)]

    @property
    def intensity_flop_per_byte(self) -> Array:
        f, b = np.asarray(self.flop_per_device, dtype=float), np.asarray(self.bytes_per_device, dtype=float)
        return np.divide(f, b, out=np.zeros(np.broadcast_shapes(f.shape, b.shape)), where=b > 0)

    @property
    def tokens_per_s(self) -> Array:
        """Tokens processed per second by the whole batch (batch * new tokens / time)."""
        return self.batch * self.new_tokens / self.time_s

    @property
    def per_sequence_tokens_per_s(self) -> Array:
        """Tokens per second one sequence sees in this stage (new tokens / time)."""
        return self.new_tokens / self.time_s

    @property
    def tokens_per_s_per_user(self) -> Array:
        """:attr:`per_sequence_tokens_per_s` under the name serving, speculative and sweep results use."""
        return self.per_sequence_tokens_per_s


def combine(results: list[StageResult], masks: list[Any], *, stage: str) -> StageResult:
    """Sum sequential passes (chunked prefill, gamma draft steps); ``masks`` say where each pass happens
    (booleans) or how many times (numbers: :func:`mix` passes shares).

    The overlapped time is the sum of each pass's overlapped time: kernels do not overlap across passes.
    """
    first = results[0]
    shape = np.broadcast_shapes(*(r.time_s.shape for r in results), *(np.shape(m) for m in masks))
    zero = np.zeros(shape)
    weights = [np.asarray(m, dtype=float) for m in masks]

    def total(name: str) -> Array:
        return sum((w * finite(getattr(r, name)) for r, w in zip(results, weights)), zero)

    fits = np.all([np.where(w > 0, r.fits, True) for r, w in zip(results, weights)], axis=0)
    tiers = sorted({t for r in results for t in r.memory_by_tier_s})   # sorted: key order never depends on hashing
    by_tier = {t: sum((w * finite(r.memory_by_tier_s.get(t, zero)) for r, w in zip(results, weights)), zero)
               for t in tiers}
    return attrs.evolve(
        first, stage=stage, batch=spread(first.batch, shape), context=spread(first.context, shape),
        new_tokens=total("new_tokens"), time_s=np.where(fits, total("time_s"), np.nan),
        compute_s=total("compute_s"), memory_s=total("memory_s"), memory_serial_s=total("memory_serial_s"),
        memory_by_tier_s=by_tier, communication_s=total("communication_s"), overhead_s=total("overhead_s"),
        attention_compute_s=total("attention_compute_s"), kv_memory_s=total("kv_memory_s"),
        dequant_s=total("dequant_s"), weights_per_device_bytes=spread(first.weights_per_device_bytes, shape),
        fits=spread(fits, shape), passes=len(results),
        footprint=StagesFootprint(parts=tuple(results), masks=tuple(masks)))


def mix(results: list[StageResult], shares: list[Any], *, stage: str) -> StageResult:
    """The mean pass of a stream in which a share ``shares[i]`` of the passes are ``results[i]`` (shares sum
    to 1 at every point): every time term is the share-weighted mean, so the mean of each kind's overlapped
    time, not the overlap of the means (a prefill chunk's compute cannot hide under another step's memory
    time). Used for continuous batching with chunked prefill: most steps decode only, a share also carry a
    chunk (Sarathi-Serve, Agrawal et al. OSDI 2024, https://arxiv.org/abs/2403.02310; docs/theory.md §6).
    """
    return attrs.evolve(combine(results, shares, stage=stage), passes=1)


def check_feasible(r: StageResult, on_infeasible: str, scalar: bool) -> StageResult:
    """Apply the ``on_infeasible`` policy: ``nan`` marks, ``raise`` raises, ``auto`` raises for scalar calls."""
    if on_infeasible not in ON_INFEASIBLE:
        raise WorkloadError(f"on_infeasible must be 'auto', 'raise' or 'nan', got {on_infeasible!r}")
    if r.fits.all() or on_infeasible == "nan" or (on_infeasible == "auto" and not scalar):
        return r
    return require_feasible(r)


def require_feasible(r: StageResult) -> StageResult:
    """Return ``r`` if every point fits, else raise :class:`InfeasibleError` describing the first that does not."""
    if np.all(r.fits):
        return r
    i = np.unravel_index(np.argmin(r.fits), r.fits.shape) if r.fits.ndim else ()
    need = float(np.asarray(r.memory_per_device_bytes)[i])
    weights, kv = float(np.asarray(r.weights_per_device_bytes)[i]), float(np.asarray(r.kv_per_device_bytes)[i])
    raise InfeasibleError(
        f"{r.model_id} does not fit on {r.group} for {r.stage}: needs {format_quantity(need, 'bytes')} per device "
        f"(weights {format_quantity(weights, 'bytes')}, KV {format_quantity(kv, 'bytes')}, activations and "
        f"workspace {format_quantity(max(need - weights - kv, 0.0), 'bytes')}) but "
        f"{format_quantity(r.usable_per_device_bytes, 'bytes')} is usable; use more devices (a larger group, "
        f"DEVICE:N), a smaller format, or a smaller batch/context")


def accumulate(steps: list[StageResult], count: Any, *, stage: str) -> StageResult:
    """The first ``count`` of a run of passes, summed (``count`` broadcasts: a gamma axis).

    The passes are evaluated without the count axis (draft step i does not depend on how many steps
    follow), so a batch x gamma grid costs O(batch x gamma) memory, not O(batch x gamma^2).
    """
    first = steps[0]
    count = np.asarray(count, dtype=float)

    def total(name: str) -> Array:
        return prefix_sum([finite(getattr(r, name)) for r in steps], count)

    fits = prefix_sum([r.fits.astype(float) for r in steps], count, op=np.minimum, initial=1.0) > 0.5
    tiers = sorted({t for r in steps for t in r.memory_by_tier_s})
    zero = np.zeros(first.time_s.shape)
    shape = fits.shape
    return attrs.evolve(
        first, stage=stage, batch=np.broadcast_to(first.batch, shape), context=np.broadcast_to(first.context, shape),
        new_tokens=np.broadcast_to(count, shape), time_s=np.where(fits, total("time_s"), np.nan),
        compute_s=total("compute_s"), memory_s=total("memory_s"), memory_serial_s=total("memory_serial_s"),
        memory_by_tier_s={t: prefix_sum([finite(r.memory_by_tier_s.get(t, zero)) for r in steps], count)
                          for t in tiers},
        communication_s=total("communication_s"), overhead_s=total("overhead_s"),
        attention_compute_s=total("attention_compute_s"), kv_memory_s=total("kv_memory_s"),
        dequant_s=total("dequant_s"), weights_per_device_bytes=np.broadcast_to(first.weights_per_device_bytes, shape), fits=fits,
        passes=len(steps), footprint=PrefixFootprint(parts=tuple(steps), count=count))
