"""The engine's global parameters: achieved fractions of peak and fixed overheads, in one place.

Pure rooflines land 30-50% off real serving numbers; the difference is mostly
these few physical parameters. The class defaults are engineering estimates
from the sources below (theory.md §1.2-1.3, §5.1); :data:`DEFAULT_PARAMS`, which
every function uses, is the shipped fit of the same parameters to published
measurements (``roofline/profiles/default.toml``, ``roofline calibrate``). Override any of them with
``attrs.evolve(DEFAULT_PARAMS, step_overhead_s=...)`` or per device with a
spec file's ``[derates]`` / ``[floors]``.
"""

from __future__ import annotations

import attrs

_frac = [attrs.validators.gt(0), attrs.validators.le(1)]
_nonneg = attrs.validators.ge(0)


@attrs.frozen(kw_only=True)
class EngineParams:
    """Global efficiency and overhead parameters (all SI).

    * ``memory_bandwidth_fraction`` (MBU): achieved / peak memory bandwidth.
      0.80 is aiconfigurator's ``mem_bw_empirical_scaling_factor``; well-tuned
      CUDA stacks reach 0.6-0.85 in decode (theory.md §1.3).
    * ``compute_fraction`` (MFU): achieved / peak tensor FLOP/s for large passes;
      0.6 sits in the 0.5-0.7 prefill range of theory.md §1.3 (PaLM reached 0.76).
    * ``low_precision_compute_scale``: FP8/FP6/FP4/INT8/INT4 tensor-core matmuls
      reach this fraction of the efficiency BF16 ones reach (their kernels are
      younger and more often bound by scaling and data movement); 1 = same.
    * ``compute_half_tokens``: a pass over T tokens reaches
      compute_fraction * T / (T + compute_half_tokens) of peak: small matmuls
      (short prompts, decode) run below peak (DESIGN.md: "prefill at batch 1 runs
      well below peak FLOP/s"). 0 disables it.
    * ``link_bandwidth_fraction``: NCCL reaches ~370 of 450 GB/s on NVLink (scaling book).
    * ``step_overhead_s`` (T_0): launches, sampling and scheduling per forward
      pass, 0.05-0.3 ms with CUDA graphs (theory.md §1.2).
    * ``layer_overhead_s``: fixed cost per layer per pass (kernel boundaries).
    * ``collective_base_s`` / ``link_hop_latency_s``: all-reduce cost
      t0 + 2(p-1) t_hop + 2(p-1)/p M/W, GenZ's ``collective_times.py`` constant
      5 us and ~1 us per hop; a spec file's link latency replaces the hop value.
    * ``dequant_ops_per_element``: vector ops to dequantise one weight element in
      weight-only kernels (int4/int8 weight-only, FP4 on chips without FP4
      units), executed at the device's fp32 rate: the reason weight-only decode
      is slower than its bytes suggest (DESIGN.md).
    * ``usable_memory_fraction``: share of each tier an engine may fill with
      weights, KV and workspace; theory.md §3.3 uses u = 0.9-0.95 (vLLM's
      ``gpu_memory_utilization`` defaults to 0.9, TensorRT-LLM gives 0.9 of the
      memory left after the weights to the KV cache).
    * ``expert_imbalance``: busiest expert shard / mean under expert parallelism (>= 1).
    """

    memory_bandwidth_fraction: float = attrs.field(default=0.80, validator=_frac)
    compute_fraction: float = attrs.field(default=0.60, validator=_frac)
    link_bandwidth_fraction: float = attrs.field(default=0.80, validator=_frac)
    low_precision_compute_scale: float = attrs.field(default=1.0, validator=_frac)
    compute_half_tokens: float = attrs.field(default=0.0, validator=_nonneg)
    step_overhead_s: float = attrs.field(default=100e-6, validator=_nonneg)
    layer_overhead_s: float = attrs.field(default=2e-6, validator=_nonneg)
    collective_base_s: float = attrs.field(default=5e-6, validator=_nonneg)
    link_hop_latency_s: float = attrs.field(default=1e-6, validator=_nonneg)
    dequant_ops_per_element: float = attrs.field(default=4.0, validator=_nonneg)
    usable_memory_fraction: float = attrs.field(default=0.95, validator=_frac)
    expert_imbalance: float = attrs.field(default=1.0, validator=attrs.validators.ge(1))


def _shipped() -> EngineParams:
    """The ``[params]`` of the shipped calibration profile, fitted to the published measurements in
    ``roofline/validation/measurements.csv``; reproduce it with
    ``roofline calibrate --out roofline/profiles/default.toml``. Falls back to the estimates above."""
    import tomllib
    from importlib import resources
    from pathlib import Path

    path = Path(str(resources.files("roofline"))) / "profiles" / "default.toml"
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8"))["params"]
        return EngineParams(**{k: float(v) for k, v in table.items()})
    except (OSError, KeyError, ValueError, TypeError, tomllib.TOMLDecodeError):
        return EngineParams()


#: What every function uses unless given ``params=``: the calibrated defaults.
DEFAULT_PARAMS = _shipped()
