"""Our error against a peer's on the published rows both can express: llm-analysis (github.com/cli99/llm-analysis).

llm-analysis is not a dependency: `pip install llm-analysis` first (it installs from the package registry). It ships
configs for Llama-2-7B and -70B, A100 and H100, and weight/activation formats w16a16, w8a16, w4a16, w8a8; rows
outside that are skipped. Each tool runs with its own defaults, as a user would: llm-analysis at its default
efficiencies, roofline with its shipped calibration.

``--save`` keeps llm-analysis's predictions in docs/llm_analysis_predictions.json, so that the peer table of
docs/validation.md can be regenerated (scripts/refresh_docs.py) and checked (a test) without llm-analysis installed:
its predictions do not move when roofline's do.

Run: python scripts/compare_llm_analysis.py [--json] [--save]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from roofline.errors import RooflineError
from roofline.evidence.validate import predict_row, read_rows, row_params, shipped_data
from roofline.specs.params import shipped_profile

MODELS = {"llama-2-7b": "NousResearch_Llama-2-7b-hf", "llama-2-70b": "upstage_Llama-2-70b-instruct-v2"}
GPUS = {"a100-sxm-80gb": "a100-sxm-80gb", "h100-sxm": "h100-sxm-80gb"}
DTYPES = {"bf16": "w16a16e16", "fp16": "w16a16e16", "int8": "w8a16e16", "int4-g32": "w4a16e16", "fp8": "w8a8e16"}
#: llm-analysis's predictions of the rows (written by --save): the peer's side of the table without the peer.
SAVED = Path(__file__).resolve().parent.parent / "docs" / "llm_analysis_predictions.json"


def llm_analysis_value(row) -> float:
    from llm_analysis.analysis import infer
    b = int(row.get("batch"))
    tp = int(row.get("tp"))
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        logging.disable(logging.CRITICAL)
        r = infer(model_name=MODELS[row.get("model")], gpu_name=GPUS[row.get("hardware")],
                  dtype_name=DTYPES[row.get("weight_dtype")], log_level="CRITICAL", batch_size_per_gpu=b, tp_size=tp,
                  seq_len=int(row.get("isl")), num_tokens_to_generate=max(1, int(row.get("osl"))),
                  kv_cache_dtype_bytes=1 if row.get("kv_dtype") == "fp8" else 2)
        logging.disable(logging.NOTSET)
    metric = row.get("metric")
    if metric == "decode_tokens_per_s_per_user":
        return float(r["decode_tokens_per_sec"]) / b
    if metric == "ttft_ms":
        return float(r["prefill_latency"]) * 1e3
    if metric == "output_tokens_per_s_per_device":
        return b * int(row.get("osl")) / float(r["total_latency"]) / tp
    raise KeyError(metric)


def saved_predictions() -> dict[str, float]:
    """llm-analysis's predictions by row id as --save kept them (NaN where it failed)."""
    data = json.loads(SAVED.read_text())
    return {k: math.nan if v is None else float(v) for k, v in data["predictions"].items()}


def run(peer: Mapping[str, float] | None = None) -> dict:
    """Both tools on the rows both can express; ``peer``: llm-analysis's predictions by row id (default: run
    llm-analysis now)."""
    profile = shipped_profile()
    rows = []
    for row in read_rows(shipped_data()):
        if (row.get("model") not in MODELS or row.get("hardware") not in GPUS or row.get("weight_dtype") not in DTYPES
                or row.get("serving") != "static" or row.get("spec_method") not in ("", "none")
                or row.get("metric") not in ("decode_tokens_per_s_per_user", "ttft_ms", "output_tokens_per_s_per_device")):
            continue
        measured = float(row.get("value"))
        try:
            ours = predict_row(row, row_params(profile, row))
        except RooflineError:    # a row roofline cannot express either (a missing length, a draft model)
            continue
        note = ""
        if peer is not None:
            theirs = peer.get(row.id, math.nan)
        else:
            try:
                theirs = llm_analysis_value(row)
            except Exception as e:  # noqa: BLE001 - the peer's failure is data here
                theirs, note = math.nan, f"llm-analysis failed: {type(e).__name__}"
        rows.append({"id": row.id, "metric": row.get("metric"), "measured": measured, "roofline": ours,
                     "roofline_error": ours / measured - 1, "llm_analysis": theirs,
                     "llm_analysis_error": theirs / measured - 1, "note": note})
    def med(key: str) -> float:
        vals = [abs(r[key]) for r in rows if math.isfinite(r[key])]
        return float(np.median(vals)) if vals else math.nan
    return {"rows": rows, "median_abs_error": {"roofline": med("roofline_error"),
                                               "llm_analysis": med("llm_analysis_error")}}


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--save", action="store_true", help=f"keep llm-analysis's predictions in {SAVED.name}")
    args = ap.parse_args()
    try:
        import llm_analysis  # noqa: F401
    except ImportError:
        raise SystemExit("compare_llm_analysis: llm-analysis is not installed (pip install llm-analysis)") from None
    out = run()
    if args.save:
        from importlib.metadata import version
        SAVED.write_text(json.dumps({"llm_analysis_version": version("llm-analysis"), "predictions": {
            r["id"]: r["llm_analysis"] if math.isfinite(r["llm_analysis"]) else None for r in out["rows"]}},
            indent=1) + "\n")
    if args.json:
        print(json.dumps(out, indent=1, default=lambda x: None))
    else:
        print(f"{'id':6} {'metric':32} {'measured':>10} {'roofline':>10} {'err':>6} {'llm-analysis':>13} {'err':>6}")
        for r in out["rows"]:
            print(f"{r['id']:6} {r['metric']:32} {r['measured']:10.4g} {r['roofline']:10.4g} "
                  f"{r['roofline_error']:+6.0%} {r['llm_analysis']:13.4g} {r['llm_analysis_error']:+6.0%} {r['note']}")
        m = out["median_abs_error"]
        print(f"median |error| on these {len(out['rows'])} rows: roofline {m['roofline']:.0%}, "
              f"llm-analysis {m['llm_analysis']:.0%}")
