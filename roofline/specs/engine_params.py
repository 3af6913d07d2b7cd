"""Engine parameters: how a device family's software runs a model, as achieved fractions of peak and fixed
overheads (all SI), and the names profile files and what-ifs give them (:data:`PROFILE_FIELDS`).

Pure rooflines land 30-50% off real serving numbers; the difference is mostly these few physical parameters
(docs/theory.md §1.2-1.3, §5.1). The class defaults are engineering estimates from the sources in
:class:`EngineParams`; the shipped fit (:func:`roofline.specs.profiles.default_params`) replaces them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import attrs

from ..errors import RooflineError, SpecError, UnitError, WorkloadError
from ..units import parse_quantity
from ..workload import in_range, one_of
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


def _whole(name: str, value: float, counted: str = "devices") -> None:
    if not math.isfinite(value) or value != int(value):
        raise WorkloadError(f"{name} is a count of {counted}, a whole number: got {value!r}")


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
    * ``allreduce_fusion``: whether the tensor-parallel all-reduces are fused into the epilogues of the GEMMs that
      produce their operands (TensorRT-LLM's ``gemm_allreduce_plugin``, NVIDIA's MLPerf engines): each reduces in
      the NVSwitch (NVLink SHARP: a rank's partial goes to the switch once and the sum comes back once) while the
      GEMM still computes, so only what outlasts those GEMMs is exposed (:mod:`roofline.physics.comms`). None or
      False: separate all-reduce kernels, as the stacks' defaults run them.
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
    * ``prefill_stream_tokens``: a compiled pipeline (the SRAM families) streams a prompt through its stages
      in chunks of this many tokens, so a stage holds one chunk's activations, not the whole prompt's, and
      the chunks overlap across the stages (:func:`roofline.physics.stages.prefill`); 0: the prompt runs as
      one pass (GPU engines chunk prompts by their own token budget, in the serving model instead).
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
    allreduce_fusion: bool | None = attrs.field(default=None, validator=attrs.validators.optional(
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
    prefill_stream_tokens: float = _p(0.0, [in_range(0), lambda _i, _a, v: _whole("prefill_stream_tokens", v, "tokens")])

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
    "prefill_stream_tokens": ("prefill_stream_tokens", "number"),
    "collective": ("collective", "choice"),
    "overlap": ("overlap", "choice"),
}
#: The words a ``choice`` field takes.
CHOICES: dict[str, tuple[str, ...]] = {"collective": COLLECTIVES, "overlap": OVERLAPS}
#: profile fields that count devices or token rows
WHOLE_FIELDS = frozenset({"max_tp", "m_tile", "dequant_tile_rows", "prefill_stream_tokens"})
#: whole-number fields where 0 means "off"
ZERO_OFF_FIELDS = frozenset({"prefill_stream_tokens"})
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
        least = 0 if name in ZERO_OFF_FIELDS else 1
        ok, why = value >= least and float(value).is_integer(), f"a whole number >= {least}"
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
