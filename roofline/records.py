"""What every result record of broadcasting arrays offers: a compact ``repr``, ``to_dict()`` and notebook HTML.

A result of a 1000 x 1000 sweep should not print a million numbers: ``repr`` gives the shape and the range of
its headline fields; ``to_dict()`` gives plain JSON-ready values (arrays as nested lists, NaN as None);
``_repr_html_`` renders the first points as a table in Jupyter.

Records keep their tables as read-only ``MappingProxyType`` views, which the standard library cannot pickle;
importing this module (``import roofline`` does) registers a reduction to a plain dict, so devices, groups,
prices and profiles travel to worker processes (``roofline.sweep(executor=...)``).
"""

from __future__ import annotations

import copyreg
import html
import math
from types import MappingProxyType
from typing import Any, ClassVar

import attrs
import numpy as np


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

    def to_dict(self) -> dict[str, Any]:
        """Every field (and the headline properties) as plain JSON-ready values."""
        out = {f.name: plain(getattr(self, f.name)) for f in attrs.fields(type(self)) if f.repr}
        out.update({k: plain(getattr(self, k)) for k in self.headline if k not in out})
        return out

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
