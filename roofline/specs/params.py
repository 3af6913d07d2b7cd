"""Engine parameters (achieved fractions of peak and fixed overheads), calibration profiles, and their files.

Pure rooflines land 30-50% off real serving numbers; the difference is mostly
these few physical parameters (docs/theory.md §1.2-1.3, §5.1). The class
defaults are engineering estimates from the sources in :class:`EngineParams`;
:func:`default_params`, which every function uses unless given ``params=``, is
the shipped fit of :data:`DEFAULT_STACK` (vLLM) to published measurements
(``roofline/profiles/default.toml``, reproduced by ``roofline calibrate``).

A :class:`Profile` holds one pooled parameter set (``[params]``, fitted to every
stack's rows at once: the ``pooled`` stack) and one per serving-stack family
(gpt-fast, TensorRT-LLM/NIM, vLLM, SGLang and their ROCm builds). GPUs run
:data:`DEFAULT_STACK`'s set unless a stack is named. Profile files are read and
written here and nowhere else. A broken shipped profile is an error, never a
silent fallback.
"""

from __future__ import annotations

import functools
import math
import os
import re
import tomllib
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any

import attrs

from ..errors import RooflineError, SpecError, UnitError, WorkloadError
from ..units import parse_quantity
from ..workload import in_range, one_of
from .files import loads_toml, read_text, write_text_atomic
from .formats import get_format

_frac = [in_range(0, 1, lo_strict=True)]
_nonneg = [in_range(0)]


def _float(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:   # too large for a float: the field's validator says so, naming the field
            return value
    return value


def _p(default: float, validators: list[Any]) -> Any:
    return attrs.field(default=default, converter=_float, validator=validators)


FAMILIES = ("gpu", "groq", "cerebras", "sambanova", "d-matrix", "tpu", "trainium", "gaudi", "cpu", "generic")
COLLECTIVES = ("ring", "scheduled", "auto", "none")
ADMISSIONS = ("paged", "reserve")
MOE_DISPATCHES = ("gather", "alltoall")
OVERLAPS = ("pass", "kernel")


@attrs.frozen(kw_only=True)
class WeightOnlyKernel:
    """A weight-only matmul kernel whose unpacking does not follow its device family's ``dequant_tile_rows``:
    the weight formats it runs (format names) and the token rows one unpacking of the weights serves."""

    formats: tuple[str, ...]
    weights: str   # the formats in words, for the line under the tables
    tile_rows: float
    source: str


#: Weight-only kernels a serving stack runs in place of its family's (:data:`STACK_WEIGHT_ONLY_KERNEL`).
#: tinygemm (PyTorch's ``_weight_int4pack_mm``, https://github.com/pytorch/pytorch/blob/
#: 05f814fecfca7d2a17f28cbe7e1cb2d8d4c13230/aten/src/ATen/native/cuda/int4mm.cu) is the int4 kernel gpt-fast
#: and torchao call. Its cost grows with the token rows well inside one 16-row m-tile: on an H200 an 8192 x 28672
#: int4 matmul (group 128) takes 65-69 us at 1-2 tokens and 94, 159, 275, 535 and 1,032 us at 4, 8, 16, 32 and
#: 64 (scripts/measure_h200.py, roofline/validation/h200_microbench.json; 4096 x 14336 the same shape of curve),
#: about one more 1-token cost per 3.5-4 rows; torchao's table of it on an RTX A6000 (4096 x 4096) grows 8.7x
#: from 128 to 1,024 rows (https://github.com/pytorch/ao/blob/2a18357813a661f9db05459e15af7a4ea0488997/
#: torchao/prototype/hqq/README.md). Charged as one unpacking per 4 rows: what it measures, not why (each warp
#: of its n-tiles re-reads the activations, so the per-row work is plausibly the activation fragments' loads and
#: the scale-and-zero arithmetic rather than the unpacking itself).
WEIGHT_ONLY_KERNELS: dict[str, WeightOnlyKernel] = {
    # int4mm.cu accepts groups of 32, 64, 128 and 256 only (TORCH_CHECK on qGroupSize)
    "tinygemm": WeightOnlyKernel(formats=("int4-g32", "int4-g64", "int4-g128", "int4-g256"),
                                 weights="int4 (groups of 32-256)", tile_rows=4.0,
                                 source="scripts/measure_h200.py int4 section (h200_microbench.json)"),
}


def _whole(name: str, value: float) -> None:
    if not math.isfinite(value) or value != int(value):
        raise WorkloadError(f"{name} is a count of devices, a whole number: got {value!r}")


def _tier_fractions(_inst: object, _a: attrs.Attribute, value: Mapping[str, float]) -> None:
    for k, v in value.items():
        if not (isinstance(v, float) and 0 < v <= 1):
            raise WorkloadError(f"{k}_bandwidth_fraction must be in (0, 1], got {v!r}")


@attrs.frozen(kw_only=True)
class EngineParams:
    """An execution profile: how a device family's software runs a model, as efficiencies and costs (all SI).

    GPUs run kernels launched from a host; dataflow and SRAM-centric chips run a compiled pipeline. Each
    device names its ``family`` in its spec file; the family's profile (``hardware_specs/execution/``, or for
    ``gpu`` the shipped calibration) supplies these, and a spec's ``[execution]`` table overrides them per
    device. Fields:

    * ``memory_bandwidth_fraction`` (MBU): achieved / peak memory bandwidth.
      0.80 is aiconfigurator's ``mem_bw_empirical_scaling_factor``
      (https://github.com/ai-dynamo/aiconfigurator); tuned CUDA stacks reach
      0.6-0.85 in decode (docs/theory.md §1.3).
    * ``compute_fraction`` (MFU): achieved / peak tensor FLOP/s for large passes;
      0.6 sits in the 0.5-0.7 prefill range of docs/theory.md §1.3 (PaLM reached
      0.76, https://arxiv.org/abs/2204.02311).
    * ``prefill_compute_scale``: prefill passes reach this fraction of the efficiency decode-sized passes
      reach (long-prompt attention kernels, activation all-reduces and scheduling a serving stack pays per
      prompt; 1 = the same).
    * ``sequence_overhead_s``: host time per running sequence per step (scheduling, sampling, detokenising:
      Python schedulers pay tens of microseconds per sequence, so a step over 1,000 sequences costs
      milliseconds before any kernel runs).
    * ``request_overhead_s``: per-request time before the first token that is not model execution (HTTP,
      tokenisation, admission by the scheduler, detokenising and streaming the first token); added to TTFT.
    * ``low_precision_compute_scale``: FP8/FP6/FP4/INT8/INT4 tensor-core matmuls
      reach this fraction of the efficiency BF16 ones reach; 1 = same. ``fp4_compute_scale``: matmuls with
      both operands 4-bit floats (NVFP4 W4A4, MXFP4 x MXFP4) reach this fraction again (their block scales
      and smaller tiles keep them further from a peak twice FP8's).
    * ``compute_half_tokens``: a pass over T tokens reaches
      compute_fraction * T / (T + compute_half_tokens) of peak: small matmuls
      (short prompts, decode) run below peak (tile quantisation, occupancy). 0 disables it.
    * ``link_bandwidth_fraction``: the share of a link's bandwidth an all-to-all, a pipeline hop or a
      scale-out transfer achieves: NCCL reaches ~370 of 450 GB/s on NVLink with large messages (scaling book,
      https://jax-ml.github.io/scaling-book/gpus/).
    * ``allreduce_bandwidth_fraction``: the share of the scale-up link a tensor-parallel all-reduce achieves.
      The family files give it their link share; inside a GPU serving step (MB-sized messages beside the
      GEMMs, fused with the residual add and the norm) it reaches less, and the GPU calibration fits it,
      shared by every stack, from the rows that sweep tensor parallelism on one model (docs/validation.md).
    * ``step_overhead_s`` (T_0): launches, sampling and scheduling per forward
      pass, 0.05-0.3 ms with CUDA graphs (docs/theory.md §1.2).
    * ``layer_overhead_s``: fixed cost per layer per pass (kernel boundaries on GPUs, the stage latency of
      a compiled pipeline on dataflow chips); ``moe_layer_overhead_s``: the extra fixed cost of a layer with
      routed experts (routing, dispatch and combine: more kernels on GPUs, more pipeline stages elsewhere).
    * ``kernel_overhead_s``: fixed cost per kernel on GPUs (launch gap and tail between kernels), times the
      kernels of a pass counted by layer kind (:func:`roofline.physics.work.kernels_per_pass`: GQA or MLA
      attention, dense MLP or routed experts). The GPU family file and its calibration set the per-layer
      costs to 0 and fit this instead; a bare ``EngineParams()`` keeps generic defaults (2 us per layer, no
      per-kernel cost, 4 unpacking ops per element) for devices without a profile.
    * ``collective_base_s`` / ``link_hop_latency_s``: all-reduce cost
      t0 + 2(p-1) t_hop + 2(p-1)/p M/W; GenZ's collective model uses a 5 us
      constant and ~1 us per hop (https://github.com/abhibambhaniya/GenZ-LLM-Analyzer);
      a spec file's link latency replaces the hop value.
    * ``dequant_ops_per_element``: vector ops to dequantise one weight element in
      weight-only kernels, executed at the device's fp32 rate x ``compute_fraction``.
    * ``dequant_tile_rows``: token rows one dequantised weight tile serves: a weight-only matmul over T
      tokens unpacks its weights ceil(T / dequant_tile_rows) times (Marlin runs a batch in slices of at most
      4 x 16 = 64 rows, each thread block unpacking its own copy of the weight tiles).
    * ``usable_memory_fraction``: share of each tier an engine may fill with
      weights, KV and workspace; vLLM's ``gpu_memory_utilization`` defaults to
      0.9 (https://docs.vllm.ai/en/latest/configuration/engine_args.html).
    * ``expert_imbalance``: routing skew on top of uniform routing's busiest-shard imbalance under expert
      parallelism (computed, :func:`roofline.physics.work.expert_shard_imbalance`); 1 = uniform routing.
    * ``expert_load_slope``: how the routed tokens of the busiest expert-parallel rank exceed the mean,
      1 + slope x log2(ep) (:func:`roofline.physics.work.expert_load_imbalance`); it scales that rank's expert
      matmuls and the tokens it receives. 0.17 = DeepSeek-V3's measured routing without a load balancer (SGLang's
      simulation, EP 8-64); about 0.04 with EPLB's redundant experts; 0 = perfectly balanced routing.
    * ``attention_dp_balance``: whether an engine with attention data parallelism synchronises its ranks' prompt
      phases (TensorRT-LLM's ``attention_dp_config.enable_balance``) or places each arriving prompt on one rank
      while the others decode (the default of TensorRT-LLM, vLLM and SGLang; None = that): then the step waits
      for the rank carrying the prompts (:func:`roofline.physics.work.rider_rank_share`).
    * ``moe_dispatch``: how attention data-parallel ranks hand their tokens to the experts: ``gather`` (every rank
      all-gathers every token, runs its experts on them and reduce-scatters the outputs: vLLM's default
      ``--all2all-backend allgather_reducescatter``, https://docs.vllm.ai/en/latest/configuration/engine_args.html;
      TensorRT-LLM's CUTLASS MoE under attention DP, "fp4_allgather + FusedMoe Op + reducescatter",
      https://github.com/NVIDIA/TensorRT-LLM/blob/000a01de66f0eab4ab05640711f0253f50f5209c/tensorrt_llm/_torch/modules/fused_moe/fused_moe_cutlass.py,
      which keeps it whenever EP <= top-k or without multi-node NVLink) or ``alltoall`` (each token's top-k copies
      sent to the experts' ranks: DeepEP, TensorRT-LLM's MNNVL all-to-all on GB200 NVL72 with EP > top-k);
      None = gather.
    * ``family``: the device family this profile describes.
    * ``m_tile``: rows of the matmul unit's tile; a pass over T tokens computes ceil(T/m_tile) x m_tile
      rows (1 = matrix-vector native: nothing wasted at batch 1).
    * ``tier_bandwidth_fraction``: achieved fraction of peak per memory tier by name (SRAM and HBM differ);
      tiers not listed use ``memory_bandwidth_fraction``.
    * ``collective``: how the family's collectives run: ``ring`` (NCCL-like, latency grows with ranks),
      ``scheduled`` (compiler-scheduled direct exchange: t0 + 2 hops + bytes/W), ``auto`` (the faster of a
      one-shot all-reduce and the ring at each message size, as GPU serving stacks choose), ``none`` (no
      collectives); None = the family's (a serving stack's own choice comes from :data:`STACK_COLLECTIVES`).
    * ``kv_admission``: how continuous batching admits a request against KV memory: ``paged`` (vLLM, SGLang:
      blocks as they fill, preempting when they run out, so the batch holds its mean context isl + osl/2)
      or ``reserve`` (TensorRT-LLM's default GUARANTEED_NO_EVICT: the blocks of prompt + maximum output are
      reserved at admission, so the batch holds the final context isl + osl); None = paged, or the serving
      stack's own choice (:data:`STACK_ADMISSION`).
    * ``chunked_prefill``: whether continuous batching splits prompts into chunks that fit the step's token
      budget (vLLM, SGLang) or admits each prompt whole, the budget raised to hold it beside the batch
      (TensorRT-LLM's default); None = chunked, or the serving stack's own choice (:data:`STACK_CHUNKED_PREFILL`).
    * ``windowed_kv``: whether a sliding-window layer's KV cache holds only its window (vLLM's hybrid KV cache
      manager) or the whole context like a full-attention layer, the window applied only as the attention
      kernel's mask (TensorRT-LLM unless ``kv_cache_config.max_attention_window`` is set): capacity only, the
      kernel reads the window either way; None = windowed, or the serving stack's own choice
      (:data:`STACK_WINDOWED_KV`).
    * ``head_format``: the format a stack's toolchain keeps the embedding table and LM head in when the other
      weights are quantised narrower (:meth:`Formats.with_toolchain_head <roofline.specs.formats.Formats>`);
      None = quantised with the weights, or the serving stack's own choice (:data:`STACK_HEAD_FORMAT`).
    * ``expert_recipe``: the format a serving stack runs MXFP4 routed experts in beside 16-bit activations on a
      device with FP4 and FP8 units (``w4a8-mxfp4``: TensorRT-LLM quantises the MoE's activations to MXFP8 on
      Blackwell); None = the experts as given, or the serving stack's own choice (:data:`STACK_EXPERT_RECIPE`).
    * ``weight_only_kernel``: the weight-only matmul kernel a serving stack runs where it unpacks weights
      differently from its family's ``dequant_tile_rows`` (:data:`WEIGHT_ONLY_KERNELS`: tinygemm, gpt-fast's
      int4, unpacks per ~4 token rows); for the formats it runs its rows replace ``dequant_tile_rows`` (a
      what-if of that field then changes only the other formats). None = the family's, or the serving stack's
      own choice (:data:`STACK_WEIGHT_ONLY_KERNEL`).
    * ``overlap``: what a pass's compute overlaps its memory traffic within: ``pass`` (one roofline over the
      whole pass, max(compute, memory): a compiled pipeline streams weights and KV beside every unit's work)
      or ``kernel`` (kernels run one after another and each overlaps only its own traffic: the weight matmuls
      max(matmul compute, weight and activation traffic) plus the attention kernels max(attention compute,
      KV traffic): a two-group form of LLM-Viewer's per-operator roofline (https://arxiv.org/abs/2402.16363
      §2; all matmuls, routed experts included, share one roofline); a decode step whose matmuls are
      compute-bound and whose attention is bound by KV reads pays both. A prompt chunk riding a decode step
      shares the step's attention roofline (one varlen attention kernel, as vLLM's V1 engine runs; an engine
      with separate prefill and decode attention kernels pays somewhat more).
    * ``overlap_efficiency`` (eta): the share of the shorter of a roofline's compute and memory times that hides
      under the longer: T = max(c, m) + (1 - eta) min(c, m) for each roofline ``overlap`` forms. 1 is the
      roofline's lower bound max(c, m), 0 its serial upper bound c + m (the scaling book's two bounds,
      https://jax-ml.github.io/scaling-book/roofline/); a kernel near its ridge point keeps neither its tensor
      cores nor its memory system busy all the time, so real kernels sit between them.
    * ``pipeline_hop_s``: latency of one pipeline-stage boundary crossing (None: the link's latency).
    * Busy floor (fractions of TDP; :func:`roofline.physics.energy.busy_power_w`): power while a stage runs
      never drops below a floor set by what bounds each part of its time. ``busy_floor_fraction``: the floor
      of bandwidth-bound work (a clocked pipeline is not at idle power; on GPUs the power a loaded serving GPU
      draws beyond the linear model). ``compute_floor_fraction``: the floor of compute-bound work; the work's
      floor rises linearly from the first to the second as compute's share of the work time,
      T_compute / (T_compute + T_memory), goes from 0 to ``compute_floor_share`` (an H200 GEMM reaches its
      compute-bound power at about a third of its time in tensor cores). ``communication_floor_fraction``:
      the floor of collective time. ``fixed_floor_fraction``: the floor of fixed-cost time (launches, host
      scheduling, pipeline stage latency); the device's idle power where lower (an H200 waiting on host
      launches draws its idle power). A family that sets all four floors equal has one floor for all busy time.
    * ``compute_power_weight`` (w_c) / ``memory_power_weight`` (w_m): the share of the range from idle to TDP
      that saturated compute units / a saturated memory stream draw; busy power is idle + (TDP - idle) x
      min(1, w_c T_compute / T + w_m T_memory / T) (:mod:`roofline.physics.energy`). Independent: an H200
      copying at its full bandwidth draws 0.76 of the range and a saturated GEMM reaches its 700 W cap.
    * ``max_tp``: default layout: tensor parallel up to this many devices, then pipeline stages.
    """

    memory_bandwidth_fraction: float = _p(0.80, _frac)
    compute_fraction: float = _p(0.60, _frac)
    prefill_compute_scale: float = _p(1.0, _frac)
    request_overhead_s: float = _p(0.0, _nonneg)
    sequence_overhead_s: float = _p(0.0, _nonneg)
    link_bandwidth_fraction: float = _p(0.80, _frac)
    allreduce_bandwidth_fraction: float = _p(0.80, _frac)
    low_precision_compute_scale: float = _p(1.0, _frac)
    fp4_compute_scale: float = _p(1.0, _frac)
    compute_half_tokens: float = _p(0.0, _nonneg)
    step_overhead_s: float = _p(100e-6, _nonneg)
    layer_overhead_s: float = _p(2e-6, _nonneg)
    moe_layer_overhead_s: float = _p(0.0, _nonneg)
    kernel_overhead_s: float = _p(0.0, _nonneg)
    collective_base_s: float = _p(5e-6, _nonneg)
    link_hop_latency_s: float = _p(1e-6, _nonneg)
    dequant_ops_per_element: float = _p(4.0, _nonneg)
    dequant_tile_rows: float = _p(64.0, [in_range(1)])
    usable_memory_fraction: float = _p(0.95, _frac)
    expert_imbalance: float = _p(1.0, [in_range(1)])
    expert_load_slope: float = _p(0.17, _nonneg)
    attention_dp_balance: bool | None = attrs.field(default=None, validator=attrs.validators.optional(
        attrs.validators.instance_of(bool)))
    moe_dispatch: str | None = attrs.field(default=None, validator=attrs.validators.optional(one_of(MOE_DISPATCHES)))
    family: str = attrs.field(default="gpu", validator=one_of(FAMILIES))
    m_tile: float = _p(1.0, [in_range(1)])
    tier_bandwidth_fraction: Mapping[str, float] = attrs.field(
        factory=dict, converter=lambda m: MappingProxyType({k: _float(v) for k, v in dict(m).items()}),
        validator=_tier_fractions)
    collective: str | None = attrs.field(default=None, validator=attrs.validators.optional(one_of(COLLECTIVES)))
    kv_admission: str | None = attrs.field(default=None, validator=attrs.validators.optional(one_of(ADMISSIONS)))
    chunked_prefill: bool | None = attrs.field(default=None, validator=attrs.validators.optional(
        attrs.validators.instance_of(bool)))
    windowed_kv: bool | None = attrs.field(default=None, validator=attrs.validators.optional(
        attrs.validators.instance_of(bool)))
    head_format: str | None = attrs.field(default=None, validator=lambda _i, _a, v: v is None or get_format(v))
    expert_recipe: str | None = attrs.field(default=None, validator=lambda _i, _a, v: v is None or get_format(v))
    weight_only_kernel: str | None = attrs.field(default=None, validator=attrs.validators.optional(
        one_of(tuple(WEIGHT_ONLY_KERNELS))))
    overlap: str = attrs.field(default="pass", validator=one_of(OVERLAPS))
    overlap_efficiency: float = _p(1.0, [in_range(0, 1)])
    pipeline_hop_s: float | None = attrs.field(default=None, converter=lambda v: None if v is None else _float(v),
                                               validator=in_range(0, optional=True))
    busy_floor_fraction: float = _p(0.0, [in_range(0, 1)])
    compute_floor_fraction: float = _p(0.0, [in_range(0, 1)])
    compute_floor_share: float = _p(1.0, [in_range(0, 1, lo_strict=True)])
    communication_floor_fraction: float = _p(0.0, [in_range(0, 1)])
    fixed_floor_fraction: float = _p(0.0, [in_range(0, 1)])
    compute_power_weight: float = _p(0.5, [in_range(0, 1)])
    memory_power_weight: float = _p(0.5, [in_range(0, 1)])
    max_tp: float = _p(8.0, [in_range(1), lambda _i, _a, v: _whole("max_tp", v)])

    def bandwidth_fraction(self, tier: str) -> float:
        """Achieved fraction of peak bandwidth for a memory tier."""
        return self.tier_bandwidth_fraction.get(tier, self.memory_bandwidth_fraction)

    def unpack_tile_rows(self, weight_format: str) -> float:
        """Token rows one unpacking of ``weight_format`` weights serves: the stack's weight-only kernel's
        (:data:`WEIGHT_ONLY_KERNELS`) for the formats it runs, else ``dequant_tile_rows``."""
        kernel = WEIGHT_ONLY_KERNELS.get(self.weight_only_kernel or "")
        if kernel is not None and weight_format in kernel.formats:
            return kernel.tile_rows
        return self.dequant_tile_rows


#: Names of profile fields as spec files and ``--set ID.execution.NAME=VALUE`` write them: attribute and unit kind.
PROFILE_FIELDS: dict[str, tuple[str, str]] = {
    "memory_bandwidth_fraction": ("memory_bandwidth_fraction", "fraction"),
    "compute_fraction": ("compute_fraction", "fraction"),
    "prefill_compute_scale": ("prefill_compute_scale", "fraction"),
    "request_overhead": ("request_overhead_s", "s"),
    "sequence_overhead": ("sequence_overhead_s", "s"),
    "link_bandwidth_fraction": ("link_bandwidth_fraction", "fraction"),
    "allreduce_bandwidth_fraction": ("allreduce_bandwidth_fraction", "fraction"),
    "low_precision_compute_scale": ("low_precision_compute_scale", "fraction"),
    "fp4_compute_scale": ("fp4_compute_scale", "fraction"),
    "compute_half_tokens": ("compute_half_tokens", "number"),
    "m_tile": ("m_tile", "number"),
    "step_overhead": ("step_overhead_s", "s"),
    "layer_overhead": ("layer_overhead_s", "s"),
    "moe_layer_overhead": ("moe_layer_overhead_s", "s"),
    "kernel_overhead": ("kernel_overhead_s", "s"),
    "collective_base": ("collective_base_s", "s"),
    "link_hop_latency": ("link_hop_latency_s", "s"),
    "pipeline_hop": ("pipeline_hop_s", "s"),
    "dequant_ops_per_element": ("dequant_ops_per_element", "number"),
    "dequant_tile_rows": ("dequant_tile_rows", "number"),
    "usable_memory_fraction": ("usable_memory_fraction", "fraction"),
    "expert_imbalance": ("expert_imbalance", "number"),
    "expert_load_slope": ("expert_load_slope", "number"),
    "busy_floor_fraction": ("busy_floor_fraction", "share"),
    "compute_floor_fraction": ("compute_floor_fraction", "share"),
    "compute_floor_share": ("compute_floor_share", "fraction"),
    "communication_floor_fraction": ("communication_floor_fraction", "share"),
    "fixed_floor_fraction": ("fixed_floor_fraction", "share"),
    "compute_power_weight": ("compute_power_weight", "share"),
    "memory_power_weight": ("memory_power_weight", "share"),
    "overlap_efficiency": ("overlap_efficiency", "share"),
    "max_tp": ("max_tp", "number"),
    "collective": ("collective", "choice"),
    "overlap": ("overlap", "choice"),
}
#: The words a ``choice`` field takes.
CHOICES: dict[str, tuple[str, ...]] = {"collective": COLLECTIVES, "overlap": OVERLAPS}
#: profile fields that count devices or token rows
WHOLE_FIELDS = frozenset({"max_tp", "m_tile", "dequant_tile_rows"})
TIER_SUFFIX = "_bandwidth_fraction"


def profile_value(name: str, raw: Any, *, what: str) -> tuple[str, Any]:
    """(attribute, value) for a profile field written as ``name = raw`` in a file or a what-if.

    Times carry units (``"40 us"``), fractions and counts are plain numbers, ``collective`` and ``overlap`` words;
    ``<tier>_bandwidth_fraction`` sets one memory tier's fraction. Raises :class:`SpecError` naming ``what``.
    """
    if name not in PROFILE_FIELDS and name.endswith(TIER_SUFFIX) and name != "memory" + TIER_SUFFIX:
        attr, kind = f"tier:{name[: -len(TIER_SUFFIX)]}", "fraction"
    elif name in PROFILE_FIELDS:
        attr, kind = PROFILE_FIELDS[name]
    else:
        raise SpecError(f"{what}: {name!r} is not an execution-profile field ({', '.join(PROFILE_FIELDS)}, "
                        f"or <tier>{TIER_SUFFIX})")
    if kind == "choice":
        if raw not in CHOICES[name]:
            raise SpecError(f"{what}: {name} = {raw!r}: must be one of {', '.join(CHOICES[name])}")
        return attr, raw
    try:
        value = parse_quantity(raw, "s" if kind == "s" else "count", what=f"{what}.{name}")
    except UnitError as e:
        raise SpecError(str(e)) from None
    bounds = {"fraction": (0 < value <= 1, "a fraction in (0, 1]"), "share": (0 <= value <= 1, "a share in [0, 1]")}
    ok, why = bounds.get(kind, (value >= 0, ">= 0"))
    if name in WHOLE_FIELDS and ok:   # devices, rows: 8.5 devices per scale-up domain is no layout
        ok, why = value >= 1 and float(value).is_integer(), "a whole number >= 1"
    if not ok:
        raise SpecError(f"{what}: {name} = {raw!r}: must be {why}")
    return attr, value


def with_values(base: EngineParams, values: Mapping[str, Any], *, what: str) -> EngineParams:
    """``base`` with profile attributes replaced (``tier:<name>`` keys set one tier's fraction)."""
    tiers = {k.split(":", 1)[1]: v for k, v in values.items() if k.startswith("tier:")}
    plain = {k: v for k, v in values.items() if not k.startswith("tier:")}
    if tiers:
        plain["tier_bandwidth_fraction"] = {**base.tier_bandwidth_fraction, **tiers}
    try:
        return attrs.evolve(base, **plain)
    except (RooflineError, ValueError, TypeError) as e:
        raise SpecError(f"{what}: {e}") from None


def stack_family(stack: str, vendor: str = "", isa: str = "") -> str:
    """The serving-stack family of a measurement's ``stack`` column: gpt-fast, tensorrt-llm (with NIM and
    MLPerf submissions built on it), vllm, sglang, or other. On an AMD device vLLM and SGLang are their ROCm
    builds (``vllm-rocm``, ``sglang-rocm``): other attention, GEMM and MoE kernels (AITER, hipBLASLt, RCCL;
    https://rocm.docs.amd.com/en/latest/how-to/rocm-for-ai/inference-optimization/workload.html), so they
    carry their own efficiencies and fixed costs. Given the device's ISA they are that ISA's build
    (``sglang-rocm-gfx942``): the images are built per ISA (SGLang's ``-rocm700-mi30x`` and ``-mi35x`` tags)
    and the code picks kernels by it. SGLang gated its fused MLA RoPE-and-cache kernel to gfx950 until
    https://github.com/sgl-project/sglang/pull/18242 (gfx942 ran the unfused fallbacks, ~11% of decode), and
    AITER's FP8 block-scale GEMM ran gfx942 on untuned default tiles for DeepSeek's shapes until
    https://github.com/ROCm/aiter/pull/1930 (median TPOT at 4 concurrent requests 28.8 -> 22.1 ms)."""
    s = stack.lower()
    if "gpt-fast" in s:
        return "gpt-fast"
    if re.search(r"tensorrt|trt-llm|nim", s):
        return "tensorrt-llm"
    for name in ("sglang", "vllm"):
        if name in s:
            if vendor.strip().lower() != "amd":
                return name
            return f"{name}-rocm-{isa.strip().lower()}" if isa.strip() else f"{name}-rocm"
    return "other"


_PLATFORM_BUILD = re.compile(r"^(?P<parent>.+)-(?:rocm|gfx[0-9a-z]+)$")


def parent_family(family: str) -> str | None:
    """The family a platform build specialises (``sglang-rocm-gfx942`` -> ``sglang-rocm`` -> ``sglang``);
    None for a stack's own family."""
    m = _PLATFORM_BUILD.match(family)
    return m.group("parent") if m else None


def family_chain(family: str) -> list[str]:
    """``family`` and the families it specialises, most specific first."""
    chain = [family]
    while (up := parent_family(chain[-1])) is not None:
        chain.append(up)
    return chain


#: What a platform build fits of its own when it has few rows, and what a build no calibration row measured
#: borrows from another stack's build for the same ISA (:func:`platform_donors`): the efficiencies its kernels
#: reach and the gap each kernel leaves. These belong to the platform's launch path and kernel libraries (the HIP
#: runtime and graphs, hipBLASLt, AITER, RCCL on ROCm), which every stack built for that ISA runs; the scheduler
#: and host costs (per request, sequence and step) belong to the stack.
PLATFORM_OWN = ("memory_bandwidth_fraction", "compute_fraction", "kernel_overhead_s")


def platform_of(family: str) -> str | None:
    """The platform and ISA a build is for (``rocm-gfx942`` for ``sglang-rocm-gfx942``); None for a stack's own
    family (its CUDA build)."""
    return family[len(family_chain(family)[-1]) + 1:] or None


def platform_donors(build: str, answered_by: str | None, fitted: Iterable[str],
                    measured: Iterable[str] = ()) -> list[str]:
    """The builds whose platform parameters (:data:`PLATFORM_OWN`) a stack's ``build`` takes: where no calibration
    row measured it (not in ``measured``) and the set that answers for it (``answered_by``; None for the pooled
    default) was not fitted on its platform, the other stacks' builds for the same platform and ISA among
    ``fitted``, sorted. Held out by publication, SGLang's gfx942 rows run 63% off (median) with SGLang's CUDA
    build's kernel gap and efficiencies and 21% with vLLM's gfx942 build's (docs/validation.md); another ISA's
    build of the same stack does worse than either (50%), so a stack's build for another ISA is never a donor."""
    plat = platform_of(build)
    if plat is None or build in set(measured) or (answered_by is not None and parent_family(answered_by)):
        return []
    return sorted(f for f in fitted if f != build and platform_of(f) == plat)


def with_platform_of(params: EngineParams, donors: list[EngineParams]) -> EngineParams:
    """``params`` with each :data:`PLATFORM_OWN` parameter the mean of the ``donors``' (unchanged without any)."""
    if not donors:
        return params
    return attrs.evolve(params, **{k: math.fsum(getattr(d, k) for d in donors) / len(donors) for k in PLATFORM_OWN})


def with_stack_settings(params: EngineParams, stack: str) -> EngineParams:
    """``params`` with the settings of the serving stack that ran a measurement (:data:`STACK_SETTINGS`: its
    all-reduce algorithm, KV admission, prompt chunking, sliding-window KV, LM head format and weight-only
    kernel), each unless already set."""
    family = stack_family(stack)
    fixed = {name: table[family] for name, table in STACK_SETTINGS.items()
             if getattr(params, name) is None and family in table}
    return attrs.evolve(params, **fixed) if fixed else params


#: The all-reduce each serving-stack family runs inside a GPU group: gpt-fast calls torch.distributed's
#: all_reduce, i.e. NCCL's ring/tree (https://github.com/pytorch-labs/gpt-fast/blob/main/tp.py);
#: TensorRT-LLM's custom all-reduce picks one-shot or two-shot per message size
#: (https://github.com/NVIDIA/TensorRT-LLM/blob/main/cpp/tensorrt_llm/kernels/customAllReduceKernels.h), as
#: does vLLM's custom all-reduce, which SGLang reuses
#: (https://github.com/vllm-project/vllm/blob/main/csrc/custom_all_reduce.cuh).
STACK_COLLECTIVES = {"gpt-fast": "ring", "tensorrt-llm": "auto", "vllm": "auto", "sglang": "auto"}

#: How each serving-stack family admits requests against KV memory: TensorRT-LLM's default capacity
#: scheduler policy GUARANTEED_NO_EVICT guarantees "that a started request is never paused", reserving its
#: prompt plus maximum output (https://nvidia.github.io/TensorRT-LLM/performance/performance-tuning-guide/useful-runtime-flags.html);
#: vLLM and SGLang allocate paged blocks as sequences grow and preempt when they run out
#: (https://docs.vllm.ai/en/latest/configuration/optimization.html#preemption). gpt-fast batches statically
#: into a preallocated cache: no admission policy (the default, paged, gives the same numbers there).
STACK_ADMISSION = {"tensorrt-llm": "reserve", "vllm": "paged", "sglang": "paged"}

#: Whether each serving-stack family chunks prompts by default: TensorRT-LLM's LLM API has
#: ``enable_chunked_prefill`` False (https://github.com/NVIDIA/TensorRT-LLM/blob/main/tensorrt_llm/llmapi/llm_args.py)
#: and trtllm-bench, without it, raises max_num_tokens to max_isl + max_batch_size so a whole prompt fits a step
#: (``get_settings``, https://github.com/NVIDIA/TensorRT-LLM/blob/main/tensorrt_llm/bench/benchmark/utils/general.py);
#: vLLM's V1 engine and SGLang always chunk (max_num_batched_tokens, chunked_prefill_size). Every TensorRT-LLM
#: row is taken as not chunking (trtllm-bench, trtllm-serve, NIM, MLPerf's harness); where a run sets its own
#: max_num_tokens (InferenceMAX's gpt-oss trtllm-serve script: 20,000, https://github.com/InferenceMAX/InferenceMAX/
#: blob/f987a94fa670302e7adbd695f43d1dc27a9f888a/benchmarks/gptoss_fp4_b200_trt_docker.sh) that holds them too.
STACK_CHUNKED_PREFILL = {"tensorrt-llm": False, "vllm": True, "sglang": True}

#: Whether each serving-stack family keeps only the window of a sliding-window layer in its KV cache. vLLM's
#: hybrid KV cache manager reserves "slots only for the most recent sliding_window_size tokens" on those
#: layers (https://docs.vllm.ai/en/latest/design/hybrid_kv_cache_manager/). TensorRT-LLM stores the last
#: max_attention_window tokens per layer only when ``kv_cache_config.max_attention_window`` is set ("Only the
#: last tokens will be stored in the KV cache", KvCacheConfig in
#: https://github.com/NVIDIA/TensorRT-LLM/blob/main/tensorrt_llm/llmapi/llm_args.py); its gpt-oss model
#: passes the window to the attention kernel per layer (modeling_gpt_oss.py), which its own later work calls
#: "GPT-OSS-style kernel-masked SWA" (https://github.com/NVIDIA/TensorRT-LLM/pull/16957), and the published
#: gpt-oss configurations set no max_attention_window (perf-overview llm_options), so every layer holds the
#: whole context. SGLang's sliding-window pool is sized as a ratio of the full pool (--swa-full-tokens-ratio),
#: not by the window: left at the default here.
STACK_WINDOWED_KV = {"tensorrt-llm": False, "vllm": True}

#: The format each serving-stack family's checkpoints keep the embedding table and LM head in when the other
#: weights are 8- or 4-bit. NVIDIA's Model Optimizer, which makes the FP8 and NVFP4 checkpoints TensorRT-LLM,
#: vLLM and SGLang serve, leaves the LM head unquantised by default (``"*lm_head*": {"enable": False}`` in
#: ``_default_disabled_quantizer_cfg``, https://github.com/NVIDIA/TensorRT-Model-Optimizer/blob/
#: 09914046803993961dfefe763ba04fffed76aaec/modelopt/torch/quantization/config.py; the FP8 checkpoints' cards
#: say "Only the weights and activations of the linear operators within transformers blocks are quantized",
#: https://huggingface.co/nvidia/Llama-3.1-405B-Instruct-FP8); vLLM's own FP8 quantises only linear layers,
#: experts and the KV cache, so its LM head (a vocabulary-parallel embedding) stays 16-bit
#: (``Fp8Config.get_quant_method``, https://github.com/vllm-project/vllm/blob/
#: 0071b24bf8fe8c3d1bc3516d0ff8477f07964aaf/vllm/model_executor/layers/quantization/fp8.py). No toolchain here
#: quantises the embedding table (a row gather). gpt-fast's quantize.py swaps every nn.Linear, its output head
#: included (https://github.com/pytorch-labs/gpt-fast/blob/main/quantize.py): not listed, so quantised with the
#: weights.
STACK_HEAD_FORMAT = {"tensorrt-llm": "bf16", "vllm": "bf16", "sglang": "bf16"}

#: The recipe each serving-stack family runs MXFP4 routed experts with beside 16-bit activations on devices with
#: FP4 and FP8 units (:meth:`Formats.with_stack_experts <roofline.specs.formats.Formats>`). TensorRT-LLM's
#: default MoE backend on B200/GB200/B300/GB300 multiplies MXFP4 expert weights with MXFP8 activations ("For
#: Blackwell, the default MoE backend is TRTLLM", support matrix: activation MXFP8, MoE weights MXFP4;
#: https://nvidia.github.io/TensorRT-LLM/deployment-guide/deployment-guide-for-gpt-oss-on-trtllm.html). vLLM's
#: default on SM100 is FlashInfer's BF16 x MXFP4 kernel; MXFP8 activations need VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8
#: (``get_mxfp4_backend``, vllm/model_executor/layers/quantization/mxfp4.py): not listed, so the weights unpack.
STACK_EXPERT_RECIPE = {"tensorrt-llm": "w4a8-mxfp4"}

#: The weight-only matmul kernel each serving-stack family runs where it is not its device family's (Marlin's
#: 64-row slices on GPUs): gpt-fast's int4 ``WeightOnlyInt4Linear`` calls ``torch.ops.aten._weight_int4pack_mm``,
#: tinygemm (https://github.com/pytorch-labs/gpt-fast/blob/main/quantize.py), as torchao's int4 weight-only
#: layout does. Its int8 path (``F.linear(x, w.to(dtype)) * scales``, fused by Inductor) keeps the family's.
STACK_WEIGHT_ONLY_KERNEL = {"gpt-fast": "tinygemm"}

#: The engine settings a serving stack fixes, by field: what :func:`with_stack_settings` applies.
STACK_SETTINGS: dict[str, dict[str, Any]] = {
    "collective": STACK_COLLECTIVES, "kv_admission": STACK_ADMISSION, "chunked_prefill": STACK_CHUNKED_PREFILL,
    "windowed_kv": STACK_WINDOWED_KV, "head_format": STACK_HEAD_FORMAT, "expert_recipe": STACK_EXPERT_RECIPE,
    "weight_only_kernel": STACK_WEIGHT_ONLY_KERNEL, "attention_dp_balance": {}, "moe_dispatch": {}}


@attrs.frozen(kw_only=True)
class Profile:
    """Engine parameters: a default set and, optionally, one per serving-stack family."""

    default: EngineParams = attrs.field(factory=EngineParams)
    families: dict[str, EngineParams] = attrs.field(factory=dict)
    path: str = ""
    #: the ``[fit]`` record `roofline calibrate` wrote (rows, in-sample, leave-one-out, held-out errors); empty
    #: for a profile written by hand
    fit: Mapping[str, Any] = attrs.field(factory=dict, eq=False, converter=lambda m: MappingProxyType(dict(m)))

    def for_stack(self, stack: str, vendor: str = "", isa: str = "") -> EngineParams:
        """The parameters of a stack's build for a device's platform and ISA, else of the nearest family it
        specialises (:func:`family_chain`: the platform's build, then the stack's), else the default set; with
        the stack's all-reduce algorithm and KV admission."""
        _chain, fitted, donors = self._answer(stack, vendor, isa)
        base = self.families[fitted] if fitted is not None else self.default
        return with_stack_settings(with_platform_of(base, [self.families[d] for d in donors]), stack)

    def _answer(self, stack: str, vendor: str, isa: str) -> tuple[list[str], str | None, list[str]]:
        """A stack's build chain on a platform, the fitted set that answers for it (None: the default) and the
        builds it borrows its platform parameters from (:func:`platform_donors`; the ``[fit]`` record's
        ``builds`` are the builds the calibration measured)."""
        chain = family_chain(stack_family(stack, vendor, isa))
        fitted = next((f for f in chain if f in self.families), None)
        return chain, fitted, platform_donors(chain[0], fitted, self.families, self.fit.get("builds", ()))

    def standard_error(self, name: str) -> float | None:
        """The standard error of the default set's parameter ``name`` (the ``[fit]`` record's ``standard_errors``);
        None where the record gives none (a parameter no row responds to, or a profile written by hand). A parameter
        the fit could not identify has one, larger than its value (:meth:`not_identified` lists those)."""
        return self.fit.get("standard_errors", {}).get(name)

    def not_identified(self, name: str) -> list[str]:
        """The parameters of set ``name`` (``default`` or a stack family) the fit recorded as not identified by
        its data (the ``[fit]`` record's ``not_identified``: set in place, not measured)."""
        return [x.partition(".")[2] for x in self.fit.get("not_identified", []) if x.partition(".")[0] == name]

    def for_gpus(self, stack: str, devices: Iterable[Any]) -> StackChoice:
        """The parameters serving stack ``stack`` (a name of :data:`STACK_NAMES`) runs the GPUs among ``devices``
        with: its build for their platform and ISA (``vllm`` on MI300X: ``vllm-rocm-gfx942``), answered by that
        build's fitted set, else the nearest family it specialises that the profile fits (:meth:`for_stack`), else
        ``default``. Other device families keep their own execution profiles whatever the stack. Raises
        :class:`WorkloadError` for an unknown name, for devices with no GPU among them (the stack would change
        nothing), for GPUs of two platforms or ISAs (each runs its own build of the stack: one parameter set
        cannot describe both) and for a stack that does not run on their platform (TensorRT-LLM: NVIDIA only)."""
        name = stack_name(stack)
        platforms = sorted({(d.vendor, d.isa) for d in devices if d.family == "gpu"})
        if not platforms:
            raise WorkloadError(f"serving stack {name} sets GPU parameters, and no device here is a GPU")
        other = sorted({f"{v} {i}".strip() for v, i in platforms if v != "NVIDIA"})
        if name in NVIDIA_ONLY_STACKS and other:
            raise WorkloadError(f"serving stack {name} runs on NVIDIA GPUs only ({NVIDIA_ONLY_STACKS[name]}), "
                                f"not on {', '.join(other)}")
        if len(platforms) > 1:
            raise WorkloadError(f"serving stack {name}: these GPUs run {len(platforms)} different builds of it "
                                f"({', '.join(f'{v} {i}'.strip() for v, i in platforms)}); give one platform and "
                                "ISA at a time")
        vendor, isa = platforms[0]
        if name == POOLED:
            return StackChoice(name=POOLED, build=POOLED, fitted="default", params=self.default)
        chain, fitted, donors = self._answer(name, vendor, isa)
        return StackChoice(name=name, build=chain[0], fitted=fitted or "default", platform_from=tuple(donors),
                           params=self.for_stack(name, vendor, isa),
                           other_platform=vendor != "NVIDIA" and fitted is not None and parent_family(fitted) is None)


@attrs.frozen(kw_only=True)
class StackChoice:
    """What :meth:`Profile.for_gpus` chose: the stack, the build the GPUs run, the parameter set that answers for
    it and its parameters; ``other_platform`` when that set was fitted on another platform's GPUs (an AMD GPU
    answered by a stack's CUDA build, for want of a fitted ROCm build); ``platform_from``, the same ISA's other
    builds that lent it their efficiencies and kernel gap (:func:`platform_donors`)."""

    name: str
    build: str
    fitted: str
    params: EngineParams
    other_platform: bool = False
    platform_from: tuple[str, ...] = ()


#: The stack GPUs run when none is named: vLLM, the most deployed open-source engine and the one measured on the
#: most device kinds here (NVIDIA and AMD rows from InferenceMAX, ML.ENERGY, MLPerf's AMD submissions and the vLLM
#: blog). The profile's ``[params]`` set, fitted to every stack's rows at once, matches no stack (5.5 us per kernel
#: where each NVIDIA stack's own fit is about 2.4 us): it stays a named choice, ``pooled``.
DEFAULT_STACK = "vllm"
#: The name of the profile's pooled ``[params]`` set as a stack (``--stack pooled``).
POOLED = "pooled"

#: The names ``--stack`` takes for each serving-stack family (case-insensitive).
STACK_NAMES = {"tensorrt-llm": ("tensorrt-llm", "trtllm", "trt-llm", "tensorrt", "nim"), "vllm": ("vllm",),
               "sglang": ("sglang",), "gpt-fast": ("gpt-fast", "gptfast"), POOLED: (POOLED,)}
#: Stacks built for one vendor's GPUs: TensorRT-LLM is "NVIDIA's open-source library for optimizing LLM inference
#: on NVIDIA GPUs" (https://github.com/NVIDIA/TensorRT-LLM), built on CUDA and TensorRT.
NVIDIA_ONLY_STACKS = {"tensorrt-llm": "built on CUDA and TensorRT"}


def stack_name(text: str) -> str:
    """The serving-stack family a user's ``--stack`` names (exact names and aliases of :data:`STACK_NAMES`);
    :class:`WorkloadError` for anything else."""
    key = str(text).strip().lower()
    for family, names in STACK_NAMES.items():
        if key in names:
            return family
    raise WorkloadError(f"unknown serving stack {text!r}: give one of "
                        + ", ".join(f"{f} ({', '.join(n[1:])})" if n[1:] else f for f, n in STACK_NAMES.items()))


#: The settings a serving stack sets (:func:`with_stack_settings`): kept over the family's when set.
STACK_SET = tuple(STACK_SETTINGS)
#: The power model's fields (a device family's, never a serving stack's: calibration profiles do not carry them).
POWER_FIELDS = ("busy_floor_fraction", "compute_floor_fraction", "compute_floor_share", "communication_floor_fraction",
                "fixed_floor_fraction", "compute_power_weight", "memory_power_weight")
#: Family-level settings that calibration profiles (per serving stack) do not carry.
NOT_IN_PROFILE_FILES = ("family", "m_tile", "dequant_tile_rows", "tier_bandwidth_fraction", *STACK_SET, "overlap",
                        "pipeline_hop_s", *POWER_FIELDS, "max_tp")


def _params_from(table: Any, where: str, base: EngineParams) -> EngineParams:
    if not isinstance(table, dict) or not table:
        raise SpecError(f"{where}: missing or empty table")
    names = {a.name for a in attrs.fields(EngineParams)} - set(NOT_IN_PROFILE_FILES)
    for k, v in table.items():
        if k not in names:
            raise SpecError(f"{where}: field {k!r} is not an engine parameter ({', '.join(sorted(names))})")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise SpecError(f"{where}: field {k!r} = {v!r}: not a finite number")
    try:
        return attrs.evolve(base, **{k: float(v) for k, v in table.items()})
    except (RooflineError, ValueError, TypeError) as e:
        raise SpecError(f"{where}: {e}") from None


def load_profile(path: str | Path, *, base: EngineParams | None = None) -> Profile:
    """A :class:`Profile` from a TOML file; unknown or out-of-range values raise :class:`SpecError`.

    Fields the file does not set keep the values of ``base`` (default: the shipped fit), so a profile that
    sets one parameter changes only that one.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise SpecError(f"load_profile: path must be a file path, got {path!r}")
    if base is not None and not isinstance(base, EngineParams):
        raise SpecError(f"load_profile: base must be an EngineParams, got {type(base).__name__}")
    p = Path(path)
    try:
        data = loads_toml(read_text(p, what="a calibration profile (.toml)", max_bytes=1_000_000))
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{p}: not a profile TOML: {e}") from None
    start = base if base is not None else shipped_profile().default
    default = _params_from(data.get("params"), f"{p} [params]", start)
    stacks = data.get("stacks", {})
    if not isinstance(stacks, dict):
        raise SpecError(f"{p}: [stacks] must be a table of tables")
    fit = _fit_record(data.get("fit", {}), p)
    return Profile(default=default, families={k: _params_from(v, f"{p} [stacks.{k}]", default)
                                              for k, v in stacks.items()}, path=str(p), fit=fit)


def _is_error(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


def _is_names(v: Any, sep: str = "") -> bool:
    return isinstance(v, list) and all(isinstance(x, str) and x and sep in x for x in v)


#: What each kind of ``[fit]`` field must be, and how the error says it.
_FIT_KINDS: dict[str, tuple[Any, str]] = {
    "text": (lambda v: isinstance(v, str), "a string"),
    "count": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0, "a whole number of rows > 0"),
    "error": (_is_error, "a finite error >= 0"),
    "parameters": (lambda v: _is_names(v, "."), 'a list of "set.parameter" strings'),
    "builds": (_is_names, "a list of stack build names"),
    "errors by name": (lambda v: isinstance(v, dict) and all(_is_error(x) for x in v.values()),
                       "a table of finite standard errors >= 0 by parameter name"),
}
#: The ``[fit]`` record's fields and their kinds (what `roofline calibrate` writes; other keys are kept as given).
_FIT_FIELDS = {"data": "text", "rows": "count", "median_abs_error": "error", "loo_approx_median_abs_error": "error",
               "loo_approx": "text", "heldout_median_abs_error": "error", "heldout": "text",
               "not_identified": "parameters", "builds": "builds", "standard_errors": "errors by name",
               "shrink": "error", "checked_rows": "count", "checked": "text"}


def _fit_record(fit: Any, path: Path) -> dict[str, Any]:
    """A profile's ``[fit]`` table, its known fields checked (a count, finite non-negative errors, strings)."""
    if not isinstance(fit, dict):
        raise SpecError(f"{path}: [fit] must be a table (the record `roofline calibrate` writes)")
    for k, kind in _FIT_FIELDS.items():
        ok, expected = _FIT_KINDS[kind]
        if k in fit and not ok(fit[k]):
            raise SpecError(f"{path} [fit] {k} = {fit[k]!r}: expected {expected}")
    return fit


def _toml_string(text: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters escaped (a Windows path survives)."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def profile_toml(profile: Profile, *, uncertainty: dict[str, dict[str, str]], fit: dict[str, Any]) -> str:
    """The text of a profile file: ``[params]``, one ``[stacks."<family>"]`` per family, and a ``[fit]`` record.

    ``uncertainty[set][name]`` is a comment written after the parameter (``+/- 0.05``, ``not identified``).
    """
    def block(header: str, p: EngineParams, notes: dict[str, str]) -> list[str]:
        lines = [header]
        for a in attrs.fields(EngineParams):
            if a.name in NOT_IN_PROFILE_FILES:
                continue
            note = f"  # {notes[a.name]}" if a.name in notes else ""
            lines.append(f"{a.name} = {getattr(p, a.name)!r}{note}")
        return lines

    lines = ["# roofline calibration profile, written by `roofline calibrate`.",
             "# [params]: one set fitted to all rows, what every command uses without --stack;",
             "# [stacks.<family>]: a serving-stack family's own efficiencies and fixed costs (--stack, validate).", ""]
    lines += block("[params]", profile.default, uncertainty.get("default", {}))
    for fam, p in profile.families.items():
        lines += ["", *block(f"[stacks.{_toml_string(fam)}]", p, uncertainty.get(fam, {}))]
    lines += ["", "[fit]"]
    for k, v in fit.items():
        lines.append(f"{k} = {_toml_value(v)}")
    return "\n".join(lines) + "\n"


def _toml_value(v: Any) -> str:
    """A [fit] value as TOML: a string, a list of strings, a table of numbers (inline) or a number."""
    if isinstance(v, str):
        return _toml_string(v)
    if isinstance(v, list):
        return "[" + ", ".join(map(_toml_string, v)) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {x!r}" for k, x in v.items()) + "}"
    return repr(v)


def write_profile(path: str | Path, text: str) -> None:
    """Write a profile atomically after checking that it reads back (never a half-written or unreadable file)."""
    try:
        loads_toml(text)
    except tomllib.TOMLDecodeError as e:  # a bug of ours, not the user's: refuse to write it
        raise SpecError(f"refusing to write {path}: the profile text does not parse ({e})") from None
    write_text_atomic(path, text)


def shipped_profile_path() -> Path:
    """The calibration profile that ships inside the package."""
    return Path(str(resources.files("roofline"))) / "profiles" / "default.toml"


@functools.cache
def shipped_profile() -> Profile:
    """The shipped calibration, read on first use (reproduced by
    ``roofline calibrate --out roofline/profiles/default.toml``); a broken file raises :class:`SpecError`."""
    return load_profile(shipped_profile_path(), base=EngineParams())


@functools.cache
def default_params() -> EngineParams:
    """What every function uses unless given ``params=``: the shipped fit of :data:`DEFAULT_STACK` (its CUDA build;
    a GPU of another platform runs that platform's build, :func:`default_params_for`)."""
    return shipped_profile().for_stack(DEFAULT_STACK)


@functools.cache
def default_params_for(vendor: str, isa: str) -> EngineParams:
    """The parameters :data:`DEFAULT_STACK` runs a GPU of ``vendor`` and ``isa`` with (:meth:`Profile.for_stack`:
    its ROCm build's fitted set on AMD GPUs): what :func:`default_params` stands for on that GPU."""
    if vendor.strip().lower() != "amd":
        return default_params()
    return shipped_profile().for_stack(DEFAULT_STACK, vendor, isa)
