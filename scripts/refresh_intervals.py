"""Write roofline/profiles/intervals.json: the held-out errors the prediction intervals are made from.

    python scripts/refresh_intervals.py

Reads, all from files the project ships (run after a refit, `scripts/refresh_docs.py --heldout` and
`scripts/fit_families.py`):
* docs/heldout_errors.json: the GPU time rows, each predicted by a calibration that never saw its publication;
* docs/family_fits.json: the Gaudi, Trainium and TPU rows held out one publication at a time (fitted), and the
  same rows under the family files' estimates before any fit (the evidence for a family with no fitted rows);
* the dataflow families' rows their per-layer latency fit did not use (`roofline calibrate --family F`);
* the GPU energy-per-token rows (the power model fits the power rows, never these);
* the speedup rows (a speculative setup over the same setup without speculation: a ratio of two predictions that
  no fit uses, so the shipped profile's errors on them are out of sample as they stand), and the speculative kept
  set's (roofline/validation/kept_spec.csv, marked ``kept``);
* the kept set (roofline/validation/kept.csv): publications no fit has used, predicted by the shipped profile as a
  new user would (marked ``kept``; their group counts as fitted where the held-out evidence has fitted rows of the
  same platform and stack, as a user's prediction there would);
* the MLPerf Server and Interactive runs priced at the rate they were measured at (scripts/served_at_rate.py):
  their p99 TTFT and p99 TPOT against the model's at that rate (kinds ``load_ttft``, ``load_tpot``; no fit uses
  them, but the shipped profile that prices them was fitted on rows including the same submissions' Offline runs:
  not held out by publication), each submitter's results of one round counted as one publication; a run the model
  cannot carry at its measured rate (utilisation 0.99 or more) gives none.
Each becomes a score log(measured / predicted) in the time orientation (roofline.specs.intervals).
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

from roofline.errors import RooflineError
from roofline.evidence.calibrate import fit_layer_overhead, fitted_row
from roofline.evidence.validate import predict_row, read_rows, row_params, shipped_data
from roofline.serving.trust import platform
from roofline.specs.intervals import METRIC_KINDS, IntervalTable, Score, interval_file
from roofline.specs.params import family_chain, shipped_profile, stack_family
from roofline.specs.resolve import resolve_device

ROOT = Path(__file__).resolve().parent.parent
LAYER_FIT_FAMILIES = ("groq", "cerebras")


def score(row, error: float, *, fitted: bool) -> dict | None:
    """A held-out error (predicted - measured) / measured of ``row`` as a score entry; None for a metric no
    interval kind covers."""
    if row.get("metric") not in METRIC_KINDS or not math.isfinite(error) or error <= -1:
        return None
    kind, rate = METRIC_KINDS[row.get("metric")]
    dev = resolve_device(row.get("hardware"))
    stack = family_chain(stack_family(row.get("stack")))[-1] if dev.family == "gpu" else "*"
    s = math.log1p(error) if rate else -math.log1p(error)   # log(measured time / predicted time)
    return {"id": row.id, "source": row.get("source"), "platform": platform(dev), "stack": stack, "kind": kind,
            "fitted": fitted, "score": round(s, 6)}


def kept_scores(held_out: IntervalTable) -> list[dict]:
    """The kept set's errors under the shipped profile (as `roofline validate --data kept.csv` gives them), each
    marked ``kept`` and counted as fitted where ``held_out`` has fitted scores of its platform and stack."""
    out = []
    for r in read_rows(ROOT / "roofline" / "validation" / "kept.csv"):
        try:
            got = predict_row(r, row_params(shipped_profile(), r)) / float(r.get("value")) - 1
        except RooflineError:   # a row the model cannot express (validate lists it as skipped)
            continue
        e = score(r, got, fitted=True)
        if e is not None:
            e.update(fitted=held_out.is_fitted(e["platform"], e["stack"]), kept=True)
            out.append(e)
    return out


def speedup_scores(rows, *, kept: bool) -> list[dict]:
    """The speedup rows' errors under the shipped profile (never fitted: validate predicts them the same way);
    a row the model cannot express (no published acceptance) gives none."""
    out = []
    for r in (r for r in rows if r.get("metric") in ("speedup", "decode_speedup")):
        try:
            got = predict_row(r, row_params(shipped_profile(), r)) / float(r.get("value")) - 1
        except RooflineError:
            continue
        e = score(r, got, fitted=True)
        if e is not None:
            out.append({**e, "kept": True} if kept else e)
    return out


def load_scores(held_out: IntervalTable) -> list[dict]:
    """The served-load runs' errors at their measured rate (module docstring): one ``load_ttft`` and one
    ``load_tpot`` score per run that publishes the p99, fitted where ``held_out`` has fitted times of its platform
    and stack."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from served_at_rate import priced_runs
    out = []
    for run in (r for r in priced_runs() if not r["saturated"]):
        row = run["row"]
        dev = resolve_device(row.get("hardware"))
        stack = family_chain(stack_family(row.get("stack")))[-1] if dev.family == "gpu" else "*"
        where = re.match(r"^(.*?/closed/[^/]+)/", row.get("source") or "")   # one submitter's results of one round
        for kind, name in (("load_ttft", "p99 TTFT"), ("load_tpot", "p99 TPOT")):
            measured, model = run["measured"][name], run["model"][name]
            if measured and model > 0 and math.isfinite(model):
                out.append({"id": row.id, "source": where.group(1) if where else row.get("source"),
                            "platform": platform(dev), "stack": stack, "kind": kind,
                            "fitted": held_out.is_fitted(platform(dev), stack), "score": round(math.log(measured / model), 6)})
    return out


def main() -> int:
    rows = {r.id: r for r in read_rows(shipped_data())}
    entries = []
    gpu = json.loads((ROOT / "docs" / "heldout_errors.json").read_text())   # the rows the calibration fits: not a
    # grade C row's assumed setup, nor an early build's (calibrate.EARLY_BUILDS), which no user runs today
    entries += [score(rows[k], e, fitted=True) for k, e in gpu.items() if e is not None and k in rows
                and fitted_row(rows[k])]
    fams = json.loads((ROOT / "docs" / "family_fits.json").read_text())
    for fit in fams.values():
        entries += [score(rows[k], e, fitted=True) for k, e in fit["held_out_errors"].items()]
        entries += [score(rows[k], e, fitted=False) for k, e in fit["blind_errors"].items()]
    for family in LAYER_FIT_FAMILIES:
        fit = fit_layer_overhead(list(rows.values()), family)
        entries += [score(rows[k], e, fitted=True) for k, e in fit.held_out_errors.items()]
    for r in (r for r in rows.values() if r.get("metric") == "energy_per_token_j"):
        try:   # predicted directly: validate() itself reads the table this writes
            entries.append(score(r, predict_row(r, row_params(shipped_profile(), r)) / float(r.get("value")) - 1,
                                 fitted=True))
        except RooflineError:
            continue
    entries += speedup_scores(rows.values(), kept=False)
    entries += speedup_scores(read_rows(ROOT / "roofline" / "validation" / "kept_spec.csv"), kept=True)
    entries = [e for e in entries if e is not None]
    held_out = IntervalTable(scores=tuple(Score(**e) for e in entries))
    entries += kept_scores(held_out) + load_scores(held_out)
    head = json.dumps({"written_by": "scripts/refresh_intervals.py",
                       "score": "log(measured / predicted), time orientation"})[:-1]
    body = ",\n".join(json.dumps(e, sort_keys=True) for e in entries)   # one score a line: diffs stay readable
    interval_file().write_text(f'{head}, "scores": [\n{body}\n]}}\n')
    print(f"{len(entries)} scores -> {interval_file()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
