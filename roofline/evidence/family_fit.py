"""Fitting a non-GPU accelerator family's execution profile (Intel Gaudi, AWS Trainium/Inferentia, Google TPU) to
its published rows, and how well the fit predicts publications it never saw.

These families run compiled graphs (HPU graphs, Neuron, XLA), so their costs are not a GPU stack's: a whole step
is one program launch plus a host round trip, a layer is a few fused ops, the matrix units and HBM reach their own
shares of peak. Their family files (``hardware_specs/execution/<family>.toml``) started from estimates; here six
of those fields (:data:`ESTIMATES`) are fitted to the family's grade A and B time rows by robust least squares on the log of
predicted over measured (soft-L1, as :mod:`roofline.evidence.calibrate` fits the GPU stacks), each within its
physical bounds (:data:`FAMILY_BOUNDS`) and drawn weakly toward the family file's estimate, so a field the rows do
not constrain stays where the estimate put it:

* ``memory_bandwidth_fraction`` and ``compute_fraction``: achieved shares of the datasheet's HBM bandwidth and
  dense peak (docs/theory.md §1.3; measured best-case GEMMs reach 74-97% of peak on Gaudi 2/3 and 90% on TPU v6e,
  https://github.com/stas00/ml-engineering/blob/744d01e18b79512572f64a6bbd8b5f4a725203a7/compute/accelerator/README.md);
* ``step_overhead_s``, ``layer_overhead_s``: the fixed cost of a step (graph launch, host sync, sampling) and of
  a layer (kernel boundaries, collectives' latency); a row set with several model depths separates them;
* ``request_overhead_s``: the time before a request's first token that is not model execution (HTTP,
  tokenising, admission), which only TTFT rows see;
* ``prefill_compute_scale``: the share of ``compute_fraction`` a prompt's pass keeps. A compiled engine runs its
  prompts in another graph than its decode steps (Neuron's context-encoding and token-generation models, XLA's
  prefill and generate programs): long-sequence attention, softmax on the vector engines and the sequence-parallel
  collectives are prefill's, the streaming of weights through the matrix units at a few tokens is decode's, so the
  rows of both kinds pull one shared efficiency two ways (on Trainium: 0.27 of peak with one field, against
  decode's 0.44 and prefill's 0.22 when the two are apart). Bounded below at 0.2: a fifth of decode's efficiency.

Accuracy is judged on publications the fit never saw: one fit per publication leaves that publication's rows out
and predicts them (:func:`fit_family` with ``folds``), the same way the GPU calibration's held-out error is made.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import attrs
import numpy as np

from ..errors import RooflineError
from ..specs.execution import family_profile
from ..specs.params import EngineParams, with_values
from ..specs.resolve import resolve_device
from .calibrate import fitted_row
from .row_labels import ENERGY_METRICS
from .validate import Row, predict_row

#: The families whose profiles this module fits (the dataflow families keep their per-layer latency fit,
#: :func:`roofline.evidence.calibrate.fit_layer_overhead`).
PROFILE_FIT_FAMILIES = ("gaudi", "trainium", "tpu")

#: Physical bounds of the fitted fields (SI). Achieved shares below 0.3 of a datasheet's bandwidth or 0.2 of its
#: peak would be a broken kernel, not an efficiency; a step's fixed cost of 20 ms or a layer's of 300 us is beyond
#: any published launch or collective latency; 2 s before the first token is a queue, not an overhead.
FAMILY_BOUNDS: dict[str, tuple[float, float]] = {
    "memory_bandwidth_fraction": (0.3, 0.95), "compute_fraction": (0.2, 0.95), "step_overhead_s": (0.0, 0.02),
    "layer_overhead_s": (0.0, 3e-4), "request_overhead_s": (0.0, 2.0), "prefill_compute_scale": (0.2, 1.0)}
FITTED = tuple(FAMILY_BOUNDS)
#: The estimates each family file gave these fields before any of its rows were fitted (the fit's prior centre,
#: and the profile whose errors on the family's rows are the evidence for a family with no fitted rows,
#: :func:`blind_errors`): 80% of peak bandwidth and 60% of peak FLOP/s as tuned kernels reach (docs/theory.md
#: §1.3), one program launch and host sync per step (200 us for HPU graphs, 100 us for Neuron and XLA), a few us
#: per fused layer, no per-request overhead.
ESTIMATES: dict[str, dict[str, float]] = {
    "gaudi": {"memory_bandwidth_fraction": 0.8, "compute_fraction": 0.6, "step_overhead_s": 200e-6,
              "layer_overhead_s": 5e-6, "request_overhead_s": 0.0, "prefill_compute_scale": 1.0},
    "trainium": {"memory_bandwidth_fraction": 0.8, "compute_fraction": 0.6, "step_overhead_s": 100e-6,
                 "layer_overhead_s": 2e-6, "request_overhead_s": 0.0, "prefill_compute_scale": 1.0},
    "tpu": {"memory_bandwidth_fraction": 0.8, "compute_fraction": 0.6, "step_overhead_s": 100e-6,
            "layer_overhead_s": 2e-6, "request_overhead_s": 0.0, "prefill_compute_scale": 1.0}}
#: Scale of the robust loss on log(predicted / measured): residuals beyond ~10% count linearly, not squared.
F_SCALE = 0.1
#: Weight of the pull toward the family file's estimate, per unit of a field's bound range (a weak prior: one
#: row 10% off outweighs a field moved by a third of its range).
PRIOR_WEIGHT = 0.3


@attrs.frozen(kw_only=True)
class FamilyFit:
    """A family's fitted profile fields, the rows it used, and its errors: in-sample and held out by publication
    (row id -> (predicted - measured) / measured, predicted by a fit that never saw the row's publication)."""

    family: str
    values: dict[str, float]
    estimates: dict[str, float]
    rows: int
    sources: int
    in_sample_errors: dict[str, float]
    held_out_errors: dict[str, float]
    blind_errors: dict[str, float]
    skipped: dict[str, str]

    @property
    def median_abs_error(self) -> float:
        return float(np.median(np.abs(list(self.in_sample_errors.values()))))

    @property
    def held_out_median_abs_error(self) -> float:
        vals = list(self.held_out_errors.values())
        return float(np.median(np.abs(vals))) if vals else math.nan

    def to_dict(self) -> dict[str, Any]:
        return {"family": self.family, "values": self.values, "estimates": self.estimates, "rows": self.rows,
                "sources": self.sources, "median_abs_error": self.median_abs_error,
                "held_out_median_abs_error": self.held_out_median_abs_error,
                "in_sample_errors": self.in_sample_errors, "held_out_errors": self.held_out_errors,
                "blind_errors": self.blind_errors, "skipped": self.skipped}


def fittable_rows(rows: Iterable[Row], family: str) -> list[Row]:
    """The family's rows a fit may use: time metrics of rows the GPU calibration would fit too (grade A or B, no
    early build: :func:`~roofline.evidence.calibrate.fitted_row`), without speculation."""
    out = []
    for r in rows:
        try:
            fam = resolve_device(r.get("hardware")).family
        except RooflineError:
            continue
        if (fam == family and r.get("metric") not in ENERGY_METRICS and fitted_row(r)
                and r.get("spec_method") in ("", "none")):
            out.append(r)
    return out


def _params(base: EngineParams, unit: np.ndarray, family: str) -> EngineParams:
    values = {k: lo + float(u) * (hi - lo) for k, u, (lo, hi) in zip(FITTED, unit, FAMILY_BOUNDS.values(), strict=True)}
    return with_values(base, values, what=f"{family} fit")


def _log_errors(rows: list[Row], params: EngineParams) -> dict[str, float]:
    """log(predicted / measured) per row the model can express with ``params``."""
    out = {}
    for r in rows:
        try:
            out[r.id] = math.log(predict_row(r, params) / float(r.get("value")))
        except (RooflineError, ValueError, ZeroDivisionError):
            continue
    return out


def _estimates(base: EngineParams) -> np.ndarray:
    """The family file's estimates as unit coordinates within the bounds (clipped into them)."""
    return np.array([min(max((getattr(base, k) - lo) / (hi - lo), 0.0), 1.0)
                     for k, (lo, hi) in FAMILY_BOUNDS.items()])


def _solve(rows: list[Row], base: EngineParams, family: str) -> np.ndarray:
    """The unit coordinates of the fitted fields (scipy's bounded trust-region least squares, soft-L1 loss)."""
    from scipy.optimize import least_squares  # lazily: scipy is only needed to fit

    start = _estimates(base)
    ids = list(_log_errors(rows, base))
    if len(ids) < len(FITTED):
        raise RooflineError(f"{family}: {len(ids)} rows the model can predict; a profile fit needs at least "
                            f"{len(FITTED)}")
    use = [r for r in rows if r.id in set(ids)]

    def residuals(u: np.ndarray) -> np.ndarray:
        errs = _log_errors(use, _params(base, u, family))
        data = np.array([errs.get(i, math.log(10.0)) for i in ids])   # a row that stops fitting counts as 10x off
        return np.concatenate([data, PRIOR_WEIGHT * (u - start)])

    res = least_squares(residuals, start, bounds=(0.0, 1.0), loss="soft_l1", f_scale=F_SCALE, diff_step=1e-3,
                        max_nfev=60)
    return np.asarray(res.x)


def _relative(log_errors: dict[str, float]) -> dict[str, float]:
    return {k: math.expm1(v) for k, v in log_errors.items()}


def prior_params(family: str) -> EngineParams:
    """The family's profile with :data:`ESTIMATES` in place of anything fitted: where every fit starts."""
    return with_values(family_profile(family).profile, ESTIMATES[family], what=f"{family} estimates")


def fit_family(rows: list[Row], family: str, *, folds: bool = True) -> FamilyFit:
    """Fit ``family``'s profile fields (:data:`FITTED`) on its fittable rows; with ``folds``, also predict each
    publication's rows with a fit on the others' (the held-out error). Raises :class:`RooflineError` for a family
    this module does not fit or too few rows."""
    if family not in PROFILE_FIT_FAMILIES:
        raise RooflineError(f"a profile fit covers {', '.join(PROFILE_FIT_FAMILIES)}, not {family!r}")
    base = prior_params(family)
    mine = fittable_rows(rows, family)
    unit = _solve(mine, base, family)
    fitted = _params(base, unit, family)
    in_sample = _log_errors(mine, fitted)
    skipped = {}
    for r in mine:
        if r.id not in in_sample:
            try:
                predict_row(r, fitted)
            except (RooflineError, ValueError) as e:
                skipped[r.id] = str(e)
    held: dict[str, float] = {}
    sources = sorted({r.get("source") for r in mine})
    if folds and len(sources) > 1:
        for src in sources:
            train = [r for r in mine if r.get("source") != src]
            try:
                other = _params(base, _solve(train, base, family), family)
            except RooflineError:
                continue
            held.update(_log_errors([r for r in mine if r.get("source") == src], other))
    return FamilyFit(family=family, values={k: float(getattr(fitted, k)) for k in FITTED},
                     estimates={k: float(getattr(base, k)) for k in FITTED}, rows=len(in_sample),
                     sources=len(sources), in_sample_errors=_relative(in_sample), held_out_errors=_relative(held),
                     blind_errors=_relative(_log_errors(mine, base)), skipped=skipped)
