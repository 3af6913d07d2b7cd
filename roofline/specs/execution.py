"""Execution profiles per device family: ``hardware_specs/execution/<family>.toml``.

How a chip executes decides costs its spec sheet does not show: a GPU launches
kernels from a host (per-step and per-layer costs, tensor-core tiles that waste
work on small batches, NCCL collectives), a dataflow or SRAM-centric chip runs a
compiled pipeline that streams weights at the memory rate, with a per-layer
stage latency and compiler-scheduled or on-wafer communication. Every device
spec names its ``family``; the family file gives each profile field with its
provenance: a ``source`` (URL or key of ``[sources]``), an ``estimate`` (the
reasoning), or ``fitted`` (which published rows, and the command that refits
it). The ``gpu`` family's efficiencies and fixed costs are the shipped
calibration (``roofline/profiles/default.toml``); no GPU-fitted number applies
to another family. A spec's ``[execution]`` table overrides fields per device.
"""

from __future__ import annotations

import functools
import tomllib
from pathlib import Path
from typing import Any

import attrs

from ..errors import NotFoundError, SpecError, WorkloadError, did_you_mean
from ..memo import MISSING, IdentityMemo
from .devices import Device, specs_dir
from .files import loads_toml, read_text
from .params import (
    FAMILIES,
    NOT_IN_PROFILE_FILES,
    PROFILE_FIELDS,
    STACK_SET,
    EngineParams,
    default_params,
    default_params_for,
    profile_value,
    with_values,
)

PROVENANCE = ("source", "estimate", "fitted", "measured")


@attrs.frozen(kw_only=True)
class FamilyProfile:
    """A family's profile and, for each field, where its value comes from (``source: URL``, ...)."""

    family: str
    name: str
    profile: EngineParams
    provenance: dict[str, str]
    path: str


def family_dir() -> Path:
    return specs_dir() / "execution"


def _provenance(entry: dict[str, Any], refs: dict[str, str], where: str) -> str:
    kinds = [k for k in PROVENANCE if k in entry]
    if len(kinds) != 1:
        raise SpecError(f"{where}: give exactly one of {', '.join(PROVENANCE)} (the value's provenance)")
    text = entry[kinds[0]]
    if not isinstance(text, str) or not text.strip():
        raise SpecError(f"{where}: {kinds[0]} must be a non-empty string")
    if kinds[0] == "source":
        url = refs.get(text, text)
        if not url.startswith(("http://", "https://")):
            raise SpecError(f"{where}: source must be a URL or a key of [sources], got {text!r}")
        return f"source: {url}"
    return f"{kinds[0]}: {text}"


def family_profile(family: str) -> FamilyProfile:
    """The profile of a family, read from its file (the gpu family starts from the shipped calibration)."""
    if not isinstance(family, str) or family not in FAMILIES:
        raise NotFoundError(f"unknown execution family {family!r}{did_you_mean(str(family), FAMILIES)}; "
                            f"known: {', '.join(FAMILIES)}")
    return _family_profile(family)


@functools.cache
def _family_profile(family: str) -> FamilyProfile:
    path = family_dir() / f"{family}.toml"
    try:
        data = loads_toml(read_text(path, what="an execution-profile file (.toml)", max_bytes=200_000))
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{path}: TOML does not parse: {e}") from None
    refs, table = data.get("sources", {}), data.get("profile")
    if data.get("family") != family or not isinstance(table, dict) or not isinstance(refs, dict):
        raise SpecError(f"{path}: needs family = {family!r}, a [sources] table and a [profile] table")
    # the gpu family: the default stack's fitted efficiencies and costs, without the settings that stack fixes
    base = (attrs.evolve(default_params(), **{f: getattr(EngineParams(), f) for f in STACK_SET}) if family == "gpu"
            else EngineParams(family=family))
    values: dict[str, Any] = {}
    provenance: dict[str, str] = {}
    for name, entry in table.items():
        where = f"{path} [profile].{name}"
        if not isinstance(entry, dict):
            raise SpecError(f"{where}: must be a table {{ value = ..., source|estimate|fitted|measured = ... }}")
        provenance[name] = _provenance(entry, refs, where)
        if "value" in entry:
            attr, v = profile_value(name, entry["value"], what=str(path))
            values[attr] = v
        elif not (family == "gpu" and "fitted" in entry):
            raise SpecError(f"{where}: missing value (only the gpu family's fitted fields come from the calibration)")
    missing = [n for n in PROFILE_FIELDS if n not in table]
    if missing:
        raise SpecError(f"{path}: every profile field needs a value and its provenance; missing {', '.join(missing)}")
    return FamilyProfile(family=family, name=str(data.get("name", family)), path=str(path), provenance=provenance,
                         profile=with_values(attrs.evolve(base, family=family), values, what=str(path)))


#: resolve_profile's recent answers by the identity of its arguments (both immutable records): a forward pass
#: resolves its profile again and again for one row
_RESOLVED = IdentityMemo(256)


def resolve_profile(device: Device, params: EngineParams | None = None) -> EngineParams:
    """The profile a device runs with: ``params`` when it describes the device's family (a calibration; none, or
    :func:`~roofline.specs.params.default_params`, on a GPU: the default stack's build for its platform), with the
    family file's family-level fields (collective algorithm, tile, pipeline hop, ...: what
    calibration profiles never carry), else the family's own profile; then the device's ``[execution]``
    overrides (what-ifs of any field)."""
    if not isinstance(device, Device):
        raise WorkloadError(f"resolve_profile: device must be a Device (rl.load_device(...)), got {device!r}")
    if params is not None and not isinstance(params, EngineParams):
        raise WorkloadError(f"resolve_profile: params must be an EngineParams or None, got {type(params).__name__}")
    hit = _RESOLVED.get((device, params))
    return hit if hit is not MISSING else _RESOLVED.put((device, params), (), _resolve_profile(device, params))


def _resolve_profile(device: Device, params: EngineParams | None) -> EngineParams:
    if device.family == "gpu" and (params is None or params is default_params()):
        params = default_params_for(device.vendor, device.isa)   # the default stack's build for this GPU
    if params is not None and params.family == device.family:
        fam = family_profile(device.family).profile
        keep = {"family"} | {f for f in STACK_SET if getattr(params, f) is not None}
        base = attrs.evolve(params, **{f: getattr(fam, f) for f in NOT_IN_PROFILE_FILES if f not in keep})
    else:
        base = family_profile(device.family).profile
    if not device.execution:
        return base
    return with_values(base, device.execution, what=f"{device.id} [execution]")
