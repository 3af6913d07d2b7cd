"""Decode on SRAM machines: chips needed, tokens/s per user and what a token's time is made of.

Groq LPU (230 MB SRAM per chip), Groq 3 LPU (500 MB) and Cerebras WSE-3 (44 GB per wafer) hold the
weights in SRAM, so a model needs many chips, laid out as each family does (Groq: each layer split over an
8-chip node, nodes in a pipeline; Cerebras: a pipeline of wafers). Each runs under its own execution
profile (hardware_specs/execution/): a weight sweep takes microseconds per chip, so a token's time is
the per-layer stage latency of the compiled pipeline, not bandwidth. Published batch-1 speeds are printed
beside the prediction where they exist (roofline/validation/measurements.csv); GPUs give 50-125 tok/s per
user on 70B-class models (docs/design.md scenario 3).

Run: python examples/sram_decode.py [--json]
"""

from rich.console import Console
from rich.table import Table

import roofline as rl
from roofline.serving.placements import smallest_group
from roofline.ui.output import run_example

MACHINES = [("groq-lpu", "int8", "fp16"), ("groq-3-lpu", "fp8", "fp8"), ("cerebras-wse-3", "bf16", "bf16"),
            ("h100-sxm", "fp8", "fp8"), ("b200", "fp8", "fp8")]
MODELS = ["llama-3.1-8b", "llama-3.1-70b"]
#: published batch-1 decode speeds (tokens/s per user) from the shipped validation rows
PUBLISHED = {("llama-3.1-70b", "groq-lpu"): "250-300 (GQ01, GQ06, GQ08)", ("llama-3.1-8b", "groq-lpu"): "751 (CS08)",
             ("llama-3.1-70b", "cerebras-wse-3"): "450 (CB01)", ("llama-3.1-8b", "cerebras-wse-3"): "1,800 (CS01)"}


def run(context: int = 2048) -> dict:
    rows = []
    for model in MODELS:
        for name, weights, act in MACHINES:
            kw = dict(weights=weights, kv=act if act != "fp8" else "fp8", activations=act)
            dev = rl.load_device(name)
            group = smallest_group(lambda g: bool(rl.decode_step(model, g, batch=1, context=context,
                                                                 on_infeasible="nan", **kw).fits), dev)
            r = rl.decode_step(model, group, batch=1, context=context, **kw)
            rows.append({"model": model, "device": name, "family": dev.family, "chips": group.count,
                         "group": group.describe(), "format": weights, "tokens_per_s_per_user": float(1 / r.time_s),
                         "time_s": float(r.time_s), "bound": str(r.bound), "memory_s": float(r.memory_s),
                         "communication_s": float(r.communication_s), "overhead_s": float(r.overhead_s),
                         "published": PUBLISHED.get((model, name), "")})
    return {"context": context, "rows": rows}


def show(out: dict, console: Console) -> None:
    t = Table(title=f"batch-1 decode at {out['context']} tokens of context",
              caption="Each device under its family's execution profile (roofline show DEVICE prints it); fixed = "
                      "per-step and per-layer costs. Published: vendor or Artificial Analysis figures (grade C/D).")
    for c in ("model", "device", "chips", "format", "tok/s/user", "published", "memory ms", "comm ms", "fixed ms",
              "bound"):
        t.add_column(c, justify="left" if c in ("model", "device", "format", "bound", "published") else "right")
    for r in out["rows"]:
        t.add_row(r["model"], r["device"], str(r["chips"]), r["format"], f"{r['tokens_per_s_per_user']:,.0f}",
                  r["published"], f"{r['memory_s'] * 1e3:.3g}", f"{r['communication_s'] * 1e3:.3g}",
                  f"{r['overhead_s'] * 1e3:.3g}", r["bound"])
    console.print(t)
    groq = next(r for r in out["rows"] if r["device"] == "groq-lpu" and r["model"] == "llama-3.1-70b")
    console.print(
        f"On Groq a 70B token crosses {groq['chips']} chips: the weight sweep takes {groq['memory_s'] * 1e6:.0f} us, "
        f"the per-layer stage latency {groq['overhead_s'] * 1e3:.2f} ms. SRAM machines buy interactivity with chip "
        "count and a compiled pipeline; their speed is set by how fast a layer's stage runs, which no spec sheet "
        "states (the Groq and Cerebras values are fitted on their 8B rows and predict the 70B rows).")


if __name__ == "__main__":
    run_example(__doc__, run, show)
