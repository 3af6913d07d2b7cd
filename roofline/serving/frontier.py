"""Pareto frontiers of efficiency against interactivity, and their comparison.

The frontier (docs/theory.md §6; the axes of SemiAnalysis' InferenceMAX serving benchmarks):
keep the feasible points; sort by interactivity
(tokens/s per user) descending; keep each point whose efficiency beats
every point more interactive than it. Two frontiers are compared by linear
interpolation along each: the interactivity one reaches at a given efficiency
(and the efficiency at a given interactivity).

*Efficiency* is what the caller trades interactivity against: tokens/s per kW (the default of
``roofline pareto``) or tokens per USD (``--axis usd``). The older names (``throughput_per_kw``,
``energy_optimised``) stay as aliases of the efficiency ones, whichever axis was given.
"""

from __future__ import annotations

import attrs
import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..errors import WorkloadError

Array = NDArray[np.float64]


@attrs.frozen(kw_only=True)
class Frontier:
    """Frontier points sorted by interactivity descending (so efficiency ascends)."""

    interactivity: Array          # tokens/s per user
    efficiency: Array             # tokens/s per kW, or tokens per USD: the axis the caller gave
    index: NDArray[np.int_]       # flat indices into the swept arrays

    def __len__(self) -> int:
        return int(self.interactivity.size)

    @property
    def throughput_per_kw(self) -> Array:
        """The older name of :attr:`efficiency` (tokens per USD where that was the axis given)."""
        return self.efficiency

    def interactivity_at(self, efficiency: ArrayLike) -> Array:
        """Best interactivity reachable at (at least) this efficiency; NaN beyond the frontier."""
        y = np.asarray(efficiency, dtype=float)
        ys, xs = self.efficiency, self.interactivity
        inside = (y >= ys.min()) & (y <= ys.max()) if len(self) else np.zeros(y.shape, bool)
        val = np.interp(y, ys, xs) if len(self) > 1 else np.where(y == ys[0], xs[0], np.nan) if len(self) else y * np.nan
        below = y < (ys.min() if len(self) else np.inf)
        return np.where(inside, val, np.where(below & (len(self) > 0), xs[0] if len(self) else np.nan, np.nan))

    def efficiency_at(self, interactivity: ArrayLike) -> Array:
        """Best efficiency at (at least) this interactivity; NaN beyond the frontier."""
        x = np.asarray(interactivity, dtype=float)
        xs, ys = self.interactivity[::-1], self.efficiency[::-1]
        if not len(self):
            return x * np.nan
        inside = (x >= xs.min()) & (x <= xs.max())
        val = np.interp(x, xs, ys)
        below = x < xs.min()
        return np.where(inside, val, np.where(below, ys[0], np.nan))

    #: The older name of :meth:`efficiency_at`.
    throughput_per_kw_at = efficiency_at


def pareto_frontier(interactivity: ArrayLike, efficiency: ArrayLike,
                    feasible: ArrayLike | None = None) -> Frontier:
    """Non-dominated points (higher is better on both axes), NaN and infeasible points dropped; ``efficiency``:
    tokens/s per kW, tokens per USD, or any figure where more is better."""
    x = np.ravel(np.asarray(interactivity, dtype=float))
    y = np.ravel(np.asarray(efficiency, dtype=float))
    if x.shape != y.shape:
        raise WorkloadError("interactivity and efficiency must have the same shape")
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
    return Frontier(interactivity=x[k], efficiency=y[k], index=k)


@attrs.frozen(kw_only=True)
class FrontierComparison:
    """``candidate`` against ``baseline`` at equal efficiency and at equal interactivity.

    ``interactivity_ratio`` = candidate / baseline interactivity at each level of
    ``efficiency`` the two frontiers share. Two named points:
    interactivity-optimised, at the efficiency of the baseline's most
    interactive point; efficiency-optimised (energy- or cost-optimised, by the axis), at the baseline's highest
    efficiency (``efficiency_optimised_at``), NaN when the candidate cannot
    reach that efficiency at all. ``max_ratio`` is the best ratio on the shared range.
    """

    efficiency: Array
    interactivity_ratio: Array
    interactivity: Array
    efficiency_ratio: Array
    interactivity_optimised: float
    efficiency_optimised: float
    efficiency_optimised_at: float
    max_ratio: float

    @property
    def energy_optimised(self) -> float:
        """The older name of :attr:`efficiency_optimised`."""
        return self.efficiency_optimised

    @property
    def energy_optimised_throughput_per_kw(self) -> float:
        """The older name of :attr:`efficiency_optimised_at`."""
        return self.efficiency_optimised_at

    @property
    def throughput_per_kw(self) -> Array:
        """The older name of :attr:`efficiency`."""
        return self.efficiency

    @property
    def throughput_per_kw_ratio(self) -> Array:
        """The older name of :attr:`efficiency_ratio`."""
        return self.efficiency_ratio


def compare_frontiers(baseline: Frontier, candidate: Frontier, points: int = 50) -> FrontierComparison:
    if not len(baseline) or not len(candidate):
        raise WorkloadError("both frontiers need at least one feasible point")
    lo = max(baseline.efficiency.min(), candidate.efficiency.min())
    hi = min(baseline.efficiency.max(), candidate.efficiency.max())
    ys = np.linspace(lo, hi, points) if hi > lo else np.array([lo])
    ratio = candidate.interactivity_at(ys) / baseline.interactivity_at(ys)
    xlo = max(baseline.interactivity.min(), candidate.interactivity.min())
    xhi = min(baseline.interactivity.max(), candidate.interactivity.max())
    xs = np.linspace(xlo, xhi, points) if xhi > xlo else np.array([xlo])
    yratio = candidate.efficiency_at(xs) / baseline.efficiency_at(xs)

    def at(y: float) -> float:
        return float(candidate.interactivity_at(y) / baseline.interactivity_at(y))

    return FrontierComparison(
        efficiency=ys, interactivity_ratio=ratio, interactivity=xs, efficiency_ratio=yratio,
        interactivity_optimised=at(float(baseline.efficiency[0])),
        efficiency_optimised=at(float(baseline.efficiency[-1])),
        efficiency_optimised_at=float(baseline.efficiency[-1]),
        max_ratio=float(np.nanmax(ratio)) if np.any(np.isfinite(ratio)) else float("nan"))
