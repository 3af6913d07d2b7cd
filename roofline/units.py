"""Units: SI floats inside, human strings only at the edges.

Constants use decimal prefixes for rates and sizes (``GB = 1e9``) and binary
prefixes only where written so (``GiB = 2**30``): the two are never mixed
(one peer reads GB/s as GiB/s and is 7% fast on every memory-bound time).

:func:`parse_quantity` turns ``"3.35 TB/s"``, ``"141 GB"``, ``"80 GiB"``,
``"700 W"`` or ``"989.4 TFLOP/s"`` into a float in base SI units, checking that
the unit is of the expected kind.
"""

from __future__ import annotations

import math
import re

from .errors import UnitError

KB, MB, GB, TB, PB = 1e3, 1e6, 1e9, 1e12, 1e15
KiB, MiB, GiB, TiB = 2.0**10, 2.0**20, 2.0**30, 2.0**40
US, MS = 1e-6, 1e-3

_DECIMAL = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_BINARY = {"Ki": KiB, "Mi": MiB, "Gi": GiB, "Ti": TiB, "Pi": 2.0**50}

#: kind -> {unit suffix (without prefix): multiplier}
_KINDS: dict[str, dict[str, float]] = {
    "bytes": {"B": 1.0, "bit": 1 / 8, "b": 1 / 8},
    "bytes_per_s": {"B/s": 1.0, "bit/s": 1 / 8, "b/s": 1 / 8, "bps": 1 / 8},
    "flop_per_s": {"FLOP/s": 1.0, "FLOPS": 1.0, "OP/s": 1.0, "OPS": 1.0},
    "w": {"W": 1.0},
    "s": {"s": 1.0},
    "count": {"": 1.0},
}
_TIME_PREFIX = {"": 1.0, "m": 1e-3, "u": 1e-6, "µ": 1e-6, "n": 1e-9}

_THOUSANDS = re.compile(r"^[-+]?\d{1,3}(,\d{3})+(\.\d*)?([eE][-+]?\d+)?$", re.ASCII)
_NUMBER = re.compile(r"^\s*([-+]?(?:\d[\d_,]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(.*?)\s*$", re.ASCII)


def _unit_factor(unit: str, kind: str) -> float | None:
    table = _KINDS[kind]
    prefixes = _TIME_PREFIX if kind == "s" else {**_DECIMAL, **_BINARY}
    for suffix, mult in table.items():
        if not unit.endswith(suffix):
            continue
        prefix = unit[: len(unit) - len(suffix)] if suffix else unit
        if prefix in prefixes:
            if prefix in _BINARY and kind not in ("bytes", "bytes_per_s"):
                return None
            return prefixes[prefix] * mult
    return None


def parse_quantity(text: object, kind: str, *, what: str = "value") -> float:
    """Parse ``"<number> <unit>"`` into base SI units of ``kind``.

    ``kind`` is one of ``bytes``, ``bytes_per_s``, ``flop_per_s``, ``w``, ``s``,
    ``count``. A bare number is accepted only for ``count``. Raises
    :class:`UnitError` naming ``what`` for a missing, unknown or wrong unit, and
    for a non-finite number.
    """
    if not isinstance(kind, str) or kind not in _KINDS:
        raise UnitError(f"unknown quantity kind {kind!r} (kinds: {', '.join(_KINDS)})")
    if isinstance(text, bool):
        raise UnitError(f"{what}: expected a quantity, got {text!r}")
    if isinstance(text, (int, float)):
        if kind != "count":
            raise UnitError(f"{what}: {text!r} has no unit (expected e.g. {_example(kind)!r})")
        value = float(text)
    else:
        m = _NUMBER.match(str(text))
        if not m:
            raise UnitError(f"{what}: cannot read a number in {text!r} (expected e.g. {_example(kind)!r})")
        raw = m.group(1)
        if "," in raw and not _THOUSANDS.match(raw):   # '4,8 TB/s' is a decimal comma, not 48
            raise UnitError(f"{what}: cannot read {text!r}: use '.' for decimals (commas only group thousands, "
                            "as in 143,771 MiB)")
        number, unit = raw.replace("_", "").replace(",", ""), m.group(2).strip()
        try:
            value = float(number)
        except ValueError:
            raise UnitError(f"{what}: cannot read a number in {text!r}") from None
        if not unit and kind != "count":
            raise UnitError(f"{what}: {text!r} has no unit (expected e.g. {_example(kind)!r})")
        factor = _unit_factor(unit.replace(" ", ""), kind)
        if factor is None:
            raise UnitError(f"{what}: unit {unit!r} in {text!r} is not a {_NAMES[kind]} unit "
                            f"(expected e.g. {_example(kind)!r})")
        value *= factor
    if not math.isfinite(value):
        raise UnitError(f"{what}: {text!r} is not a finite number")
    return value


#: Count suffixes: decimal k and M (``128k`` = 128,000), binary Ki and Mi where a benchmark's "8k" means 8,192.
COUNT_SUFFIX = {"": 1, "k": 1_000, "K": 1_000, "m": 1_000_000, "M": 1_000_000, "Ki": 1_024, "ki": 1_024,
                "Mi": 1_048_576, "mi": 1_048_576}
#: A count as the command line and the Python workload arguments both write it: ``8192``, ``128k``, ``8Ki``, ``1.5M``
COUNT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmM]i?)?\s*$", re.ASCII)   # ASCII: "٣" is a digit to \d otherwise


def parse_count(text: str, *, what: str = "value") -> float:
    """A token or sequence count written as the CLI takes it: ``8192``, ``128k`` (128,000), ``1M``, ``8Ki`` (8,192).
    Raises :class:`UnitError` naming ``what`` for anything else (the caller checks range and wholeness)."""
    m = COUNT.match(text) if isinstance(text, str) else None
    if not m:
        raise UnitError(f"{what}: expected a count such as 8192, 128k or 8Ki, got {text!r}")
    value = float(m.group(1)) * COUNT_SUFFIX[m.group(2) or ""]
    if not math.isfinite(value):
        raise UnitError(f"{what}: {text!r} is not a finite number")
    return value


_NAMES = {"bytes": "size", "bytes_per_s": "bandwidth", "flop_per_s": "compute-rate",
          "w": "power", "s": "time", "count": "count"}


def _example(kind: str) -> str:
    return {"bytes": "80 GiB", "bytes_per_s": "3.35 TB/s", "flop_per_s": "989.4 TFLOP/s",
            "w": "700 W", "s": "5 us", "count": "8"}[kind]


def format_quantity(value: float, kind: str, digits: int = 3) -> str:
    """Render an SI float for humans: bytes in GB (decimal), rates in TB/s etc."""
    if value is None or not math.isfinite(value):
        return "n/a"
    unit = {"bytes": "B", "bytes_per_s": "B/s", "flop_per_s": "FLOP/s", "w": "W", "s": "s"}[kind]
    if kind == "s":
        for scale, p in ((1.0, ""), (1e-3, "m"), (1e-6, "µ"), (1e-9, "n")):
            if abs(value) >= scale or scale == 1e-9:
                return f"{value / scale:.{digits}g} {p}s"
    for scale, p in ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, "")):
        if abs(value) >= scale or scale == 1.0:
            return f"{value / scale:.{digits}g} {p}{unit}"
    raise AssertionError("unreachable")


def format_capacity(value: float | None) -> str:
    """A memory capacity in binary units (GiB), the way devices are built: H100's "80GB" is 80 GiB."""
    if value is None or not math.isfinite(value):
        return "n/a"
    for scale, unit in ((2.0**40, "TiB"), (2.0**30, "GiB"), (2.0**20, "MiB")):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.3g} B"
