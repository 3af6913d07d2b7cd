"""A result as a range over its uncertain inputs: one input at a time, then the two corners that combine them.

An answer that rests on inputs nobody has measured (a chip's per-layer latency, which serving stack the GPUs
run, how acceptance grows with the draft length) is a range, not a number. :func:`input_range` evaluates
``fn`` at the point (every input at its point value), then moves one input at a time to each of its other
values (the others held at the point), which names the input that moves the result most (the ``driver``);
then it evaluates the two corners that set every input at once to the value that lowered, or raised, the
result most on its own, so that inputs which compound are not missed (a one-at-a-time sweep alone never
combines them). The range is the lowest and highest of all these evaluations. A setting where ``fn`` gives
None (a ratio that cannot be reached) is listed in ``unreachable`` and left out of the range.

The sweep is a local one: it assumes each input moves the result the same way whatever the others are, as
the corners then bound it; it is not a global search of every combination (``len(values) ** inputs``
evaluations), which :func:`input_range` never runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from ..errors import WorkloadError


@attrs.frozen(kw_only=True)
class InputRange:
    """The range of one result over named uncertain inputs (:func:`input_range`).

    ``point``: the result with every input at its point value. ``low`` / ``high``: the lowest and highest
    result over the one-at-a-time settings and the two corners (None when no setting reaches a value).
    ``driver``: the input whose values alone move the result most (largest high - low among its own
    settings, the point included); None when no input moves it. ``by_input``: each input's own (low, high).
    ``corners``: the settings of the low and the high corner. ``unreachable``: the settings (input -> value)
    where the result is None.
    """

    point: float | None
    low: float | None
    high: float | None
    driver: str | None
    by_input: dict[str, tuple[float | None, float | None]]
    corners: dict[str, dict[str, Any]]
    unreachable: list[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: point, low, high, driver, by_input ({name: {low, high}}), corners, unreachable."""
        return {"point": self.point, "low": self.low, "high": self.high, "driver": self.driver,
                "by_input": {k: {"low": lo, "high": hi} for k, (lo, hi) in self.by_input.items()},
                "corners": self.corners, "unreachable": self.unreachable}


def _span(values: list[float | None]) -> tuple[float | None, float | None]:
    seen = [v for v in values if v is not None]
    return (min(seen), max(seen)) if seen else (None, None)


def input_range(fn: Callable[[dict[str, Any]], float | None], point: Mapping[str, Any],
                alternatives: Mapping[str, Sequence[Any]]) -> InputRange:
    """The range of ``fn(settings)`` over ``alternatives`` (input name -> its other values), every other input
    at ``point``. ``fn`` takes a dict of every input's value and returns a number or None (unreachable).
    Evaluations: 1 + the number of alternatives + at most 2 corners."""
    unknown = set(alternatives) - set(point)
    if unknown:
        raise WorkloadError(f"input_range: alternatives for inputs without a point value: {', '.join(sorted(unknown))}")
    base = dict(point)
    at_point = fn(base)
    values: list[float | None] = [at_point]
    unreachable: list[dict[str, Any]] = [] if at_point is not None else [{}]
    by_input: dict[str, tuple[float | None, float | None]] = {}
    lowest: dict[str, Any] = {}
    highest: dict[str, Any] = {}
    for name, others in alternatives.items():
        mine: list[tuple[Any, float | None]] = [(point[name], at_point)]
        for value in others:
            v = fn({**base, name: value})
            mine.append((value, v))
            if v is None:
                unreachable.append({name: value})
        values += [v for _, v in mine[1:]]
        reached = [(value, v) for value, v in mine if v is not None]
        by_input[name] = _span([v for _, v in mine])
        if reached:
            lowest[name] = min(reached, key=lambda t: t[1])[0]
            highest[name] = max(reached, key=lambda t: t[1])[0]
    corners: dict[str, dict[str, Any]] = {}
    for label, pick in (("low", lowest), ("high", highest)):
        setting = {**base, **pick}
        moved = {k: v for k, v in pick.items() if v != point[k]}
        if len(moved) < 2:   # a corner that moves one input or none is a one-at-a-time setting already run
            continue
        v = fn(setting)
        corners[label] = moved
        values.append(v)
        if v is None:
            unreachable.append(moved)
    widths = {k: hi - lo for k, (lo, hi) in by_input.items() if lo is not None and hi is not None and hi > lo}
    low, high = _span(values)
    return InputRange(point=at_point, low=low, high=high, driver=max(widths, key=widths.__getitem__) if widths else None,
                      by_input=by_input, corners=corners, unreachable=unreachable)
