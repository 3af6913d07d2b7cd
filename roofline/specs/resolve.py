"""The one resolver: ids, aliases, paths and group strings (``"b200:8"``, ``"corsair:1x2"``) to records.

Every public function that accepts a name calls these at its boundary; below
them the library works on :class:`~roofline.specs.models.ModelSpec`,
:class:`~roofline.specs.devices.Device` and
:class:`~roofline.specs.groups.DeviceGroup` records only.

Group syntax, everywhere a device is named: ``ID`` (one device), ``ID:N`` (N
devices in tensor parallel), ``ID:TPxPP`` (TP devices per pipeline stage, PP
stages); ``ID`` may be a path to a ``.toml`` spec.
"""

from __future__ import annotations

import os
import re

from ..errors import WorkloadError
from ..memo import MISSING, IdentityMemo
from .devices import Device, load_device
from .groups import DeviceGroup, with_layout
from .hf_config import load_model
from .models import ModelSpec

ModelLike = ModelSpec | str | os.PathLike[str]
DeviceLike = Device | str | os.PathLike[str]
GroupLike = DeviceGroup | Device | str | os.PathLike[str]

_COUNT = re.compile(r"^(\d+)(?:x(\d+))?$", re.ASCII)   # ID:TPxPP, as documented: not "8X2", not "٨"
SYNTAX = "ID, ID:N or ID:TPxPP, e.g. b200, b200:8 or groq-lpu:8x72"


def resolve_model(model: ModelLike) -> ModelSpec:
    """A :class:`ModelSpec` from a record, a preset id or a path to a ``config.json``."""
    if isinstance(model, ModelSpec):
        return model
    if not isinstance(model, (str, os.PathLike)):
        raise WorkloadError(f"a model is a preset id, a config.json path or a ModelSpec, got {model!r}")
    return load_model(model)


def resolve_device(device: DeviceLike) -> Device:
    """A :class:`Device` from a record, an id or alias, or a path to a ``.toml`` spec."""
    if isinstance(device, Device):
        return device
    if not isinstance(device, (str, os.PathLike)):
        raise WorkloadError(f"a device is an id, a .toml path or a Device, got {device!r}")
    return load_device(device)


def split_group(text: str) -> tuple[str, int, int]:
    """``"b200:8"`` -> ("b200", 8, 1); ``"groq-lpu:8x72"`` -> ("groq-lpu", 8, 72); ``"h100"`` -> ("h100", 1, 1)."""
    name, sep, count = text.rpartition(":")
    if not sep:
        return text, 1, 1
    m = _COUNT.match(count.strip())
    if not m:
        if os.sep in count or "/" in count or "\\" in count:   # a path with a drive letter, not a count
            return text, 1, 1
        raise WorkloadError(f"device group {text!r}: expected {SYNTAX}")
    tp, pp = int(m.group(1)), int(m.group(2) or 1)
    if tp < 1 or pp < 1:
        raise WorkloadError(f"device group {text!r}: counts must be >= 1")
    return name, tp, pp


#: The groups named by strings, by the identity of their device (:func:`load_device` answers with the same record
#: while its spec file is unchanged) and their counts: a loop naming ``"h200-sxm"`` gets the same record each time,
#: so what the physics remembers of a group (:func:`roofline.physics.timing.pass_plan`) is found again.
_NAMED_GROUPS = IdentityMemo(256)


def _named_group(device: Device, tp: int, pp: int) -> DeviceGroup:
    hit = _NAMED_GROUPS.get((device,), (tp, pp))
    return hit if hit is not MISSING else _NAMED_GROUPS.put((device,), (tp, pp), DeviceGroup(device=device, tp=tp, pp=pp))


def resolve_group(group: GroupLike, *, tp: int | None = None, ep: int | None = None,
                  pp: int | None = None, dp: int | None = None) -> DeviceGroup:
    """A :class:`DeviceGroup` from a record, a Device, or a group string.

    ``tp``, ``ep``, ``pp`` and ``dp`` (attention data-parallel degree) fill in what the group does not say;
    a value that contradicts it (``"b200:8"`` with ``tp=2``) is an error rather than a silent choice.
    """
    if isinstance(group, DeviceGroup):
        base = group
    elif isinstance(group, Device):
        base = DeviceGroup(device=group)
    elif isinstance(group, (str, os.PathLike)):
        name, t, p = split_group(os.fspath(group))
        base = _named_group(load_device(name), t, p)
    else:
        raise WorkloadError(f"a device group is {SYNTAX}, a Device or a DeviceGroup, got {group!r}")
    return with_layout(base, tp=tp, ep=ep, pp=pp, dp=dp)
