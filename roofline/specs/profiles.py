"""Calibration profile files: read (:func:`load_profile`), written (:func:`profile_toml`, :func:`write_profile`)
here and nowhere else, and the shipped one (``roofline/profiles/default.toml``, reproduced by ``roofline
calibrate``), whose :data:`DEFAULT_STACK <roofline.specs.stacks.DEFAULT_STACK>` set every function uses unless
given ``params=`` (:func:`default_params`). A broken shipped profile is an error, never a silent fallback."""

from __future__ import annotations

import functools
import math
import os
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

import attrs

from ..errors import RooflineError, SpecError
from .engine_params import EngineParams
from .files import loads_toml, read_text, write_text_atomic
from .stacks import DEFAULT_STACK, STACK_SET, Profile

#: The power model's fields (a device family's, never a serving stack's: calibration profiles do not carry them).
POWER_FIELDS = ("busy_floor_fraction", "compute_floor_fraction", "compute_floor_share", "communication_floor_fraction",
                "fixed_floor_fraction", "compute_power_weight", "memory_power_weight")
#: Family-level settings that calibration profiles (per serving stack) do not carry.
NOT_IN_PROFILE_FILES = ("family", "m_tile", "dequant_tile_rows", "tier_bandwidth_fraction", *STACK_SET, "overlap",
                        "pipeline_hop_s", *POWER_FIELDS, "max_tp", "prefill_stream_tokens")


def _params_from(table: Any, where: str, base: EngineParams) -> EngineParams:
    if not isinstance(table, dict) or not table:
        raise SpecError(f"{where}: missing or empty table")
    names = {a.name for a in attrs.fields(EngineParams)} - set(NOT_IN_PROFILE_FILES)
    for k, v in table.items():
        if k not in names:
            raise SpecError(f"{where}: field {k!r} is not an engine parameter ({', '.join(sorted(names))})")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise SpecError(f"{where}: field {k!r} = {v!r}: not a finite number")
    try:
        values: dict[str, Any] = {k: float(v) for k, v in table.items()}
        return attrs.evolve(base, **values)
    except (RooflineError, ValueError, TypeError) as e:
        raise SpecError(f"{where}: {e}") from None


def load_profile(path: str | Path, *, base: EngineParams | None = None) -> Profile:
    """A :class:`Profile` from a TOML file; unknown or out-of-range values raise :class:`SpecError`.

    Fields the file does not set keep the values of ``base`` (default: the shipped fit), so a profile that
    sets one parameter changes only that one.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise SpecError(f"load_profile: path must be a file path, got {path!r}")
    if base is not None and not isinstance(base, EngineParams):
        raise SpecError(f"load_profile: base must be an EngineParams, got {type(base).__name__}")
    p = Path(path)
    try:
        data = loads_toml(read_text(p, what="a calibration profile (.toml)", max_bytes=1_000_000))
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{p}: not a profile TOML: {e}") from None
    start = base if base is not None else shipped_profile().default
    default = _params_from(data.get("params"), f"{p} [params]", start)
    stacks = data.get("stacks", {})
    if not isinstance(stacks, dict):
        raise SpecError(f"{p}: [stacks] must be a table of tables")
    fit = _fit_record(data.get("fit", {}), p)
    return Profile(default=default, families={k: _params_from(v, f"{p} [stacks.{k}]", default)
                                              for k, v in stacks.items()}, path=str(p), fit=fit)


def _is_error(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


def _is_names(v: Any, sep: str = "") -> bool:
    return isinstance(v, list) and all(isinstance(x, str) and x and sep in x for x in v)


#: What each kind of ``[fit]`` field must be, and how the error says it.
_FIT_KINDS: dict[str, tuple[Any, str]] = {
    "text": (lambda v: isinstance(v, str), "a string"),
    "count": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0, "a whole number of rows > 0"),
    "error": (_is_error, "a finite error >= 0"),
    "parameters": (lambda v: _is_names(v, "."), 'a list of "set.parameter" strings'),
    "builds": (_is_names, "a list of stack build names"),
    "errors by name": (lambda v: isinstance(v, dict) and all(_is_error(x) for x in v.values()),
                       "a table of finite standard errors >= 0 by parameter name"),
}
#: The ``[fit]`` record's fields and their kinds (what `roofline calibrate` writes; other keys are kept as given).
_FIT_FIELDS = {"data": "text", "rows": "count", "median_abs_error": "error", "loo_approx_median_abs_error": "error",
               "loo_approx": "text", "heldout_median_abs_error": "error", "heldout": "text",
               "not_identified": "parameters", "builds": "builds", "standard_errors": "errors by name",
               "shrink": "error", "checked_rows": "count", "checked": "text"}


def _fit_record(fit: Any, path: Path) -> dict[str, Any]:
    """A profile's ``[fit]`` table, its known fields checked (a count, finite non-negative errors, strings)."""
    if not isinstance(fit, dict):
        raise SpecError(f"{path}: [fit] must be a table (the record `roofline calibrate` writes)")
    for k, kind in _FIT_FIELDS.items():
        ok, expected = _FIT_KINDS[kind]
        if k in fit and not ok(fit[k]):
            raise SpecError(f"{path} [fit] {k} = {fit[k]!r}: expected {expected}")
    return fit


def _toml_string(text: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters escaped (a Windows path survives)."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def profile_toml(profile: Profile, *, uncertainty: dict[str, dict[str, str]], fit: dict[str, Any]) -> str:
    """The text of a profile file: ``[params]``, one ``[stacks."<family>"]`` per family, and a ``[fit]`` record.

    ``uncertainty[set][name]`` is a comment written after the parameter (``+/- 0.05``, ``not identified``).
    """
    def block(header: str, p: EngineParams, notes: dict[str, str]) -> list[str]:
        lines = [header]
        for a in attrs.fields(EngineParams):
            if a.name in NOT_IN_PROFILE_FILES:
                continue
            note = f"  # {notes[a.name]}" if a.name in notes else ""
            lines.append(f"{a.name} = {getattr(p, a.name)!r}{note}")
        return lines

    lines = ["# roofline calibration profile, written by `roofline calibrate`.",
             "# [params]: one set fitted to all rows, what every command uses without --stack;",
             "# [stacks.<family>]: a serving-stack family's own efficiencies and fixed costs (--stack, validate).", ""]
    lines += block("[params]", profile.default, uncertainty.get("default", {}))
    for fam, p in profile.families.items():
        lines += ["", *block(f"[stacks.{_toml_string(fam)}]", p, uncertainty.get(fam, {}))]
    lines += ["", "[fit]"]
    for k, v in fit.items():
        lines.append(f"{k} = {_toml_value(v)}")
    return "\n".join(lines) + "\n"


def _toml_value(v: Any) -> str:
    """A [fit] value as TOML: a string, a list of strings, a table of numbers (inline) or a number."""
    if isinstance(v, str):
        return _toml_string(v)
    if isinstance(v, list):
        return "[" + ", ".join(map(_toml_string, v)) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {x!r}" for k, x in v.items()) + "}"
    return repr(v)


def write_profile(path: str | Path, text: str) -> None:
    """Write a profile atomically after checking that it reads back (never a half-written or unreadable file)."""
    try:
        loads_toml(text)
    except tomllib.TOMLDecodeError as e:  # a bug of ours, not the user's: refuse to write it
        raise SpecError(f"refusing to write {path}: the profile text does not parse ({e})") from None
    write_text_atomic(path, text)


def shipped_profile_path() -> Path:
    """The calibration profile that ships inside the package."""
    return Path(str(resources.files("roofline"))) / "profiles" / "default.toml"


@functools.cache
def shipped_profile() -> Profile:
    """The shipped calibration, read on first use (reproduced by
    ``roofline calibrate --out roofline/profiles/default.toml``); a broken file raises :class:`SpecError`."""
    return load_profile(shipped_profile_path(), base=EngineParams())


@functools.cache
def default_params() -> EngineParams:
    """What every function uses unless given ``params=``: the shipped fit of :data:`DEFAULT_STACK` (its CUDA build;
    a GPU of another platform runs that platform's build, :func:`default_params_for`)."""
    return shipped_profile().for_stack(DEFAULT_STACK)


@functools.cache
def default_params_for(vendor: str, isa: str) -> EngineParams:
    """The parameters :data:`DEFAULT_STACK` runs a GPU of ``vendor`` and ``isa`` with (:meth:`Profile.for_stack`:
    its ROCm build's fitted set on AMD GPUs): what :func:`default_params` stands for on that GPU."""
    if vendor.strip().lower() != "amd":
        return default_params()
    return shipped_profile().for_stack(DEFAULT_STACK, vendor, isa)
