"""Intervals on what a result reports: which interval each figure takes, and its low and high ends.

The intervals themselves come from the errors the shipped calibration made on publications it never saw
(:mod:`roofline.specs.intervals`, split conformal); this module says which of them applies to a figure: the
platform of the device it ran on (``gpu-nvidia``, ``gpu-amd``, ``gaudi``, ``tpu``, ...), the serving stack whose
fitted parameters ran a GPU (the default stack, vLLM, unless another is named; other families have one profile),
and the figure's kind (:data:`FIELDS`): a time per output token, a time to first token, a throughput or an energy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..errors import WorkloadError
from ..specs.devices import Device
from ..specs.groups import DeviceGroup
from ..specs.intervals import DEFAULT_LEVEL, KINDS, Interval, IntervalTable, envelope, shipped_intervals
from ..specs.params import DEFAULT_STACK, NVIDIA_ONLY_STACKS, POOLED, family_chain, stack_family, stack_name

#: Reported figures and the interval each takes: (kind, is a rate). ``time_s`` takes its stage's
#: (:data:`STAGE_KINDS`). A whole request's time (``e2e_s``) is mostly its decode steps, so it takes decode's.
#: Dollars per token scale as the inverse of throughput, as a time does; tokens per second per kW is the inverse
#: of energy per token (1,000 / J per token), so it takes energy's interval as a rate. A device count gets no
#: interval: which target binds it (throughput, per-user speed, TTFT) decides which error moves it; ``size
#: --confidence`` sizes at the pessimistic end instead.
FIELDS: dict[str, tuple[str, bool]] = {
    "tokens_per_s_per_user": ("decode", True), "decode_tokens_per_s_per_user": ("decode", True),
    "baseline_tokens_per_s_per_user": ("decode", True), "tpot_s": ("decode", False), "itl_s": ("decode", False),
    "e2e_s": ("decode", False), "ttft_s": ("ttft", False), "energy_per_token_j": ("energy", False),
    "tokens_per_s_per_device": ("throughput", True), "tokens_per_s_per_kw": ("energy", True),
    "output_tokens_per_s": ("throughput", True), "usd_per_million_output_tokens": ("throughput", False),
    "speedup": ("speedup", True),
    **{f"ttft_{q}_s": ("load_ttft", False) for q in ("p50", "p90", "p99", "mean")},
    **{f"{m}_{q}_s": ("load_tpot", False) for m in ("itl", "tpot", "e2e") for q in ("p50", "p90", "p99", "mean")}}
#: In a record served at a request rate (one that carries ``rate_per_s``), its mean TTFT, per-user speed and
#: request time are the queue's at that rate: they take the at-rate kinds, whose errors carry the capacity error
#: amplified near capacity (docs/load.md), not a lone step's.
#: Its throughput and its price per token are the rate's (the requests asked for), not predictions: no interval.
AT_RATE_FIELDS: dict[str, tuple[str, bool] | None] = {
    "ttft_s": ("load_ttft", False), "tokens_per_s_per_user": ("load_tpot", True), "e2e_s": ("load_tpot", False),
    "tpot_s": ("load_tpot", False), "itl_s": ("load_tpot", False), "tokens_per_s": None, "output_tokens_per_s": None,
    "usd_per_million_output_tokens": None}
#: Keys whose values are a user's inputs (a request's latency limits, and what a confidence made of them), never
#: bounded.
INPUT_KEYS = ("limits", "sized_limits")


def served_at_rate(record: Any) -> bool:
    """Whether a record (a result's JSON form) is a deployment served at a request rate: it names a positive
    ``rate_per_s``."""
    rate = record.get("rate_per_s") if isinstance(record, dict) else None
    return isinstance(rate, (int, float)) and not isinstance(rate, bool) and math.isfinite(rate) and rate > 0
#: The interval kind of a stage's ``time_s``.
STAGE_KINDS = {"prefill": "ttft", "decode": "decode", "draft": "decode", "verify": "decode"}
#: A stage's token rates (its tokens over its ``time_s``): they take the stage's kind as a rate; outside a stage
#: ``tokens_per_s`` is a deployment's throughput.
STAGE_RATES = ("tokens_per_s", "per_sequence_tokens_per_s")


def platform(device: Device) -> str:
    """The platform an interval is kept for: a GPU's vendor (``gpu-nvidia``, ``gpu-amd``), else its family."""
    return f"gpu-{device.vendor.strip().lower() or 'unknown'}" if device.family == "gpu" else device.family


def stack_key(device: Device, stack: str | None = None) -> str:
    """The stack family the scores of a device's predictions are kept under: for a GPU, the family of the named
    stack (default :data:`DEFAULT_STACK`; ``pooled`` is kept under ``*``, no one stack), else ``*`` (a non-GPU
    family has one profile whatever the stack)."""
    if device.family != "gpu":
        return "*"
    name = stack_name(stack) if stack is not None else DEFAULT_STACK
    if name in NVIDIA_ONLY_STACKS and device.vendor != "NVIDIA":
        raise WorkloadError(f"serving stack {name} runs on NVIDIA GPUs only, not on {device.id}")
    return "*" if name == POOLED else family_chain(stack_family(name))[-1]


def intervals_for(device: Device, *, stack: str | None = None, level: float = DEFAULT_LEVEL,
                  table: IntervalTable | None = None) -> dict[str, Interval]:
    """One interval per kind for predictions on ``device`` run by ``stack`` (default: the shipped table)."""
    table = table if table is not None else shipped_intervals()
    plat, key = platform(device), stack_key(device, stack)
    return {kind: table.interval(plat, key, kind, level) for kind in KINDS}


def _device(device: Device | DeviceGroup) -> Device:
    if isinstance(device, Device):
        return device
    if isinstance(device, DeviceGroup):
        return device.device
    raise WorkloadError(f"device must be a Device, a DeviceGroup or an id such as 'h100-sxm:2', got "
                        f"{type(device).__name__}" + (" (roofline.interval and roofline.with_intervals resolve ids; "
                                                      "this layer takes records)" if isinstance(device, str) else ""))


def interval(device: Device | DeviceGroup, kind: str, *, stack: str | None = None,
             level: float = DEFAULT_LEVEL) -> Interval:
    """The interval of a prediction of ``kind`` (decode, ttft, throughput, energy) on ``device`` (a record;
    :func:`roofline.interval` takes an id too) run by ``stack`` (default: the default stack on a GPU):
    ``rl.interval("h100-sxm", "decode").bounds(t)``."""
    dev = _device(device)
    return shipped_intervals().interval(platform(dev), stack_key(dev, stack), kind, level)


def with_intervals(record: Any, device: Device | DeviceGroup, *, stack: str | None = None,
                   level: float = DEFAULT_LEVEL) -> Any:
    """A result's ``to_dict()`` (or any record of its figures) with ``<name>_low`` / ``<name>_high`` beside its
    figures (:data:`FIELDS`), from the intervals of ``device`` (a record; :func:`roofline.with_intervals` takes an
    id too) under ``stack`` at ``level``:
    ``rl.with_intervals(rl.decode_step(m, "h200-sxm", batch=8, context=4096).to_dict(), "h200-sxm")``."""
    return with_bounds(record, intervals_for(_device(device), stack=stack, level=level))


def _floats(value: Any) -> Any:
    """A plain (possibly nested) list with None for NaN as a float array; a number as itself."""
    if isinstance(value, list):
        return np.array([_floats(v) if v is not None else math.nan for v in value], dtype=float)
    return float(value)


def _plain(a: Any) -> Any:
    if isinstance(a, np.ndarray):
        return [_plain(x) for x in a]
    return float(a) if math.isfinite(a) else None


def _ends(value: Any, iv: Interval, rate: bool) -> tuple[Any, Any]:
    lo, hi = iv.bounds(_floats(value), rate=rate)
    return _plain(lo), _plain(hi)


def _numeric(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return math.isfinite(value)
    return isinstance(value, list) and bool(value) and all(
        v is None or _numeric(v) for v in value)


def _bounds_itself(record: Any) -> bool:
    return callable(getattr(record, "with_bounds", None))


#: The key prefix of the intervals a ``baseline_*`` figure takes (:func:`pick`): plain decoding on the decode group.
PLAIN = "plain:"
#: The stages whose devices a figure of each kind depends on, in a record naming its stages' devices
#: (``stage_devices``: a placement, a speculative scan): a prompt's time its prefill group's (the decode group's
#: where it has none); a token's time the decode (verify) and draft groups'; throughput and energy every group's.
KIND_STAGES: dict[str, tuple[str, ...]] = {"ttft": ("prefill",), "decode": ("decode", "draft"),
                                           "throughput": ("prefill", "decode", "draft"),
                                           "energy": ("prefill", "decode", "draft"), "speedup": ("decode", "draft"),
                                           "load_ttft": ("prefill", "decode"), "load_tpot": ("decode", "draft")}


def widest(intervals: list[Interval]) -> Interval:
    """The envelope of several devices' intervals of one kind (the lowest low factor, the highest high): a figure
    that several device kinds produce is at least as uncertain as the least known of them."""
    return envelope(intervals)


def stage_intervals(stage_devices: Mapping[str, Any], intervals: Mapping[str, Interval],
                    by_device: Callable[[str], Mapping[str, Interval] | None]) -> dict[str, Interval]:
    """Each kind's interval for a record whose stages run on the devices ``stage_devices`` names (stage -> device
    id, None for a stage it has not): the widest of its stages' devices' (:data:`KIND_STAGES`; a device
    ``by_device`` does not know keeps ``intervals``)."""
    named = {k: v for k, v in stage_devices.items() if isinstance(v, str)}
    plain = (by_device(named["decode"]) or {}) if "decode" in named else {}
    out: dict[str, Interval] = {}
    for kind, iv in intervals.items():
        if kind.startswith(PLAIN):
            continue
        devs = [named[s] for s in KIND_STAGES.get(kind, ()) if s in named] or (
            [named["decode"]] if "decode" in named else [])
        own = [(by_device(d) or {}).get(kind) for d in dict.fromkeys(devs)]
        out[kind] = widest([i for i in own if i is not None]) if any(i is not None for i in own) else iv
        out[PLAIN + kind] = plain.get(kind, iv)   # a baseline_* figure: plain decoding on the decode group alone
    return out


def plain_only(intervals: Mapping[str, Interval]) -> dict[str, Interval]:
    """The intervals of figures nested under a ``baseline*`` key: each kind's plain one where there is one."""
    return {k: intervals.get(PLAIN + k, iv) for k, iv in intervals.items() if not k.startswith(PLAIN)}


def pick(intervals: Mapping[str, Interval], name: str, kind: str) -> Interval:
    """The interval of figure ``name`` of ``kind``: a ``baseline_*`` figure (the same setup without speculation,
    on the decode group alone) takes its plain interval where :func:`stage_intervals` gave one."""
    return intervals.get(PLAIN + kind, intervals[kind]) if name.startswith("baseline") else intervals[kind]


def _field_kind(name: str, stage: str | None, at_rate: bool) -> tuple[str, bool] | None:
    """(interval kind, is a rate) of figure ``name`` in a record of ``stage`` (None outside a stage), served at a
    request rate or not; None for a figure that takes no interval."""
    if at_rate and name in AT_RATE_FIELDS:
        return AT_RATE_FIELDS[name]
    if name in FIELDS:
        return FIELDS[name]
    if name.startswith("load_") and FIELDS.get(name[5:], ("",))[0].startswith("load_"):   # a CSV row's queue column
        return FIELDS[name[5:]]
    if name == "time_s":
        return ("decode" if stage is None else STAGE_KINDS.get(stage, "decode"), False)
    if name in STAGE_RATES:
        return (STAGE_KINDS.get(stage, "decode") if stage is not None else "throughput", True)
    return None


def with_bounds(record: Any, intervals: Mapping[str, Interval], stage: str | None = None,
                by_device: Callable[[str], Mapping[str, Interval] | None] | None = None) -> Any:
    """``record`` (a result's plain JSON form) with ``<name>_low`` and ``<name>_high`` beside every figure of
    :data:`FIELDS` (and ``time_s`` of a stage), nested records included; None entries stay None. A nested record
    naming its own ``device`` takes that device's intervals where ``by_device`` gives them (sizing lists options
    on several device kinds); one naming its stages' devices (``stage_devices``) takes, per kind, the widest of
    the devices that kind depends on (:func:`stage_intervals`). A record with its own
    ``with_bounds(intervals, stage, by_device)`` (rows held by column, :class:`roofline.ui.columns.Columns`)
    bounds itself."""
    if _bounds_itself(record):
        return record.with_bounds(intervals, stage, by_device)
    if isinstance(record, list):
        return [with_bounds(r, intervals, stage, by_device) for r in record]
    if not isinstance(record, dict):
        return record
    if by_device is not None and isinstance(record.get("device"), str):
        intervals = by_device(record["device"]) or intervals
    if by_device is not None and isinstance(record.get("stage_devices"), dict):
        intervals = stage_intervals(record["stage_devices"], intervals, by_device)
    stage = record.get("stage", stage) if isinstance(record.get("stage", stage), str) else stage
    at_rate = served_at_rate(record)
    out: dict[str, Any] = {}
    for k, v in record.items():
        if k in INPUT_KEYS:
            out[k] = v
            continue
        nested = (isinstance(v, (dict, list)) and not _numeric(v)) or _bounds_itself(v)
        out[k] = with_bounds(v, plain_only(intervals) if k.startswith("baseline") else intervals,
                             k if k in STAGE_KINDS else stage, by_device) if nested else v   # {"prefill": {...}}
        spec = _field_kind(k, stage, at_rate)
        if spec is None or not _numeric(v) or f"{k}_low" in record:
            continue
        kind, rate = spec
        try:
            out[f"{k}_low"], out[f"{k}_high"] = _ends(v, pick(intervals, k, kind), rate)
        except (TypeError, ValueError):   # a ragged nesting: leave the figure without bounds
            continue
    return out
