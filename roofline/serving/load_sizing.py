"""Sizing for a request rate: the fewest devices whose percentiles meet p99 (or p50/p90) latency limits.

Where :func:`roofline.serving.sizing.size` sizes N concurrent users at a steady state with no queue, this sizes a
deployment for requests arriving at a rate (Poisson, or burstier Gamma gaps) with lengths drawn from a
distribution, through the queues of :mod:`roofline.serving.load`. For each device kind, each group shape its
family's layout offers and each placement kind (aggregated; disaggregated with a pool of prefill groups of the
same shape), the fewest replicas (and prefill groups) whose percentiles meet every limit at the rate. A
deployment is never sized at a utilisation where its limits fail: the search reads the percentiles at the load
each replica would carry, and a higher rate never needs fewer devices.

Spreading requests over R replicas at random thins the arrivals; their burstiness falls as R grows
(:func:`roofline.serving.queueing.split_cv2`), and the search prices each replica count at the burstiness its
replicas see. (Pricing every count at the unthinned burstiness is not a safe side: burstier arrivals bunch the
prompts into fewer, longer steps, which can lower an ITL p99 while they raise the TTFT's.)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from ..errors import RooflineError, WorkloadError
from ..specs.devices import Device
from ..specs.formats import check_format_keys
from ..specs.groups import DeviceGroup
from ..specs.models import ModelSpec
from ..specs.params import EngineParams
from ..specs.prices import Prices, shipped_prices
from ..workload import check_instance, check_items
from .admission import Admission
from .load import Deployment, LoadResult, Workload, check_limits, deployment, meets
from .serve import DEFAULT_TOKEN_BUDGET, Placement, Request, check_context, evaluate_serving
from .sizing import Option, confidence_level, deployed_rates, device_formats, group_shapes
from .trust import FIELDS, interval

#: The most replicas (and prefill groups) a search tries.
MAX_REPLICAS = 100_000
#: vLLM's scheduler defaults for `vllm serve` (the OpenAI API server): on a GPU with at least 70 GiB that is not an
#: A100 (H100, H200, MI300X, B200, ...), max_num_seqs 1024 and max_num_batched_tokens 8192; on others 256 and
#: 2048 (``EngineArgs._set_default_args``,
#: https://github.com/vllm-project/vllm/blob/99d7eb5d6a512cfcc5a2b104f24ebf2d6cda772b/vllm/engine/arg_utils.py).
VLLM_SERVE_DEFAULTS = {"large": (1024, 8192), "other": (256, 2048)}


def engine_defaults(stack: str, device: Device) -> tuple[int | None, int | None]:
    """(max running requests, tokens per step) the stack's server runs with when not told otherwise, or None
    where no default is sourced here (the caller's own then apply): vLLM's by device (:data:`VLLM_SERVE_DEFAULTS`)."""
    if stack != "vllm" or device.family != "gpu":
        return None, None
    memory = sum(t.capacity_bytes or 0 for t in device.memory[:1])
    large = memory >= 70 * 2**30 and "a100" not in device.id.lower()
    return VLLM_SERVE_DEFAULTS["large" if large else "other"]


@attrs.frozen(kw_only=True)
class LoadTarget:
    """What must be served: ``rate_per_s`` requests/s drawn from ``workload``, every latency limit met
    (``{"ttft_p99_s": 1.0, "itl_p99_s": 0.05}``: ttft, itl, tpot or e2e at p50, p90 or p99)."""

    rate_per_s: float = attrs.field()
    workload: Workload = attrs.field(validator=attrs.validators.instance_of(Workload))
    limits: Mapping[str, float] = attrs.field(converter=check_limits)

    @rate_per_s.validator
    def _rate(self, _a: attrs.Attribute, v: float) -> None:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise WorkloadError(f"the request rate must be a positive number of requests/s, got {v!r}")

    @limits.validator
    def _some(self, _a: attrs.Attribute, v: Mapping[str, float]) -> None:
        if not v:
            raise WorkloadError("give at least one latency limit (ttft_p99_s, itl_p99_s, tpot_p99_s, ...)")
        gaps = [k for k in v if k.startswith(("itl", "tpot"))]
        if gaps and not np.any(np.asarray(self.workload.lengths.output_tokens) > 1):
            raise WorkloadError(f"every request of lengths {self.workload.lengths.name!r} outputs one token: there is "
                                f"no gap between tokens for {', '.join(gaps)} to bound (limit ttft or e2e)")


@attrs.frozen(kw_only=True)
class LoadOption(Option):
    """An :class:`Option` sized for a rate: also the rate, the percentiles there and each pool's utilisation."""

    rate_per_s: float = math.nan
    #: the busier pool's share: the decode replicas' (rate over what they sustain) or the prefill pool's
    utilisation: float = math.nan
    decode_utilisation: float = math.nan
    prefill_utilisation: float = math.nan
    #: running requests per decode replica on average (``batch_per_replica`` is the scheduler's cap)
    batch_mean: float = math.nan
    #: the share of requests that find every decode slot taken
    slot_wait_share: float = math.nan
    ttft_p50_s: float = math.nan
    ttft_p90_s: float = math.nan
    ttft_p99_s: float = math.nan
    itl_p50_s: float = math.nan
    itl_p90_s: float = math.nan
    itl_p99_s: float = math.nan
    tpot_p50_s: float = math.nan
    tpot_p90_s: float = math.nan
    tpot_p99_s: float = math.nan
    e2e_p50_s: float = math.nan
    e2e_p90_s: float = math.nan
    e2e_p99_s: float = math.nan


def _fewest(at: Any, start: int, most: int = MAX_REPLICAS) -> tuple[int, LoadResult] | None:
    """The smallest count n in [``start``, ``most``] with ``at(n)`` = (True, result), given that a larger count never
    turns a met limit into a missed one: doubling until one meets (the last try at ``most``), then bisecting; None
    where even ``most`` misses. Where ``start`` misses, ``most`` is tried next: a limit that even ``most`` misses
    (a latency floor above it, which no count lowers) costs two tries instead of a doubling to ``most``."""
    lo, hi = start - 1, min(start, most)
    if hi < start:
        return None
    ok, r = at(hi)
    top = None if ok or hi >= most else at(most)
    if not ok and (top is None or not top[0]):
        return None
    while not ok:
        lo, hi = hi, min(hi * 2, most)
        ok, r = top if hi == most and top is not None else at(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        mid_ok, mid_r = at(mid)
        if mid_ok:
            hi, r = mid, mid_r
        else:
            lo = mid
    return hi, r


def _first_meeting(d: Deployment, rate: float, limits: Mapping[str, float], start: int,
                   most: int = MAX_REPLICAS) -> tuple[int, LoadResult] | None:
    """The fewest replicas in [``start``, ``most``] whose decode replicas meet the limits, each at its share of the rate and
    the burstiness that share has (:func:`roofline.serving.queueing.split_cv2`). A disaggregated deployment is
    tried with a prefill pool at most half busy, so that its TTFT and E2E limits see the wait for a decode slot
    (which only more decode replicas shorten) and little of the pool's own."""
    if d.prefill_s.size:
        half_busy = math.ceil(2 * rate * d.workload.lengths.mean(d.prefill_s)) + 1
        d = attrs.evolve(d, prefill_groups=max(d.prefill_groups, half_busy))

    def at(n: int) -> tuple[bool, LoadResult]:
        r = attrs.evolve(d, replicas=n).at([rate])
        return bool(meets(r, limits)[0]), r
    return _fewest(at, start, most)


def _why_not(d: Deployment, limits: Mapping[str, float]) -> str:
    """Why no replica count meets the limits: the percentiles at a vanishing load already miss them."""
    light = d.at([d.capacity_per_s * 1e-4])
    missed = [f"{k[:-2].replace('_', ' ')} {float(getattr(light, k)[0]) * 1e3:.4g} ms > {v * 1e3:g} ms"
              for k, v in limits.items() if not float(getattr(light, k)[0]) <= v]
    return "even at a vanishing load " + ", ".join(missed) if missed else "no replica count meets the limits"


def _priced(model: ModelSpec, g: DeviceGroup, kind: str, target: LoadTarget, *, formats: Mapping[str, Any],
            params: EngineParams | None, max_slots: int | None, token_budget: int,
            admission: Admission | None = None) -> tuple[Deployment, int]:
    """The deployment of one shape and placement kind, and the fewest devices it could possibly need: the decode
    replicas its capacity asks for at the rate (the search's start and a bound to skip shapes by)."""
    placement = Placement(name=f"{kind} on {g.shape}", decode=g, prefill=g if kind == "disaggregated" else None)
    d = deployment(model, placement, target.workload, formats=formats, params=params, max_slots=max_slots,
                   token_budget=token_budget, admission=admission)
    start = max(1, math.ceil(target.rate_per_s / max(engine_capacity(d), 1e-300) * (1 + 1e-9)))
    return d, start


def _least_devices(d: Deployment, replicas: int) -> int:
    """The fewest devices ``replicas`` decode replicas of ``d`` take: a disaggregated deployment adds at least one
    prefill group of the same shape."""
    return (replicas + (d.placement.prefill is not None)) * d.placement.decode.count


def _sized(model: ModelSpec, d: Deployment, start: int, target: LoadTarget, *, formats: Mapping[str, Any],
           params: EngineParams | None, prices: Prices, at_most: float = math.inf) -> Option | None:
    """The fewest replicas (and prefill groups) of one priced shape whose percentiles meet the limits; None where
    it would take more than ``at_most`` devices (another shape already needs that many: the decode replicas are
    searched only up to the count that could still tie it, which spares the evaluations above)."""
    g, kind = d.placement.decode, "disaggregated" if d.placement.prefill is not None else "aggregated"
    limits = dict(target.limits)
    most = MAX_REPLICAS if math.isinf(at_most) else min(
        MAX_REPLICAS, math.floor(at_most / g.count) - (d.placement.prefill is not None))
    found = _first_meeting(d, target.rate_per_s, limits, start, most)
    if found is None and most < MAX_REPLICAS:
        return None
    if found is None:
        return Option(device=g.device.id, placement=kind, reason=_why_not(d, limits))
    replicas, r = found
    pools = 0
    if kind == "disaggregated":
        pools, r = _prefill_pool(attrs.evolve(d, replicas=replicas), target.rate_per_s, limits) or (0, r)
        if not pools:
            return Option(device=g.device.id, placement=kind, reason=_why_not(d, limits))
    return _option(model, d.placement, target, r, replicas, pools, formats=formats, params=params, prices=prices,
                   slots=d.engine.slots)


def _kind(model: ModelSpec, shapes: Sequence[DeviceGroup], kind: str, target: LoadTarget, **kw: Any) -> Option:
    """The fewest devices over the shapes for one placement kind (of equal counts, the lowest p99 TTFT): shapes
    tried from the fewest devices they could need, skipping those whose bound already exceeds the best found."""
    priced, found = [], []
    for g in shapes:
        try:
            priced.append(_priced(model, g, kind, target, formats=kw["formats"], params=kw["params"],
                                  max_slots=kw["max_slots"], token_budget=kw["token_budget"],
                                  admission=kw.get("admission")))
        except RooflineError as e:
            found.append(Option(device=g.device.id, placement=kind, reason=str(e)))
    best = math.inf
    for d, start in sorted(priced, key=lambda p: _least_devices(*p)):
        if _least_devices(d, start) > best:   # a tie is still sized: it may meet the limits with a lower p99 TTFT
            continue
        try:
            o = _sized(model, d, start, target, formats=kw["formats"], params=kw["params"], prices=kw["prices"],
                       at_most=best)
        except RooflineError as e:
            o = Option(device=d.placement.decode.device.id, placement=kind, reason=str(e))
        if o is None:   # needs more devices than the best found
            continue
        found.append(o)
        best = min(best, o.devices) if o.feasible else best
    ok = [o for o in found if isinstance(o, LoadOption) and o.feasible]   # an Option alone says why not
    if ok:
        return min(ok, key=lambda o: (o.devices, o.ttft_p99_s))
    dev = shapes[0].device.id
    return next((o for o in found if o.reason), Option(device=dev, placement=kind, reason="no shape holds the model"))


def engine_capacity(d: Deployment) -> float:
    """The rate one replica of the decode side sustains."""
    return float(attrs.evolve(d, replicas=1, prefill_s=np.zeros(0), prompt_s=np.zeros(0)).capacity_per_s)


def _prefill_pool(d: Deployment, rate: float, limits: Mapping[str, float]) -> tuple[int, LoadResult] | None:
    """The fewest prefill groups that meet every limit with ``d``'s decode replicas."""
    def at(p: int) -> tuple[bool, LoadResult]:
        r = attrs.evolve(d, prefill_groups=p).at([rate])
        return bool(meets(r, limits)[0]), r
    return _fewest(at, max(1, math.ceil(rate * d.workload.lengths.mean(d.prefill_s) * (1 + 1e-9))))


def _option(model: ModelSpec, placement: Placement, target: LoadTarget, r: LoadResult, replicas: int, pools: int, *,
            formats: Mapping[str, Any], params: EngineParams | None, prices: Prices, slots: int) -> LoadOption:
    """The sized option: devices, power and price at the load each replica carries (its mean batch)."""
    g, L = placement.decode, target.workload.lengths
    request = Request(input_tokens=max(1, round(L.mean_input_tokens)), output_tokens=max(1, round(L.mean_output_tokens)))
    batch = float(max(1, round(float(np.nan_to_num(r.batch_mean[0], nan=1.0)))))
    one = evaluate_serving(model, Placement(name=placement.name, decode=g), request, batch=batch, target_formats=formats,
                           params=params, prices=prices)
    tokens = target.rate_per_s * L.mean_output_tokens
    at = {"tokens_per_s": tokens / replicas, "power_w": float(one.power_w), "usd_per_hour": float(one.usd_per_hour),
          "devices": float(g.count)}
    devices = (replicas + pools) * g.count
    per_kw, usd = deployed_rates(at, replicas, devices, g.device, prices)

    def v(name: str) -> float:
        return float(np.asarray(getattr(r, name))[0])
    option = LoadOption(device=g.device.id, placement="disaggregated" if pools else "aggregated", replicas=replicas,
                        devices=devices, prefill_groups=pools, batch_per_replica=slots, group=g.shape,
                        tokens_per_s_per_user=1.0 / v("tpot_mean_s"), ttft_s=v("ttft_mean_s"),
                        tokens_per_s_per_kw=per_kw, usd_per_million_output_tokens=usd, placement_record=placement,
                        formats=dict(formats), target_formats=one.target_formats.as_dict() if one.target_formats else {},
                        rate_per_s=target.rate_per_s, batch_mean=v("batch_mean"))
    figures: dict[str, Any] = {k: v(k) for k in ("utilisation", "decode_utilisation", "prefill_utilisation",
                                                 "slot_wait_share", *(f"{m}_p{q}_s" for m in ("ttft", "itl", "tpot", "e2e")
                                                                      for q in (50, 90, 99)))}
    return attrs.evolve(option, **figures)


def pessimistic_limits(target: LoadTarget, device: Device, confidence: float, stack: str | None = None) -> LoadTarget:
    """``target`` with each percentile limit lowered by the upper ``confidence`` quantile of its error at a request
    rate on ``device`` (the interval kind each percentile takes, :data:`roofline.serving.trust.FIELDS`: the MLPerf
    runs priced at their measured rates, docs/load.md): a deployment whose predicted percentiles meet these meets
    the original limits at the pessimistic end of their intervals."""
    level = confidence_level(confidence)
    if level == 0:
        return target
    factor = {k: max(interval(device, FIELDS[k][0], stack=stack, level=level).high_factor, 1.0) for k in target.limits}
    return attrs.evolve(target, limits={k: v / factor[k] for k, v in target.limits.items()})


def size_at_rate(model: ModelSpec, devices: Sequence[Device | DeviceGroup], target: LoadTarget, *,
                 formats: Mapping[str, Any] | None = None, params: EngineParams | None = None,
                 prices: Prices | None = None, max_slots: int | None = None, token_budget: int | None = None,
                 stack: str | None = None, admission: Admission | None = None,
                 confidence: float | None = None) -> list[Option]:
    """The fewest devices per device kind and placement kind (aggregated, disaggregated) whose percentiles meet
    ``target``'s limits at its rate (module docstring). Devices as :func:`size` takes them (records:
    :func:`roofline.size_at_rate` takes ids too); options
    best first (fewest devices, then the lowest p99 TTFT); a kind that cannot meet the limits is listed with
    the reason. ``max_slots``: the scheduler's cap on running requests (vLLM's max_num_seqs); ``token_budget``:
    the tokens a step may carry; where unset, ``stack``'s server defaults on each device (:func:`engine_defaults`),
    else what memory holds and 8,192 tokens. ``admission``: when the scheduler lets waiting prompts in
    (:class:`roofline.serving.admission.Admission`, e.g. vLLM's multi-step ``num_scheduler_steps``); a disaggregated
    option under a wait is listed with the reason :func:`~roofline.serving.admission.check_admission` gives.
    ``confidence`` (say 0.9): each device kind sized so its p99 limits hold at the pessimistic end of its
    percentiles' intervals (:func:`pessimistic_limits`)."""
    if not isinstance(target, LoadTarget):
        raise WorkloadError(f"target must be a LoadTarget, got {type(target).__name__}")
    m = check_instance("model", model, ModelSpec, optional=False)
    L = target.workload.lengths
    check_context(m, Request(input_tokens=int(L.input_tokens.max()), output_tokens=int(L.output_tokens.max())))
    given = check_format_keys(formats)
    prices = prices if prices is not None else shipped_prices()
    items = check_items("devices", devices, (Device, DeviceGroup, str))
    if not items:
        raise WorkloadError("give at least one device (an id, a Device or a group) to size")
    out: list[Option] = []
    for item in items:
        check_instance("a device to size", item, Device, DeviceGroup, optional=False)
        dev = item.device if isinstance(item, DeviceGroup) else item
        try:
            fmt = device_formats(dev, given, m)
            end = int(np.ceil(L.mean(L.input_tokens + L.output_tokens)))
            shapes = [item] if isinstance(item, DeviceGroup) else group_shapes(m, dev, end, fmt, params)
        except RooflineError as e:
            out += [Option(device=dev.id, placement=k, reason=str(e)) for k in ("aggregated", "disaggregated")]
            continue
        seqs, budget = engine_defaults(stack or "", dev)
        goal = pessimistic_limits(target, dev, confidence, stack) if confidence is not None else target
        out += [_kind(m, shapes, kind, goal, formats=fmt, params=params, prices=prices,
                      max_slots=max_slots or seqs, token_budget=token_budget or budget or DEFAULT_TOKEN_BUDGET,
                      admission=admission)
                for kind in ("aggregated", "disaggregated")]
    return sorted(out, key=lambda o: (not o.feasible, o.devices, getattr(o, "ttft_p99_s", math.inf)))
