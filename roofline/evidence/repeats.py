"""How far the published measurements agree with themselves: one configuration measured by two publications.

TensorRT-LLM's performance tables list the same GPU, model, parallelism, formats and sequence lengths version
after version; vendors repeat a figure in a later post. Two such rows differ by what changed between the builds
and runs, not by anything a model of the hardware can see, so their spread adds, on average, to the error of
any prediction of a publication the model has not seen: a model exactly right for one of the two misses the other
by their difference (a spread, not a bound on any one row: a model can land between the two).
``roofline validate`` reports it beside the held-out error.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import attrs
import numpy as np

from ..errors import RooflineError
from .validate import Row, row_stack_family

#: Columns that do not describe the configuration measured: who published it, the build (and its version), the
#: value, its grade, and the engine's memory setting (a property of the build's defaults: TensorRT-LLM v0.14's
#: trtllm-bench ran 0.90 of free memory where v0.17's page states 0.95, which is part of what a repeat measures).
NOT_SETUP = ("id", "source", "stack", "stack_version", "kv_memory_fraction", "value", "grade", "notes")


@attrs.frozen(kw_only=True)
class Repeat:
    """Two rows of different publications that measured one configuration on one stack family."""

    ids: tuple[str, str]
    stacks: tuple[str, str]
    stack_family: str
    metric: str
    #: exp(|ln(second / first)|) - 1: their difference, the same whichever comes first
    difference: float


#: The earlier rows of other publications each row is compared with in its configuration: every pair where a
#: configuration has at most this many + 1 rows (the shipped data's have 2 to 4), and the work linear in rows
#: beyond (a file of thousands of rows of one configuration made millions of pairs and exhausted the memory).
PARTNERS = 8


@attrs.frozen
class _Seen:
    """A row of a configuration, its source, value, and its place (the configuration's, its own in it)."""

    row: Row
    source: str
    value: float
    order: tuple[int, int]


def repeated_measurements(rows: Iterable[Row]) -> list[Repeat]:
    """Pairs of rows from different sources whose setup columns (all but :data:`NOT_SETUP`) are equal and whose
    stack builds are of one family on one platform (:func:`roofline.evidence.validate.row_stack_family`): each row
    with the :data:`PARTNERS` latest earlier rows of its configuration from another source (every pair where a
    configuration has few rows; linear in rows where it has many). Left out: a row whose load its columns do not
    carry (``batch = slo``: MLPerf's Server and Interactive scenarios run at the largest load that meets their
    latency limits, which differ between scenarios the columns do not tell apart), and one with an unknown device
    or a value that is not a positive number (validate says why)."""
    windows: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[int, list[_Seen], list[int]]] = {}
    pairs: list[tuple[tuple[int, int, int], Repeat]] = []
    for r in rows:
        if r.get("batch") == "slo":
            continue
        try:
            value, family = float(r.get("value")), row_stack_family(r)
        except (RooflineError, ValueError):
            continue
        if not (math.isfinite(value) and value > 0):
            continue
        setup = tuple(sorted((k, v.strip()) for k, v in r.fields.items() if k not in NOT_SETUP))
        group, window, count = windows.setdefault((family, setup), (len(windows), [], [0]))
        seen = _Seen(row=r, source=r.get("source"), value=value, order=(group, count[0]))
        count[0] += 1
        pairs += [((group, a.order[1], seen.order[1]),
                   Repeat(ids=(a.row.id, r.id), stacks=(a.row.get("stack"), r.get("stack")), stack_family=family,
                          metric=a.row.get("metric"), difference=math.expm1(abs(math.log(value / a.value)))))
                  for a in _partners(window, seen.source)]
        _keep(window, seen)
    return [x for _k, x in sorted(pairs, key=lambda p: p[0])]   # by configuration, then by row: as found


def _partners(window: list[_Seen], source: str) -> list[_Seen]:
    """The :data:`PARTNERS` latest rows of ``window`` from another source than ``source``, oldest first."""
    out: list[_Seen] = []
    for e in reversed(window):
        if e.source != source:
            out.append(e)
            if len(out) == PARTNERS:
                break
    return out[::-1]


def _keep(window: list[_Seen], seen: _Seen) -> None:
    """Add ``seen`` to what later rows may pair with, bounded: a row with :data:`PARTNERS` later rows of its own
    source is never reached (those come first, for any other source), nor one with twice that many later rows
    kept (a later row skips at most :data:`PARTNERS` of its own source, then takes as many); each drop of a row
    after another comes with a row added after it, so what is dropped stays out of reach."""
    window.append(seen)
    same = [i for i, e in enumerate(window) if e.source == seen.source]
    if len(same) > PARTNERS:
        del window[same[0]]
    if len(window) > 2 * PARTNERS:
        del window[0]


def repeat_summary(repeats: list[Repeat]) -> dict[str, object]:
    """Pairs and their median difference, overall and by stack family (``pairs`` 0 and no median without any)."""
    def stats(xs: list[Repeat]) -> dict[str, object]:
        return {"pairs": len(xs), "median_difference": float(np.median([x.difference for x in xs]))}
    if not repeats:
        return {"pairs": 0}
    by: dict[str, list[Repeat]] = {}
    for x in repeats:
        by.setdefault(x.stack_family, []).append(x)
    return {**stats(repeats), "by_stack_family": {k: stats(v) for k, v in sorted(by.items())},
            "repeats": [attrs.asdict(x) for x in repeats]}
