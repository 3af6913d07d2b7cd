"""``roofline placements`` and ``roofline pareto``: serving points, placements and frontiers."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from rich.console import RenderableType
from rich.table import Table

from ..serving.serve import ServingResult
from .render_common import (
    View,
    formats_fields,
    formats_text,
    house_table,
    ms_cell,
    rate_cell,
    seconds_cell,
    usd_cell,
)


def serving_point(r: ServingResult, i: int) -> dict[str, Any]:
    """One point of a ServingResult (flat index i) as a JSON-ready dict."""
    def at(a: Any) -> Any:
        v = np.ravel(np.asarray(a))[i]
        return v.item() if hasattr(v, "item") else v
    return {"batch": at(r.batch), "gamma": at(r.gamma), "expected_tokens": at(r.expected_tokens),
            "ttft_s": at(r.ttft_s), "tpot_s": at(r.tpot_s), "e2e_s": at(r.e2e_s),
            "tokens_per_s_per_user": at(r.tokens_per_s_per_user), "tokens_per_s": at(r.tokens_per_s),
            "tokens_per_s_per_device": at(r.tokens_per_s_per_device), "tokens_per_s_per_kw": at(r.tokens_per_s_per_kw),
            "energy_per_token_j": at(r.energy_per_token_j), "energy_per_request_j": at(r.energy_per_request_j),
            "power_w": at(r.power_w), "power_by_group_w": {k: at(v) for k, v in r.power_by_group_w.items()},
            "devices": at(r.devices), "memory_per_device_bytes": at(r.memory_per_device_bytes),
            **{f"{k}_bound": None if b == "—" else b   # no such stage (prefill on the decode group, no draft): null
               for k, b in (("prefill", at(r.prefill_bound)), ("decode", at(r.decode_bound)),
                            ("draft", at(r.draft_bound)))},
            "usd_per_hour": at(r.usd_per_hour), "usd_per_million_output_tokens": at(r.usd_per_million_output_tokens),
            "usd_per_million_input_tokens": at(r.usd_per_million_input_tokens),
            "usd_per_million_total_tokens": at(r.usd_per_million_total_tokens),
            "fits": bool(at(r.fits)), "fits_memory": bool(at(r.fits_memory)),
            "budget_keeps_up": bool(at(r.budget_keeps_up)), "token_budget_needed": at(r.token_budget_needed),
            **formats_fields(r)}


def devices_cell(n: float) -> str:
    """A device count: three significant figures below a thousand (fractional prefill groups), whole devices with
    thousands separators above (62,500, not 6.25e+04)."""
    return f"{n:,.0f}" if n >= 1000 else f"{n:.3g}"


def serving_table(rows: list[tuple[str, str, dict[str, Any] | None, str]], title: str, caption: str) -> list[Any]:
    """Feasible placements as a table, then one line per infeasible one with its reason (a footnote, not a
    one-word-wide cell). rows: (name, description, point or None, reason)."""
    t = house_table(title=title, caption=caption)
    # several sets of formats: a key per row and each set said once under the table
    keys = {text: str(i) for i, text in enumerate(dict.fromkeys(
        formats_text(p) for _n, _d, p, _r in rows if p and p["fits"]), start=1)}
    for c in ("placement", *(("fmt",) if len(keys) > 1 else ()), "devices", "TTFT\nms", "TPOT\nms", "E2E\ns",
              "tok/s\n/user", "tok/s\n/kW", "J/\ntoken"):
        # the figures never wrap: in a narrow terminal the placement's name wraps instead of its numbers
        t.add_column(c, justify="left" if c in ("placement", "fmt") else "right", no_wrap=c != "placement",
                     ratio=1 if c == "placement" else None)
    failed: dict[str, list[str]] = {}
    for name, _desc, p, reason in rows:
        if p is None or not p["fits"]:
            failed.setdefault(reason or "does not fit", []).append(name)
            continue
        t.add_row(name, *((keys[formats_text(p)],) if len(keys) > 1 else ()), devices_cell(p["devices"]),
                  ms_cell(p["ttft_s"]), ms_cell(p["tpot_s"]), seconds_cell(p["e2e_s"]), rate_cell(p["tokens_per_s_per_user"]),
                  rate_cell(p["tokens_per_s_per_kw"]), seconds_cell(p["energy_per_token_j"]))
    out: list[Any] = [t] if t.row_count else [f"{title}: no placement is feasible."]
    if len(keys) > 1:
        out += ["Formats (fmt; unless given: bf16, or the native format every device of a group computes):"] + [
            f"  {key}: {text}" for text, key in keys.items()]
    else:
        out += [f"Formats: {text}." for text in keys if text]
    for reason, names in failed.items():
        shown = "; ".join(names[:3]) + (f"; and {len(names) - 3} more" if len(names) > 3 else "")
        out.append(f"not feasible ({shown}): {reason}")
    return out


def frontier_table(name: str, points: list[dict[str, Any]], caption: str = "", workload: str = "") -> Table:
    t = house_table(title=f"frontier: {name}" + (f" ({workload})" if workload else ""), caption=caption or None)
    for c in ("tok/s\n/user", "tok/s\n/kW", "$/Mtok\nout", "E2E\ns", "TTFT\nms", "J/\ntoken", "batch", "gamma"):
        t.add_column(c, justify="right")
    for p in points:
        t.add_row(rate_cell(p["tokens_per_s_per_user"]), rate_cell(p["tokens_per_s_per_kw"]),
                  usd_cell(p.get("usd_per_million_output_tokens", math.nan)), seconds_cell(p["e2e_s"]), ms_cell(p["ttft_s"]),
                  seconds_cell(p["energy_per_token_j"]), f"{p['batch']:.0f}", f"{p['gamma']:.0f}")
    return t


def comparison_table(rows: list[dict[str, Any]], baseline: str, axis: str = "kw") -> Table:
    y = "tokens/s per kW" if axis == "kw" else "tokens per USD"
    best = "energy-optimised" if axis == "kw" else "cost-optimised"
    t = house_table(title=f"interactivity at equal {y}, against {baseline}",
               caption=f"interactivity-optimised: at the {y} of the baseline's most interactive point; "
                       f"{best}: at the baseline's highest {y} (— when the configuration cannot reach it).")
    for c in ("configuration", "interactivity-\noptimised", best.replace("-", "-\n"), "best ratio\non shared\nrange"):
        t.add_column(c, justify="left" if c == "configuration" else "right")
    for r in rows:
        fmt = [f"{v:.2f}x" if v is not None and math.isfinite(v) else "—"
               for v in (r["interactivity_optimised"], r[best.replace("-", "_")], r["max_ratio"])]
        t.add_row(r["name"], *fmt)
    return t


def serving_rows_view(title: str, caption: str, items: list[dict[str, Any]], extra: dict[str, Any]) -> View:
    """Placements: ``items`` of {name, description, feasible, reason, metrics}."""
    rows = [(i["name"], i["description"] or "", i["metrics"], i["reason"] or "") for i in items]
    csv_rows = [{"name": i["name"], "feasible": i["feasible"], "reason": i["reason"], **(i["metrics"] or {})}
                for i in items]
    tables = serving_table(rows, title, caption)
    tables += [f"{u['device']} cannot run {', '.join(u['stages'])}: {u['reason']}"
               for u in extra.get("infeasible_devices", [])]
    return View(tables=tables, data={**extra, "placements": items}, rows=csv_rows)


def pareto_view(configs: list[dict[str, Any]], comparisons: list[dict[str, Any]], baseline: str,
                extra: dict[str, Any], note: str = "") -> View:
    req = extra.get("request") or {}
    workload = (f"{extra['target']}, {req['isl']} in / {req['osl']} out, {req['mode']}"
                if extra.get("target") and req else "")
    tables: list[RenderableType] = [frontier_table(c["name"], c["frontier"], c["description"] + (
        f"; formats {formats_text(c)}" if c.get("target_formats") else "") + (
        f"; no point: {c['why_empty']}" if c.get("why_empty") else ""), workload) for c in configs]
    if comparisons:
        tables.append(comparison_table(comparisons, baseline, extra.get("axis", "kw")))
        if configs and not configs[0]["frontier"]:
            tables.append(f"The baseline {baseline} has no point, so no ratio can be taken: give a --placement with "
                          "points first.")
    if extra.get("overrides"):
        tables.append(f"What-if (every configuration): {', '.join(extra['overrides'])}.")
    if note:
        tables.append(note)
    rows = [{"configuration": c["name"], **p} for c in configs for p in c["frontier"]]
    return View(tables=tables, data={**extra, "configurations": configs, "comparisons": comparisons}, rows=rows)
