"""Devices: loading and validating ``hardware_specs/<id>.toml``.

The schema is documented in ``hardware_specs/README.md``. Every number in a spec
file is a table ``{ value = "3.35 TB/s", source = "<url or key>", note = ... }``;
the unit lives in the string and is converted to SI here and nowhere else.
A value of ``"unknown"`` records that the vendor does not publish it: the field
is then ``None`` and :meth:`Device.get` raises :class:`UnknownSpecError` naming
the field to supply, so an unknown never becomes a silent zero.
"""

from __future__ import annotations

import difflib
import functools
import json
import math
import os
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any, NoReturn

import attrs

from ..errors import NotFoundError, RooflineError, SpecError, UnitError, UnknownSpecError, WorkloadError, did_you_mean
from ..units import parse_quantity
from ..workload import in_range, one_of
from .engine_params import CHOICES, FAMILIES, PROFILE_FIELDS, TIER_SUFFIX, profile_value
from .fabric import Link, torus_axes, whole_count
from .files import loads_toml, read_text

STATUSES = ("shipping", "announced")
#: Rates and sizes below these are not hardware (a 1e-300 FLOP/s peak would make every time infinite).
PLAUSIBLE_MIN = {"bytes_per_s": 1e3, "flop_per_s": 1e3, "bytes": 1.0, "w": 1e-3}
#: The range a bare number (a float given to :func:`override`, read in SI units) must fall in for its kind: outside
#: it the unit was left off (80 for "80 GB" of capacity, 5 for "5 us" of overhead). A value with its unit is taken
#: as written.
BARE_RANGE = {"bytes": (1e6, math.inf), "s": (0.0, 1.0), "w": (1.0, 1e5)}
MAX_SPEC_BYTES = 1_000_000  # a device spec is a few kB; anything this large is not one
#: Compute classes (the rates a spec file lists) and the operand width each multiplies at, in bits.
COMPUTE_CLASS_BITS = MappingProxyType({"fp32": 32, "tf32": 32, "bf16": 16, "fp16": 16, "fp8": 8, "fp6": 6, "fp4": 4,
                                       "int8": 8, "int4": 4})
COMPUTE_CLASSES = tuple(COMPUTE_CLASS_BITS)
BASES = ("dense", "dense-from-sparse", "unstated")
_ID_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789-.")


_positive_or_none = in_range(0, lo_strict=True, optional=True)
#: What a memory tier may hold (:attr:`MemoryTier.holds`).
HOLDS = ("weights", "kv", "workspace")


def _names(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


@attrs.frozen(kw_only=True)
class MemoryTier:
    """One memory tier (fastest first in a device): capacity and peak bandwidth, and what serving engines keep
    in it (``holds``: weights, the KV cache, the workspace of activations; all three unless the spec says)."""

    name: str
    capacity_bytes: float | None = attrs.field(validator=_positive_or_none)
    bandwidth_bytes_per_s: float | None = attrs.field(validator=_positive_or_none)
    holds: tuple[str, ...] = attrs.field(default=("weights", "kv", "workspace"), converter=_names)

    @holds.validator
    def _check_holds(self, _a: attrs.Attribute, value: tuple[str, ...]) -> None:
        if not value or not set(value) <= set(HOLDS) or len(set(value)) != len(value):
            raise ValueError(f"memory tier {self.name!r}: holds = {list(value)}: a non-empty list of distinct "
                             f"{', '.join(HOLDS)}")


def _tiers(values: Iterable[MemoryTier]) -> tuple[MemoryTier, ...]:
    return tuple(values)


@attrs.frozen(kw_only=True)
class Device:
    """A device as its datasheet describes it (dense peaks, decimal rates).

    ``peak_flop_per_s`` maps compute classes (``bf16``, ``fp8``, ``fp4``, ...)
    to dense peak FLOP/s; a class whose value is unknown maps to ``None``.
    ``family`` names the execution profile (:mod:`roofline.specs.execution`)
    and ``execution`` this device's overrides of it, kept apart from datasheet
    values. ``sources`` maps each field path (``hbm.bandwidth``,
    ``compute.bf16``, ``power.tdp``) to the URL its number comes from.
    """

    id: str
    name: str
    vendor: str
    status: str = attrs.field(validator=one_of(STATUSES))
    aliases: tuple[str, ...] = ()
    memory: tuple[MemoryTier, ...] = attrs.field(converter=_tiers)
    peak_flop_per_s: Mapping[str, float | None] = attrs.field(converter=lambda m: MappingProxyType(dict(m)))
    native: tuple[str, ...] = attrs.field(converter=_names)
    #: the best dense matmul rate published measurements reach on the device, by compute class (``[compute.measured]``
    #: of its spec file: a sourced microbenchmark, not a datasheet figure): a GPU's matmuls run at that share of the
    #: peak times its stack's fitted efficiency (:func:`roofline.physics.timing.measured_share`), and
    #: :func:`roofline.evidence.diagnose` reports achieved FLOP/s against it beside the peak
    measured_flop_per_s: Mapping[str, float] = attrs.field(factory=dict,
                                                           converter=lambda m: MappingProxyType(dict(m)))
    tdp_w: float | None = attrs.field(validator=_positive_or_none)
    idle_w: float | None = attrs.field(validator=_positive_or_none)
    scale_up: Link
    host: Link
    family: str = attrs.field(default="gpu", validator=one_of(FAMILIES))
    #: the network between scale-up domains (a node's NICs), per device and direction; unknown where the spec
    #: file has no ``[links.scale_out]`` (collectives then never leave the scale-up link)
    scale_out: Link = attrs.field(factory=lambda: Link(bandwidth_bytes_per_s=None, latency_s=None))
    #: the instruction set its kernels are compiled for (LLVM's ``gfx942``), where a spec file gives it: ROCm
    #: serving builds ship and are calibrated per ISA (:func:`roofline.specs.params.stack_family`)
    isa: str = ""
    #: this device's overrides of its family's execution profile (attribute -> value; ``tier:<name>`` for a
    #: memory tier's bandwidth fraction), from the spec's ``[execution]`` table or a what-if
    execution: Mapping[str, Any] = attrs.field(factory=dict, converter=lambda m: MappingProxyType(dict(m)))
    sources: Mapping[str, str] = attrs.field(factory=dict, converter=lambda m: MappingProxyType(dict(m)))
    path: str = ""

    @memory.validator
    def _check_memory(self, _a: attrs.Attribute, value: tuple[MemoryTier, ...]) -> None:
        if not value:
            raise ValueError("a device needs at least one memory tier")
        names = [t.name for t in value]
        if len(set(names)) != len(names):
            raise ValueError(f"memory tier names must be unique, got {names}")
        for kind in HOLDS:
            if not any(kind in t.holds for t in value):
                raise ValueError(f"no memory tier holds the {kind} (holds = [...] of the tiers {names})")

    @idle_w.validator
    def _idle_below_tdp(self, _a: attrs.Attribute, value: float | None) -> None:
        if value is not None and self.tdp_w is not None and value > self.tdp_w:
            raise SpecError(f"{self.id}: idle power {value:g} W exceeds TDP {self.tdp_w:g} W")

    @native.validator
    def _check_native(self, _a: attrs.Attribute, value: tuple[str, ...]) -> None:
        for c in value:
            if c not in COMPUTE_CLASSES:
                raise ValueError(f"unknown compute class {c!r} in native (known: {', '.join(COMPUTE_CLASSES)})")

    # ----------------------------------------------------------------- access
    def tier(self, name: str) -> MemoryTier:
        for t in self.memory:
            if t.name == name:
                return t
        raise NotFoundError(f"{self.id} has no memory tier {name!r} (tiers: {', '.join(t.name for t in self.memory)})")

    def get(self, path: str) -> float:
        """The value of a spec field by path (e.g. ``hbm.bandwidth``, ``power.tdp``).

        Raises :class:`UnknownSpecError` when the vendor does not publish it,
        saying how to supply it.
        """
        value = find_field(self, path).read(self)
        if value is None and path.startswith("execution."):   # not in this file: the family's profile has it
            attr = PROFILE_FIELDS[path.partition(".")[2]][0]
            raise UnknownSpecError(
                f"{self.id}: {path} is not set in its spec file, so its execution family's value applies: "
                f"roofline.resolve_profile(device).{attr} reads it (--set {self.id}.{path}=VALUE changes it)",
                device=self.id, field=path)
        if value is None:
            raise UnknownSpecError(
                f"{self.id}: {path} is not published for this device; supply it with "
                f"--set {self.id}.{path}=VALUE (or roofline.override(device, {path!r}, VALUE))", device=self.id,
                field=path)
        return value

    def compute_rate_flop_per_s(self, compute_class: str) -> float:
        """Dense peak FLOP/s for a compute class the device runs natively.

        The caller decides the class (see ``stages.compute_class``); this only
        refuses classes the device has no native units for.
        """
        if compute_class not in self.native:
            raise UnknownSpecError(f"{self.id} has no native {compute_class} units (native: {', '.join(self.native)})")
        return self.get(f"compute.{compute_class}")

    def supports(self, compute_class: str) -> bool:
        return compute_class in self.native


# --------------------------------------------------------------------- fields
@attrs.frozen
class Field:
    """One overridable spec field: its path (``hbm.bandwidth``), unit kind, and how to read and replace it.

    This table is the only place that knows where a path lives in a :class:`Device`: ``Device.get``,
    :func:`override`, :func:`field_paths` and the CLI's ``show`` table all go through it.
    """

    path: str
    kind: str
    read: Callable[[Device], float | None] = attrs.field(repr=False)
    #: the value is a number in SI units, or for a ``choice`` field a word
    write: Callable[[Device, Any], Device] = attrs.field(repr=False)


def _tier_fields_of(tiers: list[MemoryTier]) -> list[Field]:
    out = []
    for i, t in enumerate(tiers):
        out += [Field(f"{t.name}.capacity", "bytes", _tier_read(i, "capacity_bytes"), _tier_write(i, "capacity_bytes")),
                Field(f"{t.name}.bandwidth", "bytes_per_s", _tier_read(i, "bandwidth_bytes_per_s"),
                      _tier_write(i, "bandwidth_bytes_per_s"))]
    return out


def _tier_read(i: int, key: str) -> Callable[[Device], float | None]:
    def read(d: Device) -> float | None:
        value: float | None = getattr(d.memory[i], key)
        return value
    return read


def _tier_write(i: int, key: str) -> Callable[[Device, float], Device]:
    def write(d: Device, v: float) -> Device:
        changes: dict[str, Any] = {key: v}
        return attrs.evolve(d, memory=tuple(attrs.evolve(x, **changes) if j == i else x for j, x in enumerate(d.memory)))
    return write


def _compute_write(cls: str) -> Callable[[Device, float], Device]:
    def write(d: Device, v: float) -> Device:   # setting a rate also makes the class native
        native = d.native if cls in d.native else (*d.native, cls)
        measured = dict(d.measured_flop_per_s)
        old = d.peak_flop_per_s.get(cls)
        if cls in measured and old:   # a faster peak, the same share of it reached: the measured rate scales along
            measured[cls] = measured[cls] * v / old
        return attrs.evolve(d, peak_flop_per_s={**d.peak_flop_per_s, cls: v}, native=native,
                            measured_flop_per_s=measured)
    return write


def _link_fields(name: str) -> list[Field]:
    def write(key: str) -> Callable[[Device, float], Device]:
        return lambda d, v: attrs.evolve(d, **{name: attrs.evolve(getattr(d, name), **{key: v})})
    return [Field(f"{name}.bandwidth", "bytes_per_s", lambda d: getattr(d, name).bandwidth_bytes_per_s,
                  write("bandwidth_bytes_per_s")),
            Field(f"{name}.latency", "s", lambda d: getattr(d, name).latency_s, write("latency_s"))] + (
        [Field(f"{name}.{key}", "count", _link_read(name, key), write(key))
         for key in ("peers", "torus", "wraparound")] if name == "scale_up" else [])


def _link_read(name: str, key: str) -> Callable[[Device], float | None]:
    return lambda d: getattr(getattr(d, name), key)


def _execution_field(name: str, kind: str, attr: str | None = None) -> Field:
    """``execution.<name>``: this device's override of a profile field (None: the family's value applies)."""
    key = attr or PROFILE_FIELDS[name][0]

    def write(d: Device, v: float) -> Device:
        _attr, value = profile_value(name, v if kind != "s" else f"{v} s", what=f"{d.id} execution")
        return attrs.evolve(d, execution={**d.execution, key: value})
    return Field(f"execution.{name}", {"number": "count", "share": "count"}.get(kind, kind),
                 lambda d: d.execution.get(key), write)


def _attr_field(path: str, kind: str, name: str) -> Field:
    def write(d: Device, v: float) -> Device:
        changes: dict[str, Any] = {name: v}
        return attrs.evolve(d, **changes)
    return Field(path, kind, lambda d: getattr(d, name), write)


def _compute_read(cls: str) -> Callable[[Device], float | None]:
    return lambda d: d.peak_flop_per_s.get(cls)


def _measured_field(cls: str) -> Field:
    """``compute.measured.<cls>``: the best published measured matmul rate, at most the class's peak (a what-if of
    it changes the share of the peak a GPU's matmuls reach)."""
    def write(d: Device, v: float) -> Device:
        peak = d.peak_flop_per_s.get(cls)
        if not peak or v > peak:
            raise WorkloadError(f"{d.id}: compute.measured.{cls} = {v:.4g} FLOP/s needs a published peak it does not "
                                f"exceed (compute.{cls} = {f'{peak:.4g} FLOP/s' if peak else 'unknown'})")
        return attrs.evolve(d, measured_flop_per_s={**d.measured_flop_per_s, cls: v})
    return Field(f"compute.measured.{cls}", "flop_per_s", lambda d: d.measured_flop_per_s.get(cls), write)


_FIXED_FIELDS = (
    [Field(f"compute.{c}", "flop_per_s", _compute_read(c), _compute_write(c))
     for c in COMPUTE_CLASSES]
    + [_measured_field(c) for c in COMPUTE_CLASSES]
    + [_attr_field("power.tdp", "w", "tdp_w"), _attr_field("power.idle", "w", "idle_w")]
    + _link_fields("scale_up") + _link_fields("host") + _link_fields("scale_out")
    + [_execution_field(name, kind) for name, (_attr, kind) in PROFILE_FIELDS.items()])


@functools.lru_cache(maxsize=64)
def _fields_by_tiers(tiers: tuple[str, ...]) -> dict[str, Field]:
    # tier fields read by position, so one table serves every device with these tier names
    probe = [MemoryTier(name=n, capacity_bytes=None, bandwidth_bytes_per_s=None) for n in tiers]
    per_tier = [_execution_field(f"{n}{TIER_SUFFIX}", "fraction", f"tier:{n}") for n in tiers]
    return {f.path: f for f in _tier_fields_of(probe) + _FIXED_FIELDS + per_tier}


def fields(dev: Device) -> list[Field]:
    """Every overridable field of ``dev``, in the order tables show them."""
    return list(_fields_by_tiers(tuple(t.name for t in dev.memory)).values())


def field_paths(dev: Device) -> list[str]:
    """Every overridable field path of a device."""
    return [f.path for f in fields(dev)]


def find_field(dev: Device, path: str) -> Field:
    """The field at ``path``, or a :class:`NotFoundError` with a suggestion and the list of fields."""
    table = _fields_by_tiers(tuple(t.name for t in dev.memory))
    if path in table:
        return table[path]
    paths = field_paths(dev)
    close = [repr(c) for c in difflib.get_close_matches(path.lower(), paths, n=3, cutoff=0.4)]   # not all 50
    hint = f" (did you mean {' or '.join(close) if len(close) < 3 else f'{close[0]}, {close[1]} or {close[2]}'}?)"
    raise NotFoundError(f"{dev.id}: no spec field {path!r}{hint if close else ''}; `roofline show {dev.id}` lists "
                        f"its {len(paths)} fields")


def _check_plausible(kind: str, v: float, fail: Callable[[str], Any], bare: bool = False) -> None:
    """Raise ``fail(why)`` where ``v`` (SI units) is below :data:`PLAUSIBLE_MIN`, or, a ``bare`` number, outside
    :data:`BARE_RANGE`."""
    if v < PLAUSIBLE_MIN.get(kind, 0.0):
        raise fail(f"below {PLAUSIBLE_MIN[kind]:g} in SI units: not a plausible value")
    low, high = BARE_RANGE.get(kind, (0.0, math.inf)) if bare else (0.0, math.inf)
    if not low <= v <= high:
        raise fail(f"{'below' if v < low else 'above'} {low if v < low else high:g} in SI units: not a plausible "
                   f"value for a number without a unit (give one: '80 GB', '5 us')")


def override(dev: Any, path: str, value: str | float) -> Any:
    """A what-if copy of ``dev`` with one field replaced (``attrs.evolve`` underneath).

    ``dev``: a :class:`Device`, an id or spec path, or a :class:`~roofline.specs.groups.DeviceGroup` (which comes
    back with its device changed; ``rl.resolve_group("b200:2")`` makes one). ``value`` is a float in SI units or a
    human string (``"300 TB/s"``); a bare number outside the plausible range of its kind (80 bytes of memory, 5 s
    of per-layer overhead) is refused as a unit mistake.
    Setting ``compute.<class>`` also marks that class native.
    """
    if isinstance(dev, (str, os.PathLike)):
        if ":" in str(dev) and not str(dev).endswith(".toml"):
            raise SpecError(f"override takes a device id or a group record, got {str(dev)!r}: "
                            "pass rl.resolve_group(...) for a group")
        dev = load_device(dev)
    if not isinstance(dev, Device):
        inner = getattr(dev, "device", None)
        if isinstance(inner, Device):   # a DeviceGroup: the same shape on the changed device
            return attrs.evolve(dev, device=override(inner, path, value))
        raise SpecError(f"override needs a Device, a device id or a group, got {type(dev).__name__}")
    if not isinstance(path, str):
        raise SpecError(f"override: path must be a field path string such as 'hbm.bandwidth', got {path!r}")
    f = find_field(dev, path)
    what = f"{dev.id}.{path}"
    if f.kind == "choice":   # a word: the collective algorithm, the overlap
        words = CHOICES[path.split(".", 1)[1]]
        if not isinstance(value, str) or value.strip() not in words:
            raise SpecError(f"{what} = {value!r}: must be one of {', '.join(words)}")
        return f.write(dev, value.strip())
    if isinstance(value, str):
        v = parse_quantity(value, "count" if f.kind in ("fraction", "count") else f.kind, what=what)
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(f"{what} = {value!r}: expected a number or a quantity string")
    else:
        v = float(value)
    zero_ok = f.path.startswith("execution.") and f.kind != "fraction"   # e.g. a 0 us layer cost
    if not (math.isfinite(v) and (v > 0 or (zero_ok and v == 0))) or (f.kind == "fraction" and v > 1):
        bound = ("a fraction in (0, 1]" if f.kind == "fraction" else "a finite number >= 0" if zero_ok
                 else "a positive finite number")
        raise SpecError(f"{what} = {value!r}: must be {bound}")
    _check_plausible(f.kind, v, lambda why: SpecError(f"{what} = {value!r}: {why}"), bare=not isinstance(value, str))
    try:
        return f.write(dev, v)
    except (RooflineError, ValueError, TypeError) as e:
        raise SpecError(f"{what} = {value!r}: {e}") from None


# ------------------------------------------------------------------- loading
def specs_dir() -> Path:
    """Where the shipped spec files are: inside the installed package, or the repo."""
    env = os.environ.get("ROOFLINE_SPECS")
    if env:
        return Path(env)
    packaged = Path(str(resources.files("roofline"))) / "hardware_specs"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "hardware_specs"


@functools.cache
def device_index() -> dict[str, Path]:
    """Every id and alias of the shipped devices, mapped to its spec file."""
    index: dict[str, Path] = {}
    for f in sorted(specs_dir().glob("*.toml")):
        index[f.stem] = f
    for f in list(index.values()):
        try:
            aliases = loads_toml(f.read_text(encoding="utf-8")).get("aliases", [])
        except (tomllib.TOMLDecodeError, UnicodeDecodeError, OSError):
            continue
        for a in aliases if isinstance(aliases, list) else []:
            index.setdefault(str(a).lower(), f)
    return index


def list_devices() -> list[str]:
    """Ids of the shipped devices (file stems of ``hardware_specs/*.toml``)."""
    return sorted(p.stem for p in set(device_index().values()))


def load_device(id_or_path: str | os.PathLike[str]) -> Device:
    """Load a device by id, alias, or path to a ``.toml`` spec file."""
    text = str(id_or_path)
    if text.endswith(".toml") or os.sep in text or "/" in text:
        try:
            path = Path(text).resolve()
        except (OSError, RuntimeError) as e:   # RuntimeError: a symlink loop (Python < 3.13)
            raise SpecError(f"{text}: cannot read: {e}") from None
        return _load_file(path)
    key = text.strip().lower()
    index = device_index()
    if key not in index or not text.isprintable():   # 'h100\n' is no id: a stray newline must not pass as one
        raise NotFoundError(f"unknown device {text!r}{did_you_mean(key, index)}; "
                            f"`roofline devices` lists them, or give a path to a .toml spec")
    return _load_file(index[key])


def _load_file(path: Path) -> Device:
    """The device of the spec file at ``path``, remembered for as long as the file is unchanged: an edited file
    (another modification time or size) is read again, so a long-running process never answers with an old spec."""
    try:
        info = path.stat()
        version: tuple[int, int, int, int] = (info.st_dev, info.st_ino, info.st_mtime_ns, info.st_size)
    except (OSError, ValueError):   # read_text names the problem
        version = (0, 0, 0, 0)
    return _load_version(path, version)


@functools.lru_cache(maxsize=256)
def _load_version(path: Path, version: tuple[int, int, int, int]) -> Device:
    text = read_text(path, what="a device spec (.toml)", max_bytes=MAX_SPEC_BYTES)
    try:
        data = loads_toml(text)
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{path}: TOML does not parse: {e}") from None
    return device_from_dict(data, origin=str(path), stem=path.stem)


def measured_value(path: Any, run: Any, key: Any) -> tuple[float, str]:
    """(the number, a citation) of an in-repository measurement a spec entry cites: ``measured`` = a JSON file of
    this repository holding a list of ``runs`` (its path from the repository root, under ``roofline/``), ``run``
    = the run's number counted from 1, ``key`` = the dotted path to the number inside that run
    (``power.idle.power_w``). Raises :class:`SpecError` when any of them does not lead to a number."""
    if not (isinstance(path, str) and path.startswith("roofline/") and path.endswith(".json") and ".." not in path):
        raise SpecError(f"measured must be a JSON file of this repository under roofline/, got {path!r}")
    if isinstance(run, bool) or not isinstance(run, int) or run < 1:
        raise SpecError(f"run must be the run's number counted from 1, got {run!r}")
    if not isinstance(key, str) or not key:
        raise SpecError(f"key must be the dotted path to the number inside run {run}, got {key!r}")
    file = Path(str(resources.files("roofline"))).parent / path
    try:
        runs = json.loads(read_text(file, what="a measurement file (.json)", max_bytes=10_000_000))["runs"]
        value: Any = runs[run - 1]
        for part in key.split("."):
            value = value[int(part)] if isinstance(value, list) else value[part]
    except (KeyError, IndexError, ValueError, TypeError) as e:
        raise SpecError(f"{path} has no number at run {run}, {key}: {e!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(f"{path} run {run}, {key} is {value!r}, not a number")
    return float(value), f"{path}, run {run}, {key}"


class _Reader:
    """Field-by-field reader that names the file, field and value in every error."""

    def __init__(self, data: dict[str, Any], origin: str) -> None:
        self.data, self.origin = data, origin
        self.sources: dict[str, str] = {}
        refs = data.get("sources", {})
        if not isinstance(refs, dict) or not all(isinstance(v, str) for v in refs.values()):
            self.fail("sources", refs, "must be a table of name = \"https://...\" entries")
        self.refs: dict[str, str] = refs

    def fail(self, field: str, value: Any, why: str) -> NoReturn:
        shown = repr(value)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        raise SpecError(f"{self.origin}: field {field!r} = {shown}: {why}")

    def table(self, parent: dict[str, Any], key: str, field: str, *, required: bool = True,
              keys: frozenset[str] | None = None) -> dict[str, Any]:
        """``parent[key]`` as a table ({} where optional and absent); with ``keys``, a key outside them fails (a
        misspelt ``[links.scaleout]`` or ``tdpp`` would otherwise vanish without a word)."""
        value = parent.get(key)
        if value is None:
            if required:
                self.fail(field, None, "missing")
            return {}
        if not isinstance(value, dict):
            self.fail(field, value, "must be a table")
        if keys is not None:
            self.known(value, keys, field)
        return value

    def known(self, table: dict[str, Any], keys: frozenset[str], field: str) -> None:
        unknown = sorted(set(table) - keys)
        if unknown:
            self.fail(f"{field}.{unknown[0]}", table[unknown[0]],
                      f"is not a key of [{field}]{did_you_mean(unknown[0], keys)} (keys: {', '.join(sorted(keys))})")

    def string(self, parent: dict[str, Any], key: str, field: str) -> str:
        value = parent.get(key)
        if not isinstance(value, str) or not value.strip():
            self.fail(field, value, "missing or not a non-empty string")
        return value

    def sourced_string(self, parent: dict[str, Any], key: str, field: str) -> str:
        """An optional ``{ value = "<text>", source = "<url or key>" }`` entry ("" where absent)."""
        entry = parent.get(key)
        if entry is None:
            return ""
        if not isinstance(entry, dict) or not isinstance(entry.get("value"), str) or not entry["value"].strip():
            self.fail(field, entry, 'must be a table { value = "<text>", source = "<url or key>" }')
        self.sources[field] = self.source_url(entry, field)
        return entry["value"].strip()

    def source_url(self, entry: dict[str, Any], field: str) -> str:
        """The URL an entry's ``source`` names (a URL, or a key of [sources]), or for a ``measured`` entry the
        measurement it cites (:func:`measured_value`)."""
        if "measured" in entry:
            if "source" in entry:
                self.fail(field, entry, "give a source or a measured file, not both")
            try:
                cited, where = measured_value(entry.get("measured"), entry.get("run"), entry.get("key"))
                stated = parse_quantity(entry.get("value"), "w" if field.startswith("power.") else "count",
                                        what="value")
            except RooflineError as e:
                self.fail(field, entry, str(e))
            if not math.isclose(stated, cited, rel_tol=0.01):
                self.fail(field, entry.get("value"), f"{where} reads {cited:g}: the value must agree within 1%")
            return where
        source = entry.get("source")
        if not isinstance(source, str) or not source:
            self.fail(field, entry, "a known value needs a source (a URL or a key of [sources])")
        url = self.refs.get(source, source)
        if not url.startswith(("http://", "https://")):
            self.fail(field, source, "source must be a URL or a key of [sources]")
        return url

    def count(self, link: dict[str, Any], key: str, field: str, rule: Callable[[Any], int]) -> int | None:
        """An optional whole-number field of a link (a mesh's ``peers``, a torus's axes and ``wraparound``) under
        the record's own ``rule``; None where the file leaves it out."""
        if link.get(key) is None:
            return None
        n = self.quantity(link, key, field, "count")
        try:
            return rule(n)   # the record's whole-number rule, here with the file and field named
        except (TypeError, ValueError) as e:
            self.fail(field, link[key].get("value"), str(e).partition(": ")[2] or str(e))

    def quantity(self, parent: dict[str, Any], key: str, field: str, kind: str, *,
                 required: bool = True, fraction: bool = False, bases: tuple[str, ...] = BASES) -> float | None:
        entry = parent.get(key)
        if entry is None:
            if required:
                self.fail(field, None, 'missing (give { value = "...", source = "..." }, or value = "unknown")')
            return None
        if not isinstance(entry, dict) or "value" not in entry:
            self.fail(field, entry, 'must be a table { value = "<number> <unit>", source = "<url or key>" }')
        value = entry["value"]
        if isinstance(value, str) and value.strip().lower() == "unknown":
            return None
        url = self.source_url(entry, field)
        if kind == "flop_per_s" and entry.get("basis") not in bases:
            self.fail(field + ".basis", entry.get("basis"), f"must be one of {', '.join(bases)}")
        try:
            number = parse_quantity(value, kind, what="value")
        except UnitError as e:
            self.fail(field, value, str(e).removeprefix("value: "))
        if fraction and not 0 < number <= 1:
            self.fail(field, value, "must be a fraction in (0, 1]")
        if not number > 0:
            self.fail(field, value, "must be positive")
        _check_plausible(kind, number, lambda why: self.fail(field, value, why))
        self.sources[field] = url
        return number


#: The top-level keys of a device spec file.
SPEC_KEYS = frozenset({"schema", "id", "name", "vendor", "status", "aliases", "isa", "sources", "memory", "compute",
                       "power", "links", "execution"})


def _holds(r: _Reader, t: dict[str, Any], name: str) -> tuple[str, ...]:
    """A tier's optional ``holds`` list: which of weights, kv, workspace the serving engines keep there."""
    holds = t.get("holds", list(HOLDS))
    if (not isinstance(holds, list) or not holds or not all(isinstance(h, str) and h in HOLDS for h in holds)
            or len(set(holds)) != len(holds)):
        r.fail(f"{name}.holds", holds, f"must be a non-empty list of distinct {', '.join(map(repr, HOLDS))}")
    return tuple(holds)


def _memory_tiers(r: _Reader, data: dict[str, Any]) -> list[MemoryTier]:
    """The ``[[memory]]`` tiers, fastest first (weights fill them in that order: a slower tier listed first would
    put the weights in it)."""
    tiers_raw = data.get("memory")
    if not isinstance(tiers_raw, list) or not tiers_raw:
        r.fail("memory", tiers_raw, "must be a non-empty list of [[memory]] tiers, fastest first")
    tiers = []
    for i, t in enumerate(tiers_raw):
        if not isinstance(t, dict):
            r.fail(f"memory[{i}]", t, "must be a table")
        r.known(t, frozenset({"name", "capacity", "bandwidth", "holds"}), f"memory[{i}]")
        name = r.string(t, "name", f"memory[{i}].name")
        if name in ("compute", "power", "scale_up", "host", "scale_out", "execution"):
            r.fail(f"memory[{i}].name", name, "is a reserved word")
        tiers.append(MemoryTier(
            name=name,
            capacity_bytes=r.quantity(t, "capacity", f"{name}.capacity", "bytes"),
            bandwidth_bytes_per_s=r.quantity(t, "bandwidth", f"{name}.bandwidth", "bytes_per_s"),
            holds=_holds(r, t, name)))
        faster, this = (tiers[-2].bandwidth_bytes_per_s, tiers[-1].bandwidth_bytes_per_s) if i else (None, None)
        if faster is not None and this is not None and this > faster:   # weights fill tiers in order
            r.fail(f"memory[{i}].bandwidth", t["bandwidth"].get("value"), f"is faster than the tier before it "
                   f"({tiers[-2].name}): [[memory]] tiers are listed fastest first")
    return tiers


def device_from_dict(data: dict[str, Any], *, origin: str = "<dict>", stem: str | None = None) -> Device:
    """Build a :class:`Device` from a parsed spec, raising :class:`SpecError` on any problem."""
    if not isinstance(data, dict):
        raise SpecError(f"{origin}: expected a table at the top level")
    r = _Reader(data, origin)
    if data.get("schema") != 1:
        r.fail("schema", data.get("schema"), "must be 1")
    unknown = sorted(set(data) - SPEC_KEYS)
    if unknown:   # a misspelt table would otherwise vanish without a word ([compte] for [compute])
        r.fail(unknown[0], data[unknown[0]], f"is not a spec key{did_you_mean(unknown[0], SPEC_KEYS)} "
                                             f"(keys: {', '.join(sorted(SPEC_KEYS))})")
    dev_id = r.string(data, "id", "id")
    if set(dev_id) - _ID_CHARS:
        r.fail("id", dev_id, "use lower-case letters, digits, '-' and '.'")
    if stem is not None and dev_id != stem:
        r.fail("id", dev_id, f"must equal the file name stem {stem!r}")
    status = r.string(data, "status", "status")
    if status not in STATUSES:
        r.fail("status", status, f"must be one of {', '.join(STATUSES)}")
    aliases = data.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        r.fail("aliases", aliases, "must be a list of strings")

    tiers = _memory_tiers(r, data)

    compute = r.table(data, "compute", "compute", keys=frozenset({"native", "peak", "measured"}))
    native = compute.get("native")
    if not isinstance(native, list) or not all(isinstance(c, str) and c in COMPUTE_CLASSES for c in native):
        r.fail("compute.native", native, f"must be a list drawn from {', '.join(COMPUTE_CLASSES)}")
    peak_raw = r.table(compute, "peak", "compute.peak")
    peaks: dict[str, float | None] = {}
    for cls, _entry in peak_raw.items():
        if cls not in COMPUTE_CLASSES:
            r.fail(f"compute.peak.{cls}", cls, f"unknown compute class (known: {', '.join(COMPUTE_CLASSES)})")
        peaks[cls] = r.quantity(peak_raw, cls, f"compute.{cls}", "flop_per_s")
    for cls in native:
        if cls not in peaks:
            r.fail(f"compute.peak.{cls}", None, "a native class needs a peak entry (value may be \"unknown\")")
    measured = _measured(r, compute, peaks)

    power = r.table(data, "power", "power", keys=frozenset({"tdp", "idle"}))
    links = r.table(data, "links", "links", keys=frozenset({"scale_up", "host", "scale_out"}))
    link_objs = {}
    for name in ("scale_up", "host", "scale_out"):
        lt = r.table(links, name, f"links.{name}", required=name != "scale_out",
                     keys=frozenset({"bandwidth", "latency", "peers", "torus", "wraparound"}))
        shape = {} if name != "scale_up" else {   # the scale-up fabric's shape: a mesh's peers, a torus's axes
            "peers": r.count(lt, "peers", f"{name}.peers", whole_count),
            "torus": r.count(lt, "torus", f"{name}.torus", torus_axes),
            "wraparound": r.count(lt, "wraparound", f"{name}.wraparound",
                                  lambda v: whole_count(v, "wraparound", 2, "chips"))}
        if shape.get("wraparound") is not None and shape.get("torus") is None:
            r.fail(f"{name}.wraparound", lt["wraparound"].get("value"), "a wraparound needs the torus it closes (torus)")
        if shape.get("torus") is not None and shape.get("peers") is not None:
            r.fail(f"{name}.torus", lt["torus"].get("value"), "a link is a full mesh (peers) or a torus, not both")
        link_objs[name] = Link(bandwidth_bytes_per_s=r.quantity(lt, "bandwidth", f"{name}.bandwidth", "bytes_per_s",
                                                                required=bool(lt) or name != "scale_out"),
                               latency_s=r.quantity(lt, "latency", f"{name}.latency", "s",
                                                    required=name != "scale_out"), **shape)
    family, overrides = _execution(r, data)
    try:
        return Device(
            id=dev_id, name=r.string(data, "name", "name"), vendor=r.string(data, "vendor", "vendor"),
            status=status, aliases=tuple(a.lower() for a in aliases), memory=tiers, peak_flop_per_s=peaks,
            native=native, measured_flop_per_s=measured,
            tdp_w=r.quantity(power, "tdp", "power.tdp", "w"),
            idle_w=r.quantity(power, "idle", "power.idle", "w"),
            scale_up=link_objs["scale_up"], host=link_objs["host"], scale_out=link_objs["scale_out"], family=family,
            execution=overrides,
            isa=_isa(r, data, family),
            sources=r.sources, path=origin)
    except SpecError:   # the reader's own errors already name the file
        raise
    except (RooflineError, ValueError, TypeError) as e:
        raise SpecError(f"{origin}: {e}") from None


def _measured(r: _Reader, compute: dict[str, Any], peaks: dict[str, float | None]) -> dict[str, float]:
    """The optional ``[compute.measured]`` table: per native compute class with a published peak, the best dense
    matmul rate a cited measurement reached (``basis = "measured"``), which cannot exceed the dense peak (a figure
    above it is a sparse or a mislabelled one)."""
    table = r.table(compute, "measured", "compute.measured", required=False)
    out: dict[str, float] = {}
    for cls in table:
        field = f"compute.measured.{cls}"
        peak = peaks.get(cls)
        if cls not in peaks or peak is None:
            r.fail(field, cls, "a measured rate needs the class's published dense peak in [compute.peak]")
        value = r.quantity(table, cls, field, "flop_per_s", bases=("measured",))
        if value is not None and value > peak:
            r.fail(field, table[cls].get("value"), f"exceeds the dense peak compute.{cls} ({peak:.4g} FLOP/s): "
                   "a measured rate is at most the peak")
        if value is not None:
            out[cls] = value
    return out


#: An ISA as compilers name the processor: LLVM's AMDGPU processors (``gfx942``), CUDA's (``sm_90``).
_ISA = re.compile(r"^(gfx[0-9a-f]+|sm_[0-9]+[a-z]?)$")


def _isa(r: _Reader, data: dict[str, Any], family: str) -> str:
    """The optional ``isa`` entry, a processor name (ROCm's "LLVM target name", no target features). An AMD GPU
    needs it: ROCm serving builds are calibrated per ISA, and without it one would silently take another
    platform's parameters (:func:`roofline.specs.params.stack_family`)."""
    isa = r.sourced_string(data, "isa", "isa")
    if isa and not _ISA.match(isa):
        r.fail("isa", isa, "must be a processor name such as gfx942 or sm_90 (lower case, no :target-features)")
    if not isa and r.string(data, "vendor", "vendor").strip().lower() == "amd" and family == "gpu":
        r.fail("isa", None, 'an AMD GPU needs its ISA: isa = { value = "gfx942", source = "..." } (ROCm\'s GPU '
               "specifications list it as the LLVM target name)")
    return isa


def _execution(r: _Reader, data: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The ``[execution]`` table: ``family`` (required) and this device's overrides of the family profile,
    each ``{ value = ..., source = ... }`` like any other number."""
    table = r.table(data, "execution", "execution")
    family = table.get("family")
    if family not in FAMILIES:
        r.fail("execution.family", family, f"must be one of {', '.join(FAMILIES)}")
    overrides: dict[str, Any] = {}
    for name, entry in table.items():
        if name == "family":
            continue
        if not isinstance(entry, dict) or "value" not in entry:
            r.fail(f"execution.{name}", entry, 'must be a table { value = ..., source = "<url or key>" }')
        source = entry.get("source")
        url = r.refs.get(source, source) if isinstance(source, str) else None
        if not url or not url.startswith(("http://", "https://")):
            r.fail(f"execution.{name}", entry, "needs a source (a URL or a key of [sources])")
        try:
            attr, value = profile_value(name, entry["value"], what=f"{r.origin} [execution]")
        except SpecError as e:
            raise SpecError(str(e)) from None
        overrides[attr] = value
        r.sources[f"execution.{name}"] = url
    return family, overrides
