"""Answers remembered by the identity of the records they were computed from.

The core's records (devices, models, engine parameters) are frozen, so a function of them can remember its
answer by their ``id`` alone, without hashing their contents (a calibration times every row hundreds of times
with a handful of parameter objects). An ``id`` is only unique while its object lives, so the memo holds the
objects beside the answer and answers only when the very same objects come back. When full it empties itself:
the working set of a loop is small, and a bounded memo cannot grow with a long sweep.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

#: what :meth:`IdentityMemo.get` returns when it has no answer (an answer may be None)
MISSING: Any = object()


class IdentityMemo:
    """Up to ``size`` answers keyed by the identity of some objects plus plain hashable values.

    ``get(objects, rest)`` is the answer stored for the same objects (by ``is``) and equal ``rest``, else
    :data:`MISSING`; ``put(objects, rest, answer)`` stores one. Objects must not be changed in place while
    remembered (frozen attrs records are not).
    """

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"size must be at least 1, got {size}")
        self.size = size
        self._store: dict[tuple[Hashable, ...], tuple[tuple[Any, ...], Any]] = {}

    def __len__(self) -> int:
        return len(self._store)

    @staticmethod
    def _key(objects: tuple[Any, ...], rest: tuple[Hashable, ...]) -> tuple[Hashable, ...]:
        return (*map(id, objects), *rest)

    def get(self, objects: tuple[Any, ...], rest: tuple[Hashable, ...] = ()) -> Any:
        hit = self._store.get(self._key(objects, rest))
        if hit is None or any(a is not b for a, b in zip(hit[0], objects, strict=True)):
            return MISSING
        return hit[1]

    def put(self, objects: tuple[Any, ...], rest: tuple[Hashable, ...], answer: Any) -> Any:
        """Remember ``answer`` (emptying the memo first when it is full) and return it."""
        if len(self._store) >= self.size:
            self._store.clear()
        self._store[self._key(objects, rest)] = (objects, answer)
        return answer

    def clear(self) -> None:
        self._store.clear()
