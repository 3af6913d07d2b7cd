"""Pareto frontiers of throughput per kW against interactivity, their comparison, and elasticities.

The frontier (docs/theory.md §6; the axes of SemiAnalysis' InferenceMAX serving benchmarks):
keep the feasible points; sort by interactivity
(tokens/s per user) descending; keep each point whose tokens/s per kW beats
every point more interactive than it. Two frontiers are compared by linear
interpolation along each: the interactivity one reaches at a given tokens/s
per kW (and the tokens/s per kW at a given interactivity).
"""

from __future__ import annotations

import attrs
import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..errors import WorkloadError

Array = NDArray[np.float64]


@attrs.frozen(kw_only=True)
class Frontier:
    """Frontier points sorted by interactivity descending (so tokens/s per kW ascends)."""

    interactivity: Array          # tokens/s per user
    throughput_per_kw: Array      # tokens/s per kW
    index: NDArray[np.int_]       # flat indices into the swept arrays

    def __len__(self) -> int:
        return int(self.interactivity.size)

    def interactivity_at(self, throughput_per_kw: ArrayLike) -> Array:
        """Best interactivity reachable at (at least) this tokens/s per kW; NaN beyond the frontier."""
        y = np.asarray(throughput_per_kw, dtype=float)
        ys, xs = self.throughput_per_kw, self.interactivity
        inside = (y >= ys.min()) & (y <= ys.max()) if len(self) else np.zeros(y.shape, bool)
        val = np.interp(y, ys, xs) if len(self) > 1 else np.where(y == ys[0], xs[0], np.nan) if len(self) else y * np.nan
        below = y < (ys.min() if len(self) else np.inf)
        return np.where(inside, val, np.where(below & (len(self) > 0), xs[0] if len(self) else np.nan, np.nan))

    def throughput_per_kw_at(self, interactivity: ArrayLike) -> Array:
        """Best tokens/s per kW at (at least) this interactivity; NaN beyond the frontier."""
        x = np.asarray(interactivity, dtype=float)
        xs, ys = self.interactivity[::-1], self.throughput_per_kw[::-1]
        if not len(self):
            return x * np.nan
        inside = (x >= xs.min()) & (x <= xs.max())
        val = np.interp(x, xs, ys)
        below = x < xs.min()
        return np.where(inside, val, np.where(below, ys[0], np.nan))


def pareto_frontier(interactivity: ArrayLike, throughput_per_kw: ArrayLike,
                    feasible: ArrayLike | None = None) -> Frontier:
    """Non-dominated points (higher is better on both axes), NaN and infeasible points dropped."""
    x = np.ravel(np.asarray(interactivity, dtype=float))
    y = np.ravel(np.asarray(throughput_per_kw, dtype=float))
    if x.shape != y.shape:
        raise WorkloadError("interactivity and throughput_per_kw must have the same shape")
    ok = np.isfinite(x) & np.isfinite(y)
    if feasible is not None:
        ok &= np.ravel(np.asarray(feasible, dtype=bool))
    idx = np.flatnonzero(ok)
    order = idx[np.lexsort((-y[idx], -x[idx]))]  # x descending, ties: y descending
    keep, best = [], -np.inf
    for i in order:
        if y[i] > best:
            keep.append(i)
            best = y[i]
    k = np.array(keep, dtype=int)
    return Frontier(interactivity=x[k], throughput_per_kw=y[k], index=k)


@attrs.frozen(kw_only=True)
class FrontierComparison:
    """``candidate`` against ``baseline`` at equal tokens/s per kW and at equal interactivity.

    ``interactivity_ratio`` = candidate / baseline interactivity at each level of
    ``throughput_per_kw`` the two frontiers share. Two named points:
    interactivity-optimised, at the tokens/s per kW of the baseline's most
    interactive point; energy-optimised, at the baseline's highest tokens/s per
    kW (``energy_optimised_throughput_per_kw``), NaN when the candidate cannot
    reach that efficiency at all. ``max_ratio`` is the best ratio on the shared range.
    """

    throughput_per_kw: Array
    interactivity_ratio: Array
    interactivity: Array
    throughput_per_kw_ratio: Array
    interactivity_optimised: float
    energy_optimised: float
    energy_optimised_throughput_per_kw: float
    max_ratio: float


def compare_frontiers(baseline: Frontier, candidate: Frontier, points: int = 50) -> FrontierComparison:
    if not len(baseline) or not len(candidate):
        raise WorkloadError("both frontiers need at least one feasible point")
    lo = max(baseline.throughput_per_kw.min(), candidate.throughput_per_kw.min())
    hi = min(baseline.throughput_per_kw.max(), candidate.throughput_per_kw.max())
    ys = np.linspace(lo, hi, points) if hi > lo else np.array([lo])
    ratio = candidate.interactivity_at(ys) / baseline.interactivity_at(ys)
    xlo = max(baseline.interactivity.min(), candidate.interactivity.min())
    xhi = min(baseline.interactivity.max(), candidate.interactivity.max())
    xs = np.linspace(xlo, xhi, points) if xhi > xlo else np.array([xlo])
    yratio = candidate.throughput_per_kw_at(xs) / baseline.throughput_per_kw_at(xs)

    def at(y: float) -> float:
        return float(candidate.interactivity_at(y) / baseline.interactivity_at(y))

    return FrontierComparison(
        throughput_per_kw=ys, interactivity_ratio=ratio, interactivity=xs, throughput_per_kw_ratio=yratio,
        interactivity_optimised=at(float(baseline.throughput_per_kw[0])),
        energy_optimised=at(float(baseline.throughput_per_kw[-1])),
        energy_optimised_throughput_per_kw=float(baseline.throughput_per_kw[-1]),
        max_ratio=float(np.nanmax(ratio)) if np.any(np.isfinite(ratio)) else float("nan"))
