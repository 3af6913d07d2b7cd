"""Printing a :class:`~roofline.ui.render.View` as a table, JSON or CSV."""

from __future__ import annotations

import argparse
import csv
import io
import json
from typing import Any

from rich.console import Console
from rich.text import Text

from ..records import plain
from .render import View

#: numpy scalars/arrays and non-finite floats to plain JSON (NaN -> null): the records' own conversion.
jsonable = plain


def csv_text(rows: list[dict[str, Any]]) -> str:
    """Rows as CSV, columns in first-seen order; nested values as JSON, NaN as empty."""
    columns: dict[str, None] = {}
    for r in rows:
        columns.update(dict.fromkeys(r))
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: _cell(v) for k, v in r.items()})
    return buf.getvalue()


def _cell(v: Any) -> Any:
    v = jsonable(v)
    if v is None:
        return ""
    return json.dumps(v) if isinstance(v, (dict, list)) else v


def emit(console: Console, view: View, args: argparse.Namespace) -> None:
    """Print ``view`` the way the command line asked: --json, --csv, or tables; with --stack, which fitted
    parameter set the GPUs ran with (JSON ``stack``, a line under the tables)."""
    used = getattr(args, "stack_used", None)
    if getattr(args, "json", False):
        data = view.data
        if used and isinstance(data, dict):
            data = {**data, "stack": {"name": args.stack, "build": args.stack_build, "parameters": used,
                                      "not_identified": args.stack_not_identified}}
        console.file.write(json.dumps(jsonable(data), indent=2) + "\n")
    elif getattr(args, "csv", False):
        console.file.write(csv_text(view.rows))
    else:
        for t in view.tables:   # Text (command lines) is printed unwrapped, for copying
            console.print(t, soft_wrap=isinstance(t, Text))
        if used:
            loose = args.stack_not_identified
            console.print(f"GPUs run {args.stack_build} with the calibration's {used} parameter set"
                          + ("" if used == args.stack_build else " (the nearest one fitted)")
                          + (f"; the calibration's rows do not pin down its {', '.join(loose)} (kept as fitted, "
                             "uncertain)" if loose else ""))


def run_example(doc: str, run: Any, show: Any, *, quick: bool = False) -> None:
    """The command line every example shares: a table by default, the same result with ``--json``
    (``--quick`` passes ``quick=True`` to ``run`` for the tests' smaller sweeps)."""
    ap = argparse.ArgumentParser(description=doc.strip().splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    if quick:
        ap.add_argument("--quick", action="store_true", help="smaller sizes (used by the tests)")
    args = ap.parse_args()
    out = run(args.quick) if quick else run()
    if args.json:
        print(json.dumps(jsonable(out), indent=1))
    else:
        show(out, Console())
