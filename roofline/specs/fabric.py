"""A device's links (scale-up fabric, host, scale-out network): their bandwidth and latency, and the shape of a
scale-up fabric (a switched fabric, a full mesh of direct peer links, or a torus of nearest-neighbour links) that
sets how many links a collective drives and how many hops its latency counts."""

from __future__ import annotations

import functools
import math
from typing import Any

import attrs

from ..workload import in_range

_positive_or_none = in_range(0, lo_strict=True, optional=True)


def whole_count(value: Any, name: str = "peers", least: int = 1, what: str = "links") -> int:
    v = float(value)
    if not (math.isfinite(v) and v >= least and v == int(v)):
        raise ValueError(f"{name} = {value!r}: must be a whole number of {what} >= {least}")
    return int(v)


def torus_axes(value: Any) -> int:
    axes = whole_count(value, "torus", 2, "axes")
    if axes > 4:
        raise ValueError(f"torus = {value!r}: must be 2, 3 or 4 axes (a 2D or 3D torus, a 4D hypercube)")
    return axes


@functools.cache   # a pure function of two small counts, asked once per collective of every pass
def slice_shape(p: int, axes: int) -> tuple[int, ...]:
    """The chips along each axis of a ``p``-chip slice of a torus with ``axes`` axes: the shape closest to a
    square or cube (the smallest longest axis, then the smallest middle one), sorted ("The default topology
    associated with a given chip count is the one most similar to a cube",
    https://cloud.google.com/tpu/docs/types-topologies; v6e's 2x2, 2x4, 4x4, 4x8, ..., 16x16,
    https://docs.cloud.google.com/tpu/docs/v6e; v5p's 2x2x1, 2x2x2, 2x2x4, 2x4x4, 4x4x4, ...)."""
    def shapes(n: int, k: int) -> list[tuple[int, ...]]:
        if k == 1:
            return [(n,)]
        return [(d, *rest) for d in range(1, n + 1) if n % d == 0 for rest in shapes(n // d, k - 1)]
    return tuple(sorted(min(shapes(p, axes), key=lambda s: sorted(s, reverse=True))))


@attrs.frozen(kw_only=True)
class Link:
    """A link: bandwidth per direction and one-hop latency. ``peers``: the device's direct links to as many peers
    in a full mesh (AMD Infinity Fabric); ``bandwidth`` is then one peer link's, and a collective over p devices
    drives min(p - 1, peers) of them at once (:meth:`links_used`). None: a switched fabric
    (NVLink switches), whose ``bandwidth`` is the device's whole injection bandwidth.

    ``torus``: the axes of a torus of nearest-neighbour links (TPU ICI: 2 on v5e and v6e, 3 on v4, v5p and
    TPU7x; NeuronLink: Trn2's 4 x 4 torus, Trn1's 16 chips as a 4D hypercube, four axes of two). ``bandwidth`` is
    still the chip's whole injection bandwidth, which a collective over several axes drives at once ("This
    increases the available bandwidth by a factor of n_axes", https://jax-ml.github.io/scaling-book/sharding/),
    but its latency counts the hops along each axis of the slice (:meth:`ring_hops`), not around one ring of
    every chip. ``wraparound``: the axis length from which a
    slice's rings close: on a 2D torus an axis of that many chips wraps (v5e and v6e: 16, "smaller topologies
    can be requested without wraps on dims < 16"; Trn2: 4); on a 3D torus every axis wraps once each is a
    multiple of it (whole 4x4x4 cubes: "Any multiple of a full cube (e.g. 4x4x4 or 4x4x8) will have wraparounds",
    https://jax-ml.github.io/scaling-book/tpus/)."""

    bandwidth_bytes_per_s: float | None = attrs.field(validator=_positive_or_none)
    latency_s: float | None = attrs.field(validator=_positive_or_none)
    peers: int | None = attrs.field(default=None, converter=lambda v: None if v is None else whole_count(v))
    torus: int | None = attrs.field(default=None, converter=lambda v: None if v is None else torus_axes(v))
    wraparound: int | None = attrs.field(
        default=None, converter=lambda v: None if v is None else whole_count(v, "wraparound", 2, "chips"))

    def links_used(self, p: int) -> int:
        """Direct links a collective over ``p`` devices drives at once: min(p - 1, peers) in a mesh, else 1."""
        return max(1, min(p - 1, self.peers)) if self.peers else 1

    def ring_hops(self, p: int) -> int:
        """Link hops of one reduce-scatter (or all-gather) over ``p`` devices: p - 1 around a ring of them all;
        on a torus the sum over the slice's axes (:func:`slice_shape`) of ceil(n/2) for an axis whose ring
        closes (both directions at once) and n - 1 for one that does not ("If we do one direction, it takes
        N - 1 hops ..., otherwise we have ceil(N/2) hops", https://jax-ml.github.io/scaling-book/sharding/)."""
        if not self.torus or p <= 1:
            return max(p - 1, 0)
        shape = slice_shape(p, self.torus)
        wrap = self.wraparound or 0
        if self.torus == 3:
            closed = [bool(wrap) and all(n % wrap == 0 for n in shape)] * len(shape)
        else:
            closed = [bool(wrap) and n % wrap == 0 for n in shape]
        return sum(-(-n // 2) if c else n - 1 for n, c in zip(shape, closed))
