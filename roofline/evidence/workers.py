"""Processes that share out rows: one validation's predictions or one fit's residuals.

Every share is every ``jobs``-th row and the answers are put back in row order, so a run gives the same numbers,
to the last bit, in any number of processes (the physics is pure functions of each row). Below
:data:`ROWS_PER_JOB` rows a process costs more than it saves (each warms its own caches of specs and batches).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from ..errors import RooflineError

#: Rows per process below which sharing costs more (each process warms its own caches) than it saves.
ROWS_PER_JOB = 200


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the platform has one, not the host's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def default_jobs(n_rows: int) -> int:
    """Processes ``n_rows`` rows are shared among: one per usable core, at most one per :data:`ROWS_PER_JOB`."""
    return max(1, min(usable_cores(), n_rows // ROWS_PER_JOB))


def check_jobs(jobs: Any) -> None:
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise RooflineError(f"jobs must be a whole number >= 1, got {jobs!r}")


@attrs.frozen
class Workers:
    """``jobs`` processes: this one and ``jobs - 1`` of an executor."""

    executor: Any
    jobs: int

    def map_rows(self, fn: Callable[..., list[Any]], rows: Sequence[Any], *args: Any) -> list[Any]:
        """``fn(share, *args)`` for each process's share of ``rows`` (every ``jobs``-th row), the answers (one per
        row) put back in row order. This process computes the first share itself while the others run: it is not
        idle, and what it remembers (the counts of its rows' passes) serves its later calls, as one process's
        run would."""
        shares = [list(rows[i::self.jobs]) for i in range(self.jobs)]
        futures = [self.executor.submit(fn, share, *args) for share in shares[1:]]
        out: list[Any] = [None] * len(rows)
        out[0::self.jobs] = fn(shares[0], *args)
        for i, future in enumerate(futures, start=1):
            out[i::self.jobs] = future.result()
        return out


def workers(jobs: int) -> Any:
    """A context giving :class:`Workers` of ``jobs`` processes (``jobs - 1`` started beside this one), or None
    for one (no process is started)."""
    if jobs <= 1:
        return contextlib.nullcontext(None)
    from concurrent.futures import ProcessPoolExecutor

    @contextlib.contextmanager
    def pool() -> Any:
        with ProcessPoolExecutor(max_workers=jobs - 1) as executor:
            yield Workers(executor, jobs)
    return pool()
