"""What every result record of broadcasting arrays offers: a compact ``repr``, ``to_dict()``, ``to_frame()`` and
notebook HTML.

A result of a 1000 x 1000 sweep should not print a million numbers: ``repr`` gives the shape and the range of
its headline fields; ``to_dict()`` gives plain JSON-ready values in the record's shape (each array as nested lists
of the workload's shape, constants once, tables such as ``formats`` as nested dicts, NaN as None);
``to_dict(flat=True)`` gives tidy columns instead, one flat list per column and one entry per point (constants
repeated, nested tables as ``formats.weights``), which ``pandas.DataFrame`` takes as it is; ``to_frame()`` is that
DataFrame (pandas is an optional extra: ``pip install 'roofline[pandas]'``); ``_repr_html_`` renders the first
points as a table in Jupyter.

Records keep their tables as read-only ``MappingProxyType`` views, which the standard library cannot pickle;
importing this module (``import roofline`` does) registers a reduction to a plain dict, so devices, groups,
prices and profiles travel to worker processes (``roofline.sweep(executor=...)``).
"""

from __future__ import annotations

import copyreg
import html
import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar

import attrs
import numpy as np

from .errors import RooflineError


def _mapping_proxy(d: dict[Any, Any]) -> MappingProxyType:
    return MappingProxyType(d)


def _reduce_mapping_proxy(m: MappingProxyType) -> tuple[Any, tuple[dict[Any, Any]]]:
    return _mapping_proxy, (dict(m),)


copyreg.pickle(MappingProxyType, _reduce_mapping_proxy)


def plain(value: Any) -> Any:
    """numpy scalars and arrays to plain Python, non-finite floats to None (JSON-ready)."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return plain(value.tolist())
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.str_):
        return str(value)
    if hasattr(value, "as_dict"):   # a record with its own JSON form (formats: every component resolved)
        return plain(value.as_dict())
    if attrs.has(type(value)):
        return {f.name: plain(getattr(value, f.name)) for f in attrs.fields(type(value)) if f.repr}
    return value


class ArrayRecord:
    """Mixin for frozen result records whose numeric fields broadcast over a workload grid."""

    #: fields (or properties) shown by repr and the notebook table, headline first
    headline: ClassVar[tuple[str, ...]] = ()

    def _shape(self) -> tuple[int, ...]:
        return np.shape(getattr(self, self.headline[0])) if self.headline else ()

    #: the workload's columns, first in :meth:`to_frame` (where the record has them)
    workload: ClassVar[tuple[str, ...]] = ()

    def _fields(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in attrs.fields(type(self)) if f.repr}  # type: ignore[arg-type]  # a mixin of attrs records
        out.update({k: getattr(self, k) for k in self.headline if k not in out})
        return out

    def to_dict(self, *, flat: bool = False) -> dict[str, Any]:
        """Every field (and the headline properties) as plain JSON-ready values, in the record's shape (arrays as
        nested lists); ``flat``: tidy columns of equal length, one entry per point (:func:`columns`), which
        ``pandas.DataFrame(r.to_dict(flat=True))`` reads as it is."""
        if flat:
            return {k: plain(v) for k, v in self.columns().items()}
        return {k: plain(v) for k, v in self._fields().items()}

    def columns(self) -> dict[str, np.ndarray]:
        """One flat array per column and one entry per point of the workload grid, the workload first."""
        return tidy_columns(self._fields(), self.workload)

    def to_frame(self) -> Any:
        """A ``pandas.DataFrame``: one row per point, the workload and every figure as columns (:meth:`columns`)."""
        return frame(self.columns())

    def __repr__(self) -> str:
        parts = [f"shape={self._shape()}"]
        for k in self.headline:
            a = np.asarray(getattr(self, k))
            if a.dtype.kind in "fi":
                finite = a[np.isfinite(a)] if a.size else a
                span = ("nan" if not finite.size else f"{finite.min():.4g}" if finite.min() == finite.max()
                        else f"{finite.min():.4g}..{finite.max():.4g}")
                parts.append(f"{k}={span}")
        return f"{type(self).__name__}({', '.join(parts)})"

    def _repr_html_(self) -> str:
        cols = [k for k in self.headline]
        flat = {k: np.ravel(np.broadcast_to(np.asarray(getattr(self, k)), self._shape())) for k in cols}
        n = min(20, int(np.prod(self._shape())) if self._shape() else 1)

        def cell(v: Any) -> str:
            return f"{v:.4g}" if isinstance(v, (float, np.floating)) else html.escape(str(v))
        head = "".join(f"<th>{html.escape(k)}</th>" for k in cols)
        body = "".join("<tr>" + "".join(f"<td>{cell(flat[k][i])}</td>" for k in cols) + "</tr>" for i in range(n))
        return f"<table><tr>{head}</tr>{body}</table><p>{html.escape(repr(self))}</p>"


def leaves(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``values`` with nested tables flattened: ``{"formats": {"kv": "fp8"}}`` -> ``{"formats.kv": "fp8"}`` (a record
    with ``as_dict`` and an attrs record as their fields)."""
    out: dict[str, Any] = {}
    for k, v in values.items():
        if hasattr(v, "as_dict"):
            v = v.as_dict()
        elif attrs.has(type(v)):
            v = {f.name: getattr(v, f.name) for f in attrs.fields(type(v)) if f.repr}
        if isinstance(v, Mapping):
            out.update(leaves(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def tidy_columns(values: Mapping[str, Any], first: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """Flat columns of equal length from a record's fields: every array broadcast to the grid the arrays span and
    raveled, constants repeated, ``first`` (the workload) first. A value of another shape than the grid (a table
    along an axis of its own) is left out: it is not one value per point."""
    flat = {k: np.asarray(v) if not isinstance(v, (list, tuple)) else np.asarray(v, dtype=object)
            for k, v in leaves(values).items()}
    shapes = [a.shape for a in flat.values() if a.dtype != object or a.ndim]
    try:
        shape = np.broadcast_shapes(*shapes)
    except ValueError:   # a side table of its own length: the grid is the largest shape the others broadcast to
        shape = max(shapes, key=lambda s: (int(np.prod(s)), len(s)))
    out: dict[str, np.ndarray] = {}
    for k in [*(k for k in first if k in flat), *(k for k in flat if k not in first)]:
        a = flat[k]
        try:
            out[k] = np.broadcast_to(a if a.ndim else a.reshape(()), shape).ravel()
        except ValueError:
            continue
    return out


def frame(columns: Mapping[str, Any]) -> Any:
    """A ``pandas.DataFrame`` of ``columns``; pandas is imported here, on use (an optional extra)."""
    try:
        import pandas as pd
    except ImportError:
        raise RooflineError("to_frame needs pandas: pip install 'roofline[pandas]' (or pass r.to_dict(flat=True) to "
                            "any table library)") from None
    return pd.DataFrame(dict(columns))
