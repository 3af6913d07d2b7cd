"""What every renderer shares, and the only place that formats numbers for people (with its siblings
``render_*``, one per command family).

Each result type has one formatter that returns a :class:`View`: the tables a person reads, the dict ``--json``
prints and the flat rows ``--csv`` prints, so the three never disagree. This module holds the View, the house
table (cells shown as written, never read as markup), and the cells every family prints: times, rates, dollars,
binding terms and formats.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

import attrs
from rich import box
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from ..serving.serve import ServingResult
from ..specs.formats import Formats, brief

#: Control characters (an ANSI escape's ESC, a carriage return, C1 codes): shown escaped, never sent to a terminal.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def safe(text: str) -> str:
    """``text`` with its control characters written out (``\\x1b``): a spec's name or a CSV id carrying an ANSI
    escape must not reach the terminal or a pipe (tabs and line breaks stay)."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def cell(value: Any, style: str = "") -> Any:
    """A table cell that shows ``value`` as it is: a string becomes a Text (rich would read ``[/bold]`` in a
    placement name or a CSV id as markup, and fail on it), control characters escaped; other renderables pass."""
    if isinstance(value, str):
        return Text(safe(value), style=style)
    if isinstance(value, Text) and _CONTROL.search(value.plain):
        return Text(safe(value.plain), style=value.style)
    return value


#: Columns of names (row ids, model and device ids, groups, placements, fields): never wrapped; the other
#: columns give way first (rich shrinks the wrappable ones), so at 80 columns ``qwen3-235b-a22b`` stays whole.
NAME_COLUMNS = frozenset({"id", "model", "device", "group", "placement", "configuration", "hardware", "stack",
                          "field", "spec field", "parameter", "family", "target", "draft"})


class _Table(Table):
    """Columns wrap long words instead of cropping them (rich's default is an ellipsis); every string a row, a
    header, the title or the caption holds is shown as written (:func:`cell`), never read as markup."""

    def __init__(self, *args: Any, title: Any = None, caption: Any = None, **kw: Any) -> None:
        super().__init__(*args, title=cell(title, "table.title"), caption=cell(caption, "table.caption"), **kw)

    def add_column(self, header: Any = "", *args: Any, **kw: Any) -> None:
        kw.setdefault("overflow", "fold")
        if str(header).strip().lower() in NAME_COLUMNS:   # an id broken over two lines reads as two ids
            kw.setdefault("no_wrap", True)
        super().add_column(cell(header), *args, **kw)

    def add_row(self, *renderables: Any, **kw: Any) -> None:
        super().add_row(*(cell(r) for r in renderables), **kw)


def house_table(title: str | None = None, caption: str | None = None, **kw: Any) -> Table:
    """The house style: compact borders and padding, so tables fit an 80-column terminal."""
    return _Table(title=title, caption=caption, box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), pad_edge=False,
                  show_edge=False, **kw)


_BOUND = {"communication": "comm", "does not fit": "no fit"}


def short_bound(bound: Any) -> str:
    """A binding term as a table shows it: ``memory:hbm`` -> ``mem:hbm``, ``communication`` -> ``comm``; ``compute``,
    ``overhead`` and ``dequant`` as :attr:`StageResult.bound` names them (docs/design.md, "One vocabulary")."""
    text = str(bound)
    return _BOUND.get(text, text.replace("memory:", "mem:"))


@attrs.frozen(kw_only=True)
class View:
    """One result, ready for output: rich renderables, the JSON dict, and flat rows for CSV. A ``script`` view
    prints as a shell script: its Text items verbatim (commands), everything else as ``#`` comments.

    ``tables`` may be a function that builds them, called only when the tables are printed (``--json`` and
    ``--csv`` never build a table); ``rows`` (and lists inside ``data``) may be held by column
    (:class:`roofline.ui.columns.Columns`), which JSON and CSV write a block at a time."""

    tables: list[RenderableType] | Callable[[], list[RenderableType]]
    data: Any
    rows: Any
    script: bool = False

    def table_list(self) -> list[RenderableType]:
        """The tables, built now if they were left to be built when printed."""
        return self.tables() if callable(self.tables) else self.tables


def shown_path(path: str) -> str:
    """A file path as a table caption shows it: relative to the working directory when the file lies under it
    (``hardware_specs/h200-sxm.toml`` in a checkout), else whole (an installed package's copy); JSON keeps it
    whole."""
    try:
        rel = os.path.relpath(path)
    except ValueError:   # another drive (Windows)
        return path
    return path if rel == ".." or rel.startswith(".." + os.sep) else rel


def ms_cell(v: float) -> str:
    return "—" if not math.isfinite(v) else (f"{v * 1e3:.3g}" if v * 1e3 < 1000 else f"{v * 1e3:,.0f}")


def rate_cell(v: float) -> str:
    """A rate in at most 7 characters: 2,205 / 34.4 / 349k / 1.38M (exact values are in --json and --csv)."""
    if not math.isfinite(v):
        return "—"
    if v >= 1e6:
        return f"{v / 1e6:.3g}M"
    return f"{v / 1e3:.0f}k" if v >= 1e5 else f"{v:,.0f}" if v >= 100 else f"{v:.3g}"


def usd_cell(v: float) -> str:
    return "—" if not math.isfinite(v) else f"{v:.3g}" if v < 10 else f"{v:,.1f}" if v < 1000 else f"{v:,.0f}"


def seconds_cell(v: float) -> str:
    return "—" if not math.isfinite(v) else (f"{v:.3g}" if v < 100 else f"{v:,.0f}")


def formats_json(f: Formats | None) -> dict[str, str] | None:
    """Formats as JSON says them everywhere (:meth:`Formats.as_dict`); None where there are none."""
    return None if f is None else f.as_dict()


def formats_fields(r: ServingResult) -> dict[str, dict[str, str] | None]:
    """A serving result's formats as JSON fields: the target's (its decode group's), a separate prefill group's
    where it runs others (else null), the draft's (null without one)."""
    return {"target_formats": formats_json(r.target_formats), "prefill_formats": formats_json(r.prefill_formats),
            "draft_formats": formats_json(r.draft_formats)}


def formats_text(fields: Mapping[str, Any]) -> str:
    """The formats of :func:`formats_fields` in a few words (:func:`brief`): the target's ("decode ...; prefill ..."
    where a separate prefill group runs others), then the draft's; "" without any."""
    target, pre, draft = fields.get("target_formats"), fields.get("prefill_formats"), fields.get("draft_formats")
    if not target:
        return ""
    text = brief(target) if not pre else f"decode {brief(target)}; prefill {brief(pre)}"
    return text + (f"; draft {brief(draft)}" if draft else "")


def formats_lines(by_name: Mapping[str, str], kind: str) -> list[str]:
    """The formats each named row ran in (:func:`formats_text`): one line where all agree, else one line per
    set with the rows that ran it (a chip without bf16 units runs, unless told, in its native format)."""
    groups: dict[str, list[str]] = {}
    for name, fmt in by_name.items():
        if fmt:
            groups.setdefault(fmt, []).append(name)
    if len(groups) < 2:
        return [f"Formats: {fmt}." for fmt in groups]
    return ([f"The formats differ by {kind} (unless given: bf16, or the native format every device of the {kind} "
             "computes):"] + [f"  {fmt}: {'; '.join(names)}" for fmt, names in groups.items()])
