"""Design sweeps of any size: evaluate the grid in chunks, keep each chunk's Pareto frontier, merge.

The grid is every device group x batch x context (decode steps). Each chunk is reduced to its
non-dominated points over the chosen objectives; the frontier of a union is the frontier of the union of
the parts' frontiers (a point dominated inside its chunk is dominated in the whole grid, and a point
non-dominated in the whole grid is non-dominated in its chunk), so memory holds one chunk plus the running
frontier whatever the grid's size. Chunks run on any :class:`concurrent.futures.Executor`: none (this
process), a ``ProcessPoolExecutor`` on one machine, or a Dask cluster's ``Client.get_executor()`` across
many; we write no scheduling of our own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Executor, Future
from typing import Any

import attrs
import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..errors import RooflineError, WorkloadError
from ..physics.energy import DEFAULT_POWER, PowerModel, group_busy_w
from ..physics.stages import decode_step
from ..records import frame, plain
from ..specs.formats import check_format_keys
from ..specs.groups import DeviceGroup
from ..specs.models import ModelSpec
from ..specs.params import EngineParams
from ..specs.prices import Prices, shipped_prices
from ..workload import check_count, check_instance, check_items
from .sizing import device_formats

Array = NDArray[np.float64]
#: Objectives a sweep can trade off, and whether more (+1) or less (-1) is better.
OBJECTIVES = {"tokens_per_s_per_user": 1, "tokens_per_s": 1, "tokens_per_s_per_device": 1,
              "tokens_per_s_per_kw": 1, "usd_per_million_output_tokens": -1, "energy_per_token_j": -1,
              "time_s": -1, "context": 1, "batch": 1}
#: Futures in flight at once: enough to keep any pool busy, few enough to bound the parent's memory.
IN_FLIGHT = 64


def pareto_mask(values: ArrayLike) -> NDArray[np.bool_]:
    """Non-dominated rows of ``values`` (n points x k objectives, larger is better on every column).

    A row is dropped when another row is at least as good on every objective (of exact duplicates the first
    stays). Two objectives: one sort and a running maximum, O(n log n); more: each candidate, best first by
    the first objective, is checked against the points kept so far.
    """
    v = np.asarray(values, dtype=float)
    if v.ndim != 2:
        raise WorkloadError("pareto_mask needs an (n points x k objectives) array")
    keep = np.zeros(len(v), dtype=bool)
    if not len(v):
        return keep
    order = np.lexsort(tuple(-v[:, j] for j in reversed(range(v.shape[1]))))   # first objective descending
    if v.shape[1] == 1:
        keep[order[0]] = True
        return keep
    if v.shape[1] == 2:
        y = v[order, 1]
        prev = np.maximum.accumulate(np.concatenate(([-np.inf], y[:-1])))
        keep[order[y > prev]] = True
        return keep
    kept: list[int] = []
    for i in order:
        if not kept or not np.any(np.all(v[kept] >= v[i], axis=1)):
            kept.append(int(i))
    keep[kept] = True
    return keep


@attrs.frozen(kw_only=True)
class SweepResult:
    """The Pareto frontier of a sweep: one entry per frontier point, and what the sweep covered."""

    objective: tuple[str, ...]
    groups: tuple[str, ...]                 # group names; ``group_index`` points into them
    group_index: NDArray[np.int_]
    batch: Array
    context: Array
    metrics: Mapping[str, Array]            # every OBJECTIVES metric at the frontier points
    points: int                             # design points evaluated
    infeasible: int                         # of them, points that do not fit (or have no price/power)
    chunks: int

    def __len__(self) -> int:
        return int(self.batch.size)

    @property
    def group(self) -> list[str]:
        return [self.groups[i] for i in self.group_index]

    def to_dict(self) -> dict[str, Any]:
        return plain({"objective": list(self.objective), "points": self.points, "infeasible": self.infeasible,
                      "chunks": self.chunks, "frontier": [
                          {"group": self.groups[g], "batch": b, "context": c,
                           **{k: self.metrics[k][i] for k in self.metrics}}
                          for i, (g, b, c) in enumerate(zip(self.group_index, self.batch, self.context))]})

    def to_frame(self) -> Any:
        """A ``pandas.DataFrame`` of the frontier: one row per point (group, batch, context and every metric)."""
        return frame({"group": np.array(self.group, dtype=object), "batch": self.batch, "context": self.context,
                      **self.metrics})

    def __repr__(self) -> str:
        return (f"SweepResult({len(self)} frontier points of {self.points:,} ({self.infeasible:,} infeasible), "
                f"objective={self.objective})")


@attrs.frozen(kw_only=True)
class _Task:
    """One chunk: flat indices [start, stop) of one group's batch x context grid."""

    model: ModelSpec
    group: DeviceGroup
    group_index: int
    batch: Array
    context: Array
    start: int
    stop: int
    objective: tuple[str, ...]
    formats: Mapping[str, Any]
    params: EngineParams | None
    prices: Prices
    power: PowerModel


def _metrics(t: _Task, B: Array, L: Array) -> dict[str, Array]:
    r = decode_step(t.model, t.group, batch=B, context=L, params=t.params, on_infeasible="nan", **t.formats)
    tokens = r.tokens_per_s
    out = {"tokens_per_s_per_user": r.per_sequence_tokens_per_s, "tokens_per_s": tokens,
           "tokens_per_s_per_device": tokens / t.group.count, "time_s": r.time_s, "context": L, "batch": B}
    usd = t.group.count * t.prices.usd_per_hour(t.group.device.id)
    out["usd_per_million_output_tokens"] = usd / 3600 / tokens * 1e6
    try:
        watts = group_busy_w(t.group, r, t.power) * t.power.pue
    except RooflineError:                      # no power figure: energy objectives are NaN (infeasible)
        watts = np.full(B.shape, np.nan)
    out["tokens_per_s_per_kw"] = tokens / (watts / 1000)
    out["energy_per_token_j"] = watts / tokens
    return {k: np.broadcast_to(np.asarray(v, dtype=float), B.shape) for k, v in out.items()}


def _chunk_frontier(t: _Task) -> tuple[dict[str, Array], int]:
    """Evaluate one chunk and return its frontier (with batch, context, group) and the points evaluated."""
    flat = np.arange(t.start, t.stop)
    bi, ci = np.divmod(flat, t.context.size)
    B, L = t.batch[bi], t.context[ci]
    m = _metrics(t, B, L)
    v = np.stack([OBJECTIVES[k] * m[k] for k in t.objective], axis=1)
    ok = np.all(np.isfinite(v), axis=1)
    idx = np.flatnonzero(ok)[pareto_mask(v[ok])]
    out = {k: a[idx] for k, a in m.items()}
    out["group_index"] = np.full(idx.size, t.group_index, dtype=float)
    return out, int(flat.size - ok.sum())


def _merge(front: dict[str, Array] | None, part: dict[str, Array], objective: Sequence[str]) -> dict[str, Array]:
    both = part if front is None else {k: np.concatenate([front[k], part[k]]) for k in part}
    keep = pareto_mask(np.stack([OBJECTIVES[k] * both[k] for k in objective], axis=1))
    return {k: a[keep] for k, a in both.items()}


def _tasks(model: ModelSpec, groups: Sequence[DeviceGroup], batch: Array, context: Array, chunk: int,
           **common: Any) -> Iterator[_Task]:
    for gi, g in enumerate(groups):
        n = batch.size * context.size
        for start in range(0, n, chunk):
            yield _Task(model=model, group=g, group_index=gi, batch=batch, context=context, start=start,
                        stop=min(n, start + chunk), formats=device_formats(g.device, common["formats"]),
                        **{k: v for k, v in common.items() if k != "formats"})


def _run(tasks: Iterator[_Task], executor: Executor | None) -> Iterator[tuple[dict[str, Array], int]]:
    if executor is None:
        yield from map(_chunk_frontier, tasks)
        return
    pending: list[Future] = []
    for t in tasks:
        pending.append(_executor_call(lambda: executor.submit(_chunk_frontier, t)))
        if len(pending) >= IN_FLIGHT:
            first = pending.pop(0)
            yield _executor_call(lambda: first.result())
    for f in pending:
        yield _executor_call(lambda: f.result())  # noqa: B023 (called at once)


def _executor_call(call: Callable[[], Any]) -> Any:
    """``call()`` on the caller's executor: our own errors pass as they are, the executor's (a broken process
    pool, a submit that fails, a future that is none) become a :class:`WorkloadError` naming the argument."""
    try:
        return call()
    except RooflineError:
        raise
    except Exception as e:
        raise WorkloadError(f"executor: {type(e).__name__}: {e}") from e


def sweep(model: ModelSpec, devices: Sequence[DeviceGroup] | DeviceGroup, *, batch: ArrayLike, context: ArrayLike,
          objective: Sequence[str] = ("tokens_per_s_per_user", "tokens_per_s_per_kw"),
          executor: Executor | None = None, chunk: int = 200_000, formats: Mapping[str, Any] | None = None,
          params: EngineParams | None = None, prices: Prices | None = None,
          power: PowerModel = DEFAULT_POWER, progress: Callable[[int, int], None] | None = None) -> SweepResult:
    """Decode steps over every group in ``devices`` x ``batch`` x ``context``, reduced to the Pareto frontier
    of ``objective`` (names from :data:`OBJECTIVES`; costs and energies count as lower-is-better).

    Points that do not fit, or lack a price or power figure an objective needs, are counted as infeasible and
    left out. Formats default per device as every command's do (:meth:`~roofline.specs.formats.Formats.for_model`).
    ``executor``: any ``concurrent.futures.Executor`` (chunks are pickled to it); None runs here.
    ``progress(done, total)`` is called after each chunk (e.g. to advance a ``rich.progress`` bar).
    """
    if executor is not None and not callable(getattr(executor, "submit", None)):
        raise WorkloadError(f"executor must be a concurrent.futures.Executor (a ProcessPoolExecutor, a Dask client's "
                            f"get_executor()) or None, got {executor!r}")
    if progress is not None and not callable(progress):
        raise WorkloadError(f"progress must be a callable progress(done, total) or None, got {progress!r}")
    obj = tuple(check_items("objective", objective))
    check_instance("params", params, EngineParams)
    check_instance("prices", prices, Prices)
    check_instance("power", power, PowerModel, optional=False)
    unknown = [k for k in obj if not isinstance(k, str) or k not in OBJECTIVES]
    if not obj or unknown or len(set(obj)) != len(obj):
        raise WorkloadError(f"objective must name distinct metrics among {', '.join(OBJECTIVES)}; got {list(obj)}")
    if isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer)) or chunk < 1:
        raise WorkloadError(f"chunk must be a whole number of points >= 1, got {chunk!r}")
    B = np.unique(np.ravel(check_count("batch", batch, minimum=1)).astype(float))
    L = np.unique(np.ravel(check_count("context", context)).astype(float))
    if not B.size or not L.size:
        raise WorkloadError("batch and context each need at least one value")
    m = check_instance("model", model, ModelSpec, optional=False)
    groups = [check_instance("devices", d, DeviceGroup, optional=False) for d in check_items("devices", devices,
                                                                                        (DeviceGroup,))]
    if not groups:
        raise WorkloadError("give at least one device group")
    common = dict(objective=obj, formats=check_format_keys(formats), params=params, power=power,
                  prices=prices if prices is not None else shipped_prices())
    front, infeasible, chunks = None, 0, 0
    total = len(groups) * -(-(B.size * L.size) // int(chunk))
    for part, bad in _run(_tasks(m, groups, B, L, int(chunk), **common), executor):
        front, infeasible, chunks = _merge(front, part, obj), infeasible + bad, chunks + 1
        if progress is not None:
            try:
                progress(chunks, total)
            except Exception as e:   # the caller's callback: say whose error it is
                raise WorkloadError(f"progress: the callback raised {type(e).__name__}: {e}") from e
    assert front is not None
    order = np.lexsort((-OBJECTIVES[obj[0]] * front[obj[0]],))
    return SweepResult(objective=obj, groups=tuple(g.shape for g in groups),
                       group_index=front["group_index"][order].astype(int), batch=front["batch"][order],
                       context=front["context"][order], metrics={k: front[k][order] for k in OBJECTIVES},
                       points=len(groups) * B.size * L.size, infeasible=infeasible, chunks=chunks)

