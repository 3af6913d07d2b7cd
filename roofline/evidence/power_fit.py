"""The GPU family's busy-power floors, fitted by grid search on measured power rows (``power_w``) and checked on
the energy-per-token rows, which the fit does not use."""

from __future__ import annotations

import math
from collections.abc import Mapping

import attrs
import numpy as np

from ..errors import RooflineError
from ..specs.execution import resolve_profile
from ..specs.params import Profile
from ..specs.resolve import resolve_device
from .fit_space import row_family
from .row_labels import ENERGY_METRICS
from .validate import Row, predict_row, row_params
from .workers import Workers, check_jobs
from .workers import workers as workers_for

#: The GPU busy floors fitted on measured power (the other power fields are measured on our H200, gpu.toml), each
#: with the grid it is searched on: the bandwidth-bound floor from our H200's graph-replayed batch-1 decode step
#: (0.57 of TDP, h200_microbench.json run 5) to TDP, the communication floor from 0 (idle) to TDP.
POWER_GRIDS: dict[str, np.ndarray] = {
    "busy_floor_fraction": np.round(np.arange(0.57, 1.0001, 0.01), 2),
    "communication_floor_fraction": np.round(np.arange(0.0, 1.0001, 0.01), 2)}


@attrs.frozen(kw_only=True)
class PowerFit:
    """The GPU family's busy floors fitted on measured power rows, and how they predict every energy row (the
    J-per-token rows are not used by the fit: they check it). ``held_out_rows``: with ``holdout``, each row's
    error under floors fitted on the folds without it."""

    floors: dict[str, float]               # POWER_GRIDS field -> fitted value
    fitted_rows: dict[str, float]          # power row id -> error at the fitted floors
    checked_rows: dict[str, float]         # energy-per-token row id -> error at the fitted floors
    median_abs_error_before: float         # power rows with no floor (the linear utilisation model alone)
    holdout: str | None = None             # "hardware" or "model": what the held-out folds group by
    held_out_rows: dict[str, float] = attrs.field(factory=dict)   # every energy row id -> held-out error

    @property
    def floor_fraction(self) -> float:
        """The bandwidth-bound floor (``busy_floor_fraction``)."""
        return self.floors["busy_floor_fraction"]


def _what_if(floors: Mapping[str, float]) -> dict[str, float]:
    return {f"execution.{k}": float(v) for k, v in floors.items()}


def _energy_errors(rows: list[Row], profile: Profile, floors: Mapping[str, float]) -> dict[str, float]:
    out = {}
    for r in rows:
        try:
            p = predict_row(r, row_params(profile, r), _what_if(floors))
        except RooflineError:
            continue
        out[r.id] = p / float(r.get("value")) - 1
    return out


def _floor_costs(points: list[dict[str, float]], rows: list[Row], profile: Profile) -> list[float]:
    """The power rows' summed squared log error at each set of busy floors (inf where none can be predicted)."""
    out = []
    for floors in points:
        errs = np.array(list(_energy_errors(rows, profile, floors).values()))
        out.append(float(np.sum(np.log1p(errs) ** 2)) if errs.size else math.inf)
    return out


NO_FLOOR = {"busy_floor_fraction": 0.0, "compute_floor_fraction": 0.0, "communication_floor_fraction": 0.0,
            "fixed_floor_fraction": 0.0}


def _search_floors(power: list[Row], profile: Profile, workers: Workers | None) -> dict[str, float]:
    """Coordinate search on :data:`POWER_GRIDS`: each floor in turn is set to its grid's least-cost point (every
    fifth point, then the points around the best), until neither moves."""
    start = resolve_profile(resolve_device("h100-sxm"))
    best = {k: float(getattr(start, k)) for k in POWER_GRIDS}

    def costs(points: list[dict[str, float]]) -> list[float]:
        return (_floor_costs(points, power, profile) if workers is None
                else workers.map_rows(_floor_costs, points, power, profile))

    for _ in range(6):
        before = dict(best)
        for name, grid in POWER_GRIDS.items():
            coarse = [float(v) for v in grid[::5]]
            c = costs([{**best, name: v} for v in coarse])
            i = int(np.searchsorted(grid, coarse[int(np.argmin(c))]))
            fine = [float(v) for v in grid[max(i - 4, 0):i + 5]]
            c = costs([{**best, name: v} for v in fine])
            best[name] = fine[int(np.argmin(c))]
        if best == before:
            break
    return best


def _fold_key(row: Row, holdout: str | None) -> str:
    return row.get("hardware") if holdout == "hardware" else row.get("model")


def fit_power_floor(rows: list[Row], profile: Profile, jobs: int = 1, holdout: str | None = None) -> PowerFit:
    """Fit the gpu family's busy floors (:data:`POWER_GRIDS`) to the measured ``power_w`` rows of GPUs.

    Busy power is idle + (TDP - idle) x utilisation, never below a floor set by what bounds each part of the
    step (:func:`roofline.physics.energy.busy_floor_w`): fixed costs at idle, the compute-bound floor and the
    share of compute time that reaches it measured on our H200 (gpu.toml); the bandwidth-bound and the
    communication floors are fitted here, on grids of 0.01 within physical bounds, to minimise the power rows'
    squared log error (time parameters fixed at ``profile``). J-per-token rows are then predicted as a check.
    ``holdout`` ("hardware" or "model") refits without each group of rows in turn and predicts that group's
    power and J-per-token rows (the rows are one publication's: ML.ENERGY's). ``jobs`` > 1 shares each grid
    among that many processes (the same numbers).
    """
    check_jobs(jobs)
    if holdout not in (None, "hardware", "model"):
        raise RooflineError(f"holdout must be 'hardware' or 'model', got {holdout!r}")
    gpu = [r for r in rows if row_family(r) == "gpu"]
    power = [r for r in gpu if r.get("metric") == "power_w"]
    energy = [r for r in gpu if r.get("metric") == "energy_per_token_j"]
    if not power:
        raise RooflineError("no measured GPU power rows (metric power_w) to fit the busy floor on")
    held: dict[str, float] = {}
    with workers_for(jobs) as workers:
        best = _search_floors(power, profile, workers)
        for key in sorted({_fold_key(r, holdout) for r in power}) if holdout else ():
            floors = _search_floors([r for r in power if _fold_key(r, holdout) != key], profile, workers)
            held.update(_energy_errors([r for r in gpu if _fold_key(r, holdout) == key and r.get("metric") in
                                        ENERGY_METRICS], profile, floors))
    fitted = _energy_errors(power, profile, best)
    checked = _energy_errors(energy, profile, best)
    before = np.abs(list(_energy_errors(power, profile, NO_FLOOR).values()))
    return PowerFit(floors=best, fitted_rows=fitted, checked_rows=checked,
                    median_abs_error_before=float(np.median(before)), holdout=holdout, held_out_rows=held)
