"""``roofline diagnose``, ``validate`` and ``calibrate``: measurements against predictions, fits."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from ..evidence.diagnose import Diagnosis
from ..evidence.validate import Validation
from ..specs.params import NOT_IN_PROFILE_FILES, EngineParams
from ..units import format_quantity
from .render_common import (
    View,
    house_table,
)


def _share(x: float) -> str:
    """A ratio as a percentage with three significant figures (0.36%, 47.4%, 112%)."""
    return f"{x * 100:.3g}%"


def diagnosis_dict(d: Diagnosis) -> dict[str, Any]:
    m = d.measurement
    return {"model": d.model, "group": d.group, "batch": m.batch, "isl": m.input_tokens, "osl": m.output_tokens,
            "serving": m.serving, "measured_tpot_s": m.tpot_s, "measured_tokens_per_s_per_user": 1 / m.tpot_s,
            "predicted_tpot_s": d.predicted_tpot_s, "bytes_per_step_per_device": d.bytes_per_step,
            "flop_per_step_per_device": d.flop_per_step, "achieved_bytes_per_s": d.achieved_bytes_per_s,
            "achieved_flop_per_s": d.achieved_flop_per_s, "peak_bytes_per_s": d.peak_bytes_per_s,
            "peak_flop_per_s": d.peak_flop_per_s, "compute_class": d.compute_class, "mbu": d.mbu, "mfu": d.mfu,
            "measured_flop_per_s": d.measured_flop_per_s, "mfu_of_measured": d.mfu_of_measured,
            "modelled_compute_share": d.modelled_compute_share, "binding": d.binding, "advice": d.advice,
            "source": m.source}


def diagnosis_table(d: dict[str, Any]) -> Table:
    t = house_table(title=f"diagnosis: {d['model']} on {d['group']}, batch {d['batch']:.0f}, "
                    f"{d['isl']:.0f} in / {d['osl']:.0f} out ({d['serving']})",
              caption=d["advice"] + (f". What-if: {', '.join(d['overrides'])}" if d.get("overrides") else ""))
    peak = "what-if" if d.get("overrides") else "datasheet"
    t.add_column("quantity")
    t.add_column("value", justify="right")
    rows = [("measured time per output token", f"{d['measured_tpot_s'] * 1e3:.3g} ms"),
            ("measured tokens/s per user", f"{d['measured_tokens_per_s_per_user']:.4g}"),
            ("roofline prediction", f"{d['predicted_tpot_s'] * 1e3:.3g} ms"),
            ("bytes read per step, per device", format_quantity(d["bytes_per_step_per_device"], "bytes")),
            ("FLOP per step, per device", f"{d['flop_per_step_per_device']:.3g}"),
            ("achieved bandwidth", format_quantity(d["achieved_bytes_per_s"], "bytes_per_s")),
            ("achieved FLOP/s", format_quantity(d["achieved_flop_per_s"], "flop_per_s")),
            (f"peak bandwidth ({peak})", format_quantity(d["peak_bytes_per_s"], "bytes_per_s")),
            (f"peak {d['compute_class']} FLOP/s ({peak}, dense)", format_quantity(d["peak_flop_per_s"], "flop_per_s")),
            ("MBU (achieved / peak bandwidth)", _share(d["mbu"])),
            ("MFU (achieved / peak FLOP/s)", _share(d["mfu"])),
            *([(f"best measured {d['compute_class']} matmul (spec's compute.measured)",
                format_quantity(d["measured_flop_per_s"], "flop_per_s")),
               ("achieved / best measured FLOP/s", _share(d["mfu_of_measured"]))]
              if d.get("measured_flop_per_s") else []),
            ("modelled compute time / measured time", _share(d["modelled_compute_share"])),
            ("binding resource", d["binding"])]
    for k, v in rows:
        t.add_row(k, v)
    return t


def diagnosis_view(d: Diagnosis, overrides: Sequence[str] = ()) -> View:
    data = {**diagnosis_dict(d), "overrides": list(overrides)}
    return View(tables=[diagnosis_table(data)], data=data, rows=[data])


#: Rows `roofline validate` lists in the terminal unless told (--rows): those with the largest errors.
VALIDATE_ROWS_SHOWN = 25


def _value(v: float) -> str:
    """A measured or predicted value with four significant figures and thousands separators, never an exponent
    (18,890 / 245.3 / 0.6802)."""
    if not math.isfinite(v):
        return "—"
    digits = max(0, 3 - int(math.floor(math.log10(abs(v))))) if v else 0
    return f"{v:,.{digits}f}"


def validation_table(v: Validation, path: str, shown: int | None = VALIDATE_ROWS_SHOWN) -> Table:
    """The rows with the ``shown`` largest errors, largest first (every row in the file's order for None)."""
    o = v.summary["overall"]
    n = o.get("n", 0)
    cap = (f"Median |error| {o.get('median_abs_error', math.nan):.1%}, mean {o.get('mean_abs_error', math.nan):.1%} over "
           f"{n} row{'s' * (n != 1)}; by group in the next table"
           + (f", {len(v.skipped)} rows not predicted after it" if v.skipped else "") + ". " + GRADES_CAPTION)
    rows = v.rows if shown is None else sorted(v.rows, key=lambda r: -abs(r["error"]))[:shown]
    title = f"validation against {path}" + ("" if shown is None else (
        f": no row listed (--rows N lists the N of {len(v.rows)} with the largest errors)" if shown == 0 else
        f": the {shown} of {len(v.rows)} rows with the largest errors (--rows all lists every one)"
        if shown < len(v.rows) else ": largest errors first (--rows all: the file's order)"))
    t = house_table(title=title, caption=cap)
    for c in ("id", "metric", "device", "model", "g", "predicted", "measured", "error"):
        t.add_column(c, justify="right" if c in ("predicted", "measured", "error") else "left")
    for r in rows:
        t.add_row(r["id"], METRIC_SHORT.get(r["metric"], r["metric"]), r["hardware"], r["model"], r.get("grade", ""),
                  _value(r["predicted"]), _value(r["measured"]), f"{r['error']:+.0%}")
    return t


#: What a row's grade (the ``g`` column; the data README's ``grade``) says, and what calibration does with it.
GRADES_CAPTION = ("g = grade: A a first-party table with its setup, B one or two details inferred, C a setup partly "
                  "assumed, D second-hand; the GPU time calibration fits A and B rows and only predicts C and D.")


#: The validation summary's groupings as the terminal shows them.
SUMMARY_GROUPS = (("by_kind", "kind"), ("by_family", "family"), ("by_metric", "metric"), ("by_hardware", "device"),
                  ("by_stack_family", "stack"), ("by_stack_version", "stack version"))


def fit_errors(fit: Mapping[str, Any]) -> str:
    """A fit record's errors in a phrase: in-sample, leave-one-out, held out ("" when it has none)."""
    parts = [f"in-sample {fit['median_abs_error']:.1%}" if "median_abs_error" in fit else "",
             f"leave-one-out {fit['loo_approx_median_abs_error']:.1%} ({fit.get('loo_approx', 'approximate')})"
             if "loo_approx_median_abs_error" in fit else "",
             f"held out ({fit.get('heldout', '?')}) {fit['heldout_median_abs_error']:.1%}{_build_split(fit)}"
             if "heldout_median_abs_error" in fit else ""]
    return ", ".join(p for p in parts if p)


def _build_split(fit: Mapping[str, Any]) -> str:
    """The held-out error split by whether other publications measured the row's stack build ("" if no split)."""
    if "heldout_unseen_build_median_abs_error" not in fit or "heldout_seen_build_median_abs_error" not in fit:
        return ""
    return (f" ({fit['heldout_seen_build_median_abs_error']:.1%} on {fit['heldout_seen_build_rows']} rows of stack "
            f"builds other publications measured, {fit['heldout_unseen_build_median_abs_error']:.1%} on "
            f"{fit['heldout_unseen_build_rows']} of builds only their own publication measured)")


def calibration_record(fit: Mapping[str, Any], same_data: bool = True) -> str:
    """A profile's ``[fit]`` record in a sentence (empty for a profile without one); ``same_data`` False: the rows
    validated are another file's, which the sentence says (its figures are the fit's own data's, not theirs)."""
    if not fit.get("rows") or not fit_errors(fit):
        return ""
    other = "" if same_data else ", not on the file validated here"
    checked = int(fit.get("checked_rows") or 0)
    rows = (f"{fit['rows'] - checked} of the {fit['rows']} GPU time rows (the other {checked}, of a grade it does "
            "not fit, predicted)" if checked else f"{fit['rows']} GPU time rows")
    return f" The calibration was fitted on {rows} of {fit.get('data', '?')}{other}: {fit_errors(fit)}."


def repeat_record(repeats: Mapping[str, Any] | None) -> str:
    """The data's repeated measurements in a sentence (empty without a pair)."""
    if not repeats or not repeats.get("pairs"):
        return ""
    return (f" {repeats['pairs']} pairs of rows from different publications measured one configuration on one "
            f"stack family; they differ by {repeats['median_difference']:.1%} (median): a spread that adds, on "
            f"average, to the error of predicting a publication not fitted (--json: repeats).")


def validation_summary_table(v: Validation, fit: Mapping[str, Any] | None = None, same_data: bool = True,
                             repeats: Mapping[str, Any] | None = None) -> Table:
    """Median |error|, median signed error and row count per kind, family, metric, device and stack, the
    calibration's own record (``fit``: the profile's ``[fit]`` table; ``same_data``: whether it was fitted on the
    rows validated) and how far the data's repeated measurements agree (``repeats``: :func:`repeat_summary`)."""
    t = house_table(title="errors by group", caption="error = predicted / measured - 1: + is a throughput, power or "
                                                "energy above the measured one, or a TTFT / ITL longer than measured. "
                                                "in 80% = the rows whose shipped prediction's 80% interval (made from "
                                                "the other publications' held-out errors) holds the measurement: "
                                                "optimistic for fitted rows, which the README's table checks with "
                                                "their held-out predictions; cliff = rows whose prediction moves "
                                                ">20% for 5% less usable memory."
                                                + calibration_record(fit or {}, same_data) + repeat_record(repeats),
               caption_justify="left")
    for c in ("group", "value", "n", "median |error|", "median error", "in 80%", "cliff"):
        t.add_column(c, justify="left" if c in ("group", "value") else "right")
    for key, name in SUMMARY_GROUPS:
        for value, x in v.summary.get(key, {}).items():
            cov = x.get("interval_coverage")
            t.add_row(name, METRIC_SHORT.get(value, value), str(x["n"]), f"{x['median_abs_error']:.0%}",
                      f"{round(x['median_error'], 2) + 0.0:+.0%}" if "median_error" in x else "",
                      f"{cov:.0%}" if cov is not None else "—", str(x.get("memory_cliff_rows") or ""))
    return t


def skipped_table(skipped: Sequence[dict[str, str]]) -> Table:
    """Rows not predicted, one line per reason with its count and first ids (all ids are in --json)."""
    by_reason: dict[str, list[str]] = {}
    for x in skipped:
        by_reason.setdefault(x["reason"], []).append(x["id"])
    t = house_table(title=f"{len(skipped)} rows not predicted", caption="--json lists every row with its reason",
               caption_justify="left")
    for c in ("rows", "ids", "reason"):
        t.add_column(c, justify="right" if c == "rows" else "left")
    for reason, ids in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
        t.add_row(str(len(ids)), ", ".join(ids[:3]) + (", ..." if len(ids) > 3 else ""), Text(reason))
    return t


METRIC_SHORT = {"decode_tokens_per_s_per_user": "tok/s/user", "itl_ms": "ITL ms", "ttft_ms": "TTFT ms",
                "output_tokens_per_s_per_device": "tok/s/device", "output_tokens_per_s_total": "tok/s total",
                "power_w": "power W", "energy_per_token_j": "J/token"}


def params_dict(p: EngineParams) -> dict[str, float]:
    """The calibratable (numeric, per-stack) parameters of a profile."""
    return {k: v for k, v in attrs.asdict(p).items() if k not in NOT_IN_PROFILE_FILES}


def calibration_table(d: dict[str, Any]) -> Table:
    fams = list(d["families"])
    checked = len(d.get("checked_rows") or ())
    t = house_table(title=f"calibration on {len(d['rows'])} rows of {d['data']}"
                     + (f" ({checked} of grade C or D predicted, not fitted)" if checked else ""),
              caption=f"Median |error|: {fit_errors(d['record'])}"
                      + (f". Profile written to {d['profile']}." if d["profile"] else "."))
    t.add_column("parameter")
    for f in ("default", *fams):
        t.add_column(f, justify="right")
    notes = d["uncertainty"]

    def cell(value: float, note: str | None) -> str:
        if note and note.startswith("not identified"):
            return f"{value:.4g} (not identified)"
        return f"{value:.4g}" + (f" {note.replace('+/-', '±')}" if note else "")

    for k, v in d["default"].items():
        t.add_row(k, cell(v, notes.get("default", {}).get(k)),
                  *(cell(d["families"][f][k], notes.get(f, {}).get(k)) for f in fams))
    return t


def validation_view(v: Validation, path: str, fit: Mapping[str, Any] | None = None, same_data: bool = True,
                    repeats: Mapping[str, Any] | None = None, shown: int | None = VALIDATE_ROWS_SHOWN) -> View:
    """Rows (in the terminal the ``shown`` worst, None: all; JSON and CSV carry every one), errors by group and
    rows not predicted; ``fit``: the profile's calibration record; ``same_data``: whether the profile was fitted
    on these rows; ``repeats``: the data's repeated measurements (:func:`roofline.evidence.repeats.repeat_summary`)."""
    data = {"data": path, "rows": v.rows, "summary": v.summary, "skipped": v.skipped, "calibration": dict(fit or {}),
            "calibrated_on_this_data": same_data, "repeats": dict(repeats or {"pairs": 0})}
    tables: list[RenderableType] = [validation_table(v, path, shown), validation_summary_table(v, fit, same_data, repeats)]
    if v.skipped:
        tables.append(skipped_table(v.skipped))
    return View(tables=tables, data=data, rows=v.rows)


def calibration_view(d: dict[str, Any]) -> View:
    rows = [{"parameter": k, "default": v, **{f: d["families"][f][k] for f in d["families"]}}
            for k, v in d["default"].items()]
    return View(tables=[calibration_table(d)], data=d, rows=rows)


def layer_fit_view(fit: Any, path: str) -> View:
    """A family's fitted per-layer latencies, the rows they come from and the held-out errors."""
    t = house_table(title=f"{fit.family}: per-layer stage latency fitted on its smallest models ({path})",
              caption=f"layer_overhead = {fit.layer_overhead_s * 1e6:.1f} us"
                      + (f", moe_layer_overhead = {fit.moe_layer_overhead_s * 1e6:.1f} us"
                         if fit.moe_layer_overhead_s is not None else "")
                      + f" (write these into hardware_specs/execution/{fit.family}.toml). Held-out rows were not fitted.")
    for c in ("row", "role", "value"):
        t.add_column(c, justify="right" if c == "value" else "left")
    rows = []
    for rid, v in fit.fitted_rows.items():
        t.add_row(rid, "fitted: implied per-layer latency", f"{v * 1e6:.1f} us")
        rows.append({"id": rid, "role": "fitted", "implied_layer_s": v})
    for rid, e in fit.held_out_errors.items():
        t.add_row(rid, "held out: error", f"{e:+.0%}")
        rows.append({"id": rid, "role": "held out", "error": e})
    data = {"family": fit.family, "layer_overhead_s": fit.layer_overhead_s,
            "moe_layer_overhead_s": fit.moe_layer_overhead_s, "fitted_rows": fit.fitted_rows,
            "held_out_errors": fit.held_out_errors, "data": path}
    return View(tables=[t], data=data, rows=rows)


def family_fit_view(fit: Any, path: str) -> View:
    """A non-GPU family's fitted profile fields and its errors: blind (the estimates), in-sample, held out."""
    t = house_table(title=f"{fit.family}: execution profile fitted on {fit.rows} rows of {fit.sources} publications ({path})",
               caption=f"Held out: each publication predicted by a fit on the others. scripts/fit_families.py writes "
                       f"the values into hardware_specs/execution/{fit.family}.toml.")
    for c in ("field", "estimate", "fitted"):
        t.add_column(c, justify="left" if c == "field" else "right")
    for k, v in fit.values.items():
        t.add_row(k, f"{fit.estimates[k]:.4g}", f"{v:.4g}")
    blind = np.abs(list(fit.blind_errors.values()))
    t.add_row("median |error|: estimates / in-sample / held out",
              f"{np.median(blind):.0%}" if blind.size else "—",
              f"{fit.median_abs_error:.0%} / {fit.held_out_median_abs_error:.0%}")
    rows = [{"id": k, "in_sample_error": e, "held_out_error": fit.held_out_errors.get(k),
             "blind_error": fit.blind_errors.get(k)} for k, e in fit.in_sample_errors.items()]
    return View(tables=[t], data={**fit.to_dict(), "data": path}, rows=rows)


def power_fit_view(fit: Any, path: str) -> View:
    """The GPU family's fitted busy-power floor: power rows before and after, J-per-token rows as a check."""
    after = np.abs(list(fit.fitted_rows.values()))
    check = np.abs(list(fit.checked_rows.values()))
    t = house_table(title=f"gpu: busy-power floor fitted on measured power ({path})",
               caption=", ".join(f"{k} = {v:.2f}" for k, v in fit.floors.items()) + " of TDP (write them into "
                       "hardware_specs/execution/gpu.toml). Power rows were fitted; J-per-token rows were not.")
    for c in ("rows", "n", "median abs error"):
        t.add_column(c, justify="left" if c == "rows" else "right")
    t.add_row("power, linear utilisation alone (floor 0)", str(after.size), f"{fit.median_abs_error_before:.0%}")
    t.add_row("power, floors by bound", str(after.size), f"{np.median(after):.0%}" if after.size else "—")
    t.add_row("J per output token (check)", str(check.size), f"{np.median(check):.0%}" if check.size else "—")
    data = {"family": "gpu", **fit.floors, "fitted_rows": fit.fitted_rows,
            "checked_rows": fit.checked_rows, "median_abs_error_before": fit.median_abs_error_before, "data": path}
    rows = [{"id": k, "role": "fitted", "error": v} for k, v in fit.fitted_rows.items()]
    rows += [{"id": k, "role": "check", "error": v} for k, v in fit.checked_rows.items()]
    return View(tables=[t], data=data, rows=rows)
