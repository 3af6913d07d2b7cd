"""The project's error types.

Every error a user can cause derives from :class:`RooflineError`, so a script can
catch one type and the CLI can turn any of them into one line on stderr.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, cast

#: a function type a decorator hands back unchanged
F = TypeVar("F", bound=Callable[..., Any])


class RooflineError(Exception):
    """Base class for every error `roofline` raises on bad input."""


class SpecError(RooflineError):
    """A device spec file or model config is missing, malformed or invalid.

    The message names the file, the field and the offending value.
    """


class UnknownSpecError(RooflineError):
    """A field the vendor does not publish was needed for this computation (``device`` and ``field`` name it
    where known)."""

    def __init__(self, message: str, *, device: str = "", field: str = "") -> None:
        super().__init__(message)
        self.device, self.field = device, field


class UnitError(RooflineError):
    """A quantity string has no unit, an unknown unit or the wrong kind of unit."""


class NotFoundError(RooflineError):
    """An unknown device, model or format id."""


class WorkloadError(RooflineError):
    """A workload argument is out of range (negative, non-finite, ...)."""


class LayoutError(WorkloadError):
    """A device group that cannot hold the model's layout (e.g. TP that does not divide the heads)."""


class InfeasibleError(RooflineError):
    """A single (non-sweep) evaluation does not fit in memory or is impossible."""


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """Return ' (did you mean 'x'?)' for the closest choice, or ''."""
    close = difflib.get_close_matches(name.lower(), list(choices), n=1, cutoff=0.5)
    return f" (did you mean {close[0]!r}?)" if close else ""


#: What numpy says when an argument is a ragged list (``[[1, 2], [3]]``), not an array.
_RAGGED = ("inhomogeneous shape", "setting an array element with a sequence")


def _ragged_argument(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """The name of the first argument of ``func`` that numpy cannot make an array of ('' where none)."""
    import inspect

    import numpy as np
    try:
        bound = inspect.signature(func).bind(*args, **kwargs)
    except TypeError:
        return ""
    for name, value in bound.arguments.items():
        if isinstance(value, (list, tuple)):
            try:
                np.asarray(value, dtype=float)
            except (ValueError, TypeError):
                return name
    return ""


def broadcast_errors(func: F) -> F:
    """Turn numpy's shape-mismatch ValueError into a WorkloadError naming the function, and a ragged list (rows of
    unequal length) into one naming the argument (public API boundary)."""
    import functools

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except ValueError as e:
            if "broadcast" in str(e) or "shape mismatch" in str(e):
                raise WorkloadError(f"{func.__name__}: workload arguments do not broadcast together ({e})") from None
            if any(m in str(e) for m in _RAGGED):
                name = _ragged_argument(func, args, kwargs)
                raise WorkloadError(f"{func.__name__}: {name or 'an argument'} is a ragged list (rows of unequal "
                                    "length), not an array of numbers") from None
            raise
    return cast(F, wrapper)
