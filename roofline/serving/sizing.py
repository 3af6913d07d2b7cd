"""Sizing: the fewest devices that serve N concurrent users at a per-user speed and a TTFT target.

For each device kind and each placement (aggregated; disaggregated prefill; speculative with the draft on the
decode devices when a draft is given) the search tries every group shape of the family's layout that holds
the model (tensor parallel up to the family's ``max_tp``, then the fewest pipeline stages), and for each the
largest batch per replica whose tokens/s per user and TTFT meet the targets (both worsen as the batch grows:
more KV to read, more prompts mixed into each step). Replicas = ceil(users / batch); the option with the
fewest devices wins (ties: the faster one). Steady-state continuous batching, every user active: a lower
bound that ignores queueing and arrival bursts.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from ..errors import RooflineError, UnitError, UnknownSpecError, WorkloadError
from ..physics.energy import DEFAULT_POWER, idle_w
from ..physics.memory import stored_weight_bytes
from ..physics.speculative import Acceptance
from ..physics.stages import decode_step, max_batch, setup
from ..records import frame, plain, tidy_columns
from ..specs.devices import Device
from ..specs.execution import resolve_profile
from ..specs.formats import Formats, check_format_keys, native_default
from ..specs.groups import DeviceGroup
from ..specs.models import ModelSpec
from ..specs.params import EngineParams
from ..specs.prices import Prices, shipped_prices
from ..units import parse_quantity
from ..workload import check_instance, check_items, check_whole, record_of
from .serve import Placement, Request, ServingResult, check_context, evaluate_serving
from .trust import interval

TPS = (1, 2, 4, 8, 16, 32)
MAX_BATCH = 4096
GAMMAS = np.arange(1, 17)
PP_FACTORS = (1.5, 2, 3, 4, 6, 8)
MAX_GROUP_DEVICES = 16384


@attrs.frozen(kw_only=True)
class Target:
    """What must be served: concurrent users, each at least this fast, first token within ``max_ttft_s``
    (seconds, or a time with its unit: ``"200 ms"``, as the command line's ``--max-ttft-ms`` gives it in ms)."""

    users: int = attrs.field(converter=lambda v: check_whole("users", v, maximum=10**9))
    min_tokens_per_s_per_user: float = attrs.field(converter=lambda v: _positive("min tokens/s per user", v))
    request: Request = attrs.field(validator=record_of(Request))
    max_ttft_s: float = attrs.field(default=math.inf, converter=lambda v: _positive("max_ttft_s", _time(v), inf=True))


def _time(v: Any) -> Any:
    """A time string (``"200 ms"``, ``"0.2 s"``) in seconds; anything else as given."""
    if not isinstance(v, str):
        return v
    try:
        return parse_quantity(v, "s", what="max_ttft_s")
    except UnitError as e:
        raise WorkloadError(str(e)) from None


def _positive(what: str, v: Any, inf: bool = False) -> float:
    """``v`` as a float if it is a positive number (numpy scalars too; ``inf`` allows infinity), else a WorkloadError."""
    ok = isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_)) and float(v) > 0 and (
        math.isfinite(v) or (inf and v == math.inf))
    if not ok:
        raise WorkloadError(f"{what} must be a positive number, got {v!r}")
    return float(v)


@attrs.frozen(kw_only=True)
class Option:
    """The fewest devices for one device kind and placement kind, or why there is none."""

    device: str
    placement: str
    replicas: int = 0
    devices: int = 0
    #: whole prefill groups (each of ``group``'s shape) the deployment needs when disaggregated: the replicas'
    #: prefill share added up and rounded up, so ``devices`` is what can be deployed, not a fraction of a group
    prefill_groups: int = 0
    batch_per_replica: int = 0
    gamma: int = 0
    group: str = ""
    tokens_per_s_per_user: float = math.nan
    ttft_s: float = math.nan
    tokens_per_s_per_kw: float = math.nan
    usd_per_million_output_tokens: float = math.nan
    placement_record: Placement | None = attrs.field(default=None, eq=False, repr=False)
    #: the formats the option was sized with (weights, experts, kv, activations: the sizing input)
    formats: Mapping[str, Any] = attrs.field(factory=dict, eq=False, repr=False)
    #: the formats its target's passes ran in (:meth:`Formats.as_dict`, with the stack's LM head: what every
    #: other command reports; empty for an option that does not fit)
    target_formats: Mapping[str, Any] = attrs.field(factory=dict, eq=False, repr=False)
    #: the formats a speculative option's draft ran in (:meth:`Formats.as_dict`; empty without a draft)
    draft_formats: Mapping[str, Any] = attrs.field(factory=dict, eq=False, repr=False)
    reason: str = ""

    @property
    def feasible(self) -> bool:
        return self.replicas > 0

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values, as the other result records give (the placement as its description)."""
        out = {f.name: plain(getattr(self, f.name)) for f in attrs.fields(Option) if f.name != "placement_record"}
        placement = self.placement_record.describe() if self.placement_record is not None else None
        return {"feasible": self.feasible, **out, "placement_description": placement}

    def to_frame(self) -> Any:
        """A one-row ``pandas.DataFrame`` (nested formats as ``formats.weights`` columns); a list of options:
        ``pandas.concat([o.to_frame() for o in options])``, or ``DataFrame([o.to_dict() for o in options])``."""
        return frame(tidy_columns(self.to_dict()))


def device_formats(device: Device, given: Mapping[str, Any] | None, model: ModelSpec | None = None) -> dict[str, Any]:
    """The formats to size ``device`` with: each of weights, experts, kv and activations as given, else (missing,
    None or ``"auto"``) the defaults every command uses (:meth:`Formats.for_model` with this device: the
    checkpoint's where the device runs them, else bf16 or the device's native format, fp16 on Groq's LPU, mxint8 on
    Corsair), so the formats say what was sized."""
    chosen = {k: v for k, v in dict(given or {}).items() if v not in (None, "auto")}
    if model is None:
        auto = native_default((device,))
        return {"weights": auto, "kv": auto, "activations": auto, **chosen}
    f = Formats.for_model(model, **chosen, devices=(device,))
    out = {"weights": f.weights, "experts": f.experts or f.weights, "kv": f.kv, "activations": f.activations}
    out.update({"head": f.head} if f.head else {})
    return out


def group_shapes(model: ModelSpec, device: Device, context: int, formats: Mapping[str, Any],
            params: EngineParams | None) -> list[DeviceGroup]:
    """Candidate groups: every TP of the family's layout (up to ``max_tp``) that divides the heads and holds the
    model at batch 1, then pipelines of ``max_tp`` devices per stage from the fewest stages that hold it up to
    8x as many (more stages leave more memory for KV, hence larger batches: on SRAM chips the cheapest answer
    is rarely the smallest group)."""
    from .placements import smallest_group
    max_tp = int(resolve_profile(device, params).max_tp)

    def holds(g: DeviceGroup) -> bool:
        return bool(max_batch(model, g, context=context, params=params, **formats) >= 1)
    out = [DeviceGroup(device=device, tp=tp) for tp in TPS if tp <= max_tp and model.num_heads % tp == 0]
    out = [g for g in out if holds(g)]
    top = out[-1] if out else smallest_group(holds, device, max_tp=max_tp)
    bases = [top.pp] + [pp for pp in [_fast_tier_stages(model, top, formats, params)] if pp and pp > top.pp]
    stages = {math.ceil(pp * k) for pp in bases for k in (1, *PP_FACTORS)} - {top.pp}
    extra = [DeviceGroup(device=device, tp=top.tp, pp=pp) for pp in sorted(stages)
             if pp > top.pp and top.tp * pp <= MAX_GROUP_DEVICES]
    return out + [top] * (not out) + extra


def _fast_tier_stages(model: ModelSpec, group: DeviceGroup, formats: Mapping[str, Any],
                      params: EngineParams | None) -> int | None:
    """Pipeline stages (of ``group.tp`` devices) whose fastest memory tier alone holds the weights, for devices
    with more than one tier (Corsair's SRAM over LPDDR); None otherwise."""
    tiers = group.device.memory
    if len(tiers) < 2 or not tiers[0].capacity_bytes:
        return None
    s = setup(model, group, tp=None, ep=None, params=params, **{"experts": None, **formats})
    profile = resolve_profile(group.device, s.params)
    weights = stored_weight_bytes(s.model, s.formats.with_toolchain_head(profile.head_format))
    return math.ceil(weights / (group.tp * tiers[0].capacity_bytes * profile.usable_memory_fraction))


def _best_batch(r: ServingResult, target: Target, speculative: bool) -> tuple[int, int] | None:
    """(batch, gamma) with the largest batch that meets the targets (best gamma at that batch), or None."""
    per_user = np.where(r.fits, np.nan_to_num(r.tokens_per_s_per_user, nan=-1), -1)
    ok = (per_user >= target.min_tokens_per_s_per_user) & (np.nan_to_num(r.ttft_s, nan=np.inf) <= target.max_ttft_s)
    if speculative:
        ok_any = ok.any(axis=1)
        if not ok_any.any():
            return None
        i = int(np.flatnonzero(ok_any)[-1])
        j = int(np.argmax(np.where(ok[i], per_user[i], -1)))
        return int(r.batch[i, j]), int(r.gamma[i, j])
    if not ok.any():
        return None
    i = int(np.flatnonzero(ok)[-1])
    return int(np.ravel(r.batch)[i]), 0


PLACEMENT_KINDS = ("aggregated", "disaggregated", "speculative")


def _placement(kind: str, g: DeviceGroup, draft: ModelSpec | None) -> Placement:
    name = f"{kind} on {g.shape}"
    if kind == "disaggregated":   # prefill on groups of the same shape, provisioned to the request rate
        return Placement(name=name, decode=g, prefill=g)
    if kind == "speculative":
        return Placement(name=name, decode=g, draft_model=draft, draft_kind="model")
    return Placement(name=name, decode=g)


def _evaluate(model: ModelSpec, p: Placement, target: Target, batches: np.ndarray, acceptance: Acceptance | None,
              formats: Mapping[str, Any], params: EngineParams | None, prices: Prices | None) -> ServingResult:
    spec = p.speculative
    return evaluate_serving(model, p, target.request, batch=batches[:, None] if spec else batches,
                            gamma=GAMMAS[None, :] if spec else 0, acceptance=acceptance if spec else None,
                            target_formats=formats, params=params, prices=prices)


def _size_shape(model: ModelSpec, g: DeviceGroup, kind: str, target: Target, draft: ModelSpec | None,
                acceptance: Acceptance | None, formats: Mapping[str, Any], params: EngineParams | None,
                prices: Prices | None) -> Option | None:
    steady = target.request.input_tokens + target.request.output_tokens // 2    # paged KV, steady state
    bmax = min(int(max_batch(model, g, context=steady, params=params, **formats)), MAX_BATCH, target.users)
    if bmax < 1:   # a shape given as ID:N that does not hold the model: say what does not fit, as `stage` does
        decode_step(model, g, batch=1, context=steady, params=params, on_infeasible="raise", **formats)
        return None
    p = _placement(kind, g, draft)
    best = _best_batch(_evaluate(model, p, target, np.arange(1, bmax + 1, dtype=float), acceptance, formats, params,
                                 prices), target, p.speculative)
    if best is None:
        return None
    replicas = math.ceil(target.users / best[0])
    batch = math.ceil(target.users / replicas)    # the users spread evenly: each replica runs at most best[0]
    r = _evaluate(model, p, target, np.array([float(batch)]), acceptance, formats, params, prices)
    i = int(np.argmax(np.where(r.fits, np.nan_to_num(r.tokens_per_s_per_user, nan=-1), -1)))
    at = {k: float(np.ravel(np.broadcast_to(getattr(r, k), r.batch.shape))[i])
          for k in ("tokens_per_s_per_user", "ttft_s", "tokens_per_s", "power_w", "usd_per_hour", "devices",
                    "gamma")}
    prefill, devices = 0, math.ceil(replicas * at["devices"] - 1e-9)
    if p.prefill is not None:   # the replicas' prefill shares (of groups shaped like g) in whole groups
        prefill = math.ceil(replicas * (at["devices"] - g.count) / g.count - 1e-9)
        devices = (replicas + prefill) * g.count
    per_kw, usd = deployed_rates(at, replicas, devices, g.device, prices)
    return Option(device=g.device.id, placement=kind, replicas=replicas, devices=devices, prefill_groups=prefill,
                  batch_per_replica=batch, gamma=int(at["gamma"]),
                  group=g.shape, tokens_per_s_per_user=at["tokens_per_s_per_user"], ttft_s=at["ttft_s"],
                  tokens_per_s_per_kw=per_kw, usd_per_million_output_tokens=usd, placement_record=p,
                  formats=dict(formats), target_formats=r.target_formats.as_dict() if r.target_formats else {},
                  draft_formats=r.draft_formats.as_dict() if r.draft_formats else {})


def deployed_rates(at: Mapping[str, float], replicas: int, devices: int, device: Device,
                    prices: Prices | None) -> tuple[float, float]:
    """(tokens/s per kW, USD per million output tokens) of the whole deployment: ``replicas`` replicas as
    evaluated (their busy and idle power, their devices' price, a fractional prefill share each) plus the devices
    rounding up to whole prefill groups adds, which the same work spreads over: they add idle power and their
    price, not tokens."""
    extra = max(devices - replicas * at["devices"], 0.0)
    try:
        extra_w = extra * idle_w(device, DEFAULT_POWER) * DEFAULT_POWER.pue if extra > 0 else 0.0
    except UnknownSpecError:   # no published TDP: the power (and tokens/s per kW) is unknown, the rest is not
        extra_w = math.nan
    tokens_per_s = replicas * at["tokens_per_s"]
    power_w = replicas * at["power_w"] + extra_w
    usd_per_h = replicas * at["usd_per_hour"]
    if prices is not None and extra > 0:
        usd_per_h += extra * prices.usd_per_hour(device.id) + extra_w / 1000.0 * prices.usd_per_kwh
    return tokens_per_s / (power_w / 1000.0), usd_per_h / 3600.0 / tokens_per_s * 1e6


def _kind_option(model: ModelSpec, shapes: Sequence[DeviceGroup], kind: str, target: Target, **kw: Any) -> Option:
    """The fewest devices for one placement kind over the candidate shapes, or why none meets the target."""
    dev = shapes[0].device.id
    found = []
    for g in shapes:
        try:
            o = _size_shape(model, g, kind, target, **kw)
        except RooflineError as e:
            found.append(Option(device=dev, placement=kind, reason=str(e)))
            continue
        if o is not None:
            found.append(o)
    ok = [o for o in found if o.feasible]
    if ok:
        return min(ok, key=lambda o: (o.devices, -o.tokens_per_s_per_user))
    why = next((o.reason for o in found if o.reason), "") or (
        f"no batch on {', '.join(g.shape for g in shapes)} reaches {target.min_tokens_per_s_per_user:g} tokens/s "
        "per user" + (f" within a {target.max_ttft_s * 1e3:g} ms TTFT" if math.isfinite(target.max_ttft_s) else ""))
    return Option(device=dev, placement=kind, reason=why)


def confidence_level(confidence: float) -> float:
    """The two-sided interval level whose high end is the upper ``confidence`` quantile (2 x confidence - 1; 0 at
    a confidence of 0.5, the median), ``confidence`` checked to be in [0.5, 1)."""
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not 0.5 <= confidence < 1:
        raise WorkloadError(f"confidence must be in [0.5, 1), got {confidence!r}")
    return 2 * confidence - 1


def pessimistic_target(target: Target, device: Device, confidence: float, stack: str | None = None) -> Target:
    """``target`` made stricter so a prediction meeting it meets the original at the pessimistic end of its interval:
    the speed asked of a user's decode raised by the upper ``confidence`` quantile of the per-token time's error on
    ``device`` (the two-sided interval at level 2 x confidence - 1 has it as its high end), the TTFT limit lowered
    by the TTFT's."""
    level = confidence_level(confidence)
    if level == 0:
        return target
    decode, ttft = (interval(device, kind, stack=stack, level=level).high_factor for kind in ("decode", "ttft"))
    return attrs.evolve(target, min_tokens_per_s_per_user=target.min_tokens_per_s_per_user * max(decode, 1.0),
                        max_ttft_s=target.max_ttft_s / max(ttft, 1.0))


def size(model: ModelSpec, devices: Sequence[Device | DeviceGroup], target: Target, *,
         draft: ModelSpec | None = None, acceptance: Acceptance | float | None = None,
         formats: Mapping[str, Any] | None = None, params: EngineParams | None = None,
         prices: Prices | None = None, confidence: float | None = None, stack: str | None = None) -> list[Option]:
    """The fewest devices per device kind and placement kind that meet ``target`` (a lower bound: no queueing).

    With ``confidence`` (say 0.9), each device kind is sized so the target holds at the pessimistic end of its
    prediction interval (:func:`pessimistic_target`: the upper ``confidence`` quantile of the errors on
    publications the fit never saw, for ``stack``'s predictions on that device, default the default stack).

    ``devices``: a list of records (:func:`roofline.size` takes ids too, and one string of comma-separated
    entries as the command line's ``--devices`` takes them, ``"b200,h200-sxm:8"``). A :class:`Device` is searched
    over the group shapes of its family's layout; a :class:`DeviceGroup` is sized on that shape only. ``prices``
    default to the shipped ones. Options come back best first (fewest devices, then fastest); a kind that cannot
    meet the target is listed with the reason. With ``draft``, speculative placements (the draft on the decode devices) are sized
    too.
    """
    if draft is not None and acceptance is None:
        raise WorkloadError("sizing speculative placements needs an acceptance (alpha)")
    if acceptance is not None and not isinstance(acceptance, Acceptance):
        acceptance = Acceptance.geometric(acceptance)
    if acceptance is not None and acceptance.shape:
        raise WorkloadError(f"size takes one acceptance (one alpha or one table), got alphas of shape "
                            f"{acceptance.shape}; sweep alphas with speculative_round or evaluate_serving")
    if not isinstance(target, Target):
        raise WorkloadError(f"target must be a Target, got {type(target).__name__}")
    model = check_instance("model", model, ModelSpec, optional=False)
    draft = check_instance("draft", draft, ModelSpec)
    for m in (model, draft) if draft is not None else (model,):
        check_context(m, target.request)   # no deployment serves a request longer than the model's context
    formats = check_format_keys(formats)
    prices = check_instance("prices", prices, Prices) or shipped_prices()   # as evaluate_serving prices the replicas
    check_instance("params", params, EngineParams)
    kinds = PLACEMENT_KINDS if draft is not None else PLACEMENT_KINDS[:2]
    items = check_items("devices", devices, (Device, DeviceGroup, str))
    if not items:
        raise WorkloadError("give at least one device (an id, a Device or a group) to size")
    out = []
    for item in items:
        check_instance("a device to size", item, Device, DeviceGroup, optional=False)
        dev = item.device if isinstance(item, DeviceGroup) else item
        try:
            fmt = device_formats(dev, formats, model)
            end = target.request.input_tokens + target.request.output_tokens
            shapes = [item] if isinstance(item, DeviceGroup) else group_shapes(model, dev, end, fmt, params)
        except RooflineError as e:
            out += [Option(device=dev.id, placement=k, reason=str(e)) for k in kinds]
            continue
        goal = pessimistic_target(target, dev, confidence, stack) if confidence is not None else target
        out += [_kind_option(model, shapes, kind, goal, draft=draft, acceptance=acceptance, formats=fmt,
                             params=params, prices=prices) for kind in kinds]
    unique = list(dict.fromkeys(out))   # an ID searched over shapes may find the same option as ID:N given beside it
    return sorted(unique, key=lambda o: (not o.feasible, o.devices, -np.nan_to_num(o.tokens_per_s_per_user)))
