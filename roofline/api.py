"""The door into the physics and the serving layer: names become records here, once, and the layers below take
records only.

``roofline.decode_step("llama-3.1-8b", "h200-sxm:2", batch=8, context=4096)`` takes the model as a preset id, a
Hugging Face repo id, a ``config.json`` path or a :class:`~roofline.specs.models.ModelSpec`, and the devices as
``ID``, ``ID:N``, ``ID:TPxPP``, a spec path, a :class:`~roofline.specs.devices.Device` or a
:class:`~roofline.specs.groups.DeviceGroup`; it resolves them (:mod:`roofline.specs.resolve`) and calls the
stage of :mod:`roofline.physics.stages`, which takes a ModelSpec and a DeviceGroup. A loop of many calls may
resolve once itself (``rl.load_model``, ``rl.resolve_group``) and pass the records: the door then has nothing to
do. The serving layer's door (:mod:`roofline.serving_api`) is built with :func:`named_door`; the command line calls
the doors, or resolves its arguments itself before it calls below.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable
from typing import Any, TypeVar

from .physics import stages
from .physics.stage_result import StageResult
from .specs.devices import Device
from .specs.groups import DeviceGroup
from .specs.links import get_link
from .specs.resolve import GroupLike, ModelLike, resolve_device, resolve_group, resolve_model
from .workload import check_devices

R = TypeVar("R")


def _door(stage: Callable[..., R]) -> Callable[..., R]:
    """``stage`` (its first two arguments a ModelSpec and a DeviceGroup) taking any name of either in their place."""
    @functools.wraps(stage)
    def door(model: ModelLike, device: GroupLike, *args: Any, **kwargs: Any) -> R:
        return stage(resolve_model(model), resolve_group(device), *args, **kwargs)

    sig = inspect.signature(stage)
    first, second, *rest = sig.parameters.values()
    # inspect reads a function's __signature__; typeshed does not declare the attribute
    door.__signature__ = sig.replace(parameters=[first.replace(annotation="ModelLike"),   # type: ignore[attr-defined]
                                                 second.replace(annotation="GroupLike"), *rest])
    door.__module__ = __name__
    return door


def _resolve_groups(devices: Any) -> list[DeviceGroup]:
    """A ``devices`` argument (one comma-separated string, one group or a list of them) as groups."""
    return [resolve_group(d) for d in check_devices(devices, (str, os.PathLike, Device, DeviceGroup))]


def device_or_group(item: Any) -> Device | DeviceGroup:
    """A device to search over its family's layouts (a record, an id or a spec path) or one group (a record or
    ``ID:N``), as :func:`roofline.size` takes them."""
    if isinstance(item, (Device, DeviceGroup)):
        return item
    text = str(item)
    return resolve_group(text) if ":" in text and not text.endswith(".toml") else resolve_device(text)


def devices_or_groups(devices: Any) -> list[Device | DeviceGroup]:
    """A sizing's ``devices`` (one comma-separated string, one entry or a list of them): each a device kind to
    search over group shapes or one group (:func:`device_or_group`)."""
    return [device_or_group(d) for d in check_devices(devices, (str, os.PathLike, Device, DeviceGroup))]


def device_kinds(devices: Any) -> list[Device]:
    """A ``devices`` argument of device kinds (ids, spec paths or records), as :func:`enumerate_placements` takes
    them."""
    return [resolve_device(d) for d in check_devices(devices, (str, os.PathLike, Device))]


def device_named(device: Any) -> Any:
    """A device or group named by a string (``"h100-sxm:2"``) as its group; a record (or anything else, which the
    function refuses) as it is."""
    return resolve_group(device) if isinstance(device, str) else device


#: How the door resolves each argument it takes by name, and what the signature then says it takes.
Resolver = tuple[Callable[[Any], Any], str]
_RESOLVERS: dict[str, Resolver] = {
    "model": (resolve_model, "ModelLike"), "target": (resolve_model, "ModelLike"),
    "draft": (resolve_model, "ModelLike | None"), "draft_model": (resolve_model, "ModelLike | None"),
    "verify_on": (resolve_group, "GroupLike"), "draft_on": (resolve_group, "GroupLike | None"),
    "link": (get_link, "str | GroupLink"), "kv_link": (get_link, "str | GroupLink"),
    "draft_link": (get_link, "str | GroupLink"), "devices": (_resolve_groups, "Sequence[GroupLike] | str"),
    "device": (device_named, "GroupLike"),
}


def named_door(fn: Callable[..., R], *names: str, **resolvers: Resolver) -> Callable[..., R]:
    """``fn`` taking the arguments ``names`` (:data:`_RESOLVERS`) and ``resolvers`` (name: (resolve, what the
    signature says it takes)) by name too; None stays None."""
    sig = inspect.signature(fn)
    table = {**{n: _RESOLVERS[n] for n in names}, **resolvers}

    @functools.wraps(fn)
    def door(*args: Any, **kwargs: Any) -> R:
        bound = sig.bind(*args, **kwargs)
        for name, (resolve, _what) in table.items():
            if bound.arguments.get(name) is not None:
                bound.arguments[name] = resolve(bound.arguments[name])
        return fn(*bound.args, **bound.kwargs)

    # inspect reads a function's __signature__; typeshed does not declare the attribute
    door.__signature__ = sig.replace(parameters=[   # type: ignore[attr-defined]
        p.replace(annotation=table[p.name][1]) if p.name in table else p for p in sig.parameters.values()])
    door.__module__ = __name__
    return door


decode_step: Callable[..., StageResult] = _door(stages.decode_step)
prefill: Callable[..., StageResult] = _door(stages.prefill)
verify: Callable[..., StageResult] = _door(stages.verify)
draft: Callable[..., StageResult] = _door(stages.draft)
draft_head: Callable[..., StageResult] = _door(stages.draft_head)
max_batch: Callable[..., Any] = _door(stages.max_batch)

__all__ = ["decode_step", "device_kinds", "device_or_group", "devices_or_groups", "draft", "draft_head", "max_batch",
           "named_door", "prefill", "verify"]
