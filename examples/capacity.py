"""Long-context serving where KV capacity, not bandwidth, decides: a 128 TB memory server against HBM GPUs.

Majestic Labs' Prometheus (announced) puts up to 128 TB of LPDDR-class memory
in one server; its bandwidth and compute are not published, so this example
states them as assumptions and sweeps the bandwidth (docs/design.md scenario 5).
For Llama-3.1-70B in FP8 at 128K and 1M tokens of context it finds the largest
batch each system holds and the decode speed at that batch.

Run: python examples/capacity.py [--json]
"""


from rich.console import Console
from rich.table import Table

import roofline as rl
from roofline import resolve_group as parse_group
from roofline.ui.output import run_example

ASSUMED_BW = ["2 TB/s", "8 TB/s", "32 TB/s"]       # not published: swept
ASSUMED_COMPUTE = "2 PFLOP/s"                      # not published: assumed, dense FP8-class
MODEL, FMT = "llama-3.1-70b", dict(weights="fp8", kv="fp8", activations="fp8")


def systems() -> list[tuple[str, rl.DeviceGroup]]:
    out = [("8x h200-sxm", parse_group("h200-sxm:8")), ("8x b200", parse_group("b200:8"))]
    base = rl.load_device("majestic-prometheus")
    for bw in ASSUMED_BW:
        dev = rl.override(rl.override(base, "dram.bandwidth", bw), "compute.fp8", ASSUMED_COMPUTE)
        out.append((f"prometheus @ {bw}", rl.DeviceGroup(device=dev)))
    return out


def run() -> dict:
    rows = []
    for context in (131_072, 1_048_576):
        for name, g in systems():
            b = int(rl.max_batch(MODEL, g, context=context, **FMT))
            row = {"system": name, "context": context, "max_batch": b, "devices": g.count}
            if b >= 1:
                r = rl.decode_step(MODEL, g, batch=b, context=context, **FMT)
                one = rl.decode_step(MODEL, g, batch=1, context=context, **FMT)
                row.update(tokens_per_s=float(r.tokens_per_s), tokens_per_s_per_user=float(1 / r.time_s),
                           batch1_tokens_per_s_per_user=float(1 / one.time_s), bound=str(r.bound),
                           kv_per_device_bytes=float(r.kv_per_device_bytes))
            rows.append(row)
    return {"model": MODEL, "formats": FMT, "assumed_bandwidths": ASSUMED_BW, "assumed_compute": ASSUMED_COMPUTE,
            "rows": rows}


def show(out: dict, console: Console) -> None:
    t = Table(title=f"{out['model']} (FP8) at long context: capacity against bandwidth",
              caption=f"Prometheus bandwidth and compute are not published: swept {', '.join(out['assumed_bandwidths'])}"
                      f", compute assumed {out['assumed_compute']}.")
    for c in ("system", "context", "max batch", "tok/s total", "tok/s/user at max", "tok/s/user at B=1", "bound"):
        t.add_column(c, justify="left" if c in ("system", "bound") else "right")
    for r in out["rows"]:
        ok = r["max_batch"] >= 1
        t.add_row(r["system"], f"{r['context']:,}", str(r["max_batch"]), f"{r['tokens_per_s']:,.0f}" if ok else "—",
                  f"{r['tokens_per_s_per_user']:.3g}" if ok else "—",
                  f"{r['batch1_tokens_per_s_per_user']:.3g}" if ok else "—", r.get("bound", "does not fit"))
    console.print(t)
    long = [r for r in out["rows"] if r["context"] == 1_048_576]
    gpu_best = max((r["max_batch"] for r in long if "prometheus" not in r["system"]), default=0)
    big = max(r["max_batch"] for r in long if "prometheus" in r["system"])
    console.print(f"At 1M tokens the GPUs hold at most {gpu_best} sequences and the 128 TB server {big}: capacity "
                  "decides how many users fit; per-user speed is still the bandwidth's (each step re-reads every "
                  "sequence's KV), so the server wins on total throughput only if its assumed bandwidth keeps up.")


if __name__ == "__main__":
    run_example(__doc__, run, show)
