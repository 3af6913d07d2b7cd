"""Enumerate placements of the stages on candidate device kinds, each with the smallest group that fits.

Placement names say it in words: ``decode b200, prefill h100-sxm, draft on corsair``; "on the decode group"
means the stage shares the decode devices (aggregated prefill, or the draft on the target's devices).

Every assignment of prefill, decode (or verify) and draft to each candidate
kind is tried; a stage's group is the smallest count that holds its weights,
KV cache and workspace: tensor parallelism up to ``max_tp`` (8, one NVLink
domain), then pipeline stages (SRAM chips need hundreds). Placements that
cannot be built are returned with the reason, never dropped.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from ..errors import LayoutError, RooflineError, WorkloadError
from ..physics.stages import decode_step, prefill
from ..physics.stages import draft as draft_stage
from ..specs.devices import Device
from ..specs.execution import resolve_profile
from ..specs.groups import DeviceGroup
from ..specs.links import GroupLink
from ..specs.models import ModelSpec
from ..specs.params import EngineParams
from ..workload import check_instance, check_items
from .round import draft_formats
from .serve import Placement, Request, check_context, evaluate_serving

TP_CHOICES = (1, 2, 4, 8, 16, 32)


@attrs.frozen(kw_only=True)
class Failure:
    """A stage that cannot run on a device kind at all, and why."""

    stage: str
    device: str
    reason: str


@attrs.frozen(kw_only=True)
class Candidate:
    """A placement, or the stages that could not be placed (``placement`` None)."""

    name: str
    placement: Placement | None
    failures: tuple[Failure, ...] = ()

    @property
    def reason(self) -> str:
        return "; ".join(f"{f.stage} on {f.device}: {f.reason}" for f in self.failures)


def smallest_group(fits: Any, device: Device, *, max_tp: int | None = None, max_devices: int = 16384) -> DeviceGroup:
    """The smallest group for which ``fits(group)`` is true: TP 1, 2, 4, ... up to ``max_tp`` (default: the
    device family's layout, e.g. 8 on GPUs and Groq, 16 on SN40L, 2 on Corsair, 1 on Cerebras wafers), then
    pipeline stages of ``max_tp`` devices each, the fewest that fit (memory per device falls as stages grow)."""
    if max_tp is None:
        max_tp = int(resolve_profile(device).max_tp)
    tps = [t for t in TP_CHOICES if t <= max_tp] or [1]

    def holds(g: DeviceGroup) -> bool:   # a TP that cannot split the model's heads is not a candidate
        try:
            return bool(fits(g))
        except LayoutError:
            return False
    for tp in tps:
        if holds(DeviceGroup(device=device, tp=tp)):
            return DeviceGroup(device=device, tp=tp)
    tp = tps[-1]
    lo, hi = 1, 2
    while not holds(DeviceGroup(device=device, tp=tp, pp=hi)):
        lo, hi = hi, hi * 2
        if tp * hi > max_devices:
            raise RooflineError(f"does not fit on up to {max_devices} {device.id} devices")
    while hi - lo > 1:  # fewest stages: fitting is monotone in the stage count
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if holds(DeviceGroup(device=device, tp=tp, pp=mid)) else (mid, hi)
    return DeviceGroup(device=device, tp=tp, pp=hi)


def enumerate_placements(model: ModelSpec, devices: Sequence[Device], request: Request, *,
                         batch: int, draft_model: ModelSpec | None = None, mode: str = "continuous",
                         prefill_batch: int = 1, target_formats: dict[str, Any] | None = None,
                         params: EngineParams | None = None, kv_link: GroupLink | None = None,
                         draft_link: GroupLink | None = None,
                         knobs: Mapping[str, Any] | None = None) -> list[Candidate]:
    """All stage-to-kind assignments for ``devices`` (device kinds), each stage on its smallest fitting group.
    Records only: :func:`roofline.serving_api.enumerate_placements` takes ids and link names too. The links
    default to :class:`Placement`'s (NVLink for the KV cache, PCIe 5 to a draft group). A plain placement whose
    prompts ride the decode steps (prefill on the decode group, continuous batching) gets the smallest group that
    serves the request with them, the prompt chunks' workspace beside the batch (``knobs``: the scheduler's
    keywords of :func:`evaluate_serving`, ``chunk`` and ``poll_steps``)."""
    m = check_instance("model", model, ModelSpec, optional=False)
    dm = check_instance("draft_model", draft_model, ModelSpec)
    for checked in (m, dm) if dm is not None else (m,):
        check_context(checked, request)   # no placement serves a request longer than the model's context
    kinds = [check_instance("a device kind", d, Device, optional=False) for d in check_items("devices", devices, (Device, str))]
    links = {k: check_instance(k, v, GroupLink, optional=False) for k, v in (("kv_link", kv_link),
                                                                            ("draft_link", draft_link)) if v is not None}
    tf: dict[str, Any] = dict(target_formats or {})
    end = request.input_tokens + request.output_tokens
    nan: dict[str, Any] = dict(params=params, on_infeasible="nan")
    cache: dict[tuple[str, str], DeviceGroup | Failure] = {}

    def group_for(stage: str, dev: Device) -> DeviceGroup | Failure:
        key = (stage, dev.id)
        if key not in cache:
            try:
                if stage == "decode":
                    cache[key] = smallest_group(lambda g: bool(decode_step(m, g, batch=batch, context=end, **tf,
                                                                           **nan).fits), dev)
                elif stage == "aggregated":   # the decode batch and the prompt chunks riding its steps
                    cache[key] = smallest_group(lambda g: bool(np.all(evaluate_serving(
                        m, Placement(name="sizing", decode=g), request, batch=batch, mode=mode,
                        target_formats=tf, params=params, **dict(knobs or {})).fits_memory)), dev)
                elif stage == "prefill":
                    pb = batch if mode == "static" else prefill_batch
                    cache[key] = smallest_group(lambda g: bool(prefill(m, g, prompt=request.input_tokens, batch=pb,
                                                                       **tf, **nan).fits), dev)
                else:
                    if dm is None:   # a draft stage is asked for only with a draft model
                        raise WorkloadError("a draft stage needs a draft model")
                    fmt: dict[str, Any] = draft_formats(DeviceGroup(device=dev))
                    cache[key] = smallest_group(lambda g: bool(draft_stage(dm, g, batch=batch, context=end, gamma=1,
                                                                           **fmt, **nan).fits), dev)
            except RooflineError as e:
                cache[key] = Failure(stage=stage, device=dev.id, reason=str(e))
        return cache[key]

    # prompts ride the decode group's steps (continuous) or its prefill steps (a wave, which has no prefill group)
    return _assemble(m, kinds, dm, group_for, links, ride=mode in ("continuous", "waves"), split=mode != "waves")


def placement_name(prefill: Device | None, decode: Device, draft: Device | None, *, speculative: bool) -> str:
    """A placement in plain words: ``decode b200, prefill h100-sxm, draft on corsair``."""
    parts = [f"decode {decode.id}", f"prefill {prefill.id}" if prefill else "prefill on the decode group"]
    if speculative:
        parts.append(f"draft on {draft.id}" if draft else "draft on the decode group")
    return ", ".join(parts)


def _assemble(m: ModelSpec, kinds: list[Device], dm: ModelSpec | None, group_for: Any,
              links: dict[str, Any], *, ride: bool, split: bool = True) -> list[Candidate]:
    out: list[Candidate] = []
    prefill_options: list[Device | None] = [None, *kinds] if split else [None]
    draft_options: list[Device | None] = [None, *kinds] if dm is not None else [None]
    for pre, dec, dra in itertools.product(prefill_options, kinds, draft_options):
        name = placement_name(pre, dec, dra, speculative=dm is not None)
        aggregated = pre is None and dm is None and ride   # prompts ride the decode steps
        groups = {"decode": group_for("aggregated" if aggregated else "decode", dec)}
        if pre is not None:
            groups["prefill"] = group_for("prefill", pre)
        if dra is not None:
            groups["draft"] = group_for("draft", dra)
        bad = tuple(g for g in groups.values() if isinstance(g, Failure))
        if bad:
            out.append(Candidate(name=name, placement=None, failures=bad))
            continue
        out.append(Candidate(name=name, placement=Placement(
            name=name, decode=groups["decode"], prefill=groups.get("prefill"), draft=groups.get("draft"),
            draft_model=dm, draft_kind="model" if dm is not None else None, **links)))
    return out


