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
import re
from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from ..errors import RooflineError
from ..specs.execution import family_profile, resolve_profile
from ..specs.params import (
    NOT_IN_PROFILE_FILES,
    PLATFORM_OWN,
    STACK_SET,
    EngineParams,
    Profile,
    StackChoice,
    family_chain,
    parent_family,
    platform_donors,
    profile_toml,
    with_platform_of,
    with_values,
    write_profile,
)
from ..specs.resolve import resolve_device, resolve_model
from .validate import ENERGY_METRICS, Row, predict_row, row_params, row_stack_family, shipped_data
from .workers import Workers, check_jobs
from .workers import workers as workers_for

#: name -> (lower bound, upper bound, scale used inside the optimiser). The bounds bracket the physical ranges
#: of docs/theory.md: a pass costs 0.05-0.3 ms of fixed time with CUDA graphs and over 1 ms without (§1.2;
#: bounds 20 us-2 ms), a collective 5-20 us of NCCL small-message
#: latency (§5.1; bounds 2-20 us), a request at most 200 ms of serving overhead before its first token
#: (HTTP, tokenisation, admission), a running sequence at most 200 us of host time per step, a kernel at most
#: 10 us of launch gap and tail (1-3 us inside CUDA graphs, 5-10 us launched one by one); they keep the
#: fit from turning a fixed cost into a catch-all for what the model misses.
BOUNDS: dict[str, tuple[float, float, float]] = {
    "memory_bandwidth_fraction": (0.3, 1.0, 1.0),
    "compute_fraction": (0.2, 1.0, 1.0),
    "low_precision_compute_scale": (0.3, 1.0, 1.0),
    "fp4_compute_scale": (0.3, 1.0, 1.0),
    "step_overhead_s": (20e-6, 2e-3, 1e-4),
    "kernel_overhead_s": (0.0, 10e-6, 1e-6),
    "collective_base_s": (2e-6, 20e-6, 1e-5),
    "prefill_compute_scale": (0.2, 1.0, 1.0),
    "request_overhead_s": (0.0, 0.2, 0.01),
    "sequence_overhead_s": (0.0, 200e-6, 1e-5),
    "dequant_ops_per_element": (0.0, 32.0, 1.0),
    "allreduce_bandwidth_fraction": (0.2, 1.0, 1.0),
}
PER_FAMILY = ("memory_bandwidth_fraction", "compute_fraction", "prefill_compute_scale", "step_overhead_s",
              "request_overhead_s", "sequence_overhead_s")
#: A stack's platform build (``sglang-rocm-gfx942``) is fitted apart from the family it specialises only with at
#: least this many rows; fewer rows fit with that family (:func:`_stack_layout`).
MIN_PLATFORM_ROWS = 4
#: A platform build with MIN_PLATFORM_ROWS or more rows, but fewer than twice PLATFORM_FULL, fits PLATFORM_OWN of
#: its own (the CUDA stacks share one kernel gap).
SHARED = tuple(k for k in BOUNDS if k not in PER_FAMILY)
#: What a platform build with rows for each of these twice over fits of its own.
PLATFORM_FULL = PER_FAMILY + tuple(k for k in PLATFORM_OWN if k not in PER_FAMILY)


@attrs.frozen(kw_only=True)
class Fit:
    """A calibration: the fitted profile, standard errors by parameter set (``default``, ``*`` for the
    parameters the stack families share, one per family), the rows used and skipped, and the errors."""

    profile: Profile
    standard_errors: dict[str, dict[str, float]]
    rows: list[str]
    skipped: list[dict[str, str]]
    #: of ``rows``, those the fit predicts without fitting them (grades outside :data:`FITTED_GRADES`)
    checked_rows: tuple[str, ...] = ()
    median_abs_error: float
    loo_median_abs_error: float | None     # held-out error (``holdout`` says how rows were held out)
    loo_errors: dict[str, float] | None
    holdout: str = ""
    #: held-out rows whose stack build (:func:`roofline.evidence.validate.row_stack_family`) no training row of
    #: their fold shares: predicted with the parameters of the family the build specialises (or the pooled ones), with
    #: the kernel efficiencies and gap of the same ISA's other builds where the training rows fit any (platform_donors)
    heldout_unseen_builds: frozenset[str] = frozenset()
    #: row id -> (predicted - measured) / measured under the fit without that row, estimated by one Newton step
    #: from the full fit (:func:`approximate_loo`); NaN for a row too influential to estimate that way
    approx_loo_errors: dict[str, float] = attrs.field(factory=dict)
    #: the stack builds the rows measured (:func:`roofline.evidence.validate.row_stack_family`), sorted
    builds: tuple[str, ...] = ()
    #: per stack family, the parameters none of its rows responds to that took the pooled fit's value
    #: (:func:`_unseen_by_rows`); a blind parameter not listed is hidden under a longer cost and kept as fitted
    pooled_params: Mapping[str, frozenset[str]] = attrs.field(factory=dict)
    #: the partial pooling the fit ran with (:data:`SHRINK`; 0: none)
    shrink: float = 0.0

    def heldout_split(self) -> dict[str, dict[str, float]]:
        """Median held-out |error| and row count of the rows whose stack build other rows in training share
        (``seen``) and of those whose build left with their fold (``unseen``): a publication of a known build or
        a new build. A group without rows is left out."""
        errs = self.loo_errors or {}
        out: dict[str, dict[str, float]] = {}
        for name, keep in (("seen", False), ("unseen", True)):
            mine = [abs(e) for k, e in errs.items() if (k in self.heldout_unseen_builds) == keep]
            if mine:
                out[name] = {"median_abs_error": float(np.median(mine)), "rows": len(mine)}
        return out

    @property
    def approx_loo_median_abs_error(self) -> float | None:
        errs = [abs(e) for e in self.approx_loo_errors.values() if math.isfinite(e)]
        return float(np.median(errs)) if errs else None


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
            out[fam] = attrs.evolve(base, **{**values.get("*", {}), **tied, **values.get(fam, {})})
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


def row_family(row: Row) -> str:
    """The execution family of a row's device (``gpu``, ``groq``, ...)."""
    return resolve_device(row.get("hardware")).family


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
            if r.get("metric") == "speedup" or r.get("batch") == "slo":
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
            up = next((f for f in family_chain(fam)[1:] if f in counts and f not in ties), None)
            if up is not None:
                ties[fam] = up
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
#: The grades (data README) of the rows the fit moves its parameters with. Rows of grade C (a vendor claim or a
#: third-party measurement with the setup partly assumed: ML.ENERGY's unpublished prompt lengths) and D (second
#: hand) are predicted by the fitted parameters and reported with the others (in-sample, leave-one-out and held
#: out, where each is out of sample by construction), but a setup the row does not carry would leak into a
#: stack's constants: fitted with them, one fold put vLLM's request overhead at 153 ms to absorb ML.ENERGY's B200
#: rows (docs/validation.md).
FITTED_GRADES = ("A", "B")


#: Builds measured while their kernels for the model were still being brought up, several times slower than the
#: same stack's releases a few months on: DeepSeek-V3/R1 on AMD's February 2025 staging images (SGLang 0.4.2 on
#: rocm/sglang-staging, vLLM 0.7.3.dev on rocm/vllm-dev:vllm-ds3-staging; dstack's MI300X runs): 34-46 ms per token
#: at 4 concurrent requests where SGLang 0.5.5 on the same GPUs takes 27 (InferenceMAX); DeepSeek-R1 at batch 1 on
#: 8 B200s in TensorRT-LLM's pre-GTC 2025 build (tech blog 1's MTP table: 111 TPS/user without MTP, 253 with MTP3),
#: which the same blog's later kernels took from 253 to 299 and 340 TPS/user at the same strict acceptance
#: (https://github.com/NVIDIA/TensorRT-LLM/blob/01c4ece911eb569e72cf4177f83238a0520641c2/docs/source/blogs/tech_blog/blog1_Pushing_Latency_Boundaries_Optimizing_DeepSeek-R1_Performance_on_NVIDIA_B200_GPUs.md).
#: Predicted and reported, not fitted: one parameter set cannot describe both builds, and the later one is what
#: users run.
EARLY_BUILDS = re.compile(r"staging|pre-GTC", re.IGNORECASE)


def fitted_row(row: Row) -> bool:
    """Whether the fit uses ``row`` (its grade is in :data:`FITTED_GRADES` and its build is not an early one,
    :data:`EARLY_BUILDS`), rather than only predicting it. Rows at a latency-bound load (``batch = slo``) are
    predicted, never fitted: they test the queues of :mod:`roofline.serving.load` on the fitted physics. So are
    ``speedup`` rows: a ratio of two predictions on one stack, which tests the speculative round, not the stack's
    constants."""
    return (row.get("grade") in FITTED_GRADES and not EARLY_BUILDS.search(row.get("stack"))
            and row.get("batch") != "slo" and row.get("metric") != "speedup")


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
    for ids in sorted(sources.values(), key=len, reverse=True):
        min(folds, key=len).update(ids)
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
    wanted = {layout.fitted_as(row_stack_family(r)) for r in rows if r.id in fold} - {None}
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


def bound_side(name: str, value: float) -> str | None:
    """``"lower"`` or ``"upper"`` where a fitted parameter stopped at that bound of :data:`BOUNDS`, else None
    (also for a parameter the calibration does not fit)."""
    if name not in BOUNDS:
        return None
    lo, hi, scale = BOUNDS[name]
    return next((s for b, s in ((lo, "lower"), (hi, "upper")) if abs(value - b) <= 1e-4 * scale), None)


def stack_record(choice: StackChoice, prof: Profile) -> dict[str, Any]:
    """What ``--stack`` chose, for the JSON ``stack`` record and the line under the tables: the stack, the build
    the GPUs run, the fitted set that answers for it, and that set's parameters its rows do not pin down (with
    the value used and whether it sits at a bound of the fit); ``at_bound``, its identified parameters the fit
    stopped at a bound of their physical range (:data:`BOUNDS`: its rows would push them further, so the model
    misses something there); ``settings``, the engine settings the stack fixes (:data:`STACK_SETTINGS
    <roofline.specs.params.STACK_SETTINGS>`: all-reduce, KV admission, prompt chunking, ...);
    ``platform_parameters_from``, the same ISA's builds whose efficiencies and kernel gap it borrowed
    (:func:`roofline.specs.params.platform_donors`), whose own loose ends then count for those parameters."""
    names = set(prof.not_identified(choice.fitted))
    if choice.platform_from:
        names = (names - set(PLATFORM_OWN)) | {k for d in choice.platform_from for k in prof.not_identified(d)
                                                if k in PLATFORM_OWN}
    values = {name: getattr(choice.params, name) for name in sorted(names)}
    loose = {name: {"value": v, "at_bound": bound_side(name, v)} for name, v in values.items()}
    at_bound = {k: {"value": getattr(choice.params, k), "bound": side} for k in BOUNDS
                if k not in names and (side := bound_side(k, getattr(choice.params, k)))}
    settings = {k: getattr(choice.params, k) for k in STACK_SET if getattr(choice.params, k) is not None}
    return {"name": choice.name, "build": choice.build, "parameters": choice.fitted,
            "fitted_on_other_platform": choice.other_platform,
            "platform_parameters_from": list(choice.platform_from), "not_identified": loose, "at_bound": at_bound,
            "settings": settings}


#: Kinds of note on a fitted parameter (:func:`assessment`) that say the data do not identify it.
UNIDENTIFIED = ("not identified", "hidden")


def _note(name: str, value: float, se: float | None) -> tuple[str, str]:
    """(kind, text) of a fitted parameter's note from its value and standard error."""
    if se is None:
        return "", ""
    side = bound_side(name, value)
    if not math.isfinite(se) or se > max(abs(value), 1e-300):
        return "not identified", f"not identified by this data (+/- {se:.2g})" + (f", at its {side} bound" if side else "")
    if side:
        return "bound", f"at its {side} bound (its standard error does not apply)"
    return "se", f"+/- {se:.3g}"


def _blind_note(name: str, value: float, pooled: bool) -> tuple[str, str]:
    """(kind, text) of a parameter no row of its stack responds to at the optimum: ``pooled`` when it took the
    pooled value (:func:`_unseen_by_rows`), else hidden under a longer cost and kept as fitted."""
    if pooled:
        return "pooled", "no row of this stack responds to it: the pooled value"
    side = bound_side(name, value)
    return "hidden", ("hidden under a longer cost in every row of this stack (no row responds to a small change, "
                      "the pooled value would move them): kept where the fit left it"
                      + (f", at its {side} bound" if side else ""))


def assessment(fit: Fit) -> dict[str, dict[str, tuple[str, str]]]:
    """Per parameter set and name, (kind, text): ``se`` (``+/- se``); ``not identified`` where the standard
    error exceeds the value itself (the data cannot tell the parameter from zero); ``bound`` where the fit stopped
    at a physical bound of :data:`BOUNDS` (a standard error there means nothing); ``tied`` for a platform build's
    parameter taken from the family it specialises; ``pooled`` or ``hidden`` for one no row of its stack
    responds to (:func:`_blind_note`)."""
    out: dict[str, dict[str, tuple[str, str]]] = {"default": {}}
    for k, se in fit.standard_errors.get("default", {}).items():
        out["default"][k] = _note(k, getattr(fit.profile.default, k), se)
    full = {f for f in fit.profile.families if set(PER_FAMILY) <= set(fit.standard_errors.get(f, {}))}
    for fam, p in fit.profile.families.items():
        up = next((f for f in family_chain(fam)[1:] if f in full), None) if fam not in full else None
        tied = {k: ("tied", f"as {up} (too few rows to fit it apart)") for k in PER_FAMILY if k not in PLATFORM_OWN} if up else {}
        ses = {**fit.standard_errors.get("*", {}), **fit.standard_errors.get(fam, {})}
        pooled = fit.pooled_params.get(fam, frozenset())
        blind = {k: _blind_note(k, getattr(p, k), k in pooled) for k, se in
                 fit.standard_errors.get(fam, {}).items() if not math.isfinite(se) and k in PLATFORM_FULL}
        out[fam] = {**{k: _note(k, getattr(p, k), se) for k, se in ses.items()}, **tied, **blind}
    return out


def uncertainty(fit: Fit) -> dict[str, dict[str, str]]:
    """Per parameter set and name, the text of its note (:func:`assessment`), as the profile's comments say it."""
    return {name: {k: text for k, (_kind, text) in notes.items()} for name, notes in assessment(fit).items()}


def fit_record(fit: Fit, *, data: str) -> dict[str, Any]:
    """What a fit says of itself (a profile's ``[fit]`` table): the data, rows and median |error| in-sample,
    estimated leave-one-out and held out, and the parameters its data do not identify (``set.name``)."""
    # five decimals: a percentage printed to one decimal from the record is not rounded twice (0.09548 -> 9.5%)
    record: dict[str, Any] = {"data": data, "rows": len(fit.rows), "median_abs_error": round(fit.median_abs_error, 5)}
    if fit.checked_rows:
        record["checked_rows"] = len(fit.checked_rows)
        record["checked"] = (f"rows of grade other than {' or '.join(FITTED_GRADES)} or of an early build "
                             f"(EARLY_BUILDS): predicted by this fit, not "
                             "fitted; every median of this record counts them as predicted")
    if fit.shrink:
        record["shrink"] = fit.shrink
    if fit.approx_loo_median_abs_error is not None:
        record["loo_approx_median_abs_error"] = round(fit.approx_loo_median_abs_error, 5)
        unestimated = sum(1 for e in fit.approx_loo_errors.values() if not math.isfinite(e))
        record["loo_approx"] = "one Newton step per row from this fit" + (
            f"; {unestimated} rows too influential to estimate, left out of the median" if unestimated else "")
    if fit.loo_median_abs_error is not None:
        record["heldout_median_abs_error"] = round(fit.loo_median_abs_error, 5)
        record["heldout"] = fit.holdout
        for name, part in fit.heldout_split().items():
            record[f"heldout_{name}_build_median_abs_error"] = round(part["median_abs_error"], 5)
            record[f"heldout_{name}_build_rows"] = part["rows"]
    missing = sorted(f"{name}.{k}" for name, notes in assessment(fit).items() for k, (kind, _text) in notes.items()
                     if kind in UNIDENTIFIED)
    if missing:
        record["not_identified"] = missing
    if fit.builds:
        record["builds"] = list(fit.builds)
    record["standard_errors"] = standard_error_record(fit.standard_errors.get("default", {}))
    return record


def standard_error_record(errors: Mapping[str, float]) -> dict[str, float]:
    """The default set's finite standard errors, to three significant figures (the ``[fit]`` record's
    ``standard_errors``, what `roofline show` prints beside a fitted value)."""
    return {k: float(f"{se:.3g}") for k, se in sorted(errors.items()) if math.isfinite(se)}


def profile_text(fit: Fit, *, data: str) -> str:
    """The profile file of a fit, with each parameter's uncertainty and the fit's record."""
    return profile_toml(fit.profile, uncertainty=uncertainty(fit), fit=fit_record(fit, data=data))


def save_profile(fit: Fit, path: str, *, data: str) -> None:
    """Write ``fit`` as a profile every command accepts with ``--profile`` (atomically)."""
    write_profile(path, profile_text(fit, data=data))


#: "Smallest models" for a family fit: the per-layer latency is fitted on these and checked on larger ones.
SMALL_MODEL_PARAMS = 10e9


@attrs.frozen(kw_only=True)
class LayerFit:
    """A dataflow family's per-layer stage latency fitted on its smallest models' batch-1 rows (and the extra
    latency of an MoE layer on its smallest MoE model's rows), and how the fitted values predict the family's
    other rows, which the fit never saw."""

    family: str
    layer_overhead_s: float
    moe_layer_overhead_s: float | None
    fitted_rows: dict[str, float]          # row id -> the per-layer latency that row alone implies
    held_out_errors: dict[str, float]      # row id -> (predicted - measured) / measured with the fitted values


def _tpot_s(row: Row, value: float) -> float:
    metric = row.get("metric")
    if metric == "decode_tokens_per_s_per_user":
        return 1.0 / value
    if metric == "itl_ms":
        return value / 1e3
    raise RooflineError(f"{row.id}: a layer-latency fit needs decode speed or ITL, not {metric}")


def _implied(rows: list[Row], params: EngineParams, layers: Any) -> dict[str, float]:
    """Per row: (measured TPOT - TPOT predicted with ``params``) / layers(model)."""
    out = {}
    for r in rows:
        m = resolve_model(r.get("model"))
        out[r.id] = (_tpot_s(r, float(r.get("value"))) - _tpot_s(r, predict_row(r, params))) / layers(m)
    return out


def fit_layer_overhead(rows: list[Row], family: str) -> LayerFit:
    """Fit ``layer_overhead`` (and ``moe_layer_overhead``) of ``family`` in closed form.

    For each plain batch-1 decode row of a small dense model (<= 10B parameters) the per-layer time left
    after everything else the model predicts is (measured TPOT - predicted TPOT without it) / layers; the fit
    is the median over those rows. The MoE extra is fitted the same way on the rows of the family's smallest
    MoE model, per MoE layer. Every other row of the family is then predicted and reported as held out.
    """
    base = family_profile(family).profile
    mine = [r for r in rows if r.get("spec_method") in ("", "none") and row_family(r) == family
            and r.get("batch") == "1" and r.get("metric") in ("decode_tokens_per_s_per_user", "itl_ms")]
    models = {r.id: resolve_model(r.get("model")) for r in mine}
    small = [r for r in mine if not models[r.id].is_moe and models[r.id].total_params <= SMALL_MODEL_PARAMS]
    if not small:
        raise RooflineError(f"no small-model (<= 10B) batch-1 decode rows of family {family} to fit on")
    zero = with_values(base, {"layer_overhead_s": 0.0, "moe_layer_overhead_s": 0.0}, what=f"{family} fit")
    implied = _implied(small, zero, lambda m: m.num_layers)
    layer = float(np.median(list(implied.values())))
    use = with_values(zero, {"layer_overhead_s": layer}, what=f"{family} fit")
    moe_rows = [r for r in mine if models[r.id].is_moe]
    moe = None
    if moe_rows:
        smallest = min((models[r.id] for r in moe_rows), key=lambda m: m.total_params).id
        extra = _implied([r for r in moe_rows if models[r.id].id == smallest], use, lambda m: m.num_moe_layers)
        implied.update(extra)
        moe = float(np.median(list(extra.values())))
        use = with_values(use, {"moe_layer_overhead_s": moe}, what=f"{family} fit")
    held = {}
    for r in (r for r in rows if row_family(r) == family and r.id not in implied):
        try:
            held[r.id] = predict_row(r, use) / float(r.get("value")) - 1
        except RooflineError:
            continue
    return LayerFit(family=family, layer_overhead_s=layer, moe_layer_overhead_s=moe, fitted_rows=implied,
                    held_out_errors=held)


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


def _fold_key(row: Row, holdout: str) -> str:
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
