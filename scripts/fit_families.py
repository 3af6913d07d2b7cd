"""Refit the Gaudi, Trainium and TPU execution profiles on their published rows and write them where they ship.

    python scripts/fit_families.py [--family gaudi] [--dry-run]

For each family: `roofline.evidence.family_fit.fit_family` (six fields, robust least squares within physical
bounds, plus one refit per publication left out), then
* the fitted values into ``hardware_specs/execution/<family>.toml`` (each with ``fitted = "..."``: the rows, the
  publications, the held-out error and the estimate it replaced);
* every row's in-sample, held-out and blind (estimated-profile) error into ``docs/family_fits.json``, which
  ``scripts/refresh_intervals.py`` turns into the shipped intervals.

Minutes on two cores (Trainium's 13 publications take the longest). Run it after adding rows of these families.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from roofline.evidence.family_fit import PROFILE_FIT_FAMILIES, FamilyFit, fit_family
from roofline.evidence.validate import read_rows, shipped_data

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "family_fits.json"
#: The family file's key and how its value is written, per fitted field.
KEYS = {"memory_bandwidth_fraction": ("memory_bandwidth_fraction", lambda v: f"{v:.3f}"),
        "compute_fraction": ("compute_fraction", lambda v: f"{v:.3f}"),
        "step_overhead_s": ("step_overhead", lambda v: f'"{v * 1e6:.1f} us"'),
        "layer_overhead_s": ("layer_overhead", lambda v: f'"{v * 1e6:.2f} us"'),
        "request_overhead_s": ("request_overhead", lambda v: f'"{v * 1e3:.3f} ms"'),
        "prefill_compute_scale": ("prefill_compute_scale", lambda v: f"{v:.3f}")}


def write_profile(fit: FamilyFit) -> None:
    path = ROOT / "hardware_specs" / "execution" / f"{fit.family}.toml"
    text = path.read_text()
    for field, (key, fmt) in KEYS.items():
        note = (f"roofline calibrate --family {fit.family} (scripts/fit_families.py): {fit.rows} grade A/B time rows "
                f"of {fit.sources} publications; held out by publication {fit.held_out_median_abs_error:.0%} "
                f"(median), in-sample {fit.median_abs_error:.0%}; the estimate before any fit was "
                f"{fit.estimates[field]:.4g}")
        line = f'{key} = {{ value = {fmt(fit.values[field])}, fitted = "{note}" }}'
        text, n = re.subn(rf"^{key} = \{{.*\}}$", line, text, flags=re.MULTILINE)
        if n != 1:
            raise SystemExit(f"{path}: expected one line for {key}, found {n}")
    path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", choices=PROFILE_FIT_FAMILIES, action="append")
    ap.add_argument("--dry-run", action="store_true", help="print the fits, write nothing")
    args = ap.parse_args(argv)
    rows = read_rows(shipped_data())
    record = json.loads(OUT.read_text()) if OUT.exists() else {}
    for family in args.family or PROFILE_FIT_FAMILIES:
        fit = fit_family(rows, family)
        print(f"{family}: {fit.rows} rows, {fit.sources} publications; in-sample {fit.median_abs_error:.1%}, held out "
              f"{fit.held_out_median_abs_error:.1%}; {', '.join(f'{k} {v:.4g}' for k, v in fit.values.items())}")
        if not args.dry_run:
            write_profile(fit)
            record[family] = fit.to_dict()
            OUT.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
