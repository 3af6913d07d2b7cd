"""Predict published measurements (the CSV format of ``roofline/validation/README.md``) and report errors.

Each row is served as the publication describes it: ``tp`` devices in one
group (``ep`` expert-parallel), ``static`` or ``continuous`` batching
(:mod:`roofline.serving.serve`), ``batch = max`` meaning the largest batch that fits
at isl + osl, MTP/EAGLE speculation with the reported acceptance length. A
row the model cannot express is skipped with the reason, never dropped.
"""

from __future__ import annotations

import csv
import io
import math
import os
from importlib import resources
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from ..errors import RooflineError, SpecError
from ..physics.speculative import Acceptance
from ..physics.stages import max_batch, prefill
from ..serving.placements import smallest_group
from ..serving.serve import Placement, Request, evaluate_serving
from ..specs.devices import Device
from ..specs.execution import resolve_profile
from ..specs.files import read_text
from ..specs.groups import DeviceGroup
from ..specs.models import ModelSpec
from ..specs.params import EngineParams, Profile, shipped_profile, stack_family
from ..specs.resolve import resolve_device, resolve_model

COLUMNS = ("id", "source", "stack", "hardware", "n_devices", "tp", "pp", "ep", "model", "weight_dtype", "expert_dtype",
           "kv_dtype", "batch", "serving", "isl", "osl", "spec_method", "draft_len", "acceptance_length", "metric",
           "value", "grade", "notes")
METRICS = ("decode_tokens_per_s_per_user", "itl_ms", "ttft_ms", "output_tokens_per_s_per_device",
           "output_tokens_per_s_total")


def shipped_data() -> Path:
    """The copy of the published measurements that ships with the package."""
    return Path(str(resources.files("roofline"))) / "validation" / "measurements.csv"



@attrs.frozen(kw_only=True)
class Row:
    """One measurement row (parsed, not yet validated against specs)."""

    id: str
    fields: dict[str, str]

    def get(self, key: str) -> str:
        return (self.fields.get(key) or "").strip()


def read_rows(path: str | os.PathLike[str]) -> list[Row]:
    """Read a measurements CSV, checking the header; raises :class:`SpecError` naming the file."""
    p = Path(path)
    text = read_text(p, what="a measurements CSV", max_bytes=100_000_000)
    reader = csv.DictReader(io.StringIO(text))
    header = reader.fieldnames or []
    missing = [c for c in ("id", "hardware", "model", "metric", "value", "batch", "isl", "osl") if c not in header]
    if missing:
        raise SpecError(f"{p}: missing columns {missing} (expected the columns of roofline/validation/README.md)")
    rows = []
    try:
        for i, rec in enumerate(reader, start=2):
            if rec.get(None):  # type: ignore[call-overload]
                raise SpecError(f"{p}: line {i}: more fields than columns")
            rows.append(Row(id=(rec.get("id") or f"line{i}").strip(), fields={k: v or "" for k, v in rec.items() if k}))
    except csv.Error as e:
        raise SpecError(f"{p}: CSV does not parse: {e}") from None
    if not rows:
        raise SpecError(f"{p}: no rows")
    return rows


def _int(row: Row, key: str, default: int | None = None) -> int:
    text = row.get(key)
    if not text and default is not None:
        return default
    try:
        v = float(text)
    except ValueError:
        raise RooflineError(f"column {key} = {text!r} is not a number") from None
    if not math.isfinite(v) or v != int(v):
        raise RooflineError(f"column {key} = {text!r} is not a whole finite number")
    return int(v)


def _formats(row: Row, device: Device) -> dict[str, str]:
    w = row.get("weight_dtype") or "bf16"
    e = row.get("expert_dtype") or None
    kv = row.get("kv_dtype") or "bf16"
    # FP8 / FP4 checkpoints in these stacks quantise activations too (FP8 GEMMs); weight-only int4/int8 keep
    # 16-bit activations: bf16, or fp16 where the device has no bf16 units (Groq)
    low = {w, e or w} & {"fp8", "nvfp4", "mxfp4", "mxfp8"}
    sixteen = "fp16" if w == "fp16" or (not device.supports("bf16") and device.supports("fp16")) else "bf16"
    return {"weights": w, "experts": e, "kv": kv, "activations": "fp8" if low and device.supports("fp8") else sixteen}


def _layout(row: Row, model: ModelSpec, device: Device, fmt: dict[str, str], batch: int | None,
            context: int, params: EngineParams) -> DeviceGroup:
    """The row's device group: its tp x pp (x ep), or from n_devices alone the family's layout (TP up to the
    family's max_tp, then pipeline stages), or with nothing given the family's layout at the fewest devices
    that hold the batch at this context."""
    ep = _int(row, "ep", 1)
    n_text, tp_text, pp_text = row.get("n_devices"), row.get("tp"), row.get("pp")
    max_tp = int(resolve_profile(device, params).max_tp)
    if tp_text or pp_text:
        tp, pp = _int(row, "tp", 1), _int(row, "pp", 1)
        if n_text and _int(row, "n_devices") != tp * pp:
            raise RooflineError(f"n_devices {_int(row, 'n_devices')} != tp {tp} x pp {pp}: data-parallel replicas are "
                                "not modelled")
        return DeviceGroup(device=device, tp=tp, ep=ep, pp=pp)
    if n_text:
        n = _int(row, "n_devices")
        tp = max(t for t in (1, 2, 4, 8, 16, 32) if t <= max_tp and n % t == 0)
        return DeviceGroup(device=device, tp=tp, ep=ep, pp=n // tp)
    if batch is None:
        raise RooflineError("batch = max needs the device count (n_devices or tp/pp)")
    isl = _int(row, "isl")

    def fits(g: DeviceGroup) -> bool:   # the batch at its final context, and its prompts' prefill
        return bool(max_batch(model, g, context=context, params=params, **fmt) >= batch) and bool(
            prefill(model, g, prompt=isl, batch=batch, params=params, on_infeasible="nan", **fmt).fits)
    return smallest_group(fits, device, max_tp=max_tp)


def predict_row(row: Row, params: EngineParams) -> float:
    """The model's value for a row's metric; raises RooflineError when the row cannot be expressed."""
    metric = row.get("metric")
    if metric not in METRICS:
        raise RooflineError(f"unknown metric {metric!r}")
    model = resolve_model(row.get("model"))
    dev = resolve_device(row.get("hardware"))
    isl, osl = _int(row, "isl"), _int(row, "osl")
    fmt = _formats(row, dev)
    group = _layout(row, model, dev, fmt, None if row.get("batch") == "max" else _int(row, "batch"), isl + osl, params)
    n = group.count
    spec = row.get("spec_method") or "none"
    gamma = _int(row, "draft_len", 0) if spec != "none" else 0
    acceptance = None
    if spec in ("mtp", "eagle"):
        tau = row.get("acceptance_length")
        if not tau:
            raise RooflineError("speculative row without a measured acceptance length")
        acceptance = Acceptance.measured({gamma: float(tau)})
        placement = Placement(name=row.id, decode=group, draft_kind=spec)
    elif spec == "draft":
        raise RooflineError("draft-model rows need the draft model, which the format does not name")
    else:
        placement = Placement(name=row.id, decode=group)
    serving = row.get("serving") or "static"
    batch_text = row.get("batch")
    if batch_text == "max":
        b = int(max_batch(model, group, context=isl + osl, params=params, **fmt))
        if b < 1:
            raise RooflineError("the model does not fit at batch 1")
    else:
        b = _int(row, "batch")
    r = evaluate_serving(model, placement, Request(input_tokens=isl, output_tokens=osl), batch=b, gamma=gamma,
                         acceptance=acceptance, mode=serving, target_formats=fmt, params=params)
    if not bool(r.fits):
        raise RooflineError(f"does not fit in memory at batch {b}")
    value = {"decode_tokens_per_s_per_user": r.tokens_per_s_per_user, "itl_ms": r.tpot_s * 1e3,
             "ttft_ms": r.ttft_s * 1e3, "output_tokens_per_s_per_device": r.tokens_per_s / n,
             "output_tokens_per_s_total": r.tokens_per_s}[metric]
    return float(value)


@attrs.frozen(kw_only=True)
class Validation:
    """Per-row results, skipped rows with reasons, and a summary by metric and by device."""

    rows: list[dict[str, Any]]
    skipped: list[dict[str, str]]

    @property
    def summary(self) -> dict[str, Any]:
        def stats(items: list[dict[str, Any]]) -> dict[str, float]:
            errs = np.abs([r["error"] for r in items])
            return {"n": int(errs.size), "median_abs_error": float(np.median(errs)),
                    "mean_abs_error": float(np.mean(errs)), "median_error": float(np.median([r["error"] for r in items]))}
        out: dict[str, Any] = {"overall": stats(self.rows) if self.rows else {"n": 0}}
        for key in ("family", "metric", "hardware", "stack_family"):
            groups: dict[str, list[dict[str, Any]]] = {}
            for r in self.rows:
                groups.setdefault(r[key], []).append(r)
            out[f"by_{key}"] = {k: stats(v) for k, v in sorted(groups.items())}
        return out


def validate(rows: list[Row], profile: Profile | EngineParams | None = None) -> Validation:
    """Predict every row with the parameters of its serving stack's family (``profile``, default: the shipped
    calibration); one :class:`EngineParams` applies to every row."""
    prof = profile if isinstance(profile, Profile) else shipped_profile() if profile is None else Profile(default=profile)
    done, skipped = [], []
    for row in rows:
        try:
            measured = float(row.get("value"))
            if not math.isfinite(measured) or measured <= 0:
                raise RooflineError(f"measured value {row.get('value')!r} is not a positive number")
            predicted = predict_row(row, prof.for_stack(row.get("stack")))
        except (RooflineError, ValueError) as e:
            skipped.append({"id": row.id, "reason": str(e)})
            continue
        done.append({"id": row.id, "metric": row.get("metric"), "hardware": row.get("hardware"),
                     "family": resolve_device(row.get("hardware")).family, "stack": row.get("stack"),
                     "stack_family": stack_family(row.get("stack")),
                     "model": row.get("model"), "predicted": predicted, "measured": measured,
                     "error": (predicted - measured) / measured})
    return Validation(rows=done, skipped=skipped)
