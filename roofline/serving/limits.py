"""Latency limits a served load is held to: percentiles by name, checked."""

from __future__ import annotations

import math
from collections.abc import Mapping

from ..errors import WorkloadError

#: Percentiles every load result reports.
PERCENTILES = (50, 90, 99)


def check_limits(limits: Mapping[str, float]) -> dict[str, float]:
    """p99 (or other percentile) limits by name: ``ttft_p99_s``, ``tpot_p99_s``, ``itl_p99_s``, ... > 0."""
    out = {}
    for k, v in limits.items():
        name, _, rest = k.partition("_p")
        if name not in ("ttft", "itl", "tpot", "e2e") or rest[:-2] not in {str(p) for p in PERCENTILES}:
            raise WorkloadError(f"unknown latency limit {k!r}: use ttft, itl, tpot or e2e with _p50_s, _p90_s or "
                                "_p99_s")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise WorkloadError(f"latency limit {k} must be a positive number of seconds, got {v!r}")
        out[k] = float(v)
    return out
