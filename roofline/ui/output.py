"""Printing a :class:`~roofline.ui.render_common.View` as a table, JSON or CSV."""

from __future__ import annotations

import argparse
import csv
import io
import itertools
import json
import os
import sys
from collections.abc import Iterable, Iterator
from typing import Any

from rich.console import Console
from rich.text import Text

from ..records import plain
from ..serving.trust import served_at_rate, stage_intervals, with_bounds
from ..specs.intervals import Interval
from ..specs.params import WEIGHT_ONLY_KERNELS
from .columns import Columns, csv_cell, json_chunks
from .options import Engine
from .render_common import View, cell, safe

#: The kinds of the range line's times (a speedup's range is said apart, where a view shows speedups).
TIME_KINDS = ("decode", "ttft", "throughput", "energy")

#: numpy scalars/arrays and non-finite floats to plain JSON (NaN -> null): the records' own conversion.
jsonable = plain


class _Console(Console):
    """A console that, when its reader goes away (``roofline validate | head``), stops writing and raises
    BrokenPipeError for `roofline.ui.cli.main` to end quietly with the shell's SIGPIPE status, instead of rich's
    default exit status 1 (which the exit statuses reserve for bad input)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


def stdout_console(piped_width: int = 120) -> Console:
    """The console the command and the examples print to: the terminal's width, or ``piped_width`` columns when
    the output goes to a pipe or a file (rich's 80 would cut model and device names to 'llam…'), unless COLUMNS
    says; no colour under NO_COLOR."""
    width = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else piped_width
    return _Console(no_color=bool(os.environ.get("NO_COLOR")) or None, width=width)


def silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's flush at exit cannot fail again (the recipe in
    https://docs.python.org/3/library/signal.html#note-on-sigpipe)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):   # stdout without a descriptor (a test's StringIO): nothing to flush
        pass


def csv_text(rows: list[dict[str, Any]] | Columns) -> str:
    """Rows as CSV, columns in first-seen order; nested values as JSON, NaN as empty."""
    return "".join(csv_chunks(rows))


def csv_chunks(rows: list[dict[str, Any]] | Columns) -> Iterator[str]:
    """:func:`csv_text` in pieces: rows held by column a block at a time."""
    if isinstance(rows, Columns):
        yield from rows.csv_chunks()
        return
    columns: dict[str, None] = {}
    for r in rows:
        columns.update(dict.fromkeys(r))
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: csv_cell(v) for k, v in r.items()})
    yield buf.getvalue()


#: How much of a JSON or CSV text goes out before each flush: a pipe's buffer
_CHUNK = 1 << 16


def _write(console: Console, chunks: Iterable[str]) -> None:
    """``chunks`` of text to the console's file a pipe buffer at a time, flushed: a reader that goes away part-way
    (``| head``) then raises BrokenPipeError here, which `roofline.ui.cli.main` turns into the shell's SIGPIPE
    status; one large write lost the tail quietly and exited 0."""
    f = console.file
    pending: list[str] = []
    size = 0
    for chunk in chunks:
        pending.append(chunk)
        size += len(chunk)
        if size >= _CHUNK:
            text = "".join(pending)
            for i in range(0, len(text), _CHUNK):
                f.write(text[i:i + _CHUNK])
                f.flush()
            pending, size = [], 0
    if pending:
        f.write("".join(pending))
        f.flush()


def emit(console: Console, view: View, args: argparse.Namespace, engine: Engine | None = None) -> None:
    """Print ``view`` the way the command line asked: --json, --csv, or tables; with the ``engine`` its devices
    ran (:func:`roofline.ui.options.engine`), which fitted parameter set the GPUs ran with (JSON ``stack``, a
    ``stack`` column in CSV, a line under the tables) and the intervals of its figures."""
    note, trust = (engine.stack_note, engine.trust) if engine else (None, None)
    if args.json:
        data = {**view.data, "stack": note} if note and isinstance(view.data, dict) else view.data
        if trust and isinstance(data, dict):
            data = {**with_bounds(jsonable(data), trust["intervals"], by_device=trust["by_device"]),
                    "intervals": interval_record(trust)}
        _write(console, itertools.chain(json_chunks(jsonable(data), indent=2), ["\n"]))
    elif args.csv:
        rows = view.rows
        if note:
            rows = rows.with_column("stack", note["parameters"]) if isinstance(rows, Columns) else [
                {**r, "stack": note["parameters"]} for r in rows]
        if trust:   # the rows of a result whose stages ran on several kinds take the ranges its JSON gives them
            stages = view.data.get("stage_devices") if isinstance(view.data, dict) else None
            intervals = (stage_intervals(stages, trust["intervals"], trust["by_device"]) if isinstance(stages, dict)
                         else trust["intervals"])
            rows = with_bounds(jsonable(rows), intervals, by_device=trust["by_device"])
        _write(console, csv_chunks(rows))
    elif view.script:   # a shell script: commands verbatim, never wrapped; tables and prose as # comments
        lines = [*view.table_list(), *([stack_line(note)] if note else []),
                 *([interval_line(trust, speedup=speedup_interval(view.data, trust),
                                  at_rate=served_at_rate(view.data))] if trust else [])]
        for t in lines:
            console.print(t if isinstance(t, Text) else commented(t, console.width), soft_wrap=True)
    else:
        for t in view.table_list():   # Text (command lines) is printed unwrapped, for copying
            console.print(cell(t), soft_wrap=isinstance(t, Text))
        if note:
            console.print(safe(stack_line(note)), markup=False)
        if trust:
            console.print(safe(interval_line(trust, speedup=speedup_interval(view.data, trust),
                                             at_rate=served_at_rate(view.data))), markup=False)


def commented(renderable: Any, width: int) -> Text:
    """``renderable`` (a table, a line of prose) as shell comments: rendered plain two columns narrower than
    ``width``, each line behind ``# ``, so a line that wraps stays a comment and a saved script never runs prose."""
    buf = io.StringIO()
    plain_console = Console(file=buf, width=max(width - 2, 20), color_system=None, no_color=True, highlight=False,
                            emoji=False, markup=False)
    plain_console.print(renderable)
    return Text("\n".join(f"# {line}".rstrip() for line in buf.getvalue().rstrip("\n").split("\n")))


def interval_record(trust: dict[str, Any]) -> dict[str, Any]:
    """The JSON ``intervals`` record: the level, the device whose intervals the command's headline figures take
    (its first GPU, else its first device), per kind its factors on a time, the group of held-out errors that gave
    them and how many, and the same for every device of the command (``by_device``: a figure of a record naming
    its own device takes that device's)."""
    def kinds(ivs: dict[str, Any]) -> dict[str, Any]:
        return {k: {"low_factor": iv.low_factor, "high_factor": iv.high_factor, "group": iv.group, "n": iv.n,
                    "fitted": iv.fitted} for k, iv in ivs.items()}
    return {"level": trust["level"], "device": trust["device"], "kinds": kinds(trust["intervals"]),
            "by_device": {d: kinds(trust["by_device"](d)) for d in trust.get("devices", [])},
            "basis": "split-conformal quantiles of errors on publications the fit never saw, every publication "
                     "weighing alike (roofline.specs.intervals); load_ttft and load_tpot: MLPerf runs priced at their "
                     "measured request rates, whose capacity the fit did see (docs/load.md)"}


def reports(data: Any, name: str, depth: int = 3) -> bool:
    """Whether a view's data carries a figure ``name`` (in its record, or in the first row of a nested list)."""
    if isinstance(data, Columns):
        return name in data.columns
    if isinstance(data, dict):
        return name in data or (depth > 0 and any(reports(v, name, depth - 1) for v in data.values()
                                                  if isinstance(v, (dict, list, Columns))))
    return bool(isinstance(data, list) and data and depth > 0 and reports(data[0], name, depth - 1))


def speedup_interval(data: Any, trust: dict[str, Any]) -> Interval | None:
    """The interval a view's speedups take (None where it shows none): its stages' devices' widest where the view
    names them (a draft on another device kind: :func:`stage_intervals`), as its JSON's ``speedup_low`` and
    ``speedup_high`` take it, else the headline device's."""
    if not reports(data, "speedup"):
        return None
    stages = data.get("stage_devices") if isinstance(data, dict) else None
    ivs = stage_intervals(stages, trust["intervals"], trust["by_device"]) if isinstance(stages, dict) else trust[
        "intervals"]
    return ivs.get("speedup")


def interval_line(trust: dict[str, Any], *, speedup: Interval | None = None, at_rate: bool = False) -> str:
    """The line under the tables giving the range of every figure: how far a measurement may fall from it (with
    ``speedup``, the interval a view's speedups take: measured over predicted; with ``at_rate``, a view of
    percentiles at a request rate, the ranges of times at a rate too)."""
    ivs = {k: iv for k, iv in trust["intervals"].items() if k in TIME_KINDS}   # a speedup's range is said apart

    def span(kind: str) -> str:
        return f"x{ivs[kind].low_factor:.2f}..x{ivs[kind].high_factor:.2f}"
    fitted = all(iv.fitted for iv in ivs.values())
    text = (f"{trust['level']:.0%} range on {trust['device']} (measured / predicted time; errors on publications "
            f"the fit never saw): per-token time {span('decode')}, TTFT {span('ttft')}, throughput time "
            f"{span('throughput')}, energy {span('energy')}")
    if speedup is not None:   # a rate: measured / predicted is the inverse of the time factors
        text += f"; speedup (measured / predicted) x{1 / speedup.high_factor:.2f}..x{1 / speedup.low_factor:.2f}"
        text += "" if speedup.fitted else " (NO fitted rows)"
    if at_rate:   # the queue's figures at a rate: MLPerf runs priced at their measured rates (docs/load.md)
        load = trust["intervals"]
        text += (f"; at a request rate, TTFT x{load['load_ttft'].low_factor:.2f}..x{load['load_ttft'].high_factor:.2f}"
                 f" and per-token time x{load['load_tpot'].low_factor:.2f}..x{load['load_tpot'].high_factor:.2f}")
    text += "." if fitted else "; NO fitted rows for this platform and stack: a wide range."
    aside = [k for k, iv in ivs.items() if iv.low_factor > 1 or iv.high_factor < 1]
    if aside:   # an interval that leaves the prediction out: the model has leaned one way on this platform
        text += (f" The model has run {'fast' if ivs[aside[0]].low_factor > 1 else 'slow'} here: the "
                 f"{aside[0].replace('decode', 'per-token time')} range leaves the prediction out.")
    others = []
    for d in (d for d in trust.get("devices", []) if d != trust["device"]):   # every device's own, not only the first's
        own = trust["by_device"](d)
        others.append(f"{d} x{own['decode'].low_factor:.2f}..x{own['decode'].high_factor:.2f}"
                      + ("" if all(own[k].fitted for k in TIME_KINDS) else " (NO fitted rows)"))
    return text + (f" Per-token time on {', '.join(others)}; a figure from several kinds takes the widest; the "
                   f"rest: the JSON's intervals.by_device." if others else "")


#: How the line under the tables words each setting a serving stack fixes (STACK_SETTINGS).
_SETTING_WORDS: dict[str, Any] = {
    "collective": lambda v: f"{v} all-reduce" if v != "auto" else "one-shot or ring all-reduce by message size",
    "kv_admission": lambda v: "KV reserved for the whole output at admission" if v == "reserve" else "paged KV",
    "chunked_prefill": lambda v: "chunked prompts" if v else "whole prompts",
    "windowed_kv": lambda v: "window-only KV on sliding-window layers" if v else "full-context KV on every layer",
    "head_format": lambda v: f"a {v} LM head",
    "expert_recipe": lambda v: f"MXFP4 experts run as {v} on GPUs with FP4 units",
    "weight_only_kernel": lambda v: f"{v} for {WEIGHT_ONLY_KERNELS[v].weights} weights",
}


def stack_line(note: dict[str, Any]) -> str:
    """The line under the tables saying which fitted parameter set the GPUs ran with, and what it leaves open."""
    if note["name"] == "family profile":
        return (f"No GPU here: each device runs its family's execution profile ({', '.join(note['families'])}); "
                "a serving stack's fitted set applies to GPUs only.")
    build, used = note["build"], note["parameters"]
    if note["name"] == "pooled":
        text = ("GPUs run the calibration's pooled parameter set (fitted to every stack's rows at once; it matches "
                "no one stack)")
    else:
        text = (f"GPUs run {build} with the calibration's {used} parameter set" if used == build else
                f"GPUs run {build}; the calibration fits no set for it, so its nearest, {used}, answers")
    for other in note.get("other_builds", []):
        text += f"; {other['build']} with its {other['parameters']} set"
    if note["fitted_on_other_platform"]:
        text += " (fitted on NVIDIA GPUs)"
    if note["platform_parameters_from"]:
        text += (", with the efficiencies and kernel gap of " + " and ".join(note["platform_parameters_from"]) +
                 " (the same ISA's kernel libraries and launch path; their mean where several)")
    loose = [f"{k} = {x['value']:.3g}" + (f", at its {x['at_bound']} bound" if x["at_bound"] else "")
             for k, x in note["not_identified"].items()]
    if loose:
        text += f". Its rows do not pin down {'; '.join(loose)}: uncertain"
    pinned = [f"{k} = {x['value']:.3g} ({x['bound']})" for k, x in note.get("at_bound", {}).items()]
    if pinned:
        text += f". At a bound of its physical range (its rows would go further): {'; '.join(pinned)}"
    settings = [_SETTING_WORDS[k](v) for k, v in note.get("settings", {}).items() if k in _SETTING_WORDS]
    if settings:
        listed = settings[0] if len(settings) == 1 else f"{', '.join(settings[:-1])} and {settings[-1]}"
        text += f". The stack runs {listed}"
    return text + "."


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
        show(out, stdout_console(piped_width=160))   # the examples' tables are up to ~150 columns wide
