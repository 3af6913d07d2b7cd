"""``roofline stage`` and ``roofline compare``: stage results per workload point, groups side by side."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from rich.console import RenderableType
from rich.table import Table

from ..physics.stage_result import StageResult
from ..specs.formats import brief
from ..specs.groups import DeviceGroup
from .render_common import (
    View,
    formats_lines,
    house_table,
    ms_cell,
    rate_cell,
    short_bound,
    usd_cell,
)

STAGE_FIELDS = ("batch", "new_tokens", "context", "time_s", "time_serial_s", "compute_s", "memory_s",
                "attention_compute_s", "kv_memory_s", "communication_s", "overhead_s", "dequant_s", "bound",
                "intensity_flop_per_byte", "memory_per_device_bytes", "weights_per_device_bytes",
                "kv_per_device_bytes", "fits", "flop_per_device", "bytes_per_device")


def stage_rows(r: StageResult) -> list[dict[str, Any]]:
    """One dict per workload point (arrays flattened in C order)."""
    cols = {f: np.asarray(getattr(r, f)) for f in STAGE_FIELDS}
    cols["tokens_per_s"] = np.asarray(r.tokens_per_s)
    cols["per_sequence_tokens_per_s"] = np.asarray(r.per_sequence_tokens_per_s)
    shape = np.broadcast_shapes(*(c.shape for c in cols.values()))
    flat = {k: np.broadcast_to(v, shape).ravel() for k, v in cols.items()}
    rows = []
    for i in range(int(np.prod(shape)) if shape else 1):
        rows.append({k: (v[i].item() if hasattr(v[i], "item") else v[i]) for k, v in flat.items()})
    return rows


def stage_dict(r: StageResult) -> dict[str, Any]:
    return {"stage": r.stage, "model": r.model_id, "group": r.group, "passes": r.passes,
            "formats": r.formats.as_dict(),
            "ridge_flop_per_byte": r.ridge_flop_per_byte, "usable_per_device_bytes": r.usable_per_device_bytes,
            "memory_by_tier_s": {k: v for k, v in r.memory_by_tier_s.items()}, "rows": stage_rows(r)}


def _intensity(v: float) -> str:
    return "—" if not math.isfinite(v) else f"{v:,.0f}" if v >= 1000 else f"{v:.3g}"


def _gb(v: float) -> str:
    if not math.isfinite(v):
        return "—"
    return f"{v / 1e6:.0f} MB" if v < 1e9 else f"{v / 1e9:.1f} GB" if v < 10e9 else f"{v / 1e9:,.0f} GB"


def stage_table(r: StageResult, caption: str | None) -> Table:
    """One stage, a row per batch; the communication column only where the group communicates."""
    # a verify pass's gamma + 1 tokens are what it processes per sequence, not what a user gets (acceptance decides)
    per_user = r.stage.startswith(("decode", "draft"))
    rows = stage_rows(r)
    n, ctx = rows[0]["new_tokens"], rows[0]["context"]
    where = f"{n:.0f} new tokens/seq after {ctx:.0f} cached" if r.stage != "decode" else f"context {ctx:.0f}"
    t = house_table(title=f"{r.stage}: {r.model_id} on {r.group}, {where} (times in ms)", caption=caption,
               caption_justify="left")
    comm = any(row["communication_s"] for row in rows if row["fits"])
    deq = any(row["dequant_s"] for row in rows if row["fits"])
    cols = ["batch", "time", "comp", "mem", *(["dequant"] if deq else []), *(["comm"] if comm else []), "over\nhead",
            "bound", "FLOP\n/B",
            "mem/\ndev", "tok/s\n/user" if per_user else "tok/s\n/seq", "tok/s"]
    for c in cols:
        t.add_column(c, justify="left" if c == "bound" else "right", overflow="fold")
    for row in rows:
        part = ms_cell if row["fits"] else (lambda v: "—")  # components of a point that does not fit: not shown
        t.add_row(f"{row['batch']:.0f}", ms_cell(row["time_s"]), part(row["compute_s"]),
                  part(row["memory_s"]), *([part(row["dequant_s"])] if deq else []),
                  *([part(row["communication_s"])] if comm else []), part(row["overhead_s"]),
                  short_bound(row["bound"]), _intensity(row["intensity_flop_per_byte"]),
                  _gb(row["memory_per_device_bytes"]), rate_cell(row["per_sequence_tokens_per_s"]),
                  rate_cell(row["tokens_per_s"]))
    return t


def stage_view(model: str, group: DeviceGroup, results: Sequence[StageResult], caption: str,
               overrides: Sequence[str] = (), notes: Sequence[str] = ()) -> View:
    """Stages' tables; ``notes`` (why a stage fits at no batch, a context beyond the model, ...) go to the
    caption and the JSON's ``notes``."""
    data = {"model": model, "device": group.device.id, "group": group.shape, "overrides": list(overrides),
            "notes": list(notes), "stages": [stage_dict(r) for r in results]}
    rows = [{"stage": r.stage, **row} for r in results for row in stage_rows(r)]
    # the caption (formats, formula, profile) holds for every stage: said once, under the last table
    return View(tables=[stage_table(r, caption if i == len(results) - 1 else None) for i, r in enumerate(results)],
                data=data, rows=rows)


def compare_table(model_id: str, batch: Any, rows: list[dict[str, Any]], context: int, prompt: int,
                  overrides: Sequence[str] = (), note: str = "") -> list[Any]:
    """One row per group and batch; groups that cannot run the model get one line each below the table. The
    caption names the what-ifs applied to every group and what each named variant changed."""
    t = house_table(title=f"{model_id}: side by side (decode at context {context}, prefill of {prompt})",
               caption="tok/s/kW from the linear utilisation power model; $/Mtok: the group's devices at their "
                       "price per hour (plus its power at the electricity price, where one is set) over its decode "
                       "tokens; max batch at this context." + (f" What-if: {', '.join(overrides)}." if overrides else "")
                       + "".join(f" {r['name']} = {r['group']} with {'; '.join(r['variant'])}." for r in rows if r.get("variant"))
                       + note)
    for c in ("group", "batch", "decode\nms", "tok/s\n/user", "tok/s\n/kW", "$/Mtok\nout", "bound", "prefill\nms",
              "max\nbatch"):
        t.add_column(c, justify="left" if c in ("group", "bound") else "right")
    errors = []
    for r in rows:
        if "error" in r:
            errors.append(f"{r['name']}: {r['error']}")
            continue
        kw = r.get("tokens_per_s_per_kw") or [math.nan] * len(r["decode"])
        usd = r.get("usd_per_million_output_tokens") or [math.nan] * len(r["decode"])
        for i, d in enumerate(r["decode"]):
            first = i == 0
            t.add_row(r["name"] if first else "", f"{d['batch']:.0f}", ms_cell(d["time_s"]),
                      rate_cell(d["per_sequence_tokens_per_s"]), rate_cell(kw[i] if kw[i] is not None else math.nan),
                      usd_cell(usd[i] if usd[i] is not None else math.nan),
                      short_bound(d["bound"]),
                      ms_cell(r["prefill"]["time_s"] if r["prefill"]["fits"] else math.nan) if first else "",
                      str(r["max_batch"]) if first else "")
    return [t, *errors]


def elasticity_table(name: str, el: dict[str, float], batch: int, context: int) -> Table:
    shown = {k: v for k, v in el.items() if round(v, 2) != 0}   # a field that moves nothing at the precision shown
    idle = len(el) - len(shown)
    t = house_table(title=f"{name}: elasticity of decode time (batch {batch}, context {context})",
              caption="d ln(time) / d ln(field): -1 = time inversely proportional to the field, 0 = irrelevant here."
                      + (f" {idle} field{'s' if idle != 1 else ''} with no effect here (|elasticity| < 0.005) left "
                         "out; --json lists every field." if idle else ""))
    t.add_column("spec field")
    t.add_column("elasticity", justify="right")
    for k, v in sorted(shown.items(), key=lambda kv: kv[1]):
        t.add_row(k, f"{v:+.2f}")
    return t


def compare_view(model_id: str, batch: Any, rows: list[dict[str, Any]], context: int, prompt: int,
                 overrides: Sequence[str] = (), note: str = "") -> View:
    tables: list[RenderableType] = list(compare_table(model_id, batch, rows, context, prompt, overrides, note))
    tables += formats_lines({r["name"]: brief(r["formats"]) for r in rows if r.get("formats")}, "group")
    for row in rows:
        if row.get("elasticity"):
            tables.append(elasticity_table(row["name"], row["elasticity"], int(np.ravel(batch)[0]), context))
    csv_rows = []
    for row in rows:
        for i, d in enumerate(row.get("decode") or []):
            kw = row.get("tokens_per_s_per_kw")
            csv_rows.append({"name": row["name"], "group": row["group"], **{f"decode_{k}": v for k, v in d.items()},
                             "prefill_time_s": row["prefill"]["time_s"], "max_batch": row["max_batch"],
                             "tokens_per_s_per_kw": kw[i] if kw else None,
                             "usd_per_million_output_tokens": row["usd_per_million_output_tokens"][i]})
        if "error" in row:
            csv_rows.append({"name": row["name"], "group": row["group"], "error": row["error"]})
    return View(tables=tables, data={"model": model_id, "context": context, "prompt": prompt,
                                     "overrides": list(overrides), "rows": rows}, rows=csv_rows)
