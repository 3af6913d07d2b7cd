"""How far the published measurements agree with themselves: one configuration measured by two publications.

TensorRT-LLM's performance tables list the same GPU, model, parallelism, formats and sequence lengths version
after version; vendors repeat a figure in a later post. Two such rows differ by what changed between the builds
and runs, not by anything a model of the hardware can see, so their spread adds, on average, to the error of
any prediction of a publication the model has not seen: a model exactly right for one of the two misses the other
by their difference (a spread, not a bound on any one row: a model can land between the two).
``roofline validate`` reports it beside the held-out error.
"""

from __future__ import annotations

import itertools
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


def repeated_measurements(rows: Iterable[Row]) -> list[Repeat]:
    """Every pair of rows from different sources whose setup columns (all but :data:`NOT_SETUP`) are equal and
    whose stack builds are of one family on one platform (:func:`roofline.evidence.validate.row_stack_family`).
    Left out: a row whose load its columns do not carry (``batch = slo``: MLPerf's Server and Interactive
    scenarios run at the largest load that meets their latency limits, which differ between scenarios the
    columns do not tell apart), and one with an unknown device or a value that is not a positive number
    (validate says why)."""
    groups: dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[Row, float]]] = {}
    for r in rows:
        if r.get("batch") == "slo":
            continue
        try:
            value, family = float(r.get("value")), row_stack_family(r)
        except (RooflineError, ValueError):
            continue
        if math.isfinite(value) and value > 0:
            setup = tuple(sorted((k, v.strip()) for k, v in r.fields.items() if k not in NOT_SETUP))
            groups.setdefault((family, setup), []).append((r, value))
    out = []
    for (family, _setup), members in groups.items():
        for (a, va), (b, vb) in itertools.combinations(members, 2):
            if a.get("source") != b.get("source"):
                out.append(Repeat(ids=(a.id, b.id), stacks=(a.get("stack"), b.get("stack")), stack_family=family,
                                  metric=a.get("metric"), difference=math.expm1(abs(math.log(vb / va)))))
    return out


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
