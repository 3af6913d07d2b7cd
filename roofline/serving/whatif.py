"""What-ifs: overrides of any spec field (``ID.FIELD=VALUE``), applied to the devices in play, and elasticities.

An override that names no device of the command is an error, never silently
ignored (a typo in a device id must not print the datasheet's numbers as if
they were the what-if's).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import attrs
import numpy as np

from ..errors import RooflineError, WorkloadError
from ..specs.devices import Device, field_paths, find_field, override
from ..specs.groups import DeviceGroup

GRAMMAR = "ID.FIELD=VALUE, e.g. corsair.sram.bandwidth=300TB/s"


@attrs.frozen
class Override:
    """One what-if: set ``path`` of the device ``device_id`` (id or alias) to ``value``."""

    device_id: str
    path: str
    value: str

    @classmethod
    def parse(cls, text: str) -> Override:
        key, sep, value = text.partition("=")
        dev_id, dot, path = key.strip().partition(".")
        if not sep or not dot or not path or not dev_id or not value.strip():
            raise WorkloadError(f"--set {text!r}: expected {GRAMMAR}")
        return cls(device_id=dev_id.lower(), path=path.strip(), value=value.strip())

    def names(self, device: Device) -> bool:
        return self.device_id in (device.id, *device.aliases)

    def __str__(self) -> str:
        return f"{self.device_id}.{self.path}={self.value}"


@attrs.frozen
class WhatIf:
    """A set of overrides; ``apply`` changes the devices they name and remembers which were used."""

    overrides: tuple[Override, ...] = ()

    @classmethod
    def parse(cls, texts: Iterable[str]) -> WhatIf:
        items = tuple(Override.parse(t) for t in texts)
        seen: dict[tuple[str, str], Override] = {}
        for o in items:
            if (o.device_id, o.path) in seen and seen[(o.device_id, o.path)].value != o.value:
                raise WorkloadError(f"--set gives {o.device_id}.{o.path} twice ({seen[(o.device_id, o.path)].value} "
                                    f"and {o.value}): say it once")
            seen[(o.device_id, o.path)] = o
        return cls(overrides=items)

    def __bool__(self) -> bool:
        return bool(self.overrides)

    def apply(self, device: Device) -> Device:
        """``device`` with every override that names it applied (unknown fields raise). Two overrides of one field
        under two names of the device (``h100.hbm.bandwidth`` and ``h100-sxm.hbm.bandwidth``) must agree: the last
        would otherwise win silently while both were reported as applied."""
        mine = [o for o in self.overrides if o.names(device)]
        seen: dict[str, Override] = {}
        for o in mine:
            first = seen.setdefault(o.path, o)
            if "".join(first.value.split()).lower() != "".join(o.value.split()).lower():
                raise WorkloadError(f"--set {first} and --set {o} set the same field of {device.id} to different "
                                    "values: say it once")
        for o in mine:
            find_field(device, o.path)
            device = override(device, o.path, o.value)
        return device

    def apply_group(self, group: DeviceGroup) -> DeviceGroup:
        return attrs.evolve(group, device=self.apply(group.device)) if self else group

    def check_used(self, devices: Sequence[Device]) -> None:
        """Raise if an override names none of ``devices``: it would otherwise be silently ignored."""
        ids = sorted({d.id for d in devices})
        for o in self.overrides:
            if not any(o.names(d) for d in devices):
                raise WorkloadError(f"--set {o}: {o.device_id!r} is not a device of this command "
                                    f"(devices in play: {', '.join(ids) or 'none'})")

    def describe(self) -> list[str]:
        return [str(o) for o in self.overrides]


def elasticities(metric: Callable[[Device], float], device: Device, fields: Sequence[str] | None = None,
                 rel_step: float = 0.01) -> dict[str, float]:
    """d ln(metric) / d ln(field) for each known numeric spec field (central differences).

    -1 means the metric is inversely proportional to the field (e.g. a
    memory-bound latency against bandwidth); 0 means the field does not matter
    at this operating point. Fields the device does not publish are skipped.
    """
    out: dict[str, float] = {}
    base = metric(device)
    for path in fields or field_paths(device):
        if path.startswith("execution.") or find_field(device, path).kind == "count":
            continue   # profile fields are not spec-sheet numbers; a count of links has no 1% step
        try:
            v = device.get(path)
        except RooflineError:  # unknown or unpublished fields have no elasticity
            continue
        if path.startswith("compute.") and path.split(".", 1)[1] not in device.native:
            continue
        up = metric(override(device, path, v * (1 + rel_step)))
        down = metric(override(device, path, v * (1 - rel_step)))
        if np.isfinite(up) and np.isfinite(down) and base:
            out[path] = float((np.log(up) - np.log(down)) / (np.log1p(rel_step) - np.log1p(-rel_step)))
    return out
