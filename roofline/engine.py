"""Time of one forward pass on a device group: the physics core behind :mod:`roofline.stages`.

One forward pass (:func:`roofline.work.forward_work`) is turned into time on a
group of ``tp`` identical devices:

    T_lower = max(T_compute, max_i T_mem,i) + T_comm + T_fixed      (overlapped)
    T_upper = T_compute + sum_i T_mem,i + T_comm + T_fixed           (serial)

``time_s`` is the overlapped form; both are reported (scaling book "Rooflines":
``max`` lower bound, sum upper bound, never more than 2x apart before the
additive terms). T_mem,i is the traffic from memory tier i at the achieved
bandwidth; data is placed fastest tier first (weights, then KV, then
workspace) and spilled bytes are re-read from the slower tier every pass
(theory.md §1.4). T_compute runs each component at the rate of its compute
class (weight-only and non-native formats are dequantised and multiplied at
the activation rate, theory.md §0, §8 item 2). T_comm is the exposed
tensor-parallel all-reduce (two per layer, Megatron) and expert all-to-all
(theory.md §5.1-5.4). T_fixed is the per-pass and per-layer overhead
(:mod:`roofline.params`) plus the dequantisation work of weight-only formats,
which the kernels do not hide behind the weight stream.

Points that do not fit in memory come back as NaN with ``fits == False``; a
call whose workload arguments are all scalars raises :class:`InfeasibleError`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import attrs
import numpy as np
from numpy.typing import ArrayLike, NDArray

from .configs import load_model
from .errors import InfeasibleError, UnknownSpecError, WorkloadError
from .hardware import Device, load_device
from .model import ModelSpec
from .params import DEFAULT_PARAMS, EngineParams
from .precision import Format
from .units import format_quantity
from .work import Formats, Work, _validate, add, forward_work

Array = NDArray[np.float64]


@attrs.frozen(kw_only=True)
class DeviceGroup:
    """``tp * pp`` identical devices running one model replica.

    ``tp``: tensor parallelism (weights, KV heads and FLOP split; two
    all-reduces per layer). ``pp``: pipeline stages of consecutive layers (each
    device holds 1/pp of the layers; a token crosses the stages one after the
    other, so a pass takes the sum of the stage times plus pp - 1 hops: PP adds
    capacity, not speed, and microbatch overlap is not modelled). ``ep`` > 1:
    the MoE layers use expert parallelism (all-to-all of token activations)
    over ``ep`` of the tp devices instead of tensor-parallel all-reduce.
    """

    device: Device
    tp: int = attrs.field(default=1, validator=attrs.validators.ge(1))
    ep: int = attrs.field(default=1, validator=attrs.validators.ge(1))
    pp: int = attrs.field(default=1, validator=attrs.validators.ge(1))

    @ep.validator
    def _ep(self, _a: attrs.Attribute, v: int) -> None:
        if v > self.tp or self.tp % v:
            raise WorkloadError(f"ep ({v}) must divide tp ({self.tp}): experts are spread over the tp devices")

    @property
    def count(self) -> int:
        return self.tp * self.pp

    def describe(self) -> str:
        parts = [f"TP{self.tp}"] if self.tp > 1 else []
        parts += [f"EP{self.ep}"] if self.ep > 1 else []
        parts += [f"PP{self.pp}"] if self.pp > 1 else []
        head = f"{self.count}x {self.device.id}" if self.count > 1 else self.device.id
        return head + (f" ({', '.join(parts)})" if parts else "")


@attrs.frozen(kw_only=True)
class StageResult:
    """Time, bounds and memory of one stage; every numeric field broadcasts with the workload.

    Times are seconds for the whole stage (for ``draft``, all gamma steps).
    ``bound`` names the largest term: ``compute``, ``memory:<tier>``,
    ``communication`` or ``overhead``. Per-device quantities are for one device
    of the group. Infeasible points have ``fits`` False and NaN ``time_s`` and
    ``time_serial_s``; the component times there are what the pass would take
    if it fitted. Fields are read-only arrays of the broadcast workload shape.
    """

    stage: str
    model_id: str
    group: str
    formats: Formats
    batch: Array
    new_tokens: Array
    context: Array
    time_s: Array
    compute_s: Array
    memory_s: Array
    memory_serial_s: Array
    memory_by_tier_s: dict[str, Array]
    communication_s: Array
    overhead_s: Array
    ridge_flop_per_byte: float
    weights_per_device_bytes: Array
    usable_per_device_bytes: float
    fits: NDArray[np.bool_]
    passes: int = 1
    #: quantities computed on first use (sweeps that never read them do not pay for them)
    lazy: dict[str, Callable[[], Any]] = attrs.field(factory=dict, eq=False, repr=False)

    def _lazy(self, name: str) -> Array:
        return np.broadcast_to(np.asarray(self.lazy[name](), dtype=float), self.time_s.shape)

    @functools.cached_property
    def time_serial_s(self) -> Array:
        """Upper bound: compute + memory from every tier in turn + communication + fixed (NaN where infeasible)."""
        t = self._lazy("time_serial_s")
        return t if self.fits.all() else np.where(self.fits, t, np.nan)

    @functools.cached_property
    def flop_per_device(self) -> Array:
        """FLOP one device executes in the stage."""
        return self._lazy("flop_per_device")

    @functools.cached_property
    def bytes_per_device(self) -> Array:
        """Bytes one device moves from memory in the stage."""
        return self._lazy("bytes_per_device")

    @functools.cached_property
    def kv_per_device_bytes(self) -> Array:
        """KV cache held by one device."""
        return self._lazy("kv_per_device_bytes")

    @functools.cached_property
    def memory_per_device_bytes(self) -> Array:
        """Weights + KV + workspace held by one device."""
        return self._lazy("memory_per_device_bytes")

    @functools.cached_property
    def bound(self) -> NDArray[np.str_]:
        """The largest term per point: ``compute``, ``memory:<tier>``, ``communication``, ``overhead``
        (``does not fit`` where the point is infeasible); computed on first use, not in sweeps that skip it."""
        terms = [self.compute_s, *self.memory_by_tier_s.values(), self.communication_s, self.overhead_s]
        labels = np.array(["compute", *(f"memory:{t}" for t in self.memory_by_tier_s), "communication", "overhead"])
        best = np.nan_to_num(np.asarray(terms[0], dtype=float), nan=-1.0)
        code = np.zeros(best.shape, dtype=np.int8)
        for i, t in enumerate(terms[1:], start=1):
            t = np.asarray(t, dtype=float)
            bigger = t > best
            code = np.where(bigger, i, code)
            best = np.where(bigger, t, best)
        return np.where(self.fits, labels[code], "does not fit")

    @property
    def intensity_flop_per_byte(self) -> Array:
        return _safe_div(np.asarray(self.flop_per_device, dtype=float), np.asarray(self.bytes_per_device, dtype=float))

    @property
    def tokens_per_s(self) -> Array:
        """Tokens processed per second by the whole batch (batch * new tokens / time)."""
        return self.batch * self.new_tokens / self.time_s

    @property
    def per_sequence_tokens_per_s(self) -> Array:
        """Tokens per second one sequence sees in this stage (new tokens / time)."""
        return self.new_tokens / self.time_s


def parse_group(spec: str | Device | DeviceGroup, *, ep: int = 1) -> DeviceGroup:
    """``"b200:8"`` (8 devices in TP), ``"groq-lpu:8x40"`` (TP8 x PP40), a Device, or a DeviceGroup."""
    if isinstance(spec, DeviceGroup):
        return spec
    if isinstance(spec, Device):
        return DeviceGroup(device=spec, ep=ep)
    name, _, count = str(spec).rpartition(":") if ":" in str(spec) else (str(spec), "", "1")
    tp_text, _, pp_text = count.lower().partition("x")
    try:
        tp, pp = int(tp_text), int(pp_text or 1)
    except ValueError:
        raise WorkloadError(f"device group {spec!r}: expected ID, ID:TP or ID:TPxPP, e.g. b200:8 or groq-lpu:8x40") from None
    if tp < 1 or pp < 1:
        raise WorkloadError(f"device group {spec!r}: counts must be >= 1")
    return DeviceGroup(device=load_device(name), tp=tp, ep=ep, pp=pp)


def native_default_format(device: Device) -> str:
    """The format a device computes natively, preferring bf16: what to run on it when the user does not say."""
    for cls, fmt in (("bf16", "bf16"), ("fp16", "fp16"), ("fp8", "fp8"), ("int8", "mxint8"), ("fp4", "mxfp4")):
        if cls in device.native:
            return fmt
    raise UnknownSpecError(f"{device.id} lists no native compute format; supply one with --set {device.id}.compute.bf16=...")


# ------------------------------------------------------------------ helpers
def _resolve(model: ModelSpec | str, device: Device | DeviceGroup | str, tp: int, ep: int) -> tuple[ModelSpec, DeviceGroup]:
    m = model if isinstance(model, ModelSpec) else load_model(model)
    if isinstance(device, DeviceGroup):
        return m, device
    dev = device if isinstance(device, Device) else load_device(device)
    for name, v in (("tp", tp), ("ep", ep)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise WorkloadError(f"{name} must be a whole number >= 1, got {v!r}")
    return m, DeviceGroup(device=dev, tp=int(tp), ep=int(ep))


def compute_class(fmt: Format, activation: Format, device: Device) -> tuple[str, bool]:
    """The compute class a matmul with weights in ``fmt`` runs at, and whether it dequantises.

    A native, non-weight-only format computes at its own rate (FP8 on Hopper,
    NVFP4/MXFP4 on Blackwell: activations quantised to match). Otherwise the
    weights are dequantised to the activation format (int4 weight-only, MXFP4
    on Hopper: BF16 rate; theory.md §0).
    """
    if not fmt.weight_only and device.supports(fmt.compute):
        return fmt.compute, False
    return activation.compute, fmt.name != activation.name


def _rate(device: Device, cls: str) -> float:
    if not device.supports(cls):
        raise UnknownSpecError(
            f"{device.id} has no native {cls} units (native: {', '.join(device.native) or 'none'}); choose formats "
            f"it runs natively (e.g. --weights/--kv/--activations {_suggest(device)}) or supply "
            f"--set {device.id}.compute.{cls}=VALUE")
    return device.get(f"compute.{cls}")


def _suggest(device: Device) -> str:
    for cls, fmt in (("bf16", "bf16"), ("fp8", "fp8"), ("int8", "mxint8"), ("fp16", "fp16")):
        if cls in device.native:
            return fmt
    return "?"


def _kv_shards(model: ModelSpec, tp: int) -> int:
    """KV heads split over TP ranks only while tp <= n_kv; MLA's single latent is replicated (theory.md §2.9)."""
    return 1 if model.is_mla else min(tp, model.num_kv_heads)


def stored_weight_bytes(model: ModelSpec, formats: Formats) -> float:
    """Bytes of all stored weights (every expert), non-expert and expert formats apart."""
    experts = model.param_breakdown()["experts"]
    return ((model.total_params - experts) * formats.weight.bytes_per_element
            + experts * formats.expert.bytes_per_element)


def workspace_per_sequence_bytes(model: ModelSpec, formats: Formats, tp: int, new_tokens: ArrayLike,
                                 logits_per_seq: ArrayLike) -> Array:
    """Transient activations per sequence and device: the residual stream and the widest MLP
    intermediate for each new token (4d + 2*d_ff_widest elements) plus fp32 logits."""
    widest = max(model.intermediate_size, model.experts_per_token * model.expert_intermediate_size, model.hidden_size)
    n = np.asarray(new_tokens, dtype=float)
    return (formats.activation.bytes_per_element * n * (4 * model.hidden_size + 2 * widest)
            + 4.0 * np.asarray(logits_per_seq, dtype=float) * model.vocab_size) / tp


def _allreduce_s(bytes_: Array, p: int, bw: float, hop_s: float, params: EngineParams) -> Array:
    """Ring all-reduce: t0 + 2(p-1) t_hop + 2(p-1)/p * M / W (GenZ collective_times.py; theory.md §5.1)."""
    return params.collective_base_s + 2 * (p - 1) * hop_s + 2 * (p - 1) / p * bytes_ / bw


def _alltoall_s(bytes_: Array, p: int, bw: float, hop_s: float, params: EngineParams) -> Array:
    """All-to-all sending (p-1)/p of ``bytes_`` off each device: t0 + (p-1) t_hop + bytes (p-1)/p / W."""
    return params.collective_base_s + (p - 1) * hop_s + (p - 1) / p * bytes_ / bw


# --------------------------------------------------------------- one pass
def evaluate_pass(model: ModelSpec, group: DeviceGroup, formats: Formats, *, batch: ArrayLike,
                  new_tokens: ArrayLike, prefix_tokens: ArrayLike, logits_per_seq: ArrayLike,
                  mla_absorbed: bool, stage: str, params: EngineParams = DEFAULT_PARAMS,
                  on_infeasible: str = "auto", mean_field: bool = False) -> StageResult:
    """Time one forward pass on ``group`` (see the module docstring for the model).

    With pipeline stages the batch is split into m = min(batch, pp) microbatches
    that keep every stage busy: a token still crosses all pp stages, so the
    step takes pp stage-times of one microbatch (weights are re-read for every
    microbatch), while memory residency counts the whole batch.
    """
    dev, tp, pp = group.device, group.tp, group.pp
    # arguments keep their own shapes: only terms that need the full grid are materialised at it
    B = _validate("batch", batch, minimum=1, integer=not mean_field)
    n = _validate("new_tokens", new_tokens, minimum=1, integer=not mean_field)
    p = _validate("prefix_tokens", prefix_tokens, minimum=0, integer=not mean_field)
    shape = np.broadcast_shapes(B.shape, n.shape, p.shape, np.shape(logits_per_seq))
    micro = np.minimum(B, pp) if pp > 1 else 1.0
    work: Work = forward_work(model, formats, batch=B / micro if pp > 1 else B, new_tokens=n, prefix_tokens=p,
                              logits_per_seq=logits_per_seq, mla_absorbed=mla_absorbed, mean_field=mean_field or pp > 1)
    mbu = dev.memory_bandwidth_fraction or params.memory_bandwidth_fraction
    mfu = vector_fraction = dev.compute_fraction or params.compute_fraction
    if params.compute_half_tokens > 0:
        # matmuls over few tokens run below peak (tile quantisation, occupancy): efficiency T / (T + T_half)
        mfu = mfu * work.tokens / (work.tokens + params.compute_half_tokens)
    act = formats.activation

    # ---- compute: each component at its class's rate, plus dequantisation on the vector units
    w_cls, w_deq = compute_class(formats.weight, act, dev)
    e_cls, e_deq = compute_class(formats.expert, act, dev)
    classes = {"attention_proj": w_cls, "attention_core": act.compute, "mlp": w_cls, "experts": e_cls,
               "shared_experts": w_cls, "router": w_cls, "lm_head": w_cls}
    by_class: dict[str, list[Any]] = {}
    for comp, flop in work.flop.items():
        if np.any(flop > 0):
            by_class.setdefault(classes[comp], []).append(flop)
    inv_mfu = 1.0 / mfu   # small (batch-shaped) or scalar: fold it into each class's factor before the big product
    low = {"fp8", "fp6", "fp4", "int8", "int4"}
    compute = add(*(add(*flops) * (inv_mfu / (tp * _rate(dev, cls)
                                            * (params.low_precision_compute_scale if cls in low else 1.0)))
                    for cls, flops in by_class.items()))
    deq: Any = 0.0
    dequant_s: Any = 0.0
    for fmt, dequantised, comps in ((formats.weight, w_deq, ("attention", "mlp", "shared_experts", "router", "lm_head")),
                                    (formats.expert, e_deq, ("experts",))):
        if dequantised:
            deq = deq + sum(work.weight_bytes[c] for c in comps) / fmt.bytes_per_element
    if np.any(deq > 0) and params.dequant_ops_per_element > 0:
        if dev.peak_flop_per_s.get("fp32") is None:
            raise UnknownSpecError(
                f"{dev.id}: dequantising {formats.expert.name if e_deq else formats.weight.name} weights (no native "
                f"units for them) runs on the vector units, whose rate compute.fp32 is not published; supply "
                f"--set {dev.id}.compute.fp32=VALUE or choose a format {dev.id} computes natively")
        # weight-only kernels unpack every element on the vector units between loading and multiplying it: the
        # work does not hide behind the weight stream, so it is added to the pass (DESIGN.md: weight-only decode
        # is slower than its bytes suggest)
        dequant_s = deq / tp * params.dequant_ops_per_element / (dev.get("compute.fp32") * vector_fraction)

    # ---- memory: per-device residency, placement over tiers, traffic per tier
    imbalance = params.expert_imbalance if group.ep > 1 else 1.0
    # per device of one pipeline stage; stage times are summed over the pp stages below
    w_read = (work.weight_bytes_total - work.weight_bytes["experts"]
              + imbalance * work.weight_bytes["experts"]) / (tp * pp)
    stored = stored_weight_bytes(model, formats) / (tp * pp)
    shards = _kv_shards(model, tp) * pp
    kv_seq = model.kv_cache_bytes(p + n, formats.kv)     # per sequence: context-shaped, small
    kv_dev_of = lambda: (B / shards) * kv_seq  # noqa: E731 - the full grid, built only when asked for
    ws = B * workspace_per_sequence_bytes(model, formats, tp, n, np.asarray(logits_per_seq, dtype=float))
    act_bytes = work.activation_bytes / (tp * pp)
    small_bytes = add(w_read, act_bytes, work.kv_write_bytes / shards)   # batch-shaped
    step_bytes_of = lambda: add(small_bytes, work.kv_read_bytes / shards)  # noqa: E731
    traffic_by_tier: dict[str, Any] = {}
    first = dev.memory[0]
    first_cap = dev.get(f"{first.name}.capacity") * params.usable_memory_fraction
    if len(dev.memory) == 1:
        # one tier (most GPUs): everything lives there, whatever does not fit is infeasible; the comparison
        # kv_seq <= (cap - weights - workspace) * shards / batch builds only a boolean grid
        fits = kv_seq <= (first_cap - stored - ws) * shards / B
        k = pp / (dev.get(f"{first.name}.bandwidth") * mbu)
        traffic_by_tier[first.name] = add(small_bytes * k, work.kv_read_bytes * (k / shards))
        usable_total = first_cap
    else:
        kv_dev = kv_dev_of()
        kv_traffic = (work.kv_read_bytes + work.kv_write_bytes) / shards
        remaining: dict[str, Any] = {"w": stored, "kv": kv_dev, "ws": ws}
        usable_total = 0.0
        for tier in dev.memory:
            if not any(np.any(r > 0) for r in remaining.values()):
                if tier.capacity_bytes is not None:
                    usable_total += tier.capacity_bytes * params.usable_memory_fraction
                continue
            free: Any = dev.get(f"{tier.name}.capacity") * params.usable_memory_fraction
            usable_total += free
            placed = {}
            for key in ("w", "kv", "ws"):
                placed[key] = np.minimum(remaining[key], free)
                free = free - placed[key]
                remaining[key] = remaining[key] - placed[key]
            traffic = (w_read * placed["w"] / stored + kv_traffic * _safe_div(placed["kv"], kv_dev)
                       + act_bytes * _safe_div(placed["ws"], ws))
            if np.any(traffic > 0):
                traffic_by_tier[tier.name] = pp * traffic / (dev.get(f"{tier.name}.bandwidth") * mbu)
        fits = np.logical_and.reduce([np.broadcast_to(r <= 1e-6 * (stored + 1), shape) for r in remaining.values()])
    mem_times = list(traffic_by_tier.values()) or [0.0]
    memory = mem_times[0] if len(mem_times) == 1 else np.maximum.reduce(np.broadcast_arrays(*mem_times))
    memory_serial = mem_times[0] if len(mem_times) == 1 else sum(mem_times)

    # ---- communication (exposed) and fixed overheads
    comm: Any = 0.0
    if tp > 1 or pp > 1:
        bw = dev.get("scale_up.bandwidth") * params.link_bandwidth_fraction
        hop = dev.scale_up.latency_s if dev.scale_up.latency_s is not None else params.link_hop_latency_s
    if tp > 1:
        msg = work.tokens * model.hidden_size * act.bytes_per_element
        n_ar = 2 * model.num_layers - (model.num_moe_layers if group.ep > 1 else 0)
        comm = n_ar * _allreduce_s(msg, tp, bw, hop, params)
        if group.ep > 1:
            a2a = work.tokens * model.experts_per_token * model.hidden_size * act.bytes_per_element
            comm = comm + 2 * model.num_moe_layers * _alltoall_s(a2a, group.ep, bw, hop, params)
    if pp > 1:  # each pass crosses pp - 1 stage boundaries with the tokens' activations
        comm = comm + (pp - 1) * (hop + work.tokens * model.hidden_size * act.bytes_per_element / bw)
    step = dev.step_floor_s if dev.step_floor_s is not None else params.step_overhead_s
    layer = dev.layer_floor_s if dev.layer_floor_s is not None else params.layer_overhead_s
    overhead = step + layer * model.num_layers + dequant_s

    lazy = {"flop_per_device": lambda: work.flop_total * (micro / (tp * pp)),   # per step (all microbatches)
            "bytes_per_device": lambda: step_bytes_of() * micro,
            "kv_per_device_bytes": kv_dev_of,
            "memory_per_device_bytes": lambda: add(stored, ws, kv_dev_of())}
    main_cls = w_cls if not model.is_moe else e_cls
    ridge = dev.peak_flop_per_s.get(main_cls) or math.nan
    first_bw = dev.memory[0].bandwidth_bytes_per_s
    ridge = ridge / first_bw if first_bw else math.nan
    result = _finish(stage=stage, model_id=model.id, group=group.describe(), formats=formats, B=B, n=n, context=p,
                     compute=compute, memory=memory, memory_serial=memory_serial, by_tier=traffic_by_tier,
                     comm=comm, overhead=overhead, ridge=ridge, weights=stored, usable=usable_total, fits=fits,
                     shape=shape, lazy=lazy)
    return _check_feasible(result, on_infeasible, (batch, new_tokens, prefix_tokens))


def _safe_div(a: Array, b: Array) -> Array:
    return np.divide(a, b, out=np.zeros_like(a), where=b > 0)


def _finish(*, stage: str, model_id: str, group: str, formats: Formats, B: Any, n: Any, context: Any,
            compute: Any, memory: Any, memory_serial: Any, by_tier: dict[str, Any], comm: Any, overhead: Any,
            ridge: float, weights: Any, usable: float, fits: Any, lazy: dict[str, Callable[[], Any]],
            shape: tuple[int, ...] | None = None, passes: int = 1) -> StageResult:
    shape = shape if shape is not None else np.broadcast_shapes(*(np.shape(x) for x in (
        B, n, context, compute, memory, comm, overhead, fits)))

    def full(x: Any) -> Array:
        return np.broadcast_to(np.asarray(x, dtype=float), shape)

    fits = np.broadcast_to(np.asarray(fits, dtype=bool), shape)
    fixed = comm + overhead
    lower = _owned(np.maximum(compute, memory), shape)   # a fresh full-size array, written in place below
    lower += fixed
    if not fits.all():
        np.putmask(lower, ~fits, np.nan)
    lazy = {"time_serial_s": lambda: add(compute, fixed, memory_serial), **lazy}
    return StageResult(
        stage=stage, model_id=model_id, group=group, formats=formats, batch=full(B), new_tokens=full(n),
        context=full(context), time_s=lower, compute_s=full(compute), memory_s=full(memory),
        memory_serial_s=full(memory_serial), memory_by_tier_s={k: full(v) for k, v in by_tier.items()},
        communication_s=full(comm), overhead_s=full(overhead), ridge_flop_per_byte=ridge,
        weights_per_device_bytes=full(weights), usable_per_device_bytes=float(usable), fits=fits, passes=passes,
        lazy=lazy)


def _owned(x: Any, shape: tuple[int, ...]) -> Array:
    """``x`` itself when it is already a fresh float array of ``shape``, else a full-size copy."""
    if isinstance(x, np.ndarray) and x.shape == shape and x.dtype == np.float64 and x.flags.owndata:
        return x
    return np.array(np.broadcast_to(np.asarray(x, dtype=float), shape), dtype=float)


def _check_feasible(r: StageResult, on_infeasible: str, inputs: tuple[ArrayLike, ...]) -> StageResult:
    if on_infeasible not in ("auto", "raise", "nan"):
        raise WorkloadError(f"on_infeasible must be 'auto', 'raise' or 'nan', got {on_infeasible!r}")
    scalar = all(np.ndim(x) == 0 for x in inputs)
    if np.all(r.fits) or on_infeasible == "nan" or (on_infeasible == "auto" and not scalar):
        return r
    return require_feasible(r)


def require_feasible(r: StageResult) -> StageResult:
    """Return ``r`` if every point fits, else raise :class:`InfeasibleError` describing the first that does not."""
    if np.all(r.fits):
        return r
    i = np.unravel_index(np.argmin(r.fits), r.fits.shape) if r.fits.ndim else ()
    need = float(np.asarray(r.memory_per_device_bytes)[i])
    raise InfeasibleError(
        f"{r.model_id} does not fit on {r.group} for {r.stage}: needs {format_quantity(need, 'bytes')} per device "
        f"(weights {format_quantity(float(np.asarray(r.weights_per_device_bytes)[i]), 'bytes')}, "
        f"KV {format_quantity(float(np.asarray(r.kv_per_device_bytes)[i]), 'bytes')}) but "
        f"{format_quantity(r.usable_per_device_bytes, 'bytes')} is usable; use more devices (--tp), "
        f"a smaller format, or a smaller batch/context")


def combine(results: list[StageResult], masks: list[Array], *, stage: str) -> StageResult:
    """Sum sequential passes (chunked prefill, gamma draft steps); ``masks`` say where each pass happens."""
    first = results[0]
    zero = np.zeros_like(first.time_s)

    def total(get: Callable[[StageResult], Array]) -> Array:
        return sum((np.where(m, np.nan_to_num(get(r)), 0.0) for r, m in zip(results, masks)), zero)

    def peak(get: Callable[[StageResult], Array]) -> Array:
        return np.maximum.reduce([np.where(m, get(r), 0.0) for r, m in zip(results, masks)])

    fits = np.all([np.where(m, r.fits, True) for r, m in zip(results, masks)], axis=0)
    tiers = {t for r in results for t in r.memory_by_tier_s}
    by_tier = {t: total(lambda r, t=t: r.memory_by_tier_s.get(t, zero)) for t in tiers}
    compute, memory = total(lambda r: r.compute_s), total(lambda r: r.memory_s)
    comm, overhead = total(lambda r: r.communication_s), total(lambda r: r.overhead_s)
    lazy = {"flop_per_device": lambda: total(lambda r: r.flop_per_device),
            "bytes_per_device": lambda: total(lambda r: r.bytes_per_device),
            "kv_per_device_bytes": lambda: peak(lambda r: r.kv_per_device_bytes),
            "memory_per_device_bytes": lambda: peak(lambda r: r.memory_per_device_bytes)}
    out = _finish(stage=stage, model_id=first.model_id, group=first.group, formats=first.formats,
                  B=first.batch, n=total(lambda r: r.new_tokens), context=first.context, compute=compute,
                  memory=memory, memory_serial=total(lambda r: r.memory_serial_s), by_tier=by_tier, comm=comm,
                  overhead=overhead, ridge=first.ridge_flop_per_byte, weights=first.weights_per_device_bytes,
                  usable=first.usable_per_device_bytes, fits=fits, lazy=lazy, passes=len(results))
    # the overlapped time is the sum of each pass's max(compute, memory): kernels do not overlap across passes
    lower = total(lambda r: r.time_s)
    return attrs.evolve(out, time_s=np.where(fits, lower, np.nan))
