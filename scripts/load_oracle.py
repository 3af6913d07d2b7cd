"""The served-load closed forms against the discrete-event oracle (tests/queue_oracle.py) at utilisation 0.3-0.9.

    python scripts/load_oracle.py [--jobs 2] [--runs 8] [--requests 4000000] [--case SUBSTRING] [--table-only]

Near capacity the simulation's own percentiles are uncertain: the slots fill, or the prompts' queue builds, in rare
episodes that last many steps, and one run of a million requests moves its p99 TTFT by +-14% with its seed. So each
case is run ``--runs`` times independently at each utilisation (of the engine's capacity, as
``roofline.serving.load`` states it), ``--requests x utilisation`` requests a run (the cost per run about equal: a
lighter load takes more steps per request), the samples pooled in fine log-spaced bins. It writes
docs/load_oracle.json (the pooled percentiles, every run's own, the spread between runs) and the table of relative
errors of the closed forms into docs/load.md (between the ``oracle-table`` markers); ``--table-only`` rebuilds
the table from the JSON (the closed forms take milliseconds). The defaults take about 40 minutes on two cores
(16 runs at 0.9, 8 below).
"""

from __future__ import annotations

import argparse
import json
import sys
from multiprocessing import Pool
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import queue_oracle as oracle  # noqa: E402

OUT = ROOT / "docs" / "load_oracle.json"
DOC = ROOT / "docs" / "load.md"
UTILISATIONS = (0.3, 0.6, 0.9)
PERCENTILES = (50, 90, 99)
MARKERS = ("<!-- oracle-table -->", "<!-- /oracle-table -->")


def _one(task: tuple[str, float, int, int]) -> tuple[str, float, dict]:
    name, u, n, seed = task
    engine, lengths, cv2 = oracle.cases()[name]
    rate = u * engine.capacity_per_s(lengths)
    s = oracle.run(engine, lengths, rate, cv2=cv2, n=n, seed=seed)
    own = {f"{k}_p{p}": float(np.percentile(getattr(s, f"{k}_s"), p)) for k in ("ttft", "tpot", "e2e") for p in PERCENTILES}
    own |= {f"itl_p{p}": s.itl_quantile(p / 100) for p in PERCENTILES}
    return name, u, {"hist": oracle.histograms(s), "own": own, "batch": s.batch_mean}


def simulate(names: list[str], utils: tuple[float, ...], runs: int, requests: int, jobs: int) -> dict:
    # near capacity a run's own spread is largest (the slots fill in rare, long episodes): twice the runs there
    tasks = [(name, u, int(requests * u), seed) for name in names for u in utils
             for seed in range(runs * (2 if u >= 0.9 else 1))]
    acc: dict[tuple[str, float], list[dict]] = {}
    with Pool(jobs) as pool:
        for name, u, r in pool.imap_unordered(_one, tasks):
            acc.setdefault((name, u), []).append(r)
            print(f"{name} at {u}: {len(acc[name, u])} runs done", file=sys.stderr, flush=True)
    out: dict = {}
    for (name, u), rs in acc.items():
        engine, lengths, cv2 = oracle.cases()[name]
        hist = {k: sum(r["hist"][k] for r in rs) for k in oracle.METRICS}
        pooled = {f"{k}_p{p}": oracle.quantile(hist[k], p / 100) for k in oracle.METRICS for p in PERCENTILES}
        band = {f"itl_p{p}": [oracle.quantile(hist["itl"], max(p / 100 + oracle.ITL_BAND[0], 0.0)),
                              oracle.quantile(hist["itl"], min(p / 100 + oracle.ITL_BAND[1], 0.999))] for p in PERCENTILES}
        own = {k: [r["own"][k] for r in rs] for k in pooled}
        spread = {k: float(np.std(v, ddof=1) / np.mean(v)) for k, v in own.items()}
        out.setdefault(name, {})[str(u)] = {
            "utilisation": u, "rate_per_s": u * engine.capacity_per_s(lengths), "arrival_cv2": cv2,
            "runs": len(rs), "requests_per_run": int(requests * u), "pooled": pooled, "itl_band": band,
            "run_spread": spread, "batch_mean": float(np.mean([r["batch"] for r in rs])), "each_run": own}
    return out


def table(data: dict) -> str:
    def pct(v: float) -> str:
        return f"**{v:+.0%}**" if abs(v) > 0.10 else f"{v:+.0%}"
    head = ("| workload | util | TTFT p50 / p90 / p99 | TPOT p50 / p90 / p99 | ITL p50 / p90 / p99 | E2E p50 / p90 / p99 "
            "| oracle's p99 TTFT / TPOT: standard error (one run's spread) | runs x requests |")
    lines = [head, "|" + "---|" * 8]
    cases = oracle.cases()
    for name, points in data.items():
        engine, lengths, _ = cases[name]
        for i, (u, point) in enumerate(sorted(points.items(), key=lambda kv: float(kv[0]))):
            e = oracle.model_errors(point, engine, lengths)
            cells = [" / ".join(pct(e[f"{k}_p{p}"]) for p in PERCENTILES) for k in ("ttft", "tpot", "itl", "e2e")]
            k = point["runs"]
            se = " / ".join(f"{point['run_spread'][m] / np.sqrt(k):.1%} ({point['run_spread'][m]:.1%})"
                            for m in ("ttft_p99", "tpot_p99"))
            lines.append(f"| {name if i == 0 else ''} | {float(u):.1f} | " + " | ".join(cells)
                         + f" | {se} | {k} x {point['requests_per_run']:,} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--requests", type=int, default=4_000_000, help="requests a run at utilisation 1 (times u)")
    ap.add_argument("--case", default="", help="only the cases whose name holds this")
    ap.add_argument("--utilisations", default=",".join(map(str, UTILISATIONS)))
    ap.add_argument("--table-only", action="store_true")
    ap.add_argument("--out", type=Path, default=OUT, help="the JSON (elsewhere: docs/load.md is left alone)")
    args = ap.parse_args(argv)
    out = args.out
    data = json.loads(out.read_text()) if out.exists() else {}
    if not args.table_only:
        names = [n for n in oracle.cases() if args.case in n]
        utils = tuple(float(u) for u in args.utilisations.split(","))
        for name, points in simulate(names, utils, args.runs, args.requests, args.jobs).items():
            data.setdefault(name, {}).update(points)
        data = {n: data[n] for n in oracle.cases() if n in data}
        out.write_text(json.dumps(data, indent=1) + "\n")
    rendered = table(data)
    if out == OUT:
        text = DOC.read_text()
        a, b = text.index(MARKERS[0]) + len(MARKERS[0]), text.index(MARKERS[1])
        DOC.write_text(text[:a] + "\n" + rendered + "\n" + text[b:])
    print(rendered)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
