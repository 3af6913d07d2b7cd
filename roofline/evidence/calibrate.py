"""Fit the engine's global parameters to published measurements (scipy least squares).

Few, physical parameters (:class:`roofline.specs.params.EngineParams`): achieved
fractions of peak bandwidth and FLOP/s and the share prefill keeps, fixed costs
per pass, per request and per running sequence (fitted per serving-stack family:
their kernels and schedulers differ; a ROCm build, one per ISA, also fits its own
fixed cost per kernel, and with few rows only that and its efficiencies), and
shared by all stacks the fixed cost per kernel (the CUDA stacks) and per
collective, the share of the scale-up link's bandwidth a tensor-parallel all-reduce achieves (identified by
the rows that sweep TP on one model; the all-to-all keeps the family file's link share), what FP8 and FP4
matmuls keep of the peak efficiency, and the vector ops that unpack one weight element of a weight-only
format (``dequant_ops_per_element``: hidden in the weight stream at small batches, paid once per 64-row slice
at large ones). Two parameters every fit left at a bound are fixed in the
GPU family file instead (hardware_specs/execution/gpu.toml): the small-matmul ramp (``compute_half_tokens`` 0)
and the share of a kernel's shorter compute or memory time hidden under the longer (``overlap_efficiency`` 0).
Residuals are log(predicted / measured), so a row 2x too fast weighs as much as one 2x too slow. The fit
reports each parameter with its standard error (Jacobian at the optimum) and, on
request, the held-out error: each row predicted by a fit that never saw it
(leave-one-out, or folds of whole publications). The loss is soft-L1 on the log
residuals, so a few rows the model cannot express do not pull every parameter. Only rows of grade A or B move the parameters
(:data:`FITTED_GRADES`); rows whose setup is partly assumed are predicted and reported beside them. With ``shrink`` > 0 the stack
families' own parameters are partially pooled (a hierarchical prior, :data:`SHRINK`): each is drawn toward a
mean over the families that the fit estimates too, so a parameter only a few rows of one family identify (the
rows of a publication held out, say) stays near what the other stacks have rather than wherever the rest of
that family's rows push it.
"""

from __future__ import annotations

import math
import random
from typing import Any

import attrs
import numpy as np

from ..errors import RooflineError
from ..specs.execution import family_profile
from ..specs.params import (
    NOT_IN_PROFILE_FILES,
    PLATFORM_OWN,
    EngineParams,
    Profile,
    family_chain,
    parent_family,
    platform_donors,
    with_platform_of,
)
from .fit_report import (
    UNIDENTIFIED,
    assessment,
    fit_record,
    profile_text,
    save_profile,
    stack_record,
    standard_error_record,
    uncertainty,
)
from .fit_space import (
    BOUNDS,
    EARLY_BUILDS,
    FITTED_GRADES,
    MIN_PLATFORM_ROWS,
    PER_FAMILY,
    PLATFORM_FULL,
    SHARED,
    Fit,
    bound_side,
    fitted_row,
    row_family,
)
from .layer_fit import SMALL_MODEL_PARAMS, LayerFit, fit_layer_overhead
from .power_fit import NO_FLOOR, POWER_GRIDS, PowerFit, fit_power_floor
from .row_labels import ENERGY_METRICS
from .validate import Row, predict_row, row_params, row_stack_family, shipped_data
from .workers import Workers, check_jobs
from .workers import workers as workers_for

#: The names this module held before the parameter space (:mod:`.fit_space`), the fit's report
#: (:mod:`.fit_report`) and the layer and power fits (:mod:`.layer_fit`, :mod:`.power_fit`) moved out; still
#: importable from here.
__all__ = [
    "BOUNDS", "DEQUANT_START", "EARLY_BUILDS", "FITTED_GRADES", "FOLD_BY", "F_SCALE", "MAX_LEVERAGE",
    "MIN_PLATFORM_ROWS", "NO_FLOOR", "PER_FAMILY", "PLATFORM_FULL", "PLATFORM_OWN", "POWER_GRIDS", "SHARED", "SHRINK",
    "SMALL_MODEL_PARAMS", "UNIDENTIFIED", "Fit", "LayerFit", "PowerFit", "approximate_loo", "assessment",
    "bound_side", "builds_left_out", "calibrate", "fit_layer_overhead", "fit_power_floor", "fit_record", "fitted_row",
    "heldout_fold", "profile_text", "row_family", "save_profile", "stack_record", "standard_error_record",
    "uncertainty",
]





class _Layout:
    """The fitted parameters: shared ones (``*``), each stack family's own (a platform build's kernel gap too),
    and for a platform build with few rows (``ties``) only PLATFORM_OWN, its other parameters tied to the
    nearest family it specialises."""

    def __init__(self, families: list[str], merged: dict[str, str] | None = None,
                 ties: dict[str, str] | None = None, shrink: float = 0.0) -> None:
        self.families = families
        self.merged = merged or {}   # platform family -> the family its rows fit with (too few rows)
        self.ties = ties or {}       # platform family fitting only PLATFORM_OWN -> the family it takes the rest from
        self.keys: list[tuple[str, str]] = [("*", k) for k in SHARED] + [
            (f, k) for f in families for k in self.own(f)]
        # partial pooling: the families' own PER_FAMILY parameters (platform builds tied to a family excepted)
        # each against a mean over the families (key set "~", which moves no row, only these prior terms)
        pooled = [(i, k) for i, (f, k) in enumerate(self.keys) if f != "*" and f not in self.ties and k in PER_FAMILY]
        means = sorted({k for _i, k in pooled}) if shrink > 0 and len(families) > 1 else []
        self.shrink = float(shrink) if means else 0.0
        self.keys += [("~", k) for k in means]
        at = {k: self.keys.index(("~", k)) for k in means}
        self.prior_pairs: list[tuple[int, int, float]] = [
            (i, at[k], BOUNDS[k][2] / (BOUNDS[k][1] - BOUNDS[k][0])) for i, k in pooled if k in at]

    def own(self, family: str) -> tuple[str, ...]:
        """The parameters ``family`` fits of its own."""
        if family in self.ties:
            return PLATFORM_OWN
        return PLATFORM_FULL if parent_family(family) else PER_FAMILY

    def fitted_as(self, family: str) -> str | None:
        """The parameter set a row of ``family`` is predicted with: its own, the one its rows merged into, or
        the nearest family it specialises; None when none is fitted (a held-out platform or stack)."""
        for f in family_chain(family):
            while f in self.merged:
                f = self.merged[f]
            if f in self.families:
                return f
        return None

    def x0(self, base: EngineParams) -> np.ndarray:
        return np.array([getattr(base, k) / BOUNDS[k][2] for _f, k in self.keys])

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        return (np.array([BOUNDS[k][0] / BOUNDS[k][2] for _f, k in self.keys]),
                np.array([BOUNDS[k][1] / BOUNDS[k][2] for _f, k in self.keys]))

    def params(self, base: EngineParams, x: np.ndarray) -> dict[str, EngineParams]:
        values: dict[str, dict[str, float]] = {}
        for (f, k), v in zip(self.keys, x):
            values.setdefault(f, {})[k] = float(np.clip(v * BOUNDS[k][2], BOUNDS[k][0], BOUNDS[k][1]))
        out = {}
        for fam in self.families:
            tied = values.get(self.ties[fam], {}) if fam in self.ties else {}
            fitted: dict[str, Any] = {**values.get("*", {}), **tied, **values.get(fam, {})}
            out[fam] = attrs.evolve(base, **fitted)
        return out

    def data_keys(self) -> list[tuple[int, str, str]]:
        """(index, set, name) of every parameter but the families' means ``~`` (which move no row)."""
        return [(i, f, k) for i, (f, k) in enumerate(self.keys) if f != "~"]

    def moved_by(self, key: str, family: str) -> bool:
        """Whether parameter set ``key`` moves a row of ``family`` (shared ones move all; the families' means
        ``~`` none: they enter only the prior terms)."""
        return key in ("*", family) or self.ties.get(family) == key

    def prior(self, x: np.ndarray) -> np.ndarray:
        """The partial-pooling terms, one per family parameter: ``shrink`` x its distance from the families'
        mean in units of the parameter's bound range (a Gaussian prior of standard deviation range / shrink
        around a mean the fit estimates, the random-effects model of Gelman and Hill, "Data Analysis Using
        Regression and Multilevel/Hierarchical Models", Cambridge 2007, ch. 12; in log-residual units: a
        family a whole range from the mean pays what one row ``shrink`` e-folds off pays)."""
        return np.array([self.shrink * (x[i] - x[m]) * scale for i, m, scale in self.prior_pairs])

    def prior_sparsity(self) -> np.ndarray:
        out = np.zeros((len(self.prior_pairs), len(self.keys)), dtype=bool)
        for j, (i, m, _scale) in enumerate(self.prior_pairs):
            out[j, i] = out[j, m] = True
        return out


def _usable(rows: list[Row], base: EngineParams) -> tuple[list[Row], list[dict[str, str]]]:
    ok, skipped = [], []
    for r in rows:
        try:
            measured = float(r.get("value"))
            if not (math.isfinite(measured) and measured > 0):
                raise RooflineError("measured value is not a positive number")
            if row_family(r) != "gpu":
                raise RooflineError(f"a {row_family(r)} row: that family's profile is fitted apart "
                                    f"(roofline calibrate --family {row_family(r)})")
            if r.get("metric") in ENERGY_METRICS:
                raise RooflineError("an energy row: the power model is fitted apart (roofline calibrate --energy)")
            if r.get("metric") in ("speedup", "decode_speedup") or r.get("batch") == "slo":
                raise RooflineError("a speedup or latency-bound row: `roofline validate` predicts it on the fit "
                                    "(kinds spec and load), the calibration neither fits nor counts it")
            predict_row(r, base)
            ok.append(r)
        except (RooflineError, ValueError) as e:
            skipped.append({"id": r.id, "reason": str(e)})
    return ok, skipped


def _family(layout: _Layout, row: Row) -> str:
    if layout.families == ["all"]:
        return "all"
    fam = layout.fitted_as(row_stack_family(row))
    if fam is None:
        raise RooflineError(f"{row.id}: no parameter set fitted for its stack {row.get('stack')!r}")
    return fam


def _stack_layout(rows: list[Row], shrink: float = 0.0) -> _Layout:
    """One parameter set per stack family present. A platform build (``sglang-rocm-gfx942``, :func:`family_chain`)
    with rows for each of PLATFORM_FULL twice over is a family of its own (its kernel gap included); with fewer
    it fits only PLATFORM_OWN and takes the rest from the nearest family it specialises that is fitted in full;
    with fewer than MIN_PLATFORM_ROWS it joins the family it specialises (deepest first, so two small ISA
    builds may make one ROCm build together; where no family above has rows of its own, the rows are fitted
    under that family's name: a stack measured only on AMD)."""
    counts: dict[str, int] = {}
    for r in rows:
        counts[row_stack_family(r)] = counts.get(row_stack_family(r), 0) + 1
    merged: dict[str, str] = {}
    for d in range(max((len(family_chain(f)) for f in counts), default=1), 1, -1):
        for fam in [f for f in counts if len(family_chain(f)) == d and counts[f] < MIN_PLATFORM_ROWS]:
            up = family_chain(fam)[1]
            counts[up] = counts.get(up, 0) + counts.pop(fam)
            merged[fam] = up
    ties: dict[str, str] = {}
    for fam in sorted(counts, key=lambda f: len(family_chain(f))):
        if parent_family(fam) and counts[fam] < 2 * len(PLATFORM_FULL):
            nearest = next((f for f in family_chain(fam)[1:] if f in counts and f not in ties), None)
            if nearest is not None:
                ties[fam] = nearest
    return _Layout(sorted(counts), merged, ties, shrink)


def _row_residuals(rows: list[Row], x: np.ndarray, base: EngineParams, layout: _Layout) -> list[float]:
    """Each row's log residual log(predicted / measured) under the parameters ``x``."""
    per = layout.params(base, x)
    out = []
    for r in rows:
        try:
            out.append(math.log(predict_row(r, per[_family(layout, r)]) / float(r.get("value"))))
        except RooflineError:
            out.append(3.0)  # a parameter set that makes a row infeasible is heavily penalised
    return out


def _residuals(x: np.ndarray, rows: list[Row], base: EngineParams, layout: _Layout,
               workers: Workers | None = None) -> np.ndarray:
    data = (_row_residuals(rows, x, base, layout) if workers is None
            else workers.map_rows(_row_residuals, rows, x, base, layout))
    return np.concatenate([data, layout.prior(x)])


def _sparsity(rows: list[Row], layout: _Layout) -> np.ndarray:
    """Which parameters move which rows: shared ones all rows, a stack family's only its own rows (so the
    finite-difference Jacobian perturbs the families' parameters together: a few evaluations, not dozens)."""
    fams = [_family(layout, r) for r in rows]
    rows_part = np.array([[layout.moved_by(f, fam) for f, _k in layout.keys] for fam in fams], dtype=bool)
    return np.vstack([rows_part, layout.prior_sparsity()])


def _solve(rows: list[Row], base: EngineParams, layout: _Layout, workers: Workers | None = None) -> Any:
    from scipy.optimize import least_squares
    lo, hi = layout.bounds()
    # soft-L1: residuals beyond ~25% weigh linearly, so a few rows the model cannot express (a mislabelled
    # setup, a kernel far off its roofline) do not drag every parameter toward them
    return least_squares(_residuals, np.clip(layout.x0(base), lo, hi), bounds=(lo, hi), jac_sparsity=_sparsity(
        rows, layout), args=(rows, base, layout, workers), x_scale="jac", diff_step=1e-3, max_nfev=60, loss="soft_l1",
        f_scale=F_SCALE, ftol=1e-4, xtol=1e-4)


#: The soft-L1 loss's scale (log residual where a row's weight starts to fall off): ~25%.
F_SCALE = 0.25
#: The partial pooling of the stack families' own parameters (:meth:`_Layout.prior`): the prior's standard
#: deviation is the parameter's bound range / SHRINK. 0: none (each family on its own rows alone). Not from a
#: source: chosen among 0, 1, 2 and 4 by refitting the held-out fold that holds InferenceMAX's runs (its held-out
#: median 21%, 17%, 15%, 14%; its training rows 6.1% to 6.6%; docs/validation.md), so the shipped held-out
#: figure is slightly optimistic for that fold.
SHRINK = 2.0
#: Rows at least this influential (leverage) are not estimated by one Newton step: without them the fit may lose
#: a parameter, which a local step cannot see (:func:`approximate_loo` gives them NaN).
MAX_LEVERAGE = 0.9
def approximate_loo(res: Any, f_scale: float = F_SCALE, n_rows: int | None = None) -> np.ndarray:
    """Each row's log residual under the fit without it, from the full fit ``res`` of scipy least squares with
    ``loss="soft_l1"`` and this ``f_scale`` (the formula below is that loss's; another loss needs its own),
    one Newton step per row: the approximate leave-one-out of Rahnama Rad and Maleki, "A scalable estimate of the
    out-of-sample prediction error via approximate leave-one-out cross-validation", J. R. Stat. Soc. B 82(4),
    965-996 (2020), https://doi.org/10.1111/rssb.12374 (https://arxiv.org/abs/1801.10243);
    for plain least squares it is the PRESS residual r / (1 - h) (Allen, Technometrics 16(1), 1974).

    Derivation (cost 1/2 sum rho(f_i^2), Gauss-Newton Hessian A = sum w_i J_i' J_i with w_i = rho' + 2 rho'' f_i^2,
    which scipy's ``res.jac`` carries row-scaled by sqrt(w_i)): dropping row i leaves the gradient -rho'_i f_i J_i',
    so the step is A_{-i}^{-1} rho'_i f_i J_i' and the row's residual becomes f_i (1 + rho'_i / w_i * h_i / (1 - h_i)),
    h_i the leverage of scaled row i (Sherman-Morrison). For soft-L1, rho'/w = 1 + (f/f_scale)^2. Parameters at
    a bound (``res.active_mask``) or that no row moves stay where they are (with every parameter so, the rows'
    in-sample residuals come back). Rows with leverage >= MAX_LEVERAGE get NaN. One step is exact for a linear
    model and overshoots where the fit is far from linear in a row's absence: a row with a large residual and
    high leverage may come out further off than an exact refit would put it. The test suite checks it against
    exact refits on a small problem; docs/validation.md on rows of the shipped data. With partial pooling
    (:meth:`_Layout.prior`) the prior terms follow the ``n_rows`` data rows in ``res``: they stay in the Hessian
    (no row's removal removes them) and only the data rows' estimates come back.
    """
    jac = _jacobian(res)
    free = (res.active_mask == 0) & (np.abs(jac).sum(axis=0) > 0)
    j = jac[:, free]
    a_inv = np.linalg.pinv(j.T @ j)
    h = np.einsum("ij,jk,ik->i", j, a_inv, j)
    f = np.asarray(res.fun, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = f * (1.0 + (1.0 + (f / f_scale) ** 2) * h / (1.0 - h))
    return np.where(h < MAX_LEVERAGE, out, np.nan)[:n_rows]


def _jacobian(res: Any) -> np.ndarray:
    return res.jac.toarray() if hasattr(res.jac, "toarray") else res.jac


def _data_jacobian(res: Any, layout: _Layout) -> np.ndarray:
    """The Jacobian's rows of the measurements (without the partial-pooling terms that follow them)."""
    jac = _jacobian(res)
    return jac[:jac.shape[0] - len(layout.prior_pairs)]


def _blind(res: Any, layout: _Layout) -> dict[str, set[str]]:
    """Per parameter set, the parameters no row responds to at the optimum (a zero column of the measurements'
    Jacobian: a prior term alone does not identify a parameter; the families' means ``~`` are left out)."""
    blind: dict[str, set[str]] = {}
    moves = np.abs(_data_jacobian(res, layout)).sum(axis=0) > 0
    for i, fam, k in layout.data_keys():
        if not moves[i]:
            blind.setdefault(fam, set()).add(k)
    return blind


def _standard_errors(res: Any, layout: _Layout, n_rows: int) -> dict[str, dict[str, float]]:
    """Standard error of each parameter from the Jacobian at the optimum (Gauss-Newton covariance); infinite
    for a parameter no row responds to (:func:`_blind`: not identified, pinv would give it 0). With partial
    pooling the covariance includes the prior terms (a posterior's), the residual variance only the ``n_rows``
    rows; the families' means are not reported."""
    s2 = float(np.sum(res.fun[:n_rows]**2)) / max(1, n_rows - len(layout.keys))
    jac = _jacobian(res)
    cov = np.linalg.pinv(jac.T @ jac) * s2
    blind = _blind(res, layout)
    se: dict[str, dict[str, float]] = {}
    for i, fam, k in layout.data_keys():
        se.setdefault(fam, {})[k] = (math.inf if k in blind.get(fam, set())
                                     else float(math.sqrt(max(cov[i, i], 0.0)) * BOUNDS[k][2]))
    return se


def calibrate(rows: list[Row], base: EngineParams | None = None, *, holdout: str | int | None = None,
              progress: Any = None, jobs: int = 1, fold_by: str = "source", shrink: float = SHRINK) -> Fit:
    """Fit shared and per-stack-family parameters to ``rows`` (log residuals, scipy least squares).

    ``holdout``: also predict rows with fits that never saw them: ``"loo"`` (one fit per row) or a number
    of folds, grouped by publication (``fold_by="source"``: every row of a source lands in the same fold, so
    no fit sees a sibling of the row it predicts) or of rows drawn at random (``"row"``, seed 0: leave-one-out
    approximated with as many fits as folds). ``progress(done, total, what)`` is called between fits.
    ``jobs`` > 1 evaluates every fit's rows in that many processes (:mod:`.workers`: the same numbers as one
    process, each fit about ``jobs`` times faster on as many cores). ``shrink``: the partial pooling of the stack
    families' own parameters (:meth:`_Layout.prior`; 0: each family on its own rows alone).
    """
    check_jobs(jobs)
    if isinstance(shrink, bool) or not isinstance(shrink, int | float) or not (math.isfinite(shrink) and shrink >= 0):
        raise RooflineError(f"shrink must be a finite number >= 0, got {shrink!r}")
    base = base or _gpu_base()
    ok, skipped = _usable(rows, base)
    fitted = [r for r in ok if fitted_row(r)]
    layout = _stack_layout(fitted, shrink)
    if len(fitted) <= len(layout.keys):
        raise RooflineError(f"calibration fits {len(layout.keys)} parameters (the shared ones and each stack "
                            f"family's), so it needs more than {len(layout.keys)} usable rows of grade "
                            f"{' or '.join(FITTED_GRADES)}; got {len(fitted)}. To fit runs of your own, add them to "
                            f"a copy of the shipped rows ({shipped_data()}) and calibrate on that")
    folds = _folds(ok, holdout, fold_by)
    total = 2 + len(folds)
    tick = progress or (lambda done, total, what: None)
    with workers_for(jobs) as workers:
        tick(0, total, "fitting per stack family")
        res = _solve(fitted, base, layout, workers)
        # the default, for any other stack and for the stage commands: one parameter set fitted to all rows
        tick(1, total, "fitting the pooled default")
        pooled = _Layout(["all"])
        pooled_fit = _solve(fitted, base, pooled, workers)
        held = _held_out(ok, folds, base, shrink=shrink, workers=workers,
                         tick=lambda i: tick(2 + i, total, f"held out: fold {i + 1} of {len(folds)}"))
    se = _standard_errors(res, layout, len(fitted))
    per = layout.params(base, res.x)
    default = pooled.params(base, pooled_fit.x)["all"]
    pooled_se = _standard_errors(pooled_fit, pooled, len(fitted))
    se["default"] = {**pooled_se.get("*", {}), **pooled_se.get("all", {})}
    unseen = _unseen_by_rows(_blind(res, layout), per, default, fitted, layout)
    per = _pool_blind(per, unseen, default, layout.ties)
    profile = Profile(default=default, families=per)
    # rows the fit only predicts are out of sample already: their error is their leave-one-out error too
    checked = {r.id: predict_row(r, row_params(profile, r)) / float(r.get("value")) - 1 for r in ok
               if not fitted_row(r)}
    in_sample = [*np.expm1(res.fun[:len(fitted)]), *checked.values()]
    loo = {**{r.id: float(e) for r, e in zip(fitted, np.expm1(approximate_loo(res, n_rows=len(fitted))))}, **checked}
    return Fit(profile=profile, standard_errors=se, rows=[r.id for r in ok], checked_rows=tuple(checked),
               skipped=skipped, median_abs_error=float(np.median(np.abs(in_sample))),
               loo_median_abs_error=float(np.median(np.abs(list(held.values())))) if held else None,
               loo_errors=held or None, holdout=_holdout_name(holdout, fold_by),
               heldout_unseen_builds=frozenset(builds_left_out(ok, folds)),
               approx_loo_errors={r.id: loo[r.id] for r in ok},
               builds=tuple(sorted({row_stack_family(r) for r in fitted})),
               pooled_params={f: frozenset(names) for f, names in unseen.items()}, shrink=layout.shrink)


def _unseen_by_rows(blind: dict[str, set[str]], per: dict[str, EngineParams], pooled: EngineParams,
                    rows: list[Row], layout: _Layout) -> dict[str, set[str]]:
    """Of the parameters no row responds to at the optimum (:func:`_blind`), those whose rows still do not
    respond at the pooled value. A zero Jacobian column can mean a cost hidden under a longer one (a host cost
    under the GPU's step): the rows then say "at most this much", and the pooled value, above it, would change
    them; such a parameter keeps its fitted value, so the profile predicts its rows as the fit did."""
    out: dict[str, set[str]] = {}
    for fam, names in blind.items():
        for k in sorted(names & set(PLATFORM_FULL)):
            trial = _pool_blind(per, {fam: {k}}, pooled, layout.ties)
            moved = {f for f in per if trial[f] != per[f]}
            hit = [r for r in rows if _family(layout, r) in moved]
            if all(_same(_prediction(r, per[_family(layout, r)]), _prediction(r, trial[_family(layout, r)]))
                   for r in hit):
                out.setdefault(fam, set()).add(k)
    return out


def _prediction(row: Row, params: EngineParams) -> float:
    try:
        return predict_row(row, params)
    except RooflineError:   # infeasible under these parameters
        return math.nan


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= 1e-9 * max(abs(a), abs(b))


def _pool_blind(per: dict[str, EngineParams], blind: dict[str, set[str]], pooled: EngineParams,
                ties: dict[str, str] | None = None) -> dict[str, EngineParams]:
    """Each stack family with the pooled fit's value for the parameters none of its rows responds to
    (``blind[family]``; a shared parameter blind for all rows stays): the optimiser leaves such a parameter
    where it started, which says nothing, so a stack without TTFT rows would otherwise answer TTFT with no
    request overhead at all. A platform build fitting only PLATFORM_OWN (``ties``) keeps the rest as the family
    it is tied to has them after pooling."""
    out = {}
    for fam, p in per.items():
        names = blind.get(fam, set()) & set(PLATFORM_FULL)
        out[fam] = attrs.evolve(p, **{k: getattr(pooled, k) for k in names}) if names else p
    for fam, up in (ties or {}).items():
        if fam in out and up in out:
            out[fam] = attrs.evolve(out[fam], **{k: getattr(out[up], k) for k in PER_FAMILY if k not in PLATFORM_OWN})
    return out


#: Where the fit starts the weight-unpacking ops per element: at 0 the unpacking hides under every row's weight
#: stream, so no row responds to a small step and the fit could not leave 0.
DEQUANT_START = 6.0


def _gpu_base() -> EngineParams:
    """Where a GPU calibration starts: the generic parameters, with the GPU family file's values for every field
    it does not fit (per-layer costs 0: kernel gaps are counted per kernel; the overlap share and the small-matmul
    ramp fixed at 0), unpacking at DEQUANT_START. The fitted fields start from the generic values, not from the
    shipped calibration, so a refit does not depend on the profile it replaces."""
    fam = family_profile("gpu").profile
    fixed = [a.name for a in attrs.fields(EngineParams) if a.name not in BOUNDS and a.name not in NOT_IN_PROFILE_FILES]
    return EngineParams(**{k: getattr(fam, k) for k in fixed}, dequant_ops_per_element=DEQUANT_START)


def _held_out(rows: list[Row], folds: list[set[str]], base: EngineParams, *, shrink: float,
              workers: Workers | None, tick: Any) -> dict[str, float]:
    """Each fold's rows predicted by a fit on the others (each fit's rows shared out among ``workers``)."""
    held: dict[str, float] = {}
    for i, fold in enumerate(folds):
        tick(i)
        held.update(_predict_fold(rows, fold, base, shrink, workers))
    return held


def heldout_fold(rows: list[Row], fold: int, folds: int, *, fold_by: str = "source", shrink: float = SHRINK,
                 jobs: int = 1, base: EngineParams | None = None) -> dict[str, float]:
    """The held-out errors of one fold (1-based) of ``calibrate(rows, holdout=folds, fold_by=fold_by)``: the
    fold's rows predicted by a fit on the others, the same numbers the full run gives for them, without its main
    fit and the other folds (one fit instead of ``folds`` + 2: how a change is tried on the fold it is for)."""
    if isinstance(fold, bool) or not isinstance(fold, int) or not 1 <= fold <= folds:
        raise RooflineError(f"fold must be a whole number in 1..{folds}, got {fold!r}")
    check_jobs(jobs)
    base = base or _gpu_base()
    ok, _skipped = _usable(rows, base)
    made = _folds(ok, folds, fold_by)
    if fold > len(made):
        raise RooflineError(f"the usable rows make only {len(made)} folds (one per publication at most), not {fold}")
    with workers_for(jobs) as workers:
        return _predict_fold(ok, made[fold - 1], base, shrink, workers)


def _holdout_name(holdout: str | int | None, fold_by: str = "source") -> str:
    return "" if holdout is None else "leave-one-out" if holdout == "loo" else f"{holdout}-fold by {fold_by}"


#: How held-out folds group rows: whole publications, rows drawn at random, whole device kinds or stack builds.
FOLD_BY = ("source", "row", "hardware", "stack")


def _folds(rows: list[Row], holdout: str | int | None, fold_by: str = "source") -> list[set[str]]:
    """Row ids per held-out fold: one per row; k folds of whole sources (or of whole device kinds,
    ``fold_by="hardware"``, or stack builds, ``"stack"``: hardware or a stack the fit never saw), largest first,
    each to the fold with the fewest rows so far; or k folds of rows shuffled with seed 0 (``fold_by="row"``)."""
    if fold_by not in FOLD_BY:
        raise RooflineError(f"folds group rows by {' or '.join(FOLD_BY)}, got {fold_by!r}")
    if holdout is None:
        return []
    if holdout == "loo":
        return [{r.id} for r in rows]
    if isinstance(holdout, bool) or not isinstance(holdout, int) or holdout < 2:
        raise RooflineError(f"holdout must be 'loo' or a number of folds >= 2, got {holdout!r}")
    if fold_by == "row":
        ids = [r.id for r in rows]
        random.Random(0).shuffle(ids)
        return [set(ids[i::holdout]) for i in range(min(holdout, len(ids)))]
    sources: dict[str, set[str]] = {}
    for r in rows:   # whole publications, device kinds or serving-stack builds
        key = r.get("source") if fold_by == "source" else r.get("hardware") if fold_by == "hardware" else \
            row_stack_family(r)
        sources.setdefault(key, set()).add(r.id)
    folds: list[set[str]] = [set() for _ in range(min(holdout, len(sources)))]
    for members in sorted(sources.values(), key=len, reverse=True):
        min(folds, key=len).update(members)
    return folds


def builds_left_out(rows: list[Row], folds: list[set[str]]) -> set[str]:
    """Ids of held-out rows whose stack build (:func:`row_stack_family`) no fitted row outside their fold has."""
    out: set[str] = set()
    for fold in folds:
        trained = {row_stack_family(r) for r in rows if r.id not in fold and fitted_row(r)}
        out |= {r.id for r in rows if r.id in fold and row_stack_family(r) not in trained}
    return out


def _predict_fold(rows: list[Row], fold: set[str], base: EngineParams, shrink: float = 0.0,
                  workers: Workers | None = None) -> dict[str, float]:
    """Fit on every row outside ``fold`` and predict the fold's rows (a stack family the training rows lack
    gets the training rows' pooled parameters)."""
    train = [r for r in rows if r.id not in fold and fitted_row(r)]
    trained = {row_stack_family(r) for r in train}
    layout = _stack_layout(train, shrink)
    res = _solve(train, base, layout, workers)
    per = layout.params(base, res.x)
    blind = _blind(res, layout)
    wanted = {f for r in rows if r.id in fold if (f := layout.fitted_as(row_stack_family(r))) is not None}
    wanted |= {layout.ties[f] for f in wanted if f in layout.ties}   # whose fixed costs they share
    pooled_params: list[EngineParams] = []

    def pooled() -> EngineParams:   # fitted once, only if a held-out row needs it
        if not pooled_params:
            one = _Layout(["all"])
            pooled_params.append(one.params(base, _solve(train, base, one, workers).x)["all"])
        return pooled_params[0]
    if any(blind.get(f, set()) & set(PLATFORM_FULL) for f in wanted):
        per = _pool_blind(per, _unseen_by_rows(blind, per, pooled(), train, layout), pooled(), layout.ties)
    out = {}
    for r in (r for r in rows if r.id in fold):
        build = row_stack_family(r)
        fam = layout.fitted_as(build)   # a platform the training rows lack: the family it specialises
        donors = platform_donors(build, fam, per, trained)   # and the same ISA's other builds' kernel costs
        params = with_platform_of(per[fam] if fam is not None else pooled(), [per[d] for d in donors])
        out[r.id] = float(predict_row(r, params) / float(r.get("value")) - 1)
    return out
