"""MLPerf Server and Interactive runs at the rate they were measured at: where the served-load error comes from.

    python scripts/served_at_rate.py [--write]

``roofline validate`` predicts each MLPerf run as the largest Poisson rate whose p99 TTFT and TPOT meet the
run's limits, and its mean TTFT and TPOT at that rate. An error there mixes two things: the engine's capacity
(the same submission's Offline throughput says how far off that is) and the queue's shape (how TTFT and TPOT grow
with the load). This script separates them: for every run with a measured throughput it prices the run's
deployment (what validate builds) at the *measured* rate (output tokens/s over the mean output length) and
compares the model's utilisation, mean and p99 TTFT and TPOT there with the measured means and the p99s the
rows' notes carry (``p99=... ms``, copied from the run's LoadGen summary). ``--write`` puts the table into
docs/load.md between the ``at-rate-table`` markers.

It reads the deployment by wrapping :func:`roofline.serving.load.max_rate` where validate calls it (a
diagnostic: the library has no other use for the deployment of a row).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

import roofline.evidence.validate as validate  # noqa: E402
from roofline.serving.load import best_rate, deployment  # noqa: E402
from roofline.specs.params import shipped_profile  # noqa: E402

DOC = ROOT / "docs" / "load.md"
MARKERS = ("<!-- at-rate-table -->", "<!-- /at-rate-table -->")
#: a utilisation at which the model's queue has no steady state to speak of (its latencies run away): such runs are
#: listed, and left out of the medians
SATURATED = 0.99
RUN_FIELDS = ("id", "metric", "value", "notes", "grade")   # what differs between the rows of one run


def _p99_ms(row: Any) -> float | None:
    m = re.search(r"p99=([\d.]+) ms", row.get("notes") or "")
    return float(m.group(1)) if m else None


def _runs(rows: list[Any]) -> list[dict[str, Any]]:
    """The SLO-bound rows grouped into runs (one submission and scenario: its throughput, TTFT and TPOT rows)."""
    runs: dict[tuple, dict[str, Any]] = {}
    for r in rows:
        if r.get("batch") == "slo":
            key = (r.get("source"), tuple(sorted((k, v) for k, v in r.fields.items() if k not in RUN_FIELDS)))
            runs.setdefault(key, {})[r.get("metric")] = r
    return [run for run in runs.values() if "output_tokens_per_s_total" in run]


def _priced(row: Any, params: Any) -> tuple[Any, float, Any]:
    """(the deployment validate chooses for ``row``, the rate it predicts, the result there): of the layouts it
    tries (a submission that does not state its tensor parallelism), the one with the highest throughput."""
    seen: list[tuple[float, Any, float, Any]] = []

    def capture(model: Any, placement: Any, workload: Any, limits: Any, **kw: Any) -> Any:
        d = deployment(model, placement, workload, **kw)
        rate, result = best_rate(d, limits)
        seen.append((float(result.output_tokens_per_s[0]) if rate > 0 else 0.0, d, rate, result))
        return rate, result
    inner, validate.max_rate = validate.max_rate, capture
    validate._SLO_RATES.clear()
    try:
        validate.predict_row(row, params)
    finally:
        validate.max_rate = inner
    if not seen:
        raise SystemExit(f"{row.id}: validate priced no deployment for it")
    _, d, rate, result = max(seen, key=lambda s: s[0])
    return d, rate, result


def _ratio(model: float, measured: float | None, saturated: bool) -> str:
    return f"{model / measured:.2f}" if measured and model == model and not saturated else "-"


def priced_runs() -> list[dict[str, Any]]:
    """Every run with a measured throughput, priced at its measured rate: its throughput row, the model's largest
    rate over the measured one, its utilisation there, and the model's and the measured mean and p99 TTFT and TPOT
    (ms; None where the run publishes none), ``saturated`` where the model's utilisation reaches
    :data:`SATURATED`."""
    prof = shipped_profile()
    out = []
    for run in _runs(validate.read_rows(validate.shipped_data())):
        tok = run["output_tokens_per_s_total"]
        d, rate, best = _priced(tok, validate.row_params(prof, tok))
        at = d.at([rate * float(tok.get("value")) / float(best.output_tokens_per_s[0])])
        tt, it = run.get("ttft_ms"), run.get("itl_ms")
        out.append({"row": tok, "rows": run, "largest": float(best.output_tokens_per_s[0]) / float(tok.get("value")),
                    "util": float(at.utilisation[0]), "saturated": float(at.utilisation[0]) >= SATURATED,
                    "model": {"mean TTFT": float(at.ttft_mean_s[0]) * 1e3, "p99 TTFT": float(at.ttft_p99_s[0]) * 1e3,
                              "mean TPOT": float(at.tpot_mean_s[0]) * 1e3, "p99 TPOT": float(at.tpot_p99_s[0]) * 1e3},
                    "measured": {"mean TTFT": float(tt.get("value")) if tt else None,
                                 "p99 TTFT": _p99_ms(tt) if tt else None,
                                 "mean TPOT": float(it.get("value")) if it else None,
                                 "p99 TPOT": _p99_ms(it) if it else None}})
    return out


def table() -> tuple[list[str], dict[str, list[float]]]:
    lines = ["| run | device | model | limits p99 TTFT / TPOT ms | largest rate | util | mean TTFT | p99 TTFT | "
             "mean TPOT | p99 TPOT |", "|---|---|---|---|---|---|---|---|---|---|"]
    ratios: dict[str, list[float]] = {"mean TTFT": [], "p99 TTFT": [], "mean TPOT": [], "p99 TPOT": []}
    for p in priced_runs():
        tok, model, measured = p["row"], p["model"], p["measured"]
        for k in ratios:
            got = measured[k]
            if got and model[k] == model[k] and not p["saturated"]:
                ratios[k].append(model[k] / got)
        cells = " | ".join(_ratio(model[k], measured[k], p["saturated"]) for k in ratios)
        lines.append(f"| {tok.id} | {tok.get('hardware')} | {tok.get('model')} | {tok.get('p99_ttft_ms')} / "
                     f"{tok.get('p99_tpot_ms')} | {p['largest']:.2f} "
                     f"| {p['util']:.2f}{' (at capacity)' if p['saturated'] else ''} | {cells} |")
    return lines, ratios


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="write the table into docs/load.md")
    args = ap.parse_args()
    lines, ratios = table()
    summary = ["", "Model / measured at the measured rate, over the runs the model holds below a utilisation of "
        f"{SATURATED}: " + "; ".join(
        f"{k} median {statistics.median(v):.2f} ({len(v)} runs)" for k, v in ratios.items() if v) + "."]
    text = "\n".join(lines + summary)
    print(text)
    if args.write:
        doc = DOC.read_text()
        head, rest = doc.split(MARKERS[0], 1)
        _, tail = rest.split(MARKERS[1], 1)
        DOC.write_text(f"{head}{MARKERS[0]}\n{text}\n{MARKERS[1]}{tail}")


if __name__ == "__main__":
    main()
