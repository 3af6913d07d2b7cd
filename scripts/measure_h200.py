"""Measure an H200 (or any CUDA GPU) for roofline's validation data: HBM bandwidth, GEMM FLOP/s, decode steps.

Run once on the machine under test (PyTorch with CUDA needed; nothing here is needed to build or test roofline):

    python scripts/measure_h200.py --out measured.csv --setup measured_setup.json

It measures
* achieved HBM bandwidth: a device-to-device copy of 4 GiB (bytes read + written / time);
* dense GEMM FLOP/s: 8192^3 in bf16, and in fp8 (e4m3, torch._scaled_mm) where the GPU supports it;
* a decode loop of a random-weight Llama-3.1-8B-shaped model (32 layers, d=4096, 32 heads, 8 KV heads,
  SwiGLU 14336, vocab 128256) in bf16, eager PyTorch with CUDA graphs, at batch 1, 8, 64 and 256 with
  1024 tokens of context: milliseconds per step.

The decode rows are written in roofline's measurements format (``roofline/validation/README.md``) so
``roofline validate --data measured.csv`` predicts them; the micro-benchmarks go to the setup JSON with the
GPU name, driver, CUDA and PyTorch versions. Not run in this repository's CI (no GPU there): the measurements
themselves are untested until a session with a GPU runs it; the rows it writes are checked by the tests
(``tests/test_validation.py``) to be ones ``roofline validate`` predicts.
"""

from __future__ import annotations

import argparse
import csv
import json
import time


def timed(fn, sync, repeat: int = 20, warmup: int = 5) -> float:
    for _ in range(warmup):
        fn()
    sync()
    t = time.perf_counter()
    for _ in range(repeat):
        fn()
    sync()
    return (time.perf_counter() - t) / repeat


#: The measurements format's columns this script fills (roofline/validation/README.md).
COLUMNS = ["id", "source", "stack", "hardware", "n_devices", "tp", "ep", "model", "weight_dtype", "expert_dtype",
           "kv_dtype", "batch", "serving", "isl", "osl", "spec_method", "draft_len", "acceptance_length", "metric",
           "value", "grade", "notes"]


def decode_rows(steps: list[dict], *, ctx: int, hardware: str, torch_version: str, gpu: str) -> list[dict]:
    """The decode loop's timings (``{"batch", "ms_per_step"}`` each) as measurement rows: one ITL row per batch."""
    return [{"id": f"MH{r['batch']}", "source": "scripts/measure_h200.py",
             "stack": f"PyTorch {torch_version} eager + CUDA graphs", "hardware": hardware, "n_devices": 1, "tp": 1,
             "ep": 1, "model": "llama-3.1-8b", "weight_dtype": "bf16", "expert_dtype": "", "kv_dtype": "bf16",
             "batch": r["batch"], "serving": "static", "isl": ctx - 1, "osl": 2, "spec_method": "none",
             "draft_len": 0, "acceptance_length": "", "metric": "itl_ms", "value": f"{r['ms_per_step']:.4f}",
             "grade": "A", "notes": f"random weights; one decode step at {ctx} tokens of context; {gpu}"}
            for r in steps]


def write_rows(path: str, rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        out = csv.DictWriter(f, fieldnames=COLUMNS)
        out.writeheader()
        out.writerows(rows)


def main() -> None:
    import torch
    import torch.nn.functional as F

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="measured.csv")
    ap.add_argument("--setup", default="measured_setup.json")
    ap.add_argument("--hardware", default="h200-sxm", help="roofline device id of the GPU under test")
    args = ap.parse_args()
    dev = torch.device("cuda")
    sync = torch.cuda.synchronize
    setup = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda,
             "capability": list(torch.cuda.get_device_capability(0))}

    # ---- HBM bandwidth: copy 4 GiB (read + write)
    n = 4 * 2**30 // 2
    a = torch.empty(n, dtype=torch.bfloat16, device=dev)
    b = torch.empty_like(a)
    t = timed(lambda: b.copy_(a), sync)
    setup["copy_bytes_per_s"] = 2 * a.numel() * 2 / t
    del a, b

    # ---- GEMM FLOP/s
    m = 8192
    x = torch.randn(m, m, device=dev, dtype=torch.bfloat16)
    y = torch.randn(m, m, device=dev, dtype=torch.bfloat16)
    setup["bf16_gemm_flop_per_s"] = 2 * m**3 / timed(lambda: x @ y, sync)
    try:
        xf, yf = x.to(torch.float8_e4m3fn), y.t().contiguous().to(torch.float8_e4m3fn).t()
        one = torch.tensor(1.0, device=dev)
        setup["fp8_gemm_flop_per_s"] = 2 * m**3 / timed(
            lambda: torch._scaled_mm(xf, yf, scale_a=one, scale_b=one, out_dtype=torch.bfloat16), sync)
    except Exception as e:  # noqa: BLE001 - not every GPU/torch build has FP8 GEMMs
        setup["fp8_gemm_flop_per_s"] = None
        setup["fp8_note"] = f"{type(e).__name__}: {e}"
    del x, y

    # ---- decode steps of a random-weight Llama-3.1-8B-shaped model
    L, d, nh, nkv, hd, ff, V, ctx = 32, 4096, 32, 8, 128, 14336, 128256, 1024
    bf = torch.bfloat16
    w = [{"qkv": torch.randn(d, (nh + 2 * nkv) * hd, device=dev, dtype=bf) * 0.01,
          "o": torch.randn(nh * hd, d, device=dev, dtype=bf) * 0.01,
          "gu": torch.randn(d, 2 * ff, device=dev, dtype=bf) * 0.01,
          "down": torch.randn(ff, d, device=dev, dtype=bf) * 0.01} for _ in range(L)]
    head = torch.randn(d, V, device=dev, dtype=bf) * 0.01
    rows = []
    for batch in (1, 8, 64, 256):
        kv = [(torch.randn(batch, nkv, ctx, hd, device=dev, dtype=bf),
               torch.randn(batch, nkv, ctx, hd, device=dev, dtype=bf)) for _ in range(L)]
        h0 = torch.randn(batch, d, device=dev, dtype=bf)

        def step() -> torch.Tensor:
            h = h0
            for lw, (k, v) in zip(w, kv):
                q, kn, vn = (h @ lw["qkv"]).split([nh * hd, nkv * hd, nkv * hd], dim=-1)
                q = q.view(batch, nh, 1, hd)
                att = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)  # reads the whole cache
                h = h + att.reshape(batch, nh * hd) @ lw["o"]
                g, u = (h @ lw["gu"]).chunk(2, dim=-1)
                h = h + (F.silu(g) * u) @ lw["down"]
            return (h @ head).argmax(-1)

        graph = torch.cuda.CUDAGraph()
        step()
        sync()
        with torch.cuda.graph(graph):
            step()
        ms = timed(graph.replay, sync) * 1e3
        rows.append({"batch": batch, "ms_per_step": ms})
        del kv
    setup["decode"] = rows
    with open(args.setup, "w") as f:
        json.dump(setup, f, indent=1)
    write_rows(args.out, decode_rows(rows, ctx=ctx, hardware=args.hardware, torch_version=torch.__version__,
                                     gpu=setup["gpu"]))
    print(json.dumps(setup, indent=1))


if __name__ == "__main__":
    main()
