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


import numpy as np
from rich.console import Console
from rich.table import Table

import roofline as rl
from roofline.serving.frontier import compare_frontiers, pareto_frontier
from roofline.serving.serve import Placement, Request, evaluate_serving
from roofline.ui.output import run_example
from roofline.ui.render import serving_point

REQUEST = Request(input_tokens=8192, output_tokens=1024)
# The Corsair's fixed cost per draft step is not published. The package default is fitted to GPU serving
# stacks (hundreds of microseconds per pass, tens per layer); d-Matrix schedules the card's dataflow itself.
# The example reports the calibrated default and two stated assumptions side by side.
CORSAIR_FIXED_COST = {"GPU-calibrated default": None, "assumed 50 us/step": "50 us", "assumed 10 us/step": "10 us"}
ACCEPTANCE = rl.Acceptance.alpha_by_gamma({5: 0.926, 40: 0.962})
DRAFT = rl.load_model("gpt-oss-draft-1.6b")


def corsair(step: str | None) -> rl.Device:
    dev = rl.load_device("corsair")
    if step is not None:  # a what-if: the card's own per-step cost, and no per-layer kernel launches
        dev = rl.override(rl.override(dev, "floors.step", step), "floors.layer", "1 ns")
    return dev


def configurations(gpu: str, step: str | None = None) -> list[Placement]:
    g8 = rl.DeviceGroup(device=rl.load_device(gpu), tp=8)
    # the two cards as a 2-stage pipeline (each holds half the draft's layers): one hop per token, where tensor
    # parallelism would pay two collectives per layer (roofline spec ... --draft-on corsair:2 shows that layout)
    corsair_group = rl.DeviceGroup(device=corsair(step), pp=2)
    return [Placement(name=f"{gpu}: disaggregated, no speculation", prefill=g8, decode=g8),
            Placement(name=f"{gpu}: GPU-only speculation", prefill=g8, decode=g8, draft_model=DRAFT, draft_kind="model"),
            Placement(name=f"{gpu}: draft on 2 Corsair", prefill=g8, decode=g8, draft=corsair_group, draft_model=DRAFT,
                      draft_kind="model")]


def sweep(p: Placement, batches: np.ndarray, gammas: np.ndarray):
    r = evaluate_serving("gpt-oss-120b", p, REQUEST, batch=batches, gamma=gammas if p.speculative else 0,
                         acceptance=ACCEPTANCE if p.speculative else None)
    return r, pareto_frontier(r.tokens_per_s_per_user, r.tokens_per_s_per_kw, r.fits)


def run(quick: bool) -> dict:
    batches = 2 ** np.arange(0, 9 if quick else 13)[:, None]           # 1 .. 4096 concurrent requests
    gammas = np.arange(1, 13 if quick else 41)[None, :]
    out = {"request": {"isl": REQUEST.input_tokens, "osl": REQUEST.output_tokens},
           "acceptance": ACCEPTANCE.describe(), "configurations": [], "by_gpu": {}}
    for gpu in ("h100-sxm", "b200"):
        fronts = []
        for p in configurations(gpu):
            r, f = sweep(p, batches, gammas)
            fronts.append(f)
            out["configurations"].append({"name": p.name, "gpu": gpu,
                                          "frontier": [serving_point(r, int(i)) for i in f.index]})
        c = compare_frontiers(fronts[1], fronts[2])
        base_pts = out["configurations"][-2]["frontier"]
        sensitivity = {}
        for label, step in CORSAIR_FIXED_COST.items():
            if step is None:
                cc = c
            else:
                cc = compare_frontiers(fronts[1], sweep(configurations(gpu, step)[2], batches, gammas)[1])
            sensitivity[label] = {"interactivity_optimised": cc.interactivity_optimised,
                                  "energy_optimised": cc.energy_optimised, "max_ratio": cc.max_ratio}
        out["by_gpu"][gpu] = {
            "interactivity_ratio": {"interactivity_optimised": c.interactivity_optimised,
                                    "energy_optimised": c.energy_optimised,
                                    "energy_optimised_tokens_per_s_per_kw": c.energy_optimised_throughput_per_kw},
            "corsair_fixed_cost_sensitivity": sensitivity,
            "baseline_e2e_s": base_pts[-1]["e2e_s"],  # GPU-only speculation at its best tokens/s per kW
            "no_speculation_energy_optimised_e2e_s": out["configurations"][-3]["frontier"][-1]["e2e_s"],
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
    t = Table(title="Corsair draft against GPU-only speculation at equal tokens/s per kW",
              caption="interactivity-optimised: at the GPU speculation's most interactive point; energy-optimised: at "
                      "its highest tokens/s per kW (— when the Corsair configuration cannot reach it); best: the best "
                      "ratio where both frontiers overlap. Published: 2-5x, up to 10x, baseline ~24 s.")
    for col in ("GPU", "Corsair fixed cost", "interactivity-opt.", "energy-opt.", "best", "baseline E2E s"):
        t.add_column(col, justify="left" if col in ("GPU", "Corsair fixed cost") else "right")

    def x(v: float | None) -> str:
        return f"{v:.2f}x" if v is not None and v == v else "—"

    for gpu, v in out["by_gpu"].items():
        for label, r in v["corsair_fixed_cost_sensitivity"].items():
            t.add_row(gpu, label, x(r["interactivity_optimised"]), x(r["energy_optimised"]), x(r["max_ratio"]),
                      f"{v['baseline_e2e_s']:.1f}")
    console.print(t)
    b = out["by_gpu"]["b200"]["corsair_fixed_cost_sensitivity"]
    console.print(
        f"What drives the gap: the Corsair draft's fixed cost per step. With the GPU-calibrated default it is "
        f"{x(b['GPU-calibrated default']['interactivity_optimised'])} at the interactivity-optimised point; if the card "
        f"costs 10 us per step it is {x(b['assumed 10 us/step']['interactivity_optimised'])}. At energy-optimised "
        "points the GPUs run hundreds of sequences, whose draft KV (9K tokens each) no longer fits the Corsair's "
        "4 GB of SRAM and spills to LPDDR5X, so the model cannot reproduce the published 'up to 10x' there.")

if __name__ == "__main__":
    run_example(__doc__, run, show, quick=True)
