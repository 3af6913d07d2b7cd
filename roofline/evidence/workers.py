"""Processes that share out rows: one validation's predictions or one fit's residuals.

Every share is every ``jobs``-th row and the answers are put back in row order, so a run gives the same numbers,
to the last bit, in any number of processes (the physics is pure functions of each row). Below
:data:`ROWS_PER_JOB` rows a process costs more than it saves (each warms its own caches of specs and batches).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
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


def cap_jobs(jobs: int, n_rows: int) -> int:
    """At most one process per usable core and per row: more would only wait for a core or hold no row (a
    ``--jobs 200`` on a five-row file started 199 idle processes)."""
    return max(1, min(jobs, usable_cores(), n_rows))


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


def _die_with_parent(parent: int) -> None:
    """A worker's start: killed by the kernel when its parent dies (Linux ``PR_SET_PDEATHSIG``; elsewhere a
    thread that watches the parent's pid), deaf to Ctrl-C (the parent answers it, and stops the workers), and
    with the default SIGTERM (not the parent's handler, which it inherited by fork)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)   # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)
    threading.Thread(target=watch, daemon=True).start()


def _stop(executor: Any) -> None:
    """End ``executor``'s processes now (an error or a signal in this one): waiting for their shares to finish
    would keep the command alive, and them after it."""
    for proc in list((getattr(executor, "_processes", None) or {}).values()):   # the pool's processes by pid
        with contextlib.suppress(Exception):
            proc.kill()
    executor.shutdown(wait=True, cancel_futures=True)   # the workers are dead: the manager thread ends at once


def workers(jobs: int) -> Any:
    """A context giving :class:`Workers` of ``jobs`` processes (``jobs - 1`` started beside this one), or None
    for one (no process is started). The processes die with this one, and are stopped at once when the block
    ends with an exception (KeyboardInterrupt and the CLI's SIGTERM included)."""
    if jobs <= 1:
        return contextlib.nullcontext(None)
    from concurrent.futures import ProcessPoolExecutor

    @contextlib.contextmanager
    def pool() -> Any:
        executor = ProcessPoolExecutor(max_workers=jobs - 1, initializer=_die_with_parent, initargs=(os.getpid(),))
        try:
            yield Workers(executor, jobs)
        except BaseException:
            _stop(executor)
            raise
        executor.shutdown(wait=True)
    return pool()
