"""Diagnose measured serving numbers: achieved bandwidth and FLOP/s, MBU, MFU, and what binds.

Two published measurements: gpt-fast's Llama-2-7B at batch 1 on an A100
(104.9 tok/s, which gpt-fast itself reports as 1,397 GB/s achieved;
https://github.com/pytorch-labs/gpt-fast) and a vLLM-format result file holding
NVIDIA's NIM measurement of Llama-3.3-70B FP8 on 2x H100 at concurrency 50
(examples/data/vllm_benchmark_sample.json). docs/design.md scenario 6.

Run: python examples/diagnose.py [--json]
"""

from pathlib import Path

from rich.console import Console
from rich.table import Table

from roofline.evidence.diagnose import Measurement, diagnose, read_vllm_benchmark
from roofline.ui.output import run_example

SAMPLE = Path(__file__).parent / "data" / "vllm_benchmark_sample.json"
FP8 = dict(weights="fp8", kv="fp8", activations="fp8")


def run() -> dict:
    cases = [
        ("gpt-fast llama-2-7b, A100, batch 1", "llama-2-7b", "a100-sxm-80gb", {},
         Measurement.from_rates(batch=1, input_tokens=5, output_tokens=200, tokens_per_s_per_user=104.9), 1397.31e9),
        ("NIM llama-3.3-70b FP8, 2x H100, concurrency 50", "llama-3.3-70b", "h100-sxm:2", FP8,
         read_vllm_benchmark(SAMPLE), None),
    ]
    rows = []
    for name, model, group, fmt, m, published_bw in cases:
        d = diagnose(model, group, m, formats=fmt)
        rows.append({"name": name, "model": model, "group": d.group, "measured_tpot_s": m.tpot_s,
                     "predicted_tpot_s": d.predicted_tpot_s, "achieved_bytes_per_s": d.achieved_bytes_per_s,
                     "published_achieved_bytes_per_s": published_bw, "mbu": d.mbu, "mfu": d.mfu,
                     "binding": d.binding, "advice": d.advice})
    return {"rows": rows}


def show(out: dict, console: Console) -> None:
    t = Table(title="diagnosis of published measurements")
    for c in ("measurement", "TPOT ms", "roofline ms", "achieved GB/s", "published GB/s", "MBU", "MFU", "binding"):
        t.add_column(c, justify="left" if c in ("measurement", "binding") else "right")
    for r in out["rows"]:
        pub = r["published_achieved_bytes_per_s"]
        t.add_row(r["name"], f"{r['measured_tpot_s'] * 1e3:.3g}", f"{r['predicted_tpot_s'] * 1e3:.3g}",
                  f"{r['achieved_bytes_per_s'] / 1e9:,.0f}", f"{pub / 1e9:,.0f}" if pub else "—", f"{r['mbu']:.0%}",
                  f"{r['mfu']:.0%}", r["binding"])
    console.print(t)
    for r in out["rows"]:
        console.print(f"[bold]{r['name']}[/bold]: {r['advice']}.")
    console.print("Where the roofline prediction is faster than the measurement, the gap is what the serving stack "
                  "loses to fixed per-step costs, prefill interference and kernels below peak: the quantities "
                  "`roofline calibrate` fits.")


if __name__ == "__main__":
    run_example(__doc__, run, show)
