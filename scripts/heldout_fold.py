"""Try a change on one held-out fold: the rows of fold K of `roofline calibrate --folds N` predicted by a fit that
never saw their publications, against what docs/heldout_errors.json (the shipped run) says of the same rows.

    python scripts/heldout_fold.py --fold 5 [--folds 5] [--jobs 2] [--data F.csv] [--json]

One fit instead of the full run's N + 2 (14 minutes on a slow 2-core machine for fold 5 of 5 with --jobs 2,
against an estimated hour and a half for the whole run, whose main fit took 21), so a change to the physics can be
judged on the fold it is for before the whole run (`scripts/refresh_docs.py --heldout`) is spent on it. The fold's
numbers equal the full run's for its rows.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np

from roofline.errors import RooflineError
from roofline.evidence.calibrate import heldout_fold
from roofline.evidence.validate import read_rows, shipped_data
from roofline.evidence.workers import usable_cores

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "docs" / "heldout_errors.json"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fold", type=int, required=True, help="which fold, 1..N (the largest publications go first)")
    ap.add_argument("--folds", type=int, default=5, help="N, as `roofline calibrate --folds N` (default 5)")
    ap.add_argument("--data", default=None, help="measurements (default: the shipped copy)")
    ap.add_argument("--jobs", type=int, default=usable_cores(), help="processes to share the fit's rows among")
    ap.add_argument("--json", action="store_true", help="print every row's error as JSON")
    args = ap.parse_args(argv)
    try:
        rows = read_rows(args.data or shipped_data())
        errors = heldout_fold(rows, args.fold, args.folds, jobs=args.jobs)
    except RooflineError as e:   # one line, as the roofline command says it
        print(f"error: {e}", file=sys.stderr)
        return 2
    by_id = {r.id: r for r in rows}
    before = json.loads(SHIPPED.read_text()) if args.data is None else {}
    out = {"fold": args.fold, "folds": args.folds, "rows": len(errors),
           "median_abs_error": float(np.median(np.abs(list(errors.values())))),
           "beyond_40_percent": sum(abs(e) > 0.4 for e in errors.values()),
           "shipped_median_abs_error": (float(np.median([abs(before[k]) for k in errors if k in before]))
                                        if before else None),
           "sources": dict(Counter(by_id[k].get("source") for k in errors).most_common())}
    if args.json:
        print(json.dumps({**out, "errors": errors}, indent=1))
        return 0
    print(f"fold {args.fold} of {args.folds}: {out['rows']} rows from {len(out['sources'])} publications")
    print(f"held-out median |error| {out['median_abs_error']:.2%}, {out['beyond_40_percent']} rows beyond 40%"
          + (f" (the shipped run: {out['shipped_median_abs_error']:.2%})" if before else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
