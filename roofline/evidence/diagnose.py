"""Diagnosis: from measured decode speed to achieved bandwidth and FLOP/s, MBU, MFU and the bottleneck.

MBU = achieved bandwidth / datasheet peak bandwidth, with achieved bandwidth =
bytes read per decode step / time per output token; MFU = achieved FLOP/s /
datasheet dense peak FLOP/s of the class the weights compute in (the
Databricks definitions, https://www.databricks.com/blog/llm-inference-performance-engineering-best-practices;
docs/theory.md §1.3). Bytes and FLOP come from the same
work counts as the stage engine (weights the batch touches plus every
sequence's KV cache at the mean context isl + osl/2). Inputs can be typed in or
read from a vLLM ``benchmark_serving`` result JSON. For continuous batching the
step also carries batch * isl / osl prompt tokens (docs/theory.md §6).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from ..errors import RooflineError, SpecError, WorkloadError
from ..physics.timing import evaluate_pass, main_compute_class
from ..specs.execution import resolve_profile
from ..specs.files import read_text
from ..specs.formats import Formats, get_format
from ..specs.models import ModelSpec
from ..specs.params import EngineParams, default_params
from ..specs.resolve import GroupLike, ModelLike, resolve_group, resolve_model
from ..workload import check_count


def _at_least(minimum: float, *, strict: bool = False) -> Any:
    def check(_inst: object, attribute: attrs.Attribute, value: Any) -> None:
        ok = (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
              and (value > minimum if strict else value >= minimum))
        if not ok:
            rel = ">" if strict else ">="
            raise WorkloadError(f"{attribute.name} must be a finite number {rel} {minimum:g}, got {value!r}")
    return check


def _serving(_inst: object, _a: attrs.Attribute, value: Any) -> None:
    if value not in ("static", "continuous"):
        raise WorkloadError(f"serving must be 'static' or 'continuous', got {value!r}")


@attrs.frozen(kw_only=True)
class Measurement:
    """What a serving benchmark measured (one steady-state operating point)."""

    batch: float = attrs.field(validator=_at_least(0, strict=True))
    input_tokens: float = attrs.field(validator=_at_least(1))
    output_tokens: float = attrs.field(validator=_at_least(1))
    tpot_s: float = attrs.field(validator=_at_least(0, strict=True))
    utilisation: float | None = None
    serving: str = attrs.field(default="static", validator=_serving)
    source: str = "typed in"
    #: the model the benchmark ran, as its file names it (vLLM's ``model_id``); empty when typed in
    model_id: str = ""

    @classmethod
    def from_rates(cls, *, batch: float, input_tokens: float, output_tokens: float,
                   tokens_per_s_per_user: float | None = None, tpot_s: float | None = None,
                   tokens_per_s_total: float | None = None, utilisation: float | None = None,
                   serving: str = "static") -> Measurement:
        given = [x for x in (tokens_per_s_per_user, tpot_s, tokens_per_s_total) if x is not None]
        if len(given) != 1:
            raise WorkloadError("give exactly one of tokens/s per user, time per output token, or total tokens/s")
        for name, v in (("batch", batch), ("measured rate", given[0])):
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise WorkloadError(f"{name} must be a positive finite number, got {v!r}")
        if tokens_per_s_per_user is not None:
            tpot = 1.0 / tokens_per_s_per_user
        elif tpot_s is not None:
            tpot = tpot_s
        else:
            tpot = batch / tokens_per_s_total  # type: ignore[operator]
        if not MEASURABLE_TPOT_S[0] <= tpot <= MEASURABLE_TPOT_S[1]:
            raise WorkloadError(f"the measured rate is {tpot:.3g} s per output token: not a measurement (between "
                                f"{MEASURABLE_TPOT_S[0]:g} s and {MEASURABLE_TPOT_S[1]:g} s)")
        if utilisation is not None and not (isinstance(utilisation, (int, float)) and 0 <= utilisation <= 1):
            raise WorkloadError(f"utilisation must be a fraction in [0, 1], got {utilisation!r}")
        if serving not in ("static", "continuous"):
            raise WorkloadError(f"serving must be 'static' or 'continuous', got {serving!r}")
        return cls(batch=batch, input_tokens=input_tokens, output_tokens=output_tokens, tpot_s=tpot,
                   utilisation=utilisation, serving=serving)


#: Times per output token a measurement can have: a nanosecond (a billion tokens/s to one user) to an hour.
MEASURABLE_TPOT_S = (1e-9, 3600.0)


def read_vllm_benchmark(path: str | os.PathLike[str]) -> Measurement:
    """A :class:`Measurement` from vLLM ``benchmark_serving.py --save-result`` output.

    Uses ``mean_tpot_ms``, ``total_input_tokens``/``total_output_tokens`` over
    ``completed``, and ``max_concurrency`` (else Little's law: request
    throughput x mean end-to-end latency) for the batch.
    """
    p = Path(path)
    try:
        data = json.loads(read_text(p, what="a benchmark_serving result JSON", max_bytes=200_000_000))
    except json.JSONDecodeError as e:
        raise SpecError(f"{p}: not a JSON result file: {e}") from None
    except RecursionError:
        raise SpecError(f"{p}: JSON nested too deeply to be a benchmark_serving result") from None
    if not isinstance(data, dict):
        raise SpecError(f"{p}: expected a JSON object")

    def num(key: str) -> float:
        v = data.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise SpecError(f"{p}: key {key!r} = {v!r}: missing or not a non-negative number")
        return float(v)

    completed = num("completed")
    if completed <= 0:
        raise SpecError(f"{p}: key 'completed' = 0: no finished requests to diagnose")
    conc = data.get("max_concurrency")
    batch = float(conc) if isinstance(conc, (int, float)) and not isinstance(conc, bool) and conc > 0 else \
        num("request_throughput") * num("mean_e2el_ms") / 1e3
    tpot = num("mean_tpot_ms") / 1e3
    if tpot <= 0:
        raise SpecError(f"{p}: key 'mean_tpot_ms' must be positive")
    model_id = data.get("model_id")
    return Measurement(batch=batch, input_tokens=num("total_input_tokens") / completed,
                       output_tokens=num("total_output_tokens") / completed, tpot_s=tpot, serving="continuous",
                       source=str(p), model_id=model_id.strip() if isinstance(model_id, str) else "")


@attrs.frozen(kw_only=True)
class Diagnosis:
    """Achieved rates against datasheet peaks for one measured operating point (per device of the group).

    ``mbu`` and ``mfu`` are achieved over peak; ``mfu_of_measured`` is achieved FLOP/s over the best dense matmul
    rate a published measurement reached on the device in that class (``compute.measured.<class>`` of its spec:
    a GEMM microbenchmark), None where its spec gives none; ``modelled_compute_share`` is the model's own compute
    time (with its efficiencies) over the measured time: a different quantity, named apart.
    """

    model: str
    group: str
    measurement: Measurement
    bytes_per_step: float
    flop_per_step: float
    achieved_bytes_per_s: float
    achieved_flop_per_s: float
    peak_bytes_per_s: float
    peak_flop_per_s: float
    compute_class: str
    mbu: float
    mfu: float
    measured_flop_per_s: float | None = None
    mfu_of_measured: float | None = None
    modelled_compute_share: float
    predicted_tpot_s: float
    binding: str
    advice: str


def _verdict(mbu: float, mfu: float, utilisation: float | None, *, split: bool,
             compute_share: float = 0.0, narrower: str = "FP8/FP4") -> tuple[str, str]:
    """The binding resource and what would help; ``split``: the group spans devices (tensor or pipeline
    parallel), so synchronisation and the interconnect are candidates too; ``compute_share``: the modelled
    compute time (at the profile's achievable efficiency, not the datasheet peak) over the measured time;
    ``narrower``: the narrower formats the device computes natively, to suggest for weights and KV."""
    if mbu >= 0.5 and mbu >= 1.5 * mfu:
        binding = "memory bandwidth"
        advice = (f"decode runs at {mbu:.0%} of peak bandwidth while compute utilisation (MFU) is {mfu:.1%}: "
                  "memory-bandwidth bound; a faster chip of the same bandwidth will not help, more bandwidth, smaller "
                  f"weights/KV{f' ({narrower})' if narrower else ''} or fewer bytes per token (speculation, larger "
                  "batch per weight read) will")
    elif mfu >= 0.5 and mfu >= mbu:
        binding = "compute"
        advice = (f"decode runs at {mfu:.0%} of peak FLOP/s: compute bound; more FLOP/s or lower-precision tensor "
                  "math helps, more bandwidth will not")
    elif compute_share >= 0.5:
        binding = "compute (below datasheet peak)"
        advice = (f"decode runs at {mfu:.1%} of peak FLOP/s, but at the efficiency matmuls of this size reach the "
                  f"modelled compute alone takes {compute_share:.0%} of the measured time: compute bound below the "
                  "datasheet peak; lower-precision tensor math or more FLOP/s help, more bandwidth will not")
    else:
        binding = "overhead or communication"
        advice = (f"neither resource is near its peak (bandwidth {mbu:.0%}, compute {mfu:.1%}): time goes to fixed "
                  + ("per-step costs, synchronisation, scheduling or kernels below peak; larger batches, fewer "
                     "launches (CUDA graphs on GPUs), fewer TP ranks or a faster interconnect help more than a faster "
                     "chip" if split else
                     "per-step costs, scheduling or kernels below peak; larger batches or fewer launches (CUDA graphs "
                     "on GPUs) help more than a faster chip"))
    if utilisation is not None and utilisation < 0.5 and binding == "memory bandwidth":
        advice += f"; the measured utilisation {utilisation:.0%} agrees (busy waiting on memory, not computing)"
    return binding, advice


def _narrower_formats(device: Any, bits: float) -> list[str]:
    """Formats narrower than ``bits`` per weight that ``device`` runs: those it multiplies natively (int8 as
    w8a8-int8 on a GPU, d-Matrix's block formats elsewhere) and, on a GPU, int4 weight-only (AWQ/GPTQ kernels)."""
    gpu = device.family == "gpu"
    native = (("fp8", "fp8"), ("int8", "w8a8-int8" if gpu else "mxint8"), ("fp4", "nvfp4" if gpu else "mxfp4"),
              ("int4", None if gpu else "mxint4"))
    out = [fmt for cls, fmt in native if fmt and device.supports(cls)] + (["int4-g128"] if gpu else [])
    return [fmt for fmt in out if get_format(fmt).bits_per_element < bits]


def _peak_bandwidth(time_by_tier_s: dict[str, Any], device: Any, profile: EngineParams) -> float:
    """The datasheet bandwidth the step's bytes meet: one tier's peak, or over several (Corsair's SRAM and LPDDR)
    the bytes over the time they take at each tier's peak, so weights that spill to a slower tier are measured
    against it. A tier's modelled time is its bytes / (peak x achieved fraction)."""
    tiers = {t: float(np.max(v)) for t, v in time_by_tier_s.items() if np.any(np.asarray(v) > 0)}
    if len(tiers) < 2:
        return float(device.get(f"{next(iter(tiers), device.memory[0].name)}.bandwidth"))
    frac = {t: profile.bandwidth_fraction(t) for t in tiers}
    traffic = {t: s * frac[t] * device.get(f"{t}.bandwidth") for t, s in tiers.items()}   # bytes, up to a factor
    return sum(traffic.values()) / sum(s * frac[t] for t, s in tiers.items())


def _check_same_model(measurement: Measurement, model: ModelSpec) -> None:
    if not measurement.model_id:
        return
    try:
        ran = resolve_model(measurement.model_id)
    except RooflineError:
        return
    if ran.id != model.id:
        raise WorkloadError(f"{measurement.source} measured {measurement.model_id} ({ran.id}), not {model.id}: "
                            f"diagnose {ran.id}, or correct the file's model_id")


def diagnose(model: ModelLike, group: GroupLike, measurement: Measurement, *,
             formats: dict[str, Any] | None = None, params: EngineParams | None = None) -> Diagnosis:
    """Compare a measured decode speed with the work it implies and the device's datasheet peaks.

    A measurement faster than the hardware allows (above 100% of peak bandwidth or FLOP/s) raises
    :class:`WorkloadError`: the setup given (batch, formats, devices) cannot be the one measured. So does a
    measurement whose file names another shipped model than ``model`` (vLLM's ``model_id``; one with no preset is
    not checked): the wrong model's physics would read as a plausible diagnosis.
    """
    m, g = resolve_model(model), resolve_group(group)
    _check_same_model(measurement, m)
    f = Formats.for_model(m, **(formats or {}), devices=(g.device,))
    ms = measurement
    context = check_count("context", round(ms.input_tokens + ms.output_tokens / 2))   # mean lengths: a whole context
    batch = max(1.0, ms.batch)
    # continuous batching: each step also carries the arriving requests' prompts, isl/osl tokens per sequence
    new = 1 + (ms.input_tokens / ms.output_tokens if ms.serving == "continuous" else 0)
    p = params if params is not None else default_params()
    r = evaluate_pass(m, g, f, batch=batch, new_tokens=new, prefix_tokens=context, logits_per_seq=1.0,
                      mla_absorbed=True, stage="decode", params=p)
    if not bool(r.fits):
        raise WorkloadError(f"{m.id} does not fit on {g.describe()} at batch {batch:g} and context {float(context):g} "
                            f"with weights {f.weights} and KV {f.kv} ({r.memory_per_device_bytes / 1e9:.1f} GB per "
                            f"device): give the run's formats (--weights, --kv) and device count")
    cls = main_compute_class(m, g.device, f)
    peak_flop = g.device.get(f"compute.{cls}")
    peak_bw = _peak_bandwidth(r.memory_by_tier_s, g.device, resolve_profile(g.device, p))
    bytes_step, flop_step = float(r.bytes_per_device), float(r.flop_per_device)
    mbu, mfu = bytes_step / ms.tpot_s / peak_bw, flop_step / ms.tpot_s / peak_flop
    if mbu > 1 or mfu > 1:
        which = f"{mbu:.0%} of peak bandwidth" if mbu > 1 else f"{mfu:.0%} of peak {cls} FLOP/s"
        raise WorkloadError(f"the measured {1 / ms.tpot_s:.4g} tokens/s per user implies {which} on {g.describe()}: "
                            "impossible for this device; check the batch, the formats (--weights, --kv) and the "
                            "device count")
    narrower = _narrower_formats(g.device, f.weight.bits_per_element)
    best = g.device.measured_flop_per_s.get(cls)
    binding, advice = _verdict(mbu, mfu, ms.utilisation, split=g.count > 1, narrower="/".join(narrower),
                               compute_share=float(r.compute_s) / ms.tpot_s)
    off = float(r.time_s) / ms.tpot_s - 1
    gap = (f"{abs(off):.0%} {'above' if off > 0 else 'below'} the measured {_ms(ms.tpot_s)}" if off > -0.5 else
           f"the measured {_ms(ms.tpot_s)} being {1 / (1 + off):.3g}x that")
    advice += (f". The model predicts {_ms(float(r.time_s))} per output token for this setup, {gap}"
               + (": the run is slower than this roofline explains (a stack or setting the model does not know, or a "
                  "setup other than the one given)" if off < -0.25 else
                  ": the run beats this calibration (a faster stack, or a setup other than the one given)" if off > 0.25
                  else ""))
    return Diagnosis(model=m.id, group=g.describe(), measurement=ms, bytes_per_step=bytes_step, flop_per_step=flop_step,
                     achieved_bytes_per_s=bytes_step / ms.tpot_s, achieved_flop_per_s=flop_step / ms.tpot_s,
                     peak_bytes_per_s=peak_bw, peak_flop_per_s=peak_flop, compute_class=cls, mbu=mbu, mfu=mfu,
                     measured_flop_per_s=best, mfu_of_measured=None if best is None else flop_step / ms.tpot_s / best,
                     modelled_compute_share=float(r.compute_s) / ms.tpot_s, predicted_tpot_s=float(r.time_s),
                     binding=binding, advice=advice)


def _ms(seconds: float) -> str:
    """A time in ms for a sentence: three significant digits, whole ms with separators from 100 ms up."""
    ms = seconds * 1e3
    return f"{ms:,.0f} ms" if ms >= 100 else f"{ms:.3g} ms"
