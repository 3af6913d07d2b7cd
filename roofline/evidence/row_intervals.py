"""Each validated row's prediction interval: the shipped held-out errors of every publication but the row's own
(roofline/specs/intervals.py), so a shipped row's interval never saw it."""

from __future__ import annotations

from typing import Any

from ..errors import RooflineError
from ..serving.trust import platform
from ..specs.intervals import DEFAULT_LEVEL, METRIC_KINDS, shipped_intervals
from ..specs.params import family_chain
from ..specs.resolve import resolve_device
from .row_labels import RowLike


def with_row_intervals(results: list[dict[str, Any]], rows: dict[str, RowLike],
                       level: float = DEFAULT_LEVEL) -> list[dict[str, Any]]:
    """Each predicted row with ``predicted_low`` and ``predicted_high``: the interval at ``level`` from the
    shipped held-out errors of every publication but the row's own (so a shipped row's interval never saw it),
    and ``covered`` (the measurement inside it). Rows of a metric no interval covers get None."""
    table, tables = shipped_intervals(), {}
    found: dict[tuple[str, str, str, str], Any] = {}
    for r in results:
        row, (kind, rate) = rows[r["id"]], METRIC_KINDS.get(r["metric"], (None, False))
        r["predicted_low"] = r["predicted_high"] = r["covered"] = None
        if kind is None:
            continue
        src = row.get("source")
        if src not in tables:
            tables[src] = table.without(src)
        dev = resolve_device(row.get("hardware"))
        stack = family_chain(r["stack_family"])[-1] if dev.family == "gpu" else "*"
        key = (src, platform(dev), stack, kind)
        if key not in found:   # a publication's rows share a few intervals: each is computed once
            try:
                found[key] = tables[src].interval(platform(dev), stack, kind, level)
            except RooflineError:
                found[key] = None
        iv = found[key]
        if iv is None:
            continue
        lo, hi = iv.bounds(r["predicted"], rate=rate)
        r.update(predicted_low=lo, predicted_high=hi, covered=bool(lo <= r["measured"] <= hi))
    return results
