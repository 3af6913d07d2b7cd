"""What the GPU calibration fits (:mod:`roofline.evidence.calibrate`): the parameters with their physical bounds,
which of them each stack family fits of its own, which rows move them, and the record a fit returns."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

import attrs
import numpy as np

from ..specs.params import PLATFORM_OWN, Profile
from ..specs.resolve import resolve_device
from .validate import Row

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
#: least this many rows; fewer rows fit with that family (:mod:`roofline.evidence.calibrate`).
MIN_PLATFORM_ROWS = 4
#: A platform build with MIN_PLATFORM_ROWS or more rows, but fewer than twice PLATFORM_FULL, fits PLATFORM_OWN of
#: its own (the CUDA stacks share one kernel gap).
SHARED = tuple(k for k in BOUNDS if k not in PER_FAMILY)
#: What a platform build with rows for each of these twice over fits of its own.
PLATFORM_FULL = PER_FAMILY + tuple(k for k in PLATFORM_OWN if k not in PER_FAMILY)


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
#: at 4 concurrent requests where SGLang 0.5.5 on the same GPUs takes 27 (InferenceMAX). Predicted and reported, not
#: fitted: one parameter set cannot describe both builds, and the later one is what users run. TensorRT-LLM's
#: pre-GTC 2025 DeepSeek-R1 batch-1 rows (DS01-DS05) stay fitted: its later builds (DS06, DS07) are still too fast
#: in the model (+18..+34% with those rows out of the fit), so those rows carry the small-batch MoE cost, not only
#: an early kernel (docs/validation.md).
EARLY_BUILDS = re.compile(r"staging", re.IGNORECASE)


def fitted_row(row: Row) -> bool:
    """Whether the fit uses ``row`` (its grade is in :data:`FITTED_GRADES` and its build is not an early one,
    :data:`EARLY_BUILDS`), rather than only predicting it. Rows at a latency-bound load (``batch = slo``) are
    predicted, never fitted: they test the queues of :mod:`roofline.serving.load` on the fitted physics. So are
    ``speedup`` rows: a ratio of two predictions on one stack, which tests the speculative round, not the stack's
    constants."""
    return (row.get("grade") in FITTED_GRADES and not EARLY_BUILDS.search(row.get("stack"))
            and row.get("batch") != "slo" and row.get("metric") not in ("speedup", "decode_speedup"))


def row_family(row: Row) -> str:
    """The execution family of a row's device (``gpu``, ``groq``, ...)."""
    return resolve_device(row.get("hardware")).family


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
    #: from the full fit (:func:`roofline.evidence.calibrate.approximate_loo`); NaN for a row too influential to estimate that way
    approx_loo_errors: dict[str, float] = attrs.field(factory=dict)
    #: the stack builds the rows measured (:func:`roofline.evidence.validate.row_stack_family`), sorted
    builds: tuple[str, ...] = ()
    #: per stack family, the parameters none of its rows responds to that took the pooled fit's value
    #: (the calibration's ``_unseen_by_rows``); a blind parameter not listed is hidden under a longer cost and kept as fitted
    pooled_params: Mapping[str, frozenset[str]] = attrs.field(factory=dict)
    #: the partial pooling the fit ran with (:data:`roofline.evidence.calibrate.SHRINK`; 0: none)
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


def bound_side(name: str, value: float) -> str | None:
    """``"lower"`` or ``"upper"`` where a fitted parameter stopped at that bound of :data:`BOUNDS`, else None
    (also for a parameter the calibration does not fit)."""
    if name not in BOUNDS:
        return None
    lo, hi, scale = BOUNDS[name]
    return next((s for b, s in ((lo, "lower"), (hi, "upper")) if abs(value - b) <= 1e-4 * scale), None)
