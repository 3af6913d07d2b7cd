"""gpt-oss-120b with a 1.6B draft: GPUs alone against a draft on 2 d-Matrix Corsair cards.

Reproduces the setting of Gimlet Labs' "Low-Latency Inference with Speculative
Decoding on d-Matrix Corsair and GPU" (https://gimletlabs.ai/blog/low-latency-spec-decode-corsair):
8K in / 1K out, coding-like acceptance (per-token 0.926 at gamma = 5, 0.962 at
gamma = 40, interpolated in between), three configurations on H100 and on
B200 nodes (prefill on 8 GPUs, decode/verify on 8 GPUs), compared at equal
tokens/s per kW. Published: 2-5x at interactivity-optimised points, up to 10x at
energy-optimised ones, from a baseline of about 24 s per request.

Run: python examples/gimlet_corsair.py [--json] [--quick]
"""

import argparse
import json

import numpy as np
from rich.console import Console
from rich.table import Table

import roofline as rl
from roofline.frontier import compare_frontiers, pareto_frontier
from roofline.render import jsonable, serving_point
from roofline.serving import Placement, Request, evaluate_serving

REQUEST = Request(input_tokens=8192, output_tokens=1024)
ACCEPTANCE = rl.Acceptance.alpha_by_gamma({5: 0.926, 40: 0.962})
DRAFT = rl.load_model("gpt-oss-draft-1.6b")


def configurations(gpu: str) -> list[Placement]:
    g8 = rl.DeviceGroup(device=rl.load_device(gpu), tp=8)
    corsair = rl.DeviceGroup(device=rl.load_device("corsair"), tp=2)
    return [Placement(name=f"{gpu}: disaggregated, no speculation", prefill=g8, decode=g8),
            Placement(name=f"{gpu}: GPU-only speculation", prefill=g8, decode=g8, draft_model=DRAFT, draft_kind="model"),
            Placement(name=f"{gpu}: draft on 2 Corsair", prefill=g8, decode=g8, draft=corsair, draft_model=DRAFT,
                      draft_kind="model")]


def run(quick: bool) -> dict:
    batches = 2 ** np.arange(0, 9 if quick else 13)[:, None]           # 1 .. 4096 concurrent requests
    gammas = np.arange(1, 13 if quick else 41)[None, :]
    out = {"request": {"isl": REQUEST.input_tokens, "osl": REQUEST.output_tokens},
           "acceptance": ACCEPTANCE.describe(), "configurations": [], "by_gpu": {}}
    for gpu in ("h100-sxm", "b200"):
        fronts = []
        for p in configurations(gpu):
            r = evaluate_serving("gpt-oss-120b", p, REQUEST, batch=batches, gamma=gammas if p.speculative else 0,
                                 acceptance=ACCEPTANCE if p.speculative else None)
            f = pareto_frontier(r.tokens_per_s_per_user, r.tokens_per_s_per_kw, r.fits)
            fronts.append(f)
            out["configurations"].append({"name": p.name, "gpu": gpu,
                                          "frontier": [serving_point(r, int(i)) for i in f.index]})
        gpu_spec, corsair = fronts[1], fronts[2]
        c = compare_frontiers(gpu_spec, corsair)
        base_pts = out["configurations"][-2]["frontier"]
        out["by_gpu"][gpu] = {
            "interactivity_ratio": {"interactivity_optimised": c.interactivity_optimised,
                                    "energy_optimised": c.energy_optimised,
                                    "energy_optimised_tokens_per_s_per_kw": c.energy_optimised_throughput_per_kw},
            "baseline_e2e_s": base_pts[-1]["e2e_s"],  # GPU-only speculation at its best tokens/s per kW
            "no_speculation_best_e2e_s": out["configurations"][-3]["frontier"][0]["e2e_s"],
        }
    main = out["by_gpu"]["b200"]        # the GPU the study's later interviews name
    out["interactivity_ratio"] = main["interactivity_ratio"]
    out["baseline_e2e_s"] = main["baseline_e2e_s"]
    return out


def show(out: dict, console: Console) -> None:
    for cfg in out["configurations"]:
        t = Table(title=cfg["name"], caption="Pareto frontier: tokens/s per kW against tokens/s per user")
        for col in ("tok/s/user", "tok/s/kW", "E2E s", "batch", "gamma"):
            t.add_column(col, justify="right")
        for p in cfg["frontier"][:: max(1, len(cfg["frontier"]) // 8)]:
            t.add_row(f"{p['tokens_per_s_per_user']:.0f}", f"{p['tokens_per_s_per_kw']:.0f}", f"{p['e2e_s']:.2f}",
                      f"{p['batch']:.0f}", f"{p['gamma']:.0f}")
        console.print(t)
    t = Table(title="Corsair draft against GPU-only speculation at equal tokens/s per kW")
    for col in ("GPU", "interactivity-optimised", "energy-optimised", "baseline E2E s", "published"):
        t.add_column(col, justify="right")
    for gpu, v in out["by_gpu"].items():
        r = v["interactivity_ratio"]
        t.add_row(gpu, f"{r['interactivity_optimised']:.2f}x", f"{r['energy_optimised']:.2f}x",
                  f"{v['baseline_e2e_s']:.1f}", "2-5x / up to 10x / ~24 s")
    console.print(t)
    console.print(
        "What drives the gap: the draft's KV cache for 9K-token contexts fills the Corsair's 4 GB of SRAM at a "
        "few dozen sequences, after which it spills to LPDDR5X (400 GB/s per card) and drafting slows; at the batch "
        "sizes where the GPUs reach their best tokens/s per kW the Corsair configuration cannot follow, so the "
        "energy-optimised ratio is taken at the best efficiency both reach. Per-layer tensor-parallel synchronisation "
        "between the two cards (our GPU-derived 5 us collective latency, not a d-Matrix figure) also caps draft speed.")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--quick", action="store_true", help="smaller sweep (used by the tests)")
    args = ap.parse_args()
    result = run(args.quick)
    if args.json:
        print(json.dumps(jsonable(result), indent=1))
    else:
        show(result, Console())
