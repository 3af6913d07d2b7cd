"""One measurement row and the reading of its whole-number columns (roofline/validation/README.md)."""
from __future__ import annotations

import math

import attrs

from ..errors import RooflineError


@attrs.frozen(kw_only=True)
class Row:
    """One measurement row (parsed, not yet validated against specs)."""

    id: str
    fields: dict[str, str]

    def get(self, key: str) -> str:
        return (self.fields.get(key) or "").strip()


#: The columns that count devices or ranks: 0 or less is no layout.
DEVICE_COUNTS = frozenset({"n_devices", "tp", "pp", "ep", "dp"})


def row_int(row: Row, key: str, default: int | None = None) -> int:
    """Column ``key`` of ``row`` as a whole number (``default`` where it is empty); a RooflineError naming the column
    otherwise."""
    text = row.get(key)
    if not text and default is not None:
        return default
    if not text.strip():
        raise RooflineError(f"column {key} is empty: the publication gives no {key} for this row")
    try:
        v = float(text)
    except ValueError:
        raise RooflineError(f"column {key} = {text!r} is not a number") from None
    if not math.isfinite(v) or v != int(v):
        raise RooflineError(f"column {key} = {text!r} is not a whole finite number")
    if key in DEVICE_COUNTS and v < 1:
        raise RooflineError(f"column {key} = {text!r}: a count of devices or ranks is at least 1")
    return int(v)
