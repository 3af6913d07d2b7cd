"""Prefill on one kind of chip, decode on another, with the KV cache moved between them.

Rubin GPUs prefill for Groq 3 LPUs (the pairing NVIDIA announced for the LPX
rack), Trainium2 prefills for Cerebras WSE-3, against GPU-only disaggregation on
B200 and H100 (docs/design.md scenario 2). Llama-3.1-70B, 8K in / 1K out, batch 32
in continuous serving; the KV cache crosses a 400 GbE link (Rubin + Groq over
NVLink-class rack links is not published; the link is an explicit assumption).

Run: python examples/disaggregated.py [--json]
"""


import numpy as np
from rich.console import Console
from rich.table import Table

import roofline as rl
from roofline import Placement, Request, evaluate_serving
from roofline.serving.placements import smallest_group
from roofline.ui.output import run_example

MODEL = "llama-3.1-70b"
REQUEST = Request(input_tokens=8192, output_tokens=1024)
BATCH = 32
FIGURES = ("ttft_s", "tpot_s", "e2e_s", "tokens_per_s_per_user", "tokens_per_s", "tokens_per_s_per_device",
           "tokens_per_s_per_kw", "energy_per_token_j", "power_w", "devices", "memory_per_device_bytes")
FP8 = dict(weights="fp8", kv="fp8", activations="fp8")
BF16 = dict(weights="bf16", kv="bf16", activations="bf16")


def group(device: rl.Device, fmt: dict, *, stage: str, max_tp: int | None) -> rl.DeviceGroup:
    if stage == "prefill":
        fits = lambda g: bool(rl.prefill(MODEL, g, prompt=REQUEST.input_tokens, on_infeasible="nan", **fmt).fits)  # noqa
    else:
        end = REQUEST.input_tokens + REQUEST.output_tokens
        fits = lambda g: bool(rl.decode_step(MODEL, g, batch=BATCH, context=end, on_infeasible="nan", **fmt).fits)  # noqa
    return smallest_group(fits, device, max_tp=max_tp)


def run() -> dict:
    cerebras = rl.load_device("cerebras-wse-3")
    cases = [  # name, prefill device, decode device, formats, decode max_tp
        ("Rubin prefill + Groq 3 LPU decode", rl.load_device("rubin"), rl.load_device("groq-3-lpu"), FP8, None),
        ("Trainium2 prefill + Cerebras WSE-3 decode", rl.load_device("trainium2"), cerebras, BF16, None),
        ("B200 prefill + B200 decode", rl.load_device("b200"), rl.load_device("b200"), FP8, 8),
        ("H100 prefill + H100 decode", rl.load_device("h100-sxm"), rl.load_device("h100-sxm"), FP8, 8),
    ]
    rows = []
    for name, pre, dec, fmt, max_tp in cases:
        p = Placement(name=name, prefill=group(pre, fmt, stage="prefill", max_tp=8),
                      decode=group(dec, fmt, stage="decode", max_tp=max_tp), kv_link=rl.get_link("ethernet-400g"))
        r = evaluate_serving(MODEL, p, REQUEST, batch=BATCH, target_formats=fmt)
        rows.append({"name": name, "placement": p.describe(), "fits": bool(np.ravel(r.fits)[0]),
                     **{k: float(np.ravel(getattr(r, k))[0]) for k in FIGURES},
                     "kv_transfer_s": float(r.kv_transfer_s), "power_note": r.energy_note or None})
    return {"model": MODEL, "request": {"isl": REQUEST.input_tokens, "osl": REQUEST.output_tokens}, "batch": BATCH,
            "kv_link": "ethernet-400g", "rows": rows}


def show(out: dict, console: Console) -> None:
    t = Table(title=f"{out['model']}, {out['request']['isl']} in / {out['request']['osl']} out, batch {out['batch']}",
              caption=f"KV cache over {out['kv_link']}; Cerebras wafers linked over their 1.2 Tb/s system I/O. "
                      "tok/s/kW needs published TDPs (Rubin, Groq 3 and Trainium2 publish none).")
    for c in ("placement", "TTFT ms", "KV xfer ms", "TPOT ms", "E2E s", "tok/s/user", "tok/s/dev", "tok/s/kW"):
        t.add_column(c, justify="left" if c == "placement" else "right")
    for r in out["rows"]:
        kw = r["tokens_per_s_per_kw"]
        t.add_row(f"{r['name']}\n{r['placement']}", f"{r['ttft_s'] * 1e3:.3g}", f"{r['kv_transfer_s'] * 1e3:.3g}",
                  f"{r['tpot_s'] * 1e3:.3g}", f"{r['e2e_s']:.3g}", f"{r['tokens_per_s_per_user']:,.0f}",
                  f"{r['tokens_per_s_per_device']:,.1f}", f"{kw:,.0f}" if kw == kw and kw is not None else "n/a")
    console.print(t)
    fastest = max(out["rows"], key=lambda r: r["tokens_per_s_per_user"])
    console.print(f"Fastest per user: {fastest['name']} ({fastest['tokens_per_s_per_user']:,.0f} tok/s/user). Each "
                  "decoder runs under its family's execution profile: the SRAM decoders' tokens are set by their "
                  "per-layer stage latency and buy interactivity with device count (hundreds of chips against one "
                  "to eight GPUs); the KV cache of an 8K prompt is hidden behind prefill when streamed layer by layer "
                  "over 400 GbE.")

if __name__ == "__main__":
    run_example(__doc__, run, show)
