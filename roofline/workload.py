"""The one place where workload arguments are checked: counts, draft lengths, probabilities.

Every public function takes workload values (batch, context, prompt, gamma,
alpha) as numbers or numpy arrays that broadcast; each is checked here, once,
at the boundary, and a bad value raises :class:`~roofline.errors.WorkloadError`
naming the argument the user passed (``context``, not an internal name).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .errors import UnitError, WorkloadError
from .units import parse_count

Array = NDArray[np.float64]

#: A draft length beyond this is not a draft length (and would make sweeps explode).
MAX_GAMMA = 1024
#: Token counts above this are not workloads (1e12 tokens of context would need petabytes of KV).
MAX_TOKENS = 1e12


def show(value: Any) -> str:
    """A short rendering of a workload value for error messages."""
    try:
        a = np.asarray(value)
    except (TypeError, ValueError):
        return repr(value)
    if a.dtype == object:
        return repr(value)
    return repr(a.item()) if a.ndim == 0 else np.array2string(a.ravel(), threshold=6, separator=", ",
                                                              max_line_width=10**6,
                                                              formatter={"float_kind": lambda x: f"{x:g}"})


def as_array(name: str, value: ArrayLike) -> Array:
    """``value`` as a float array, or a :class:`WorkloadError` naming ``name``."""
    if isinstance(value, (str, bytes)) or value is None:
        raise WorkloadError(f"{name} must be a number or an array of numbers, got {value!r}")
    try:   # a copy: a result must not change when the caller reuses the array it passed
        if type(value) is int or type(value) is float:   # one plain number (not a bool): one conversion
            return np.array(value, dtype=float)
        if np.asarray(value).dtype == np.bool_:   # True is not a batch of 1
            raise WorkloadError(f"{name} must be numbers, got booleans {show(value)}")
        a = np.array(value, dtype=float)
    except (TypeError, ValueError, OverflowError):   # a ragged list, a complex number, an object
        raise WorkloadError(f"{name} must be a number or an array of numbers, got {show(value)}") from None
    if a.size == 0:
        raise WorkloadError(f"{name} must not be empty")
    return a


def counts(name: str, value: Any) -> Any:
    """``value`` with count strings read as the command line reads them (``"8k"`` = 8,000, ``"8Ki"`` = 8,192,
    :func:`~roofline.units.parse_count`): a string, or a list or tuple of them; anything else as given."""
    try:
        if isinstance(value, str):
            return parse_count(value, what=name)
        if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
            return [parse_count(v, what=name) for v in value]
    except UnitError as e:
        raise WorkloadError(str(e)) from None
    return value


def check_count(name: str, value: ArrayLike | str, *, minimum: float = 0, integer: bool = True) -> Array:
    """A token or sequence count: finite, >= ``minimum``, whole unless ``integer`` is False (mean-field); written as
    a number, an array, or a count string as the CLI takes it (``context="8k"``, ``batch=["1", "8Ki"]``)."""
    a = as_array(name, counts(name, value))
    if a.ndim == 0:   # one number: the same checks without the array machinery
        v = float(a)
        if math.isfinite(v) and minimum <= v <= MAX_TOKENS and (not integer or v == round(v)):
            return a
    if not np.all(np.isfinite(a)):
        raise WorkloadError(f"{name} must be finite, got {show(a)}")
    if np.any(a < minimum):
        raise WorkloadError(f"{name} must be >= {minimum:g}, got {show(a)}")
    if np.any(a > MAX_TOKENS):
        raise WorkloadError(f"{name} above {MAX_TOKENS:.0e} is not a workload, got {show(a)}")
    if integer and np.any(a != np.round(a)):
        raise WorkloadError(f"{name} must be a whole number, got {show(a)}")
    return a


def check_gamma(value: ArrayLike, name: str = "gamma") -> Array:
    """A draft length: a whole number in [0, MAX_GAMMA]."""
    a = as_array(name, value)
    if not np.all(np.isfinite(a)) or np.any(a < 0) or np.any(a != np.round(a)):
        raise WorkloadError(f"{name} (draft length) must be a whole number >= 0, got {show(a)}")
    if np.any(a > MAX_GAMMA):
        raise WorkloadError(f"{name} (draft length) above {MAX_GAMMA} is not a draft length, got {show(a[a > MAX_GAMMA])}")
    return a


def check_probability(value: ArrayLike, name: str = "alpha") -> Array:
    """A probability in [0, 1] (per-token acceptance, acceptance rate)."""
    a = as_array(name, value)
    if not np.all(np.isfinite(a)) or np.any(a < 0) or np.any(a > 1):
        raise WorkloadError(f"{name} must be in [0, 1] (a per-token acceptance probability), got {show(a)}")
    return a


def check_whole(name: str, value: Any, *, minimum: int = 1, maximum: int | None = None) -> int:
    """A single whole-number setting (tp, ep, pp, chunk, head layers): an int in [minimum, maximum]."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        if isinstance(value, (float, np.floating)) and np.isfinite(value) and value == int(value):
            value = int(value)
        else:
            raise WorkloadError(f"{name} must be a whole number >= {minimum}, got {value!r}")
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"in {minimum}..{maximum}" if maximum is not None else f">= {minimum}"
        raise WorkloadError(f"{name} must be a whole number {bound}, got {value!r}")
    return int(value)


def scalar(value: Array, name: str) -> float:
    """The one number of a 0-d array, or a WorkloadError: this argument does not sweep."""
    if np.ndim(value) != 0:
        raise WorkloadError(f"{name} must be a single number here, got {show(value)}")
    return float(value)


def in_range(lo: float | None = None, hi: float | None = None, *, lo_strict: bool = False,
             optional: bool = False) -> Any:
    """An attrs validator: a finite real number in [lo, hi] (``lo_strict``: above lo), raising
    :class:`WorkloadError` naming the record and field, so building a record badly is a project error."""
    def check(inst: object, attribute: Any, value: Any) -> None:
        if value is None and optional:
            return
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise WorkloadError(f"{type(inst).__name__}.{attribute.name} must be a number, got {value!r}")
        bad = not _finite(value) or (lo is not None and (value <= lo if lo_strict else value < lo)) or (
            hi is not None and value > hi)
        if bad:
            where = f"{type(inst).__name__}.{attribute.name}"
            low = "" if lo is None else f"{'>' if lo_strict else '>='} {lo:g}"
            high = "" if hi is None else f"<= {hi:g}"
            raise WorkloadError(f"{where} must be a finite number {' and '.join(x for x in (low, high) if x)}, "
                                f"got {value!r}")
    return check


def _finite(value: float | int | np.integer | np.floating) -> bool:
    """Whether a number is finite as a float (a whole number too large for a float is not)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def one_of(options: tuple[str, ...]) -> Any:
    """An attrs validator: one of ``options``, else :class:`WorkloadError`."""
    def check(inst: object, attribute: Any, value: Any) -> None:
        if value not in options:
            raise WorkloadError(f"{type(inst).__name__}.{attribute.name} must be one of {', '.join(options)}, "
                                f"got {value!r}")
    return check


#: The most points one call evaluates at once: a grid beyond this would need gigabytes per array.
MAX_POINTS = 20_000_000


def record_of(*types: type, optional: bool = False) -> Any:
    """An attrs validator: an instance of ``types`` (or None where ``optional``), else :class:`WorkloadError` naming
    the field (a record built by hand with a string where a record belongs fails where it is built)."""
    def check(inst: object, attribute: Any, value: Any) -> None:
        if value is None and optional:
            return
        if not isinstance(value, types):
            names = " or ".join(t.__name__ for t in types)
            raise WorkloadError(f"{type(inst).__name__}.{attribute.name} must be a {names}, got {show(value)}"
                                + (" (Placement.build takes group strings such as 'b200:8')"
                                   if type(inst).__name__ == "Placement" else ""))
    return check


def check_grid(*arrays: Any, names: Sequence[str] = (), bytes_per_point: float = 0.0) -> tuple[int, ...]:
    """The broadcast shape of workload arrays (``names``: what each is, for the error); refuses incompatible
    shapes, grids beyond :data:`MAX_POINTS`, and grids whose ``bytes_per_point`` (what the caller's evaluation
    holds per point at its peak, measured) would not fit the machine's memory (:func:`usable_memory_bytes`)."""
    shapes = [np.shape(a) for a in arrays]
    if not any(shapes):   # numbers only: one point
        return ()
    try:
        shape = np.broadcast_shapes(*shapes)
    except ValueError:
        shapes = [f"{n} {np.shape(a)}" for n, a in zip(names, arrays)] if len(names) == len(arrays) else \
            [str(np.shape(a)) for a in arrays]
        raise WorkloadError(f"workload arguments of shapes {', '.join(shapes)} do not broadcast together; give each "
                            "swept argument its own axis (batch=B[:, None], gamma=G[None, :])") from None
    points = math.prod(shape)
    if points > MAX_POINTS:
        raise WorkloadError(f"a grid of {points:,} points is beyond the {MAX_POINTS:,} one call evaluates; "
                            "split the sweep into chunks")
    # refused before allocating: numpy would raise MemoryError part-way, or the OS kill us
    need = points * bytes_per_point
    if need > 0 and need > (have := usable_memory_bytes()):
        raise WorkloadError(f"a grid of {points:,} points needs about {need / 1e9:.3g} GB of memory ({bytes_per_point:,.0f} "
                            f"bytes a point), more than the {have / 1e9:.3g} GB this machine has; split the sweep "
                            "into chunks")
    return shape


#: The share of physical memory one evaluation may plan to use.
MEMORY_SHARE = 0.8


def usable_memory_bytes() -> float:
    """The memory a grid may plan for: :data:`MEMORY_SHARE` of the machine's physical memory (infinite where the
    platform does not say)."""
    try:
        return MEMORY_SHARE * os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return math.inf


def check_instance(name: str, value: Any, *types: type, optional: bool = True) -> Any:
    """``value`` when it is one of ``types`` (or None where ``optional``), else a :class:`WorkloadError` naming the
    argument: a public function given a string where a record belongs fails at its door, not deep inside."""
    if (value is None and optional) or isinstance(value, types):
        return value
    names = " or ".join(t.__name__ for t in types) + (" or None" if optional else "")
    named = isinstance(value, str) and any(t.__name__ in ("ModelSpec", "Device", "DeviceGroup", "GroupLink")
                                           for t in types)
    raise WorkloadError(f"{name} must be a {names}, got {show(value)}" + (
        " (ids are resolved by the public functions, roofline.size and the others; the layers below take records)"
        if named else ""))


def check_items(name: str, value: Any, single: tuple[type, ...] = (str,)) -> list[Any]:
    """A sequence argument as a list (one of ``single`` alone is a list of one); a :class:`WorkloadError` naming the
    argument for anything that is not a list, tuple or other iterable of values (None, a number)."""
    if isinstance(value, single):
        return [value]
    if value is None or isinstance(value, (bytes, dict)) or not hasattr(value, "__iter__"):
        raise WorkloadError(f"{name} must be a list (or one item), got {show(value)}")
    return list(value)


def check_devices(value: Any, single: tuple[type, ...] = (str,)) -> list[Any]:
    """A ``devices`` argument as a list: one string of comma-separated entries as the command line's ``--devices``
    takes them (``"b200,h200-sxm:8"``), one of ``single`` (a record, a path) alone, or a list of them."""
    if isinstance(value, str):
        parts = [d.strip() for d in value.split(",")]
        if not all(parts):
            raise WorkloadError(f"devices: an empty entry in {value!r} (write ids between commas: b200,h200-sxm)")
        return parts
    return check_items("devices", value, single)
