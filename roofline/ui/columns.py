"""Rows held column by column, written as JSON or CSV a block of rows at a time.

A scan of 300 batches by 300 draft lengths is 90,000 rows of some 30 figures: as a list of dicts it is millions of
Python objects, and ``json.dumps(..., indent=2)`` walks them one at a time. :class:`Columns` keeps each figure as
one array and formats a column at a time (the values ``json.dumps`` and ``csv`` would write, byte for byte), so
the output goes out in blocks of bounded size and no row dict is built unless someone iterates over the rows.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from ..records import plain
from ..serving.trust import FIELDS, pick, with_bounds
from ..specs.intervals import Interval
from .render_common import safe

#: Rows formatted per block: a few MB of text at a time.
BLOCK_ROWS = 4096


class Columns:
    """Equal-length 1-D columns by name, in the rows' key order; ``absent`` marks the cells a row leaves out (a
    figure's interval ends where the figure itself is not finite, as :func:`roofline.serving.trust.with_bounds`
    leaves them out of a row dict). Iterating yields the row dicts (plain Python values, NaN as None)."""

    def __init__(self, columns: Mapping[str, Any], absent: Mapping[str, np.ndarray] | None = None) -> None:
        self.columns = {k: np.asarray(v) for k, v in columns.items()}
        sizes = {v.size for v in self.columns.values()}
        if len(sizes) > 1 or any(v.ndim != 1 for v in self.columns.values()):
            raise ValueError(f"columns must be 1-D and of one length, got sizes {sorted(sizes)}")
        self.size = sizes.pop() if sizes else 0
        self.absent = dict(absent or {})

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self.raw_rows(plain)

    def raw_rows(self, convert: Callable[[Any], Any] = lambda x: x) -> Iterator[dict[str, Any]]:
        """The rows as dicts of Python values (NaN kept as NaN; ``convert`` applied to each column's list)."""
        lists = {k: convert(v.tolist()) for k, v in self.columns.items()}
        gaps = {k: m.tolist() for k, m in self.absent.items()}
        for i in range(self.size):
            yield {k: v[i] for k, v in lists.items() if not (k in gaps and gaps[k][i])}

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    def set(self, name: str, values: Any) -> None:
        """Set column ``name`` to ``values`` (broadcast to the rows) here: in place if present, else last."""
        self.columns[name] = np.broadcast_to(np.asarray(values), (self.size,))

    def with_column(self, name: str, values: Any) -> Columns:
        """A copy with ``name`` set to ``values`` (broadcast to the rows): in place if present, else last."""
        return Columns({**self.columns, name: np.broadcast_to(np.asarray(values), (self.size,))}, self.absent)

    def with_bounds(self, intervals: Mapping[str, Interval], stage: str | None = None,
                    by_device: Callable[[str], Mapping[str, Interval] | None] | None = None) -> Any:
        """``<name>_low`` and ``<name>_high`` after every figure of :data:`~roofline.serving.trust.FIELDS`, as
        :func:`~roofline.serving.trust.with_bounds` adds them to each row (none where the figure is not finite);
        rows that name their own device or stage take that function's row-by-row path."""
        if stage is not None or "stage" in self.columns or "time_s" in self.columns or (
                by_device is not None and "device" in self.columns):
            return with_bounds(list(self), intervals, stage, by_device)
        out: dict[str, np.ndarray] = {}
        absent = dict(self.absent)
        for k, v in self.columns.items():
            out[k] = v
            spec = FIELDS.get(k)
            if spec is None or v.dtype.kind not in "fiu" or f"{k}_low" in self.columns:
                continue
            kind, rate = spec
            value = v.astype(float)
            missing = ~np.isfinite(value) | self.absent.get(k, False)
            with np.errstate(all="ignore"):
                out[f"{k}_low"], out[f"{k}_high"] = pick(intervals, k, kind).bounds(value, rate=rate)
            if missing.any():
                absent[f"{k}_low"] = absent[f"{k}_high"] = missing
        return Columns(out, absent)

    # ---------------------------------------------------------------- JSON
    def json_chunks(self, indent: int, level: int) -> Iterator[str]:
        """The rows as ``json.dumps(list(self), indent=indent)`` writes them nested ``level`` deep."""
        if not self.size:
            yield "[]"
            return
        outer, inner = " " * (indent * (level + 1)), " " * (indent * (level + 2))
        keys = {k: f',\n{inner}{json.dumps(k)}: ' for k in self.columns}
        # a row with every cell: one %-template per row; a row leaving cells out: joined cell by cell
        whole = "{" + "".join(key.replace("%", "%%") + "%s" for key in keys.values())[1:] + f"\n{outer}}}"
        yield "["
        for start in range(0, self.size, BLOCK_ROWS):
            stop = min(start + BLOCK_ROWS, self.size)
            values = [json_values(v[start:stop], indent, level + 2) for v in self.columns.values()]
            gaps = [self.absent[k][start:stop] for k in self.columns if k in self.absent]
            if not any(g.any() for g in gaps):
                rows = [whole % row for row in zip(*values)]
            else:
                cells = [self._cells(k, v, start, stop, keys[k]) for k, v in zip(self.columns, values)]
                rows = ["{" + body[1:] + f"\n{outer}}}" if body else "{}" for body in map("".join, zip(*cells))]
            yield ("\n" if start == 0 else ",\n") + outer + f",\n{outer}".join(rows)
        yield "\n" + " " * (indent * level) + "]"

    def _cells(self, name: str, texts: list[str], start: int, stop: int, key: str) -> list[str]:
        gaps = self.absent.get(name)
        if gaps is None:
            return [key + text for text in texts]
        return ["" if gap else key + text for text, gap in zip(texts, gaps[start:stop].tolist())]

    # ----------------------------------------------------------------- CSV
    def csv_chunks(self) -> Iterator[str]:
        """The rows as :func:`roofline.ui.output.csv_text` writes a list of row dicts: the columns in the order
        they first appear in a row, a cell left out as empty, NaN as empty."""
        first = {k: i for k in self.columns if (i := _first_present(self.absent.get(k), self.size)) is not None}
        names = sorted(first, key=first.__getitem__)   # stable: ties keep the columns' order
        yield _csv_line(names)
        for start in range(0, self.size, BLOCK_ROWS):
            stop = min(start + BLOCK_ROWS, self.size)
            cells = []
            for k in names:
                col = csv_values(self.columns[k][start:stop])
                gaps = self.absent.get(k)
                cells.append(col if gaps is None else ["" if g else c for c, g in zip(col, gaps[start:stop].tolist())])
            yield "".join(",".join(row) + "\n" for row in zip(*cells))


def _first_present(gaps: np.ndarray | None, size: int) -> int | None:
    if gaps is None:
        return 0 if size else None
    present = np.flatnonzero(~gaps)
    return int(present[0]) if present.size else None


def json_values(a: np.ndarray, indent: int | None = None, level: int = 0) -> list[str]:
    """Each value of a 1-D array as ``json.dumps`` writes the plain value (NaN and infinities as null), a nested
    value (a list, a dict) indented as it would be ``level`` deep."""
    if a.dtype.kind == "f":
        return _float_texts(a, "null")
    if a.dtype.kind == "b":
        return ["true" if v else "false" for v in a.tolist()]
    if a.dtype.kind in "iu":
        return [repr(v) for v in a.tolist()]
    if a.dtype.kind == "U":   # a few distinct names (binding terms): each written once
        values, index = np.unique(a, return_inverse=True)
        return np.array([json.dumps(v) for v in values.tolist()], dtype=object)[index.ravel()].tolist()
    memo: dict[Any, str] = {}
    out = []
    for v in a.tolist():
        key = (type(v), v) if _hashable(v) else None
        if key is None or key not in memo:
            text = json.dumps(plain(v), indent=indent)
            text = text.replace("\n", "\n" + " " * ((indent or 0) * level)) if indent else text
            if key is None:
                out.append(text)
                continue
            memo[key] = text
        out.append(memo[key])
    return out


def _float_texts(a: np.ndarray, missing: str) -> list[str]:
    """``repr`` of each float (``missing`` for NaN and infinities), each distinct value formatted once where a
    column repeats its values (a scan's gamma, batch, alpha): the shortest repr is most of the cost of the output."""
    if a.size > 64 and not (np.signbit(a) & (a == 0)).any():   # -0.0 and 0.0 are one value to np.unique
        values, index = np.unique(a, return_inverse=True)
        if 2 * values.size < a.size:
            texts = np.array([repr(v) if math.isfinite(v) else missing for v in values.tolist()], dtype=object)
            return texts[index.ravel()].tolist()
    return [repr(v) if math.isfinite(v) else missing for v in a.tolist()]


def csv_values(a: np.ndarray) -> list[str]:
    """Each value of a 1-D array as a cell of :func:`roofline.ui.output.csv_text` (NaN and None empty, nested
    values as JSON, text with its control characters escaped, quoted where CSV needs it)."""
    if a.dtype.kind == "f":
        return _float_texts(a, "")
    if a.dtype.kind == "b":
        return ["True" if v else "False" for v in a.tolist()]
    if a.dtype.kind in "iu":
        return [repr(v) for v in a.tolist()]
    memo: dict[Any, str] = {}
    out = []
    for v in a.tolist():
        key = (type(v), v) if _hashable(v) else None
        text = memo.get(key) if key is not None else None
        if text is None:
            text = _csv_line([csv_cell(v)]).rstrip("\n") if csv_cell(v) != "" else ""
            if key is not None:
                memo[key] = text
        out.append(text)
    return out


def _csv_line(fields: Iterable[Any]) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(list(fields))
    return buf.getvalue()


def _hashable(v: Any) -> bool:
    try:
        hash(v)
    except TypeError:
        return False
    return True


def json_chunks(value: Any, indent: int = 2, level: int = 0) -> Iterator[str]:
    """``json.dumps(value, indent=indent)`` in pieces, with any :class:`Columns` inside written a block at a time;
    ``value`` is plain JSON-ready data (:func:`roofline.records.plain`) but for those."""
    if isinstance(value, Columns):
        yield from value.json_chunks(indent, level)
    elif isinstance(value, dict) and value and _holds_columns(value):
        pad = " " * (indent * (level + 1))
        for i, (k, v) in enumerate(value.items()):
            yield ("{\n" if i == 0 else ",\n") + pad + json.dumps(k if isinstance(k, str) else str(k)) + ": "
            yield from json_chunks(v, indent, level + 1)
        yield "\n" + " " * (indent * level) + "}"
    elif isinstance(value, list) and value and _holds_columns(value):
        pad = " " * (indent * (level + 1))
        for i, v in enumerate(value):
            yield ("[\n" if i == 0 else ",\n") + pad
            yield from json_chunks(v, indent, level + 1)
        yield "\n" + " " * (indent * level) + "]"
    else:
        yield json.dumps(value, indent=indent).replace("\n", "\n" + " " * (indent * level))


def _holds_columns(value: Any) -> bool:
    if isinstance(value, Columns):
        return True
    if isinstance(value, dict):
        return any(_holds_columns(v) for v in value.values())
    if isinstance(value, list):
        return any(isinstance(v, (Columns, dict, list)) and _holds_columns(v) for v in value)
    return False



def csv_cell(v: Any) -> Any:
    """A value as a CSV cell: plain (NaN and None empty), nested values as JSON, text with its control characters
    escaped (:func:`~roofline.ui.render_common.safe`)."""
    v = plain(v)
    if v is None:
        return ""
    return json.dumps(v) if isinstance(v, (dict, list)) else safe(v) if isinstance(v, str) else v
