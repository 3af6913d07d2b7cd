"""Fit the engine's global parameters to published measurements (scipy least squares).

Few, physical parameters (:class:`roofline.params.EngineParams`): achieved
fractions of peak bandwidth and FLOP/s, the token count at which matmuls reach
half their peak efficiency, fixed costs per pass and per layer, the fixed cost
of a collective, and the dequantisation work per weight element of weight-only
formats. The efficiency and fixed-cost parameters are fitted per serving-stack
family (gpt-fast against TensorRT-LLM/NIM: their kernels and schedulers
differ); the rest are shared. Residuals are log(predicted / measured), so a row
2x too fast weighs as much as one 2x too slow. The fit reports each parameter
with its standard error (Jacobian at the optimum) and, on request, the
leave-one-out error: each row predicted by a fit that never saw it.
"""

from __future__ import annotations

import math
import re
import tomllib
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from .errors import RooflineError, SpecError
from .files import read_text
from .params import DEFAULT_PARAMS, EngineParams
from .validate import Row, predict_row

#: name -> (lower bound, upper bound, scale used inside the optimiser). The bounds are the physical ranges
#: of theory.md: a pass costs 20 us to 2 ms of fixed time (0.05-0.3 ms with CUDA graphs, >= 1 ms without), a
#: layer at most 20 us of kernel boundaries, a collective 2-20 us (NCCL small-message latency); they keep the
#: fit from turning a fixed cost into a catch-all for what the model misses.
BOUNDS: dict[str, tuple[float, float, float]] = {
    "memory_bandwidth_fraction": (0.3, 1.0, 1.0),
    "compute_fraction": (0.2, 1.0, 1.0),
    "compute_half_tokens": (0.0, 2048.0, 100.0),
    "low_precision_compute_scale": (0.3, 1.0, 1.0),
    "step_overhead_s": (20e-6, 2e-3, 1e-4),
    "layer_overhead_s": (0.0, 20e-6, 1e-5),
    "collective_base_s": (2e-6, 20e-6, 1e-5),
    "dequant_ops_per_element": (0.0, 64.0, 10.0),
}
PER_FAMILY = ("memory_bandwidth_fraction", "compute_fraction", "step_overhead_s", "layer_overhead_s", "collective_base_s")
SHARED = tuple(k for k in BOUNDS if k not in PER_FAMILY)


def stack_family(stack: str) -> str:
    """The serving-stack family of a row's ``stack`` column (gpt-fast, tensorrt-llm, or other)."""
    s = stack.lower()
    if "gpt-fast" in s:
        return "gpt-fast"
    if re.search(r"tensorrt|trt-llm|nim", s):
        return "tensorrt-llm"
    return "other"


@attrs.frozen(kw_only=True)
class Profile:
    """Engine parameters: a default set and, optionally, one per serving-stack family."""

    default: EngineParams = DEFAULT_PARAMS
    families: dict[str, EngineParams] = attrs.field(factory=dict)

    def for_stack(self, stack: str) -> EngineParams:
        return self.families.get(stack_family(stack), self.default)


@attrs.frozen(kw_only=True)
class Fit:
    profile: Profile
    standard_errors: dict[str, dict[str, float]]
    rows: list[str]
    skipped: list[dict[str, str]]
    median_abs_error: float
    loo_median_abs_error: float | None
    loo_errors: dict[str, float] | None


class _Layout:
    def __init__(self, families: list[str]) -> None:
        self.families = families
        self.keys: list[tuple[str, str]] = [("*", k) for k in SHARED] + [(f, k) for f in families for k in PER_FAMILY]

    def x0(self, base: EngineParams) -> np.ndarray:
        return np.array([getattr(base, k) / BOUNDS[k][2] for _f, k in self.keys])

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        return (np.array([BOUNDS[k][0] / BOUNDS[k][2] for _f, k in self.keys]),
                np.array([BOUNDS[k][1] / BOUNDS[k][2] for _f, k in self.keys]))

    def params(self, base: EngineParams, x: np.ndarray) -> dict[str, EngineParams]:
        shared = {k: float(np.clip(v * BOUNDS[k][2], BOUNDS[k][0], BOUNDS[k][1]))
                  for (f, k), v in zip(self.keys, x) if f == "*"}
        out = {}
        for fam in self.families:
            own = {k: float(np.clip(v * BOUNDS[k][2], BOUNDS[k][0], BOUNDS[k][1]))
                   for (f, k), v in zip(self.keys, x) if f == fam}
            out[fam] = attrs.evolve(base, **shared, **own)
        return out


def _usable(rows: list[Row], base: EngineParams) -> tuple[list[Row], list[dict[str, str]]]:
    ok, skipped = [], []
    for r in rows:
        try:
            measured = float(r.get("value"))
            if not (math.isfinite(measured) and measured > 0):
                raise RooflineError("measured value is not a positive number")
            predict_row(r, base)
            ok.append(r)
        except (RooflineError, ValueError) as e:
            skipped.append({"id": r.id, "reason": str(e)})
    return ok, skipped


def _family(layout: _Layout, row: Row) -> str:
    return layout.families[0] if layout.families == ["all"] else stack_family(row.get("stack"))


def _residuals(x: np.ndarray, rows: list[Row], base: EngineParams, layout: _Layout) -> np.ndarray:
    per = layout.params(base, x)
    out = []
    for r in rows:
        try:
            out.append(math.log(predict_row(r, per[_family(layout, r)]) / float(r.get("value"))))
        except RooflineError:
            out.append(3.0)  # a parameter set that makes a row infeasible is heavily penalised
    return np.array(out)


def _solve(rows: list[Row], base: EngineParams, layout: _Layout) -> Any:
    from scipy.optimize import least_squares
    lo, hi = layout.bounds()
    return least_squares(_residuals, np.clip(layout.x0(base), lo, hi), bounds=(lo, hi),
                         args=(rows, base, layout), x_scale="jac", diff_step=1e-3, max_nfev=300)


def calibrate(rows: list[Row], base: EngineParams | None = None, *, leave_one_out: bool = False) -> Fit:
    """Fit shared and per-stack-family parameters to ``rows`` (log residuals, scipy least squares)."""
    base = base or EngineParams()
    ok, skipped = _usable(rows, base)
    families = sorted({stack_family(r.get("stack")) for r in ok})
    layout = _Layout(families)
    if len(ok) <= len(layout.keys):
        raise RooflineError(f"calibration needs more than {len(layout.keys)} usable rows, got {len(ok)}")
    res = _solve(ok, base, layout)
    dof = max(1, len(ok) - len(layout.keys))
    s2 = float(np.sum(res.fun**2)) / dof
    cov = np.linalg.pinv(res.jac.T @ res.jac) * s2
    se: dict[str, dict[str, float]] = {}
    for i, (fam, k) in enumerate(layout.keys):
        se.setdefault(fam, {})[k] = float(math.sqrt(max(cov[i, i], 0.0)) * BOUNDS[k][2])
    per = layout.params(base, res.x)
    # the default, for any other stack and for the stage commands: one parameter set fitted to all rows
    pooled = _Layout(["all"])
    pooled_fit = _solve(ok, base, pooled)
    default = pooled.params(base, pooled_fit.x)["all"]
    pooled_cov = np.linalg.pinv(pooled_fit.jac.T @ pooled_fit.jac) * float(np.sum(pooled_fit.fun**2)) / max(
        1, len(ok) - len(pooled.keys))
    se["default"] = {k: float(math.sqrt(max(pooled_cov[i, i], 0.0)) * BOUNDS[k][2])
                     for i, (_f, k) in enumerate(pooled.keys)}
    errs = np.abs(np.expm1(res.fun))
    loo = None
    if leave_one_out:
        loo = {}
        for i, r in enumerate(ok):
            fit_i = _solve(ok[:i] + ok[i + 1:], base, layout)
            p_i = layout.params(base, fit_i.x)[_family(layout, r)]
            loo[r.id] = float(predict_row(r, p_i) / float(r.get("value")) - 1)
    return Fit(profile=Profile(default=default, families=per), standard_errors=se, rows=[r.id for r in ok],
               skipped=skipped, median_abs_error=float(np.median(errs)),
               loo_median_abs_error=float(np.median(np.abs(list(loo.values())))) if loo else None, loo_errors=loo)


def _params_toml(p: EngineParams, se: dict[str, float] | None = None) -> list[str]:
    out = []
    for a in attrs.fields(EngineParams):
        v = getattr(p, a.name)
        note = f"  # +/- {se[a.name]:.3g}" if se and a.name in se else ""
        out.append(f"{a.name} = {v!r}{note}")
    return out


def write_profile(fit: Fit, path: str | Path, *, data: str) -> None:
    """A TOML profile every command accepts with ``--profile``."""
    shared_se = fit.standard_errors.get("*", {})
    lines = ["# roofline calibration profile, written by `roofline calibrate`.",
             "# [params]: one set fitted to all rows, the default for any stack and for the stage commands;",
             "# [stacks.<family>]: a serving-stack family's own efficiencies and fixed costs.", "",
             "[params]", *_params_toml(fit.profile.default, fit.standard_errors.get("default", {}))]
    for fam, p in fit.profile.families.items():
        lines += ["", f'[stacks."{fam}"]', *_params_toml(p, {**shared_se, **fit.standard_errors.get(fam, {})})]
    lines += ["", "[fit]", f'data = "{data}"', f"rows = {len(fit.rows)}",
              f"median_abs_error = {fit.median_abs_error:.4f}"]
    if fit.loo_median_abs_error is not None:
        lines.append(f"loo_median_abs_error = {fit.loo_median_abs_error:.4f}")
    try:
        Path(path).write_text("\n".join(lines) + "\n")
    except OSError as e:
        raise RooflineError(f"cannot write {path}: {e.strerror}") from None


def _params_from(table: Any, where: str) -> EngineParams:
    if not isinstance(table, dict) or not table:
        raise SpecError(f"{where}: missing or empty table")
    names = {a.name for a in attrs.fields(EngineParams)}
    for k, v in table.items():
        if k not in names:
            raise SpecError(f"{where}: field {k!r} is not an engine parameter ({', '.join(sorted(names))})")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise SpecError(f"{where}: field {k!r} = {v!r}: not a finite number")
    try:
        return EngineParams(**{k: float(v) for k, v in table.items()})
    except (ValueError, TypeError) as e:
        raise SpecError(f"{where}: {e}") from None


def load_profile(path: str | Path) -> Profile:
    """A :class:`Profile` from a TOML file; unknown or out-of-range values raise :class:`SpecError`."""
    p = Path(path)
    try:
        data = tomllib.loads(read_text(p, what="a calibration profile (.toml)", max_bytes=1_000_000))
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{p}: not a profile TOML: {e}") from None
    default = _params_from(data.get("params"), f"{p} [params]")
    stacks = data.get("stacks", {})
    if not isinstance(stacks, dict):
        raise SpecError(f"{p}: [stacks] must be a table of tables")
    return Profile(default=default, families={k: _params_from(v, f"{p} [stacks.{k}]") for k, v in stacks.items()})


def shipped_profile_path() -> Path:
    from importlib import resources
    return Path(str(resources.files("roofline"))) / "profiles" / "default.toml"


def shipped_profile() -> Profile:
    """The calibration the package ships (reproduced by ``roofline calibrate --out roofline/profiles/default.toml``)."""
    path = shipped_profile_path()
    return load_profile(path) if path.exists() else Profile()
