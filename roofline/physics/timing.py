"""Time of one forward pass on a device group: the physics core behind :mod:`roofline.physics.stages`.

One forward pass (:func:`roofline.physics.work.count_work`) is turned into time
on a group of ``tp x pp`` identical devices:

    T_lower = max(T_compute, sum_i T_mem,i) + T_comm + T_fixed      (overlapped)
    T_upper = T_compute + sum_i T_mem,i + T_comm + T_fixed           (serial)

``time_s`` is the overlapped form; both are reported (the scaling book,
"Rooflines", https://jax-ml.github.io/scaling-book/roofline/: ``max`` lower
bound, ``sum`` upper bound, never more than 2x apart before the additive terms).
A family whose profile has ``overlap = "kernel"`` (GPUs: kernels run one after
another) overlaps only within each kind of kernel: the matmuls' roofline plus
the attention kernels',

    T = max(T_compute - T_attn, T_mem - T_kv) + max(T_attn, T_kv) + T_comm + T_fixed

with T_attn the attention core's compute and T_kv the KV cache's traffic (the
two-group form of LLM-Viewer's per-operator roofline, https://arxiv.org/abs/2402.16363 §2); it lies
between the two forms above. Each max(c, m) is the perfect-overlap roofline; a profile's
``overlap_efficiency`` eta < 1 adds (1 - eta) min(c, m) to it (:func:`overlapped`: the shorter term
hides under the longer only in part), which still lies between the two bounds.
T_mem,i is the traffic from memory tier i at the achieved bandwidth
(:mod:`roofline.physics.memory`). T_compute runs each component at the rate of
its compute class, the wider operand's (weight-only and non-native formats, and
4-bit weights beside 16-bit activations, are unpacked and multiplied at the
activation rate, docs/theory.md §0, §8; :func:`compute_class`). T_comm is the
exposed communication (:mod:`roofline.physics.comms`). T_fixed is the per-pass,
per-layer and per-kernel overhead. Unpacking weight-only formats runs in the
weight stream: the matmuls' memory term is the longer of their weight traffic
and the unpacking (:func:`compute_time_s`, :func:`assemble`).

Points that do not fit in memory come back as NaN with ``fits == False``; a
call whose workload arguments are all scalars raises :class:`InfeasibleError`.
"""

from __future__ import annotations

import math
from typing import Any

import attrs
import numpy as np
from numpy.typing import NDArray

from ..errors import LayoutError, UnknownSpecError
from ..memo import MISSING, IdentityMemo
from ..specs.devices import COMPUTE_CLASS_BITS, Device
from ..specs.execution import resolve_profile
from ..specs.formats import NATIVE_DEFAULTS, Format, Formats, get_format
from ..specs.groups import DeviceGroup
from ..specs.models import ModelSpec
from ..specs.params import EngineParams
from .comms import fused_gemm_share, group_communication_s
from .memory import (
    Placement,
    Residency,
    attention_replica_bytes,
    group_kv_shards,
    place,
    stored_weight_bytes,
    workspace_per_sequence_bytes,
)
from .stage_result import (
    ON_INFEASIBLE,
    PassFootprint,
    PrefixFootprint,
    StageResult,
    StagesFootprint,
    accumulate,
    check_feasible,
    combine,
    finite,
    mix,
    prefix_sum,
    require_feasible,
    spread,
)
from .work import (
    BatchWork,
    Work,
    add,
    as_number,
    batch_work,
    expert_load_imbalance,
    expert_shard_imbalance,
    kernels_per_pass,
    rider_rank_share,
    small,
    value_key,
)

#: The result record and the combining of passes moved to :mod:`.stage_result`; still importable from here.
__all__ = [
    "LAYER_SPANNING_FAMILIES", "LOW_PRECISION", "ON_INFEASIBLE", "PassFootprint", "PrefixFootprint", "StageResult",
    "StagesFootprint", "accumulate", "activation_bytes_per_device", "assemble", "attention_class", "check_feasible",
    "combine", "compute_class", "compute_time_s", "evaluate_pass", "finite", "main_compute_class", "mix",
    "overlapped", "prefix_sum", "require_feasible", "spread",
]

Array = NDArray[np.float64]
LOW_PRECISION = frozenset({"fp8", "fp6", "fp4", "int8", "int4"})


_MIXED_FLOAT = frozenset({"fp4", "fp6", "fp8"})   # the operand classes a mixed-input MMA takes


def _head_the_device_runs(head: str | None, device: Device) -> str | None:
    """A serving stack's wider LM head format (:attr:`EngineParams.head_format`) where ``device`` publishes a rate for
    it, else None (the head then stays with the weights: Rubin's spec gives FP8 and FP4 rates, no BF16 one)."""
    if head is None:
        return None
    try:
        _rate(device, get_format(head).compute)
    except UnknownSpecError:
        return None
    return head


def compute_class(fmt: Format, activation: Format, device: Device) -> tuple[str, bool]:
    """The compute class a matmul with weights in ``fmt`` and inputs in ``activation`` runs at, and whether
    the weights are dequantised first.

    A weight-only format, or one the device has no units for, is dequantised to the activations' format
    (int4 weight-only, MXFP4 on Hopper: BF16 rate; docs/theory.md §0). A format whose recipes quantise the
    activations to match computes at its own rate (FP8 on Hopper, NVFP4 on Blackwell). Otherwise (MXFP4) a
    tensor-core MMA runs at its wider operand's rate: Blackwell's mixed FP4/FP6/FP8 MMA (kind::f8f6f4,
    kind::mxf8f6f4) runs at the FP8 rate and only kind::mxf4 / mxf4nvf4, both operands 4-bit, at the FP4
    rate (CUTLASS, https://docs.nvidia.com/cutlass/media/docs/cpp/blackwell_functionality.html); no MMA takes
    a 4-bit and a 16-bit (or integer) operand, so then the weights are unpacked to the activations (W4A16).
    A recipe that multiplies at another class than it stores (``w4a8-mxfp4``) unpacks on a device without
    units for its stored elements.
    """
    if not fmt.weight_only and not device.supports(fmt.compute) and fmt.bits_per_element > activation.bits_per_element:
        _rate(device, fmt.compute)   # wider weights than the activations are not unpacked to them: refused, named
    if fmt.weight_only or not device.supports(fmt.compute):
        return activation.compute, fmt.name != activation.name
    if fmt.stored_as is not None and not device.supports(fmt.stored_as):   # W4A8 on Hopper: unpacked to FP8
        return fmt.compute, True
    w_bits, a_bits = (COMPUTE_CLASS_BITS.get(c, 16) for c in (fmt.compute, activation.compute))
    if fmt.quantises_activations or a_bits <= w_bits:
        return fmt.compute, False
    if {fmt.compute, activation.compute} <= _MIXED_FLOAT and device.supports(activation.compute):
        return activation.compute, False   # a mixed-input float MMA (f8f6f4) at the wider operand's rate
    return activation.compute, True


def attention_class(formats: Formats, device: Device) -> str:
    """The compute class of attention's score and value matmuls: 16-bit even when weights, activations and
    the KV cache are 8- or 4-bit. Serving kernels read an FP8 cache and dequantise it to BF16/FP16 inside
    the attention kernel ("dequantize to BF16/FP16 at the reading time for attention calculation",
    https://github.com/sgl-project/sglang/issues/10083). Not distinguished: vLLM's FlashAttention-3 backend
    computes attention in FP8 over an FP8 cache
    (https://docs.vllm.ai/en/latest/features/quantization/quantized_kvcache/), so vLLM on Hopper with an FP8
    cache is charged up to 2x too much attention compute here. A device whose 16-bit rate is unpublished
    keeps the activations' class."""
    cls = formats.activation.compute
    if cls not in LOW_PRECISION:
        return cls
    return next((c for c in ("bf16", "fp16") if device.supports(c) and device.peak_flop_per_s.get(c)), cls)


def _rate(device: Device, cls: str) -> float:
    if not device.supports(cls):
        suggest = next((fmt for c, fmt in NATIVE_DEFAULTS if c in device.native), "?")
        int8 = ("; for its int8 units w8a8-int8, int8 weights and activations (int8 alone is weight-only, unpacked "
                "to the activations' format)" if device.supports("int8") and suggest != "mxint8" else "")
        raise UnknownSpecError(
            f"{device.id} has no native {cls} units (native: {', '.join(device.native) or 'none'}); choose formats "
            f"it runs natively (e.g. {suggest} for the weights, KV and activations{int8}) or supply the rate as a "
            f"what-if, {device.id}.compute.{cls}=VALUE")
    rate = device.peak_flop_per_s.get(cls)   # the field compute.<cls> reads, without the path lookup
    return rate if rate is not None else device.get(f"compute.{cls}")   # unpublished: get says how to supply it


_COMPONENT_WEIGHTS = (("attention", "mlp", "shared_experts", "router"), ("experts",), ("lm_head",))


def _row_efficiency(tokens: Any, params: EngineParams) -> Any:
    """Share of the large-matmul efficiency a matmul over ``tokens`` rows reaches: T / (T + T_half) (small
    matmuls under-fill the tensor cores), times T / (ceil(T / m) m) for a unit with tiles of m rows."""
    eff: Any = 1.0
    if params.compute_half_tokens > 0:
        eff = tokens / (tokens + params.compute_half_tokens)
    if params.m_tile > 1:   # padded rows: a matmul over T tokens costs ceil(T / m) m rows of work
        eff = eff * _tile_fill(tokens, params.m_tile)
    return eff


def _tile_fill(rows: Any, m_tile: float) -> Any:
    """Share of the work a matmul over ``rows`` rows does on tiles of ``m_tile`` rows: rows / (ceil(rows / m) m)."""
    return rows / (np.ceil(rows / m_tile) * m_tile)


def _class_scale(cls: str, params: EngineParams) -> float:
    """Efficiency of a compute class relative to BF16: 8-bit and narrower keep ``low_precision_compute_scale``,
    4-bit floats ``fp4_compute_scale`` of that again."""
    if cls not in LOW_PRECISION:
        return 1.0
    return params.low_precision_compute_scale * (params.fp4_compute_scale if cls == "fp4" else 1.0)


def _expert_slowdown(work: Work, params: EngineParams) -> Any:
    """How much slower the routed experts' matmuls run than a matmul over all the pass's tokens: each expert
    multiplies only the tokens routed to it, T k / E_u(T) rows (about 40 at batch 1,278 for gpt-oss's 4 of 128),
    so its row efficiency is that of a much smaller matmul (grouped-GEMM MoE kernels, docs/theory.md §2.7)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = _row_efficiency(work.tokens, params) / _row_efficiency(_tokens_per_expert(work), params)
    return np.where(work.experts_touched_per_layer > 0, np.nan_to_num(ratio, nan=1.0, posinf=1.0), 1.0)


def _head_tile_slowdown(work: Work, params: EngineParams) -> Any:
    """How much slower the LM head runs than the pass's own tile padding charges it, on a unit with tiles of
    ``m_tile`` rows: the head multiplies only the logit positions (one row per sequence in prefill), padded to
    a whole tile however long the prompt, so a longer prompt cannot make it cheaper. 1 without tiles."""
    if params.m_tile <= 1:
        return 1.0
    return _tile_fill(np.maximum(work.tokens, 1.0), params.m_tile) / _tile_fill(np.maximum(work.logit_rows, 1.0),
                                                                             params.m_tile)


def _tokens_per_expert(work: Work) -> Any:
    """Mean tokens each routed expert a pass touches multiplies (at least 1)."""
    touched = np.maximum(work.experts_touched_per_layer, 1e-12)
    return np.maximum(work.tokens * work.experts_per_token / touched, 1.0)


def _matmul_rows(work: Work, comp: str) -> Any:
    """Token rows the matmuls of weight component ``comp`` multiply in one pass:
    each routed expert its share of the routed tokens, the LM head its logit positions, every other weight all
    the pass's tokens."""
    if comp == "experts":
        return _tokens_per_expert(work)
    if comp == "lm_head":
        return work.logit_rows
    return work.tokens


def compute_time_s(work: Work, group: DeviceGroup, formats: Formats, params: EngineParams) -> tuple[Any, Any, Any]:
    """(matmul and attention time, dequantisation time, the attention core's share of the first) of one pass
    on one device of ``group`` (:func:`matmul_terms`, then the attention core's time, :meth:`MatmulTerms.core_s`).
    """
    terms = matmul_terms(work, group, formats, params)
    core_s = terms.core_s(work.flop.get("attention_core", 0.0))
    return add(core_s, *terms.class_s), terms.dequant_s, core_s


@attrs.frozen(kw_only=True, eq=False)
class MatmulTerms:
    """The compute terms of one pass that do not depend on the cached context: the weight matmuls' seconds by
    compute class, the unpacking of weight-only formats, and the rate the attention core runs at."""

    class_s: tuple[Any, ...]
    dequant_s: Any
    core_class: str
    core_inv_efficiency: Any
    group: DeviceGroup
    params: EngineParams

    def core_s(self, core_flop: Any) -> Any:
        """Seconds of the attention core's ``core_flop`` (0 when there are none)."""
        if not _positive(core_flop):
            return 0.0
        return _class_seconds(self.group, self.params, self.core_class, [core_flop], self.core_inv_efficiency)


#: Where a GPU's spec has no measured matmul rate for a class (nor for its kin, :data:`_KIN`): the share of the dense
#: peak that the shipped GPUs' measured rates reach, their median (16-bit: A100 0.87, H100/H200 0.80, B300 0.79,
#: B200 0.78, GB200 0.73, MI325X 0.64, MI355X 0.62, MI300X 0.54; 8-bit: H200 0.73, B200 0.76, B300 0.75, GB200
#: 0.72, H100 0.71, MI355X 0.62, MI325X 0.58, MI300X 0.49; the spec files cite each), kept equal to it by
#: tests/test_hardware_specs.py.
MEDIAN_MEASURED_SHARE = {"16-bit": 0.776, "8-bit": 0.716}
#: The class whose measured share a class without its own takes on the same device (a 16-bit twin, 4- and 6-bit
#: and int8 units beside the FP8 ones: no FP4 matmul rate is published for B200 or MI355X).
_KIN = {"fp16": "bf16", "bf16": "fp16", "tf32": "bf16", "fp4": "fp8", "fp6": "fp8", "int8": "fp8", "int4": "fp8"}


def measured_share(device: Device, cls: str) -> float:
    """The share of its dense peak a GPU's matmuls reach in compute class ``cls`` before the serving stack's own
    efficiency: the best published measured matmul rate over the peak (``compute.measured.<cls>``, or its kin's;
    :data:`MEDIAN_MEASURED_SHARE` where the spec gives neither). Vendors' peaks are not equally reachable: at the same
    1,307 TFLOP/s BF16 peak, a 750 W MI300X sustains 708 TFLOP/s at a 1,207 MHz median clock and a 1,000 W MI325X
    843 at 1,447 MHz (AMD's max-achievable FLOPs,
    https://rocm.blogs.amd.com/software-tools-optimization/measuring-max-achievable-flops-part2/README.html), an
    A100 87% of its peak and an H100 80% (Bekman's MAMF table, https://github.com/stas00/ml-engineering/blob/
    744d01e18b79512572f64a6bbd8b5f4a725203a7/compute/accelerator/README.md), so the stacks' fitted
    ``compute_fraction`` is the share of the measured rate they reach. Other families (TPU, Trainium, Gaudi, the
    SRAM chips) keep their family fits against the peak: 1."""
    if device.family != "gpu":
        return 1.0
    measured, peak = device.measured_flop_per_s, device.peak_flop_per_s
    for c in (cls, _KIN.get(cls, cls)):
        top = peak.get(c)
        if c in measured and top:
            return measured[c] / top
    return MEDIAN_MEASURED_SHARE["8-bit" if cls in LOW_PRECISION else "16-bit"]


def _class_seconds(group: DeviceGroup, params: EngineParams, cls: str, flops: list[Any], inv: Any) -> Any:
    """Seconds of ``flops`` at compute class ``cls`` on one device of ``group``, ``inv`` the inverse efficiency."""
    rate = _rate(group.device, cls) * measured_share(group.device, cls)
    return add(*flops) * (inv / (group.tp * rate * _class_scale(cls, params)))


def matmul_terms(work: Work, group: DeviceGroup, formats: Formats, params: EngineParams) -> MatmulTerms:
    """The compute terms of one pass on one device of ``group`` (:class:`MatmulTerms`).

    Each FLOP component runs at its compute class's dense peak x efficiency, where efficiency =
    compute_fraction x T / (T + T_half) for a pass over T tokens (small matmuls run below peak) x the
    low-precision scale for 8-/6-/4-bit classes; with ``overlap = "kernel"`` (GPUs) the attention core keeps
    compute_fraction x the scale (its kernels do not tile over the pass's tokens). A matmul unit with tiles of
    ``m_tile`` rows computes ceil(T / m_tile) x m_tile rows (1: matrix-vector native, nothing padded). Weight-only
    formats are unpacked on the vector units at the fp32 rate x compute_fraction, ``dequant_ops_per_element``
    ops per weight element, once per slice of ``dequant_tile_rows`` token rows (per expert: its share of the
    routed tokens): Marlin, the W4A16 kernel vLLM and SGLang use, runs a batch in slices of at most 64 rows, each
    thread block unpacking its own copy of the weight tiles
    (https://github.com/IST-DASLab/marlin/blob/0f102e119bddf2f03cff9f944d065b04952028fa/marlin/marlin_cuda_kernel.cu,
    ``marlin_cuda``); a stack's own kernel may serve fewer rows per unpacking (tinygemm, gpt-fast's int4: about
    4, measured: :data:`roofline.specs.params.WEIGHT_ONLY_KERNELS`). The unpacking runs in the weight stream,
    overlapped with the loads (:func:`assemble`), so a small batch hides it under the weight traffic and a large
    one pays it beside the tensor-core work.
    ``params`` is the device's resolved execution profile.
    """
    dev, act = group.device, formats.activation
    if not dev.supports(act.compute):   # activations the device cannot compute in (fp8 on Groq's LPU): named, not ignored
        _rate(dev, act.compute)
    vector_fraction = params.compute_fraction
    mfu = params.compute_fraction * _row_efficiency(work.tokens, params)
    w_cls, w_deq = compute_class(formats.weight, act, dev)
    e_cls, e_deq = compute_class(formats.expert, act, dev)
    h_cls, h_deq = compute_class(formats.head_format, act, dev)
    classes = {"attention_proj": w_cls, "attention_core": attention_class(formats, dev), "mlp": w_cls, "experts": e_cls,
               "shared_experts": w_cls, "router": w_cls, "lm_head": h_cls}
    by_class: dict[str, list[Any]] = {}
    for comp, flop in work.flop.items():
        if comp != "attention_core" and _positive(flop):
            slowdown = (_expert_slowdown(work, params) * expert_load_imbalance(group.ep, params.expert_load_slope)
                        if comp == "experts" else
                        _head_tile_slowdown(work, params) if comp == "lm_head" else 1.0)
            by_class.setdefault(classes[comp], []).append(flop * slowdown)
    inv_mfu = 1.0 / mfu   # small (batch-shaped) or scalar: folded into each class's factor before the big product

    # GPU attention kernels tile over sequences, heads and KV blocks, not over the pass's tokens: the small-matmul
    # efficiency T / (T + T_half) of the weight matmuls does not apply to them (FlashDecoding splits the KV of
    # even one sequence across the SMs, https://crfm.stanford.edu/2023/10/12/flashdecoding.html); a family
    # timed as one roofline per pass keeps its tile model for them too
    inv_core = 1.0 / params.compute_fraction if params.overlap == "kernel" else inv_mfu
    class_s = tuple(_class_seconds(group, params, cls, flops, inv_mfu) for cls, flops in by_class.items())
    elements: Any = 0.0
    for fmt, dequantised, comps in zip((formats.weight, formats.expert, formats.head_format), (w_deq, e_deq, h_deq),
                                       _COMPONENT_WEIGHTS):
        for comp in comps if dequantised else ():   # each slice of token rows unpacks the weights it reads once
            n = work.weight_bytes[comp] / fmt.bytes_per_element
            elements = elements + np.ceil(_matmul_rows(work, comp) / params.unpack_tile_rows(fmt.name)) * n
    terms = MatmulTerms(class_s=class_s, dequant_s=0.0, core_class=classes["attention_core"],
                        core_inv_efficiency=inv_core, group=group, params=params)
    if not (_positive(elements) and params.dequant_ops_per_element > 0):
        return terms
    if dev.peak_flop_per_s.get("fp32") is None:
        name = formats.expert.name if e_deq else formats.weight.name
        raise UnknownSpecError(
            f"{dev.id}: unpacking {name} weights to {act.name} (no native units for them, or no matmul that "
            f"pairs them with {act.name} activations) runs on the vector units, whose rate compute.fp32 is not "
            f"published; supply --set {dev.id}.compute.fp32=VALUE or choose formats {dev.id} multiplies natively")
    return attrs.evolve(terms, dequant_s=elements / group.tp * params.dequant_ops_per_element
                        / (dev.get("compute.fp32") * vector_fraction))


def _positive(x: Any) -> bool:
    """Whether any value of ``x`` is above 0 (``np.any(x > 0)``, without its dispatch for one number)."""
    return x > 0 if isinstance(x, float) else bool(np.any(x > 0))


@attrs.frozen(kw_only=True, eq=False)
class MemoryTerms:
    """What one device of a group holds and moves in one pass, but for the KV cache of the context already cached
    (:func:`place_pass` adds it): stored weights, workspace, sequences whose KV the device holds, and the traffic
    of weights, activations and KV writes."""

    weights_bytes: float
    workspace_bytes: Any
    kv_sequences: Any
    #: ways one stage's KV cache is divided (sequences over dp ranks, heads over tp) times the stages
    shards: int
    weight_read_bytes: Any
    activation_bytes: Any
    kv_write_bytes: Any
    #: weights + activations + KV writes per device (batch-shaped)
    small_bytes: Any


def memory_terms(model: ModelSpec, group: DeviceGroup, formats: Formats, work: Work, *, batch: Any, new_tokens: Any,
                 logits_per_seq: Any, params: EngineParams, rider: tuple[Any, Any] = (0.0, 0.0)) -> MemoryTerms:
    """:class:`MemoryTerms` of one pass on one device of ``group``; ``rider`` = (chunks, tokens each) of prompt
    chunks riding along, whose activations need workspace too."""
    tp, pp = group.tp, group.pp
    imbalance = params.expert_imbalance * expert_shard_imbalance(
        model.num_experts, model.experts_per_token, work.routing_draws, group.ep) if group.ep > 1 and model.is_moe else 1.0
    w_read = (work.weight_bytes_total - work.weight_bytes["experts"] + imbalance * work.weight_bytes["experts"]
              + (group.dp - 1) * work.weight_bytes["attention"]) / (tp * pp)   # DP attention: tp/dp-way split
    shards = group_kv_shards(model, group) * pp
    act_bytes = activation_bytes_per_device(work, group)
    kv_write = work.kv_write_bytes / shards
    return MemoryTerms(weights_bytes=stored_weight_bytes(model, formats) / (tp * pp)
                       + attention_replica_bytes(model, formats, group),
                       workspace_bytes=batch * workspace_per_sequence_bytes(model, formats, tp, new_tokens,
                                                                            np.asarray(logits_per_seq, dtype=float))
                       + np.asarray(rider[0], dtype=float) * workspace_per_sequence_bytes(model, formats, tp, rider[1], 0.0),
                       kv_sequences=np.maximum(batch, group.dp) / shards, shards=shards, weight_read_bytes=w_read,
                       activation_bytes=act_bytes, kv_write_bytes=kv_write, small_bytes=add(w_read, act_bytes, kv_write))


def place_pass(model: ModelSpec, group: DeviceGroup, formats: Formats, terms: MemoryTerms, work: Work, *,
               context_tokens: Any, params: EngineParams) -> tuple[Placement, Residency]:
    """(placement over tiers, residency) of one pass on one device of ``group`` whose sequences hold
    ``context_tokens`` tokens each once it has run (:func:`roofline.physics.memory.place`)."""
    res = Residency(weights_bytes=terms.weights_bytes, workspace_bytes=terms.workspace_bytes,
                    kv_sequences=terms.kv_sequences, kv_sequence_bytes=model.kv_cache_bytes(
                        context_tokens, formats.kv, windowed=params.windowed_kv is not False))
    placed = place(group.device, res, weight_read=terms.weight_read_bytes, kv_read=work.kv_read_bytes,
                   kv_share=1 / terms.shards, kv_write=terms.kv_write_bytes, activation=terms.activation_bytes,
                   pp=group.pp, bandwidth_fraction=params.bandwidth_fraction,
                   usable_fraction=params.usable_memory_fraction)
    return placed, res


def _busiest_dp_rank(counts: BatchWork, group: DeviceGroup, sequences: Any) -> BatchWork:
    """``counts`` as its busiest attention data-parallel rank sees them: each rank runs whole sequences, so with
    fewer sequences than the dp ranks one rank computes a whole sequence's attention (projections, core, KV
    traffic) and the others idle; the per-device split by tp = dp x attention tp would spread it over every
    rank. Scales the attention side by dp / sequences there. From dp sequences up they are taken as spread evenly
    (the rank holding ceil(B / dp) carries at most dp - 1 sequences more than B / dp: under 1% at the batches of
    the measured data-parallel rows)."""
    if group.dp == 1 or np.all(np.asarray(sequences) >= group.dp):
        return counts
    return counts.busiest_rank(np.maximum(1.0, group.dp / np.asarray(sequences, dtype=float)))


def activation_bytes_per_device(work: Work, group: DeviceGroup) -> Any:
    """Activation bytes one device moves in a pass: the inner widths split tp ways, the d-wide ends of each
    block (:attr:`Work.activation_ends_bytes`) whole on every rank that sees the block's tokens: all tp ranks
    for tensor-parallel blocks, 1/dp of the tokens under data-parallel attention, 1/ep of the routed tokens
    under expert parallelism; pipeline stages hold 1/pp of the layers each."""
    ends = work.activation_ends_bytes
    inner = work.activation_bytes - add(*ends.values())
    whole = add(ends.get("attention", 0.0) / group.dp, ends.get("mlp", 0.0), ends.get("experts", 0.0) / group.ep,
                ends.get("lm_head", 0.0))
    return (inner / group.tp + whole) / group.pp


@attrs.frozen(kw_only=True, eq=False)
class PassPlan:
    """Everything of one forward pass on one group that does not depend on the context already cached: the
    resolved profile and formats, the counts (:class:`~roofline.physics.work.BatchWork`), and the compute,
    memory, communication and fixed terms. :func:`evaluate_pass` makes one (:func:`pass_plan`, remembered for
    small workloads: a decode loop over contexts plans its batch once) and times it at a context
    (:func:`time_pass`)."""

    model: ModelSpec
    group: DeviceGroup
    formats: Formats
    params: EngineParams
    stage: str
    batch: Any
    new_tokens: Any
    #: the broadcast shape of batch, new tokens and logits per sequence
    shape: tuple[int, ...]
    #: microbatches through the pipeline stages (1 without pipeline parallelism)
    micro: Any
    counts: BatchWork
    compute: MatmulTerms
    memory: MemoryTerms
    communication_s: Any
    overhead_s: Any
    ridge_flop_per_byte: float


#: pass_plan's remembered plans by the identity of the model, the group and the parameters, and the rest by value
_PLANS = IdentityMemo(1024)


def pass_plan(model: ModelSpec, group: DeviceGroup, formats: Formats, *, batch: Any, new_tokens: Any,
              logits_per_seq: Any, mla_absorbed: bool, stage: str, params: EngineParams | None, chunks: Any = 0.0,
              chunk_tokens: Any = 0.0, chunk_prefix: Any = 0.0) -> PassPlan:
    """The :class:`PassPlan` of one pass (see :func:`evaluate_pass`), remembered when its arguments are a few
    points each."""
    args = (batch, new_tokens, logits_per_seq, chunks, chunk_tokens, chunk_prefix)
    key = (formats, stage, mla_absorbed, *map(value_key, args)) if small(*args) else None
    hit = _PLANS.get((model, group, params), key) if key is not None else MISSING
    if hit is not MISSING:
        return hit
    plan = _plan(model, group, formats, batch=batch, new_tokens=new_tokens, logits_per_seq=logits_per_seq,
                 mla_absorbed=mla_absorbed, stage=stage, params=params, chunks=chunks, chunk_tokens=chunk_tokens,
                 chunk_prefix=chunk_prefix)
    return _PLANS.put((model, group, params), key, plan) if key is not None else plan


def _plan(model: ModelSpec, group: DeviceGroup, formats: Formats, *, batch: Any, new_tokens: Any,
          logits_per_seq: Any, mla_absorbed: bool, stage: str, params: EngineParams | None, chunks: Any,
          chunk_tokens: Any, chunk_prefix: Any) -> PassPlan:
    pp = group.pp
    if model.num_heads % group.tp:
        divisors = [t for t in range(1, model.num_heads + 1) if model.num_heads % t == 0 and t <= 64]
        raise LayoutError(f"tp {group.tp} does not divide the {model.num_heads} attention heads of {model.id} "
                          f"(tensor parallelism splits heads evenly): use one of {', '.join(map(str, divisors))}")
    if pp > model.num_layers and group.device.family not in LAYER_SPANNING_FAMILIES:
        raise LayoutError(f"pp {pp} is more pipeline stages than the {model.num_layers} layers of {model.id}: a "
                          f"{group.device.family} serving engine's stage holds whole layers (at most "
                          f"{model.num_layers} stages)")
    prof = resolve_profile(group.device, params)
    formats = formats.with_toolchain_head(_head_the_device_runs(prof.head_format, group.device)).with_stack_experts(
        prof.expert_recipe, group.device)
    B, n = np.asarray(batch, dtype=float), np.asarray(new_tokens, dtype=float)
    micro = np.minimum(B, pp) if pp > 1 else 1.0
    riders = 1.0 if prof.attention_dp_balance is True else rider_rank_share(chunks, group.dp)   # unbalanced DP ranks
    counts = batch_work(model, formats, batch=B / micro if pp > 1 else B, new_tokens=n, logits_per_seq=logits_per_seq,
                        mla_absorbed=mla_absorbed, chunks=chunks, chunk_tokens=chunk_tokens, chunk_prefix=chunk_prefix,
                        chunk_attention_scale=riders)
    counts = _busiest_dp_rank(counts, group, B / micro if pp > 1 else B)
    # fixed costs: per pass (launches, host round trip), per layer (kernel boundaries on GPUs, the
    # stage latency of a compiled pipeline on dataflow chips; a pipeline's pp stages hold 1/pp of the
    # layers each, so a token still crosses every layer), per sequence (the host's scheduling, sampling
    # and detokenising of each running sequence every step, charged for the whole batch even with attention
    # data-parallel: splitting it over the dp ranks made the 5-fold held-out error worse (22.7% -> 23.2% with the
    # calibration of that time), so a
    # cost growing with the whole batch under DP is missing and this stands in for it, docs/validation.md)
    # and per kernel (GPU launch gaps, by layer kind)
    overhead = (prof.step_overhead_s + prof.layer_overhead_s * model.num_layers
                + prof.moe_layer_overhead_s * model.num_moe_layers + prof.kernel_overhead_s * kernels_per_pass(model)
                + prof.sequence_overhead_s * B)
    return PassPlan(model=model, group=group, formats=formats, params=prof, stage=stage, batch=as_number(B),
                    new_tokens=as_number(n),
                    shape=np.broadcast_shapes(B.shape, n.shape, np.shape(logits_per_seq)), micro=micro, counts=counts,
                    compute=matmul_terms(counts.work, group, formats, prof),
                    memory=memory_terms(model, group, formats, counts.work, batch=B, new_tokens=n,
                                        logits_per_seq=logits_per_seq, params=prof, rider=(chunks, chunk_tokens)),
                    communication_s=group_communication_s(model, group, formats.activation, counts.work.tokens, prof),
                    overhead_s=overhead, ridge_flop_per_byte=datasheet_ridge(model, group, formats))


def evaluate_pass(model: ModelSpec, group: DeviceGroup, formats: Formats, *, batch: Any, new_tokens: Any,
                  prefix_tokens: Any, logits_per_seq: Any, mla_absorbed: bool, stage: str,
                  params: EngineParams | None, chunks: Any = 0.0, chunk_tokens: Any = 0.0,
                  chunk_prefix: Any = 0.0) -> StageResult:
    """Time one forward pass on ``group`` (see the module docstring); arguments are already checked
    (:mod:`roofline.workload`) and may be fractional (a mean-field serving step). ``chunks`` prompt chunks
    of ``chunk_tokens`` tokens (after ``chunk_prefix`` tokens of their prompts) may ride along a decode or
    verify pass (:func:`roofline.physics.work.with_prompt_chunks`). Two steps: what does not depend on the
    context already cached (:func:`pass_plan`), then the pass at ``prefix_tokens`` (:func:`time_pass`).

    With pipeline stages the batch is split into m = min(batch, pp) microbatches that keep every stage
    busy: a token still crosses all pp stages, so the step takes pp stage-times of one microbatch (weights
    are re-read for every microbatch), while memory residency counts the whole batch. A prefill of a batch of
    prompts, which nothing keeps the stages busy for, takes m + pp - 1: the pipeline fills and drains.
    """
    plan = pass_plan(model, group, formats, batch=batch, new_tokens=new_tokens, logits_per_seq=logits_per_seq,
                     mla_absorbed=mla_absorbed, stage=stage, params=params, chunks=chunks, chunk_tokens=chunk_tokens,
                     chunk_prefix=chunk_prefix)
    return time_pass(plan, prefix_tokens)


def time_pass(plan: PassPlan, prefix_tokens: Any) -> StageResult:
    """The pass of ``plan`` after ``prefix_tokens`` cached tokens per sequence: the attention core, the KV reads
    and the KV cache held are the context's; the rest is the plan's."""
    p = as_number(np.asarray(prefix_tokens, dtype=float))
    shape = plan.shape if p.shape == () else np.broadcast_shapes(plan.shape, p.shape)
    model, group, params, micro, pp = plan.model, plan.group, plan.params, plan.micro, plan.group.pp
    work = plan.counts.at(p)
    core_s = plan.compute.core_s(work.flop["attention_core"])
    compute, dequant_s = add(core_s, *plan.compute.class_s), plan.compute.dequant_s
    if plan.stage == "prefill" and params.prefill_compute_scale < 1:   # the profile's prefill efficiency
        compute, core_s = compute / params.prefill_compute_scale, core_s / params.prefill_compute_scale
    placed, res = place_pass(model, group, plan.formats, plan.memory, work, context_tokens=p + plan.new_tokens,
                             params=params)
    footprint = PassFootprint(work=work, small_bytes=plan.memory.small_bytes, kv_read_scale=1 / plan.memory.shards,
                              residency=res, flop_scale=micro / (group.tp * pp), bytes_scale=micro)
    by_tier, kv_s = placed.time_by_tier_s, placed.kv_time_s
    comm, overhead = plan.communication_s, plan.overhead_s
    if params.allreduce_fusion and group.tp > 1:
        # a fused all-reduce runs while its GEMM computes (or streams its weights): only what outlasts those GEMMs
        # is exposed; they are fused_gemm_share of the pass's weight matmuls, whose time is the longer of their
        # compute and their weight stream (the pass's traffic less its KV)
        gemm_s = np.maximum(compute - core_s, sum(by_tier.values()) - kv_s)
        comm = np.maximum(comm - fused_gemm_share(model) * gemm_s, 0.0)
    if plan.stage == "prefill" and pp > 1 and np.any(micro > 1):
        # one batch of prompts through the pipeline: the last of m microbatches leaves after m + pp - 1
        # stage-times (fill and drain, GPipe, https://arxiv.org/abs/1811.06965 §2.2), not pp; a decode step in
        # steady state keeps the stages full with the previous step's microbatches, so it takes pp
        fill = (micro + pp - 1) / pp
        compute, core_s, dequant_s, comm, overhead, kv_s = (x * fill for x in (compute, core_s, dequant_s, comm,
                                                                              overhead, kv_s))
        by_tier = {t: v * fill for t, v in by_tier.items()}
    return assemble(stage=plan.stage, model=model, group=group, formats=plan.formats, shape=shape, batch=plan.batch,
                    new_tokens=plan.new_tokens, context=p, compute=compute, by_tier=by_tier, comm=comm,
                    overhead=overhead, attention_s=(core_s, kv_s) if params.overlap == "kernel" else None,
                    dequant_s=dequant_s, fits=placed.fits, weights=res.weights_bytes, usable=placed.usable_bytes,
                    footprint=footprint, profile=params, ridge_flop_per_byte=plan.ridge_flop_per_byte)


#: Families whose compilers place a model over chips in sequence at a finer grain than layers (a layer's weights
#: spread over several chips of the pipeline: Groq's and Cerebras's compiled dataflow, d-Matrix's and SambaNova's
#: streaming pipelines), so their pipeline may have more stages than the model has layers; a GPU, TPU, Trainium or
#: Gaudi engine's stage holds whole layers.
LAYER_SPANNING_FAMILIES = frozenset({"groq", "cerebras", "d-matrix", "sambanova"})


def main_compute_class(model: ModelSpec, device: Device, formats: Formats) -> str:
    """The compute class of the model's main matmuls: its routed experts' on a MoE, its weights' otherwise."""
    return compute_class(formats.expert if model.is_moe else formats.weight, formats.activation, device)[0]


def datasheet_ridge(model: ModelSpec, group: DeviceGroup, formats: Formats) -> float:
    """Datasheet ridge point (FLOP per byte of the first tier) of the model's main weight class."""
    cls = main_compute_class(model, group.device, formats)
    peak, bw = group.device.peak_flop_per_s.get(cls), group.device.memory[0].bandwidth_bytes_per_s
    return peak / bw if peak and bw else math.nan


def overlapped(compute: Any, memory: Any, eta: float) -> Any:
    """One roofline's time: max(c, m) + (1 - eta) min(c, m), the shorter term hiding under the longer to the
    share ``eta`` (1: the roofline's lower bound max(c, m); 0: the serial upper bound c + m; the scaling book's
    two bounds, https://jax-ml.github.io/scaling-book/roofline/; docs/theory.md §1.2)."""
    if eta <= 0:   # max + min of two numbers is their sum, to the bit: one pass over the arrays instead of three
        return compute + memory
    longer = np.maximum(compute, memory)
    if eta >= 1:
        return longer
    return longer + (1.0 - eta) * np.minimum(compute, memory)


def assemble(*, stage: str, model: ModelSpec, group: DeviceGroup, formats: Formats, shape: tuple[int, ...],
             batch: Any, new_tokens: Any, context: Any, compute: Any, by_tier: dict[str, Any], comm: Any,
             overhead: Any, fits: Any, weights: Any, usable: float, footprint: PassFootprint,
             profile: EngineParams, attention_s: tuple[Any, Any] | None = None, dequant_s: Any = 0.0,
             ridge_flop_per_byte: float | None = None) -> StageResult:
    """A :class:`StageResult` from the terms of one pass: the roofline of compute and memory + comm + fixed, or
    with ``attention_s`` = (its compute, its KV traffic time) the matmuls' and the attention kernels' rooflines
    in turn (the profile's ``overlap = "kernel"``); each roofline is :func:`overlapped` at the profile's
    ``overlap_efficiency``. Unpacking weight-only formats (``dequant_s``) happens as the weights stream in, in
    the same pipeline stage as the loads (Marlin issues its weight loads asynchronously to all compute,
    https://github.com/IST-DASLab/marlin/blob/2f6d7c10e124b3c5fa29ff8d77d568bd7af3274c/README.md): the
    matmuls' memory term is the longer of the two."""
    def full(x: Any) -> Array:   # a read-only view of the pass's shape
        return spread(np.asarray(x, dtype=float), shape)

    # bytes spilled to a slower tier are read after the fast tier's, not beside them: a layer's weights arrive
    # from both before it runs, so tier times add (and moving data to a slower tier never speeds a pass up)
    mem = list(by_tier.values()) or [0.0]
    memory = memory_serial = mem[0] if len(mem) == 1 else sum(mem)
    fits = spread(np.asarray(fits, dtype=bool), shape)
    eta = profile.overlap_efficiency
    if attention_s is None:
        lower = _owned(overlapped(compute, np.maximum(memory, dequant_s), eta), shape)   # a fresh array, written below
    else:
        a, m = attention_s
        lower = _owned(overlapped(compute - a, np.maximum(memory - m, dequant_s), eta) + overlapped(a, m, eta), shape)
    lower += comm + overhead
    if not fits.all():
        np.putmask(lower, ~fits, np.nan)
    return StageResult(
        stage=stage, model_id=model.id, group=group.describe(), formats=formats, batch=full(batch),
        new_tokens=full(new_tokens), context=full(context), time_s=lower, compute_s=full(compute),
        memory_s=full(memory), memory_serial_s=full(memory_serial), memory_by_tier_s={k: full(v) for k, v in by_tier.items()},
        communication_s=full(comm), overhead_s=full(overhead),
        attention_compute_s=full(attention_s[0] if attention_s else 0.0),
        kv_memory_s=full(attention_s[1] if attention_s else 0.0), kernel_overlap=attention_s is not None,
        dequant_s=full(dequant_s),
        ridge_flop_per_byte=datasheet_ridge(model, group, formats) if ridge_flop_per_byte is None else ridge_flop_per_byte,
        weights_per_device_bytes=full(weights), usable_per_device_bytes=float(usable), fits=fits, footprint=footprint,
        family=profile.family, busy_floor_fraction=profile.busy_floor_fraction,
        compute_power_weight=profile.compute_power_weight, memory_power_weight=profile.memory_power_weight)


def _owned(x: Any, shape: tuple[int, ...]) -> Array:
    """``x`` itself when it is already a fresh float array of ``shape``, else a full-size copy."""
    if isinstance(x, np.ndarray) and x.shape == shape and x.dtype == np.float64 and x.flags.owndata:
        return x
    return np.array(spread(np.asarray(x, dtype=float), shape), dtype=float)
