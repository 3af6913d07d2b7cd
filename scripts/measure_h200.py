"""Measure an H200 (or any CUDA GPU) for roofline's validation data: memory bandwidth, GEMM efficiency by
token count, launch gaps, weight-only int4 matmuls, and decode and prefill passes of a Llama-shaped model.

Run once on the machine under test (PyTorch with CUDA needed; nothing here is needed to build or test roofline):

    python scripts/measure_h200.py --out measured.csv --setup measured_setup.json

It measures, each section on its own (a section that fails records its error and the rest still run):
* ``memory``: a device-to-device copy of 4 GiB (bytes read + written / time) and a read-only reduction;
* ``gemm``: ``x @ W`` for T = 1 .. 16384 token rows against two weight shapes (8192 x 28672: a 70B MLP,
  4096 x 14336: an 8B MLP) in bf16 and FP8 (e4m3, per-tensor scales, ``torch._scaled_mm``): time, FLOP/s,
  bytes/s; small T shows the bandwidth a matrix-vector product reaches, large T the tensor-core efficiency;
* ``int4``: the weight-only int4 matmul gpt-fast runs (``torch._weight_int4pack_mm``, group size 128) at
  T = 1 .. 64, beside the bf16 times of the same shape: what dequantising costs;
* ``launch``: 2,000 one-element kernels replayed from a CUDA graph and launched eagerly: the gap a kernel
  boundary costs;
* ``decode``: one decode step of a random-weight Llama-3.1-8B-shaped model (32 layers, d 4096, 32 heads,
  8 KV heads, SwiGLU 14336, vocab 128256; RMSNorm, rotary embedding, KV-cache write, attention over the cache,
  LM head, argmax) in bf16, eager PyTorch kernels replayed from a CUDA graph, at batch 1 .. 256 and 1,024 and
  4,096 tokens of context: milliseconds per step;
* ``prefill``: one forward pass of the same model over a 512 .. 8,192-token prompt (batch 1, causal flash
  attention), eager: the time to the first token inside the process;
* ``moe``: one decode step of a random-weight Mixtral-8x7B-shaped model (the Llama layer above with 8 SwiGLU
  experts of 14336, top-2 routing, vocab 32000) in bf16 at batch 1 .. 128 and 1,024 tokens of context, replayed
  from a CUDA graph: the routed experts run as two grouped GEMMs (``torch._grouped_mm``, one group per expert,
  an expert with no token has no tile and its weights are not read), so the step streams the experts its batch
  touches. Also counted: the experts a layer's batch touches under the random router (against the closed form
  E (1 - (1 - k/E)^B));
* ``int8``: the weight-only int8 linear gpt-fast runs (``F.linear(x, w.to(bf16)) * scale``) compiled by
  Inductor as gpt-fast compiles it, beside the bf16 linear and the same int8 linear run eagerly (a cast kernel,
  then cuBLAS), at 1 .. 8 token rows on the 8B model's shapes: what the int8 recipe streams;
* ``power``: the board's power (NVML's energy counter over a window, else nvidia-smi's readings) while idle,
  while copying 4 GiB over and over (memory saturated), while multiplying 16384 x 8192 by 8192 x 28672 in bf16
  (tensor cores saturated), and during the Llama-shaped decode steps at batch 1 .. 256 and its 8,192-token
  prefill, each held ~4 s after a 1 s warm-up: what the power model's idle, memory and compute terms and
  its busy floor are on this board; ``power_gemm``: the same meter over one bf16 matmul at 1 .. 4,096 token rows;
  ``power_wait``: over work that mostly waits (the decode step at batch 1 launched eagerly, one-element kernels
  launched eagerly or replayed from a CUDA graph): what a GPU waiting on its host draws;
* ``grouped``: the MoE section's grouped GEMM alone, every one of 8 experts given 1 .. 64 rows, beside one
  cuBLAS matmul per expert replayed from a CUDA graph: what the grouped kernel streams at decode's row counts.

The decode and prefill rows are written in roofline's measurements format (``roofline/validation/README.md``)
so ``roofline validate --data measured.csv`` predicts them; the micro-benchmarks go to the setup JSON with the
GPU name, driver, CUDA and PyTorch versions. Not run in this repository's CI (no GPU there); the rows it writes
are checked by the tests (``tests/test_validation.py``) to be ones ``roofline validate`` predicts.
"""

from __future__ import annotations

import argparse
import csv
import json
import time

#: The measurements format's columns this script fills (roofline/validation/README.md).
COLUMNS = ["id", "source", "stack", "hardware", "n_devices", "tp", "ep", "model", "weight_dtype", "expert_dtype",
           "kv_dtype", "batch", "serving", "isl", "osl", "spec_method", "draft_len", "acceptance_length", "metric",
           "value", "grade", "notes"]
#: Llama-3.1-8B's shape (https://huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json).
LLAMA_8B = {"layers": 32, "d": 4096, "heads": 32, "kv_heads": 8, "head_dim": 128, "ff": 14336, "vocab": 128256}
#: Mixtral-8x7B's shape (https://huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json).
MIXTRAL = {"layers": 32, "d": 4096, "heads": 32, "kv_heads": 8, "head_dim": 128, "ff": 14336, "vocab": 32000,
           "experts": 8, "top_k": 2}


def _row(rid: str, *, metric: str, value: float, batch: int, isl: int, osl: int, hardware: str,
         torch_version: str, note: str, model: str = "llama-3.1-8b") -> dict:
    return {"id": rid, "source": "scripts/measure_h200.py", "stack": f"PyTorch {torch_version} eager kernels",
            "hardware": hardware, "n_devices": 1, "tp": 1, "ep": 1, "model": model, "weight_dtype": "bf16",
            "expert_dtype": "", "kv_dtype": "bf16", "batch": batch, "serving": "static", "isl": isl, "osl": osl,
            "spec_method": "none", "draft_len": 0, "acceptance_length": "", "metric": metric, "value": f"{value:.4f}",
            "grade": "A", "notes": note}


def decode_rows(steps: list[dict], *, ctx: int, hardware: str, torch_version: str, gpu: str) -> list[dict]:
    """The decode loop's timings (``{"batch", "ms_per_step"}`` each, optionally ``"ctx"``) as measurement rows:
    one ITL row per batch and context. A step at ``ctx`` tokens of context is the second output token of a
    ``ctx - 1``-token prompt (isl = ctx - 1, osl = 2: the one step the row times)."""
    out = []
    for r in steps:
        c = int(r.get("ctx", ctx))
        out.append(_row(f"MH{r['batch']}" + ("" if c == ctx else f"c{c}"), metric="itl_ms", value=r["ms_per_step"],
                        batch=r["batch"], isl=c - 1, osl=2, hardware=hardware, torch_version=torch_version,
                        note=f"random weights; one decode step at {c} tokens of context, replayed from a CUDA "
                             f"graph; {gpu}"))
    return out


def prefill_rows(passes: list[dict], *, hardware: str, torch_version: str, gpu: str) -> list[dict]:
    """The prefill passes' timings (``{"tokens", "ms"}`` each) as TTFT rows at batch 1 (timed in the process:
    no request overhead; the first token is the pass's argmax)."""
    return [_row(f"MP{r['tokens']}", metric="ttft_ms", value=r["ms"], batch=1, isl=r["tokens"], osl=1,
                 hardware=hardware, torch_version=torch_version,
                 note=f"random weights; one eager forward pass over the prompt, causal flash attention; {gpu}")
            for r in passes]


def gptfast_rows(steps: list[dict], *, hardware: str, torch_version: str, gpu: str) -> list[dict]:
    """The gpt-fast-recipe decode steps (``{"format", "batch", "ctx", "ms_per_step"}`` each) as ITL rows of the
    gpt-fast stack family (weight-only int4 is tinygemm's group of 128)."""
    fmts = {"bf16": "bf16", "int8": "int8", "int4": "int4-g128"}
    out = []
    for r in steps:
        row = _row(f"MG{r['format']}b{r['batch']}", metric="itl_ms", value=r["ms_per_step"], batch=r["batch"],
                   isl=r["ctx"] - 1, osl=2, hardware=hardware, torch_version=torch_version,
                   note=f"random weights; gpt-fast's recipe re-implemented (static KV cache, torch.compile "
                        f"reduce-overhead): wall time per step over 50 steps at {r['ctx']} tokens of context; {gpu}")
        row["stack"] = f"gpt-fast recipe (PyTorch {torch_version} torch.compile)"
        row["weight_dtype"] = fmts[r["format"]]
        out.append(row)
    return out


def moe_rows(steps: list[dict], *, hardware: str, torch_version: str, gpu: str) -> list[dict]:
    """The MoE decode steps (``{"batch", "ctx", "ms_per_step", "experts_touched"}`` each) as ITL rows of
    Mixtral-8x7B at batch 1 .. 128."""
    return [_row(f"MX{r['batch']}", metric="itl_ms", value=r["ms_per_step"], batch=r["batch"], isl=r["ctx"] - 1,
                 osl=2, hardware=hardware, torch_version=torch_version, model="mixtral-8x7b",
                 note=f"random weights and router; one decode step at {r['ctx']} tokens of context, replayed from a "
                      f"CUDA graph; experts as grouped GEMMs (torch._grouped_mm); a layer's batch touched "
                      f"{r['experts_touched']:.2f} of 8 experts on average; {gpu}")
            for r in steps if "ms_per_step" in r]


def write_rows(path: str, rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        out = csv.DictWriter(f, fieldnames=COLUMNS)
        out.writeheader()
        out.writerows(rows)


class Bench:
    """CUDA-event timing: the mean of ``repeat`` calls after ``warmup`` (seconds)."""

    def __init__(self, torch):
        self.torch = torch

    def time_s(self, fn, repeat: int = 20, warmup: int = 3) -> float:
        torch = self.torch
        for _ in range(warmup):
            fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(repeat):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / 1e3 / repeat


def measure_memory(torch, bench: Bench) -> dict:
    n = 4 * 2**30 // 2
    a = torch.empty(n, dtype=torch.bfloat16, device="cuda").normal_()
    b = torch.empty_like(a)
    copy_s = bench.time_s(lambda: b.copy_(a))
    read_s = bench.time_s(lambda: a.sum(dtype=torch.float32))
    return {"copy_bytes_per_s": 2 * a.numel() * 2 / copy_s, "read_bytes_per_s": a.numel() * 2 / read_s,
            "bytes": a.numel() * 2}


def measure_gemm(torch, bench: Bench) -> list[dict]:
    out = []
    one = torch.tensor(1.0, device="cuda")
    for k, n in ((8192, 28672), (4096, 14336)):
        w = torch.randn(k, n, device="cuda", dtype=torch.bfloat16) * 0.02
        w8 = w.t().contiguous().to(torch.float8_e4m3fn).t()   # column-major, as _scaled_mm wants
        for t in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384):
            x = torch.randn(t, k, device="cuda", dtype=torch.bfloat16)
            rep = 20 if t <= 2048 else 6
            rec = {"k": k, "n": n, "tokens": t, "bf16_s": bench.time_s(lambda: x @ w, repeat=rep)}
            tp = max(t, 16)   # _scaled_mm wants rows in multiples of 16: a smaller batch is padded
            x8 = torch.randn(tp, k, device="cuda", dtype=torch.bfloat16).to(torch.float8_e4m3fn)
            try:
                rec["fp8_s"] = bench.time_s(lambda: torch._scaled_mm(x8, w8, scale_a=one, scale_b=one,
                                                                   out_dtype=torch.bfloat16), repeat=rep)
                rec["fp8_rows"] = tp
            except Exception as e:  # noqa: BLE001 - not every GPU/torch build has FP8 GEMMs
                rec["fp8_error"] = f"{type(e).__name__}: {e}"[:300]
            out.append(rec)
        del w, w8
    return out


def measure_int4(torch, bench: Bench) -> list[dict]:
    """gpt-fast's int4 path: weights packed by ``_convert_weight_to_int4pack`` (two 4-bit values a byte, inner k
    tiles 8), one bf16 scale and zero per 128 input elements, ``_weight_int4pack_mm`` (tinygemm)."""
    out = []
    for k, n in ((8192, 28672), (4096, 14336)):
        q = torch.randint(0, 16, (n, k), device="cuda", dtype=torch.int32)
        packed_u8 = (q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8)
        wp = torch.ops.aten._convert_weight_to_int4pack(packed_u8, 8)
        sz = torch.randn(k // 128, n, 2, device="cuda", dtype=torch.bfloat16) * 0.01
        w = torch.randn(k, n, device="cuda", dtype=torch.bfloat16) * 0.02
        for t in (1, 2, 4, 8, 16, 32, 64):
            x = torch.randn(t, k, device="cuda", dtype=torch.bfloat16)
            out.append({"k": k, "n": n, "tokens": t,
                        "int4_s": bench.time_s(lambda: torch.ops.aten._weight_int4pack_mm(x, wp, 128, sz)),
                        "bf16_s": bench.time_s(lambda: x @ w)})
        del q, packed_u8, wp, w
    return out


def measure_launch(torch, bench: Bench) -> dict:
    x = torch.zeros(1, device="cuda")
    kernels = 2000

    def chain():
        for _ in range(kernels):
            x.add_(1.0)

    graph = torch.cuda.CUDAGraph()
    chain()
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        chain()
    return {"kernels": kernels, "graph_s_per_kernel": bench.time_s(graph.replay, repeat=10) / kernels,
            "eager_s_per_kernel": bench.time_s(chain, repeat=5) / kernels}


def llama_weights(torch, shape: dict) -> dict:
    d, hd, nh, nkv, ff = shape["d"], shape["head_dim"], shape["heads"], shape["kv_heads"], shape["ff"]
    bf = torch.bfloat16

    def mat(*s):
        return torch.randn(*s, device="cuda", dtype=bf) * 0.02

    layers = [{"ln1": torch.ones(d, device="cuda", dtype=bf), "ln2": torch.ones(d, device="cuda", dtype=bf),
               "qkv": mat(d, (nh + 2 * nkv) * hd), "o": mat(nh * hd, d), "gu": mat(d, 2 * ff), "down": mat(ff, d)}
              for _ in range(shape["layers"])]
    return {"layers": layers, "norm": torch.ones(d, device="cuda", dtype=bf), "head": mat(d, shape["vocab"])}


def rope(torch, x, cos, sin):
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def dense_mlp(torch, F, x, lw: dict, shape: dict, touched=None):
    """The Llama layer's SwiGLU MLP (``touched``: unused, the MoE MLP's counter)."""
    g, u = (x @ lw["gu"]).chunk(2, dim=-1)
    return (F.silu(g) * u) @ lw["down"]


def decode_step(torch, F, shape: dict, w: dict, cache: list, h0, pos: int, cos, sin, touched=None, mlp=dense_mlp):
    """One decode step for a batch: each sequence writes its new K/V at ``pos`` and attends over pos + 1
    tokens. GQA runs as ``heads / kv_heads`` query rows per KV head (the flash kernel, no expanded KV). ``mlp``:
    the dense SwiGLU, or :func:`moe_mlp` / :func:`moe_loop` for the Mixtral-shaped model."""
    nh, nkv, hd, d = shape["heads"], shape["kv_heads"], shape["head_dim"], shape["d"]
    b = h0.shape[0]
    h = h0
    for lw, (kc, vc) in zip(w["layers"], cache):
        x = F.rms_norm(h, (d,), lw["ln1"])
        q, k, v = (x @ lw["qkv"]).split([nh * hd, nkv * hd, nkv * hd], dim=-1)
        q = rope(torch, q.view(b, nkv, nh // nkv, hd), cos, sin)
        kc[:, :, pos] = rope(torch, k.view(b, nkv, hd), cos, sin)
        vc[:, :, pos] = v.view(b, nkv, hd)
        att = F.scaled_dot_product_attention(q, kc[:, :, :pos + 1], vc[:, :, :pos + 1])
        h = h + att.reshape(b, nh * hd) @ lw["o"]
        h = h + mlp(torch, F, F.rms_norm(h, (d,), lw["ln2"]), lw, shape, touched)
    return (F.rms_norm(h, (d,), w["norm"]) @ w["head"]).argmax(-1)


def measure_decode(torch, F, bench: Bench, w: dict, shape: dict) -> list[dict]:
    out = []
    cos = torch.ones(shape["head_dim"], device="cuda", dtype=torch.bfloat16)
    sin = torch.zeros_like(cos)
    for ctx, batches in ((1024, (1, 4, 16, 64, 128, 256)), (4096, (1, 16, 64))):
        for b in batches:
            cache = [tuple(torch.randn(b, shape["kv_heads"], ctx, shape["head_dim"], device="cuda",
                                       dtype=torch.bfloat16) for _ in range(2)) for _ in range(shape["layers"])]
            h0 = torch.randn(b, shape["d"], device="cuda", dtype=torch.bfloat16)

            def step():
                return decode_step(torch, F, shape, w, cache, h0, ctx - 1, cos, sin)

            step()
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                step()
            rec = {"batch": b, "ctx": ctx, "ms_per_step": bench.time_s(graph.replay) * 1e3}
            if b == 1:
                rec["eager_ms_per_step"] = bench.time_s(step, repeat=10) * 1e3
            out.append(rec)
            del cache, graph
    return out


def prefill_pass(torch, F, shape: dict, w: dict, tokens: int):
    nh, nkv, hd, d = shape["heads"], shape["kv_heads"], shape["head_dim"], shape["d"]
    h = torch.randn(tokens, d, device="cuda", dtype=torch.bfloat16)
    for lw in w["layers"]:
        x = F.rms_norm(h, (d,), lw["ln1"])
        q, k, v = (x @ lw["qkv"]).split([nh * hd, nkv * hd, nkv * hd], dim=-1)
        q = q.view(tokens, nh, hd).transpose(0, 1)
        k = k.reshape(tokens, nkv, hd).transpose(0, 1).repeat_interleave(nh // nkv, dim=0)
        v = v.reshape(tokens, nkv, hd).transpose(0, 1).repeat_interleave(nh // nkv, dim=0)
        att = F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True)
        h = h + att[0].transpose(0, 1).reshape(tokens, nh * hd) @ lw["o"]
        g, u = (F.rms_norm(h, (d,), lw["ln2"]) @ lw["gu"]).chunk(2, dim=-1)
        h = h + (F.silu(g) * u) @ lw["down"]
    return (F.rms_norm(h[-1:], (d,), w["norm"]) @ w["head"]).argmax(-1)


def measure_prefill(torch, F, bench: Bench, w: dict, shape: dict) -> list[dict]:
    return [{"tokens": t, "ms": bench.time_s(lambda: prefill_pass(torch, F, shape, w, t), repeat=5) * 1e3}
            for t in (512, 2048, 8192)]


def moe_weights(torch, shape: dict) -> dict:
    """Random Mixtral-shaped weights: attention as :func:`llama_weights`, a router and per layer the experts'
    gate-up (E, 2 ff, d) and down (E, d, ff) matrices, passed transposed to the grouped GEMM."""
    d, hd, nh, nkv, ff, e = (shape[k] for k in ("d", "head_dim", "heads", "kv_heads", "ff", "experts"))
    bf = torch.bfloat16

    def mat(*s):
        return torch.empty(*s, device="cuda", dtype=bf).normal_(0.0, 0.02)

    layers = [{"ln1": torch.ones(d, device="cuda", dtype=bf), "ln2": torch.ones(d, device="cuda", dtype=bf),
               "qkv": mat(d, (nh + 2 * nkv) * hd), "o": mat(nh * hd, d), "router": mat(d, e),
               "gu": mat(e, 2 * ff, d), "down": mat(e, d, ff)} for _ in range(shape["layers"])]
    return {"layers": layers, "norm": torch.ones(d, device="cuda", dtype=bf), "head": mat(d, shape["vocab"])}


def moe_mlp(torch, F, x, lw: dict, shape: dict, touched=None):
    """Top-k routed SwiGLU experts over a batch of rows: the rows sorted by expert, one grouped GEMM for
    gate-up and one for down (``offs`` = each expert's last row), weighted and summed back per token.
    ``touched`` (a 0-d tensor) accumulates the experts that received a row."""
    e, k = shape["experts"], shape["top_k"]
    top_v, top_i = (x @ lw["router"]).topk(k, dim=-1)
    wts = torch.softmax(top_v.float(), dim=-1).to(x.dtype).reshape(-1)
    flat = top_i.reshape(-1)
    order = flat.argsort(stable=True)
    counts = (flat[:, None] == torch.arange(e, device=flat.device)).sum(0)   # bincount would sync to size itself
    if touched is not None:
        touched += (counts > 0).sum()
    offs = counts.cumsum(0).to(torch.int32)
    g, u = torch._grouped_mm(x[order // k], lw["gu"].transpose(-2, -1), offs=offs).chunk(2, dim=-1)
    y = torch._grouped_mm(F.silu(g) * u, lw["down"].transpose(-2, -1), offs=offs) * wts[order, None]
    return torch.zeros_like(x).index_add_(0, order // k, y)


def moe_reference(torch, F, x, lw: dict, shape: dict):
    """The same experts one token and expert at a time in float32: the check on :func:`moe_mlp`."""
    top_v, top_i = (x @ lw["router"]).topk(shape["top_k"], dim=-1)
    wts = torch.softmax(top_v.float(), dim=-1)
    out = torch.zeros(x.shape, device=x.device, dtype=torch.float32)
    for t in range(x.shape[0]):
        for j in range(shape["top_k"]):
            ex = int(top_i[t, j])
            g, u = (x[t].float() @ lw["gu"][ex].float().t()).chunk(2)
            out[t] += wts[t, j] * ((F.silu(g) * u) @ lw["down"][ex].float().t())
    return out


def moe_loop(torch, F, x, lw: dict, shape: dict, touched=None):
    """The fallback where the grouped GEMM is missing: one gate-up and one down matmul per touched expert,
    found on the host (a sync per layer; not capturable in a CUDA graph)."""
    k = shape["top_k"]
    top_v, top_i = (x @ lw["router"]).topk(k, dim=-1)
    wts = torch.softmax(top_v.float(), dim=-1).to(x.dtype)
    out = torch.zeros_like(x)
    experts = top_i.unique().tolist()
    if touched is not None:
        touched += len(experts)
    for ex in experts:
        tok, slot = (top_i == ex).nonzero(as_tuple=True)
        g, u = (x[tok] @ lw["gu"][ex].t()).chunk(2, dim=-1)
        out.index_add_(0, tok, ((F.silu(g) * u) @ lw["down"][ex].t()) * wts[tok, slot, None])
    return out


def measure_moe(torch, F, bench: Bench, shape: dict = MIXTRAL, ctx: int = 1024,
                batches: tuple = (1, 2, 4, 8, 16, 32, 64, 128)) -> list[dict]:
    """Mixtral-shaped decode steps by batch: grouped GEMMs replayed from a CUDA graph, or, where the grouped
    GEMM fails its check against :func:`moe_reference`, the per-expert loop timed eagerly (the record says which)."""
    w = moe_weights(torch, shape)
    x = F.rms_norm(torch.randn(6, shape["d"], device="cuda", dtype=torch.bfloat16), (shape["d"],))
    ref = moe_reference(torch, F, x, w["layers"][0], shape)
    check = {"check_max_abs_ref": float(ref.abs().max())}
    mlp = moe_mlp
    try:
        check["check_max_abs_error"] = float((moe_mlp(torch, F, x, w["layers"][0], shape).float() - ref).abs().max())
        if not check["check_max_abs_error"] <= 0.05 * check["check_max_abs_ref"]:
            mlp = moe_loop
    except Exception as e:  # noqa: BLE001 - no grouped GEMM in this build: the loop instead
        check["grouped_error"], mlp = f"{type(e).__name__}: {e}"[:500], moe_loop
    check["implementation"] = mlp.__name__
    out = [check]
    print(check, flush=True)
    cos = torch.ones(shape["head_dim"], device="cuda", dtype=torch.bfloat16)
    sin = torch.zeros_like(cos)
    for b in batches:
        cache = [tuple(torch.randn(b, shape["kv_heads"], ctx, shape["head_dim"], device="cuda",
                                   dtype=torch.bfloat16) for _ in range(2)) for _ in range(shape["layers"])]
        h0 = torch.randn(b, shape["d"], device="cuda", dtype=torch.bfloat16)
        touched = torch.zeros((), device="cuda", dtype=torch.int64)

        def step(t=None):
            return decode_step(torch, F, shape, w, cache, h0, ctx - 1, cos, sin, t, mlp)

        step(touched)
        torch.cuda.synchronize()
        rec = {"batch": b, "ctx": ctx, "experts_touched": float(touched) / shape["layers"]}
        if mlp is moe_mlp:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                step()
            rec["ms_per_step"] = bench.time_s(graph.replay) * 1e3
            del graph
        else:
            rec["eager_ms_per_step"] = bench.time_s(step, repeat=5) * 1e3
        out.append(rec)
        print(rec, flush=True)
        del cache
    return out


def measure_grouped(torch, bench: Bench, experts: int = 8) -> list[dict]:
    """The experts' matmuls alone, every expert given ``m`` rows: the grouped GEMM of :func:`moe_mlp` against
    one cuBLAS matmul per expert replayed from a CUDA graph, on Mixtral's gate-up and down shapes."""
    out = []
    for k, n in ((4096, 28672), (14336, 4096)):
        w = torch.empty(experts, n, k, device="cuda", dtype=torch.bfloat16).normal_(0.0, 0.02)
        for m in (1, 2, 4, 16, 64):
            x = torch.randn(experts * m, k, device="cuda", dtype=torch.bfloat16)
            offs = torch.arange(1, experts + 1, device="cuda", dtype=torch.int32) * m

            def loop():
                for e in range(experts):
                    x[e * m:(e + 1) * m] @ w[e].t()

            loop()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                loop()
            rec = {"k": k, "n": n, "experts": experts, "rows_per_expert": m,
                   "grouped_s": bench.time_s(lambda: torch._grouped_mm(x, w.transpose(-2, -1), offs=offs)),
                   "cublas_loop_s": bench.time_s(graph.replay), "weight_bytes": w.numel() * 2}
            out.append(rec)
            print(rec, flush=True)
            del graph
        del w
    return out


def _power_meter(torch):
    """(how, start, stop): start() begins a window, stop() returns its mean power in watts. NVML's total-energy
    counter where pynvml is installed (energy / time over the window), else nvidia-smi's power readings every
    100 ms averaged over the window."""
    try:
        import pynvml
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        state = {}

        def start():
            state["j"], state["t"] = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle) / 1e3, time.perf_counter()

        def stop():
            return (pynvml.nvmlDeviceGetTotalEnergyConsumption(handle) / 1e3 - state["j"]) / (time.perf_counter() - state["t"])
        return "nvml energy counter", start, stop
    except Exception:  # noqa: BLE001 - no pynvml: sample nvidia-smi instead
        import subprocess
        state = {}

        def start():
            state["p"] = subprocess.Popen(["nvidia-smi", "--query-gpu=power.draw", "--format=csv,noheader,nounits",
                                           "-lms", "100"], stdout=subprocess.PIPE, text=True)

        def stop():
            state["p"].terminate()
            samples = [float(x) for x in state["p"].communicate()[0].split() if x.replace(".", "", 1).isdigit()]
            return sum(samples) / len(samples) if samples else float("nan")
        return "nvidia-smi power.draw every 100 ms", start, stop


def _held(torch, meter, fn, seconds: float = 4.0, warmup_s: float = 1.0) -> dict:
    """Run ``fn`` back to back for a warm-up and then ``seconds`` under the power meter."""
    _, start, stop = meter
    end = time.perf_counter() + warmup_s
    while time.perf_counter() < end:
        fn()
        torch.cuda.synchronize()
    start()
    t0, calls = time.perf_counter(), 0
    while time.perf_counter() < t0 + seconds:
        fn()
        torch.cuda.synchronize()
        calls += 1
    elapsed = time.perf_counter() - t0
    return {"power_w": stop(), "s_per_call": elapsed / calls, "calls": calls}


def measure_power(torch, F, w: dict, shape: dict) -> dict:
    meter = _power_meter(torch)
    out = {"meter": meter[0]}
    torch.cuda.synchronize()
    out["idle"] = _held(torch, meter, lambda: time.sleep(0.05), warmup_s=2.0)
    a = torch.empty(2 * 2**30, dtype=torch.bfloat16, device="cuda").normal_()
    b = torch.empty_like(a)
    out["copy"] = _held(torch, meter, lambda: b.copy_(a))
    del a, b
    x = torch.randn(16384, 8192, device="cuda", dtype=torch.bfloat16)
    wm = torch.randn(8192, 28672, device="cuda", dtype=torch.bfloat16) * 0.02
    out["gemm"] = {**_held(torch, meter, lambda: x @ wm), "flop": 2 * 16384 * 8192 * 28672}
    del x, wm
    cos = torch.ones(shape["head_dim"], device="cuda", dtype=torch.bfloat16)
    sin = torch.zeros_like(cos)
    out["decode"] = []
    for batch in (1, 16, 64, 256):
        cache = [tuple(torch.randn(batch, shape["kv_heads"], 1024, shape["head_dim"], device="cuda",
                                   dtype=torch.bfloat16) for _ in range(2)) for _ in range(shape["layers"])]
        h0 = torch.randn(batch, shape["d"], device="cuda", dtype=torch.bfloat16)

        def step():
            return decode_step(torch, F, shape, w, cache, h0, 1023, cos, sin)
        step()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        out["decode"].append({"batch": batch, "ctx": 1024, **_held(torch, meter, graph.replay)})
        print(out["decode"][-1], flush=True)
        del cache, graph
    out["prefill"] = {"tokens": 8192, **_held(torch, meter, lambda: prefill_pass(torch, F, shape, w, 8192))}
    print({k: v for k, v in out.items() if k != "decode"}, flush=True)
    return out


def measure_power_gemm(torch) -> list[dict]:
    """The board's power while one bf16 matmul x (T x 8192) @ W (8192 x 28672) runs back to back, T = 1 ..
    4,096: from a weight stream (T small) to saturated tensor cores, with the achieved bytes/s and FLOP/s."""
    meter = _power_meter(torch)
    w = torch.randn(8192, 28672, device="cuda", dtype=torch.bfloat16) * 0.02
    out = []
    for t in (1, 16, 64, 256, 1024, 4096):
        x = torch.randn(t, 8192, device="cuda", dtype=torch.bfloat16)
        rec = {"tokens": t, **_held(torch, meter, lambda: x @ w, seconds=3.0)}
        rec["flop_per_s"] = 2 * t * 8192 * 28672 / rec["s_per_call"]
        rec["bytes_per_s"] = 2 * (8192 * 28672 + t * (8192 + 28672)) / rec["s_per_call"]
        out.append(rec)
        print(rec, flush=True)
    return out


def measure_power_wait(torch, F, w: dict, shape: dict) -> dict:
    """The board's power while it mostly waits, beside its idle power and the same step from a CUDA graph on the
    same machine: the Llama-shaped decode step at batch 1 launched eagerly from Python (its ~840 kernels each
    wait on a host launch), one-element kernels launched eagerly back to back, and the same kernels replayed
    from a CUDA graph (the GPU busy with nothing but kernel boundaries)."""
    meter = _power_meter(torch)
    cos = torch.ones(shape["head_dim"], device="cuda", dtype=torch.bfloat16)
    cache = [tuple(torch.randn(1, shape["kv_heads"], 1024, shape["head_dim"], device="cuda", dtype=torch.bfloat16)
                   for _ in range(2)) for _ in range(shape["layers"])]
    h0 = torch.randn(1, shape["d"], device="cuda", dtype=torch.bfloat16)

    def step():
        return decode_step(torch, F, shape, w, cache, h0, 1023, cos, cos * 0)
    torch.cuda.synchronize()
    out = {"idle": _held(torch, meter, lambda: time.sleep(0.05), warmup_s=2.0),
           "decode_eager_batch1": _held(torch, meter, step)}
    step_graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(step_graph):
        step()
    out["decode_graph_batch1"] = _held(torch, meter, step_graph.replay)
    x = torch.zeros(1, device="cuda")

    def chain():
        for _ in range(2000):
            x.add_(1.0)
    out["tiny_kernels_eager"] = {**_held(torch, meter, chain), "kernels_per_call": 2000}
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        chain()
    out["tiny_kernels_graph"] = {**_held(torch, meter, graph.replay), "kernels_per_call": 2000}
    print(out, flush=True)
    return out


def measure_int8(torch, F, bench: Bench) -> list[dict]:
    """gpt-fast's int8 weight-only linear, ``F.linear(x, w.to(bf16)) * s``, compiled as gpt-fast compiles
    (Inductor, coordinate-descent tuning), eager, and the bf16 linear of the same shape, at 1 .. 8 rows."""
    import torch._inductor.config as ic
    ic.coordinate_descent_tuning = True
    out = []
    for k, n in ((4096, 28672), (14336, 4096)):
        w8 = torch.randint(-127, 127, (n, k), device="cuda", dtype=torch.int8)
        s = torch.rand(n, device="cuda", dtype=torch.bfloat16) * 1e-3
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02

        def int8_linear(x):
            return F.linear(x, w8.to(x.dtype)) * s

        compiled = torch.compile(int8_linear, dynamic=False)
        for t in (1, 2, 8):
            x = torch.randn(t, k, device="cuda", dtype=torch.bfloat16)
            start = time.perf_counter()
            compiled(x)
            torch.cuda.synchronize()
            out.append({"k": k, "n": n, "tokens": t, "compile_s": round(time.perf_counter() - start, 1),
                        "int8_compiled_s": bench.time_s(lambda: compiled(x), repeat=50),
                        "int8_eager_s": bench.time_s(lambda: int8_linear(x), repeat=50),
                        "bf16_s": bench.time_s(lambda: F.linear(x, w), repeat=50)})
            print(out[-1], flush=True)
        del w8, w
        torch._dynamo.reset()
    return out


def count_kernels(torch, F, w: dict, shape: dict) -> dict:
    """The GPU kernels one eager decode step at batch 1 launches (torch.profiler), per layer."""
    from torch.profiler import ProfilerActivity, profile
    cos = torch.ones(shape["head_dim"], device="cuda", dtype=torch.bfloat16)
    cache = [tuple(torch.randn(1, shape["kv_heads"], 1024, shape["head_dim"], device="cuda", dtype=torch.bfloat16)
                   for _ in range(2)) for _ in range(shape["layers"])]
    h0 = torch.randn(1, shape["d"], device="cuda", dtype=torch.bfloat16)
    decode_step(torch, F, shape, w, cache, h0, 1023, cos, cos * 0)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        decode_step(torch, F, shape, w, cache, h0, 1023, cos, cos * 0)
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type.name == "CUDA"]
    return {"kernels_per_step": len(names), "kernels_per_layer": len(names) / shape["layers"],
            "first_layer": names[:len(names) // shape["layers"]]}


def gptfast_model(torch, F, shape: dict, fmt: str):
    """A Llama-shaped decoder in gpt-fast's recipe (https://github.com/pytorch-labs/gpt-fast): a static KV cache
    written with index_copy_, every linear layer (LM head included) in ``fmt``: bf16, int8 weight-only
    (``F.linear(x, w.to(bf16)) * scale``, fused by Inductor) or int4 weight-only (tinygemm, group 128)."""
    nn = torch.nn

    class Linear(nn.Module):
        def __init__(self, k, n):
            super().__init__()
            self.k, self.n = k, n
            if fmt == "int8":
                self.register_buffer("w", torch.randint(-127, 127, (n, k), device="cuda", dtype=torch.int8))
                self.register_buffer("s", torch.rand(n, device="cuda", dtype=torch.bfloat16) * 1e-3)
            elif fmt == "int4":
                q = torch.randint(0, 16, (n, k), device="cuda", dtype=torch.int32)
                self.register_buffer("w", torch.ops.aten._convert_weight_to_int4pack(
                    (q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8), 8))
                self.register_buffer("sz", torch.randn(k // 128, n, 2, device="cuda", dtype=torch.bfloat16) * 1e-2)
            else:
                self.register_buffer("w", torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02)

        def forward(self, x):
            if fmt == "int8":
                return F.linear(x, self.w.to(x.dtype)) * self.s
            if fmt == "int4":
                return torch.ops.aten._weight_int4pack_mm(x.reshape(-1, self.k), self.w, 128, self.sz).reshape(
                    *x.shape[:-1], self.n)
            return F.linear(x, self.w)

    d, nh, nkv, hd, ff = shape["d"], shape["heads"], shape["kv_heads"], shape["head_dim"], shape["ff"]

    class KV(nn.Module):
        def __init__(self, batch, ctx):
            super().__init__()
            for name in ("k", "v"):
                self.register_buffer(name, torch.randn(batch, nkv, ctx, hd, device="cuda", dtype=torch.bfloat16) * .1)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(shape["vocab"], d, device="cuda", dtype=torch.bfloat16)
            self.layers = nn.ModuleList(nn.ModuleDict({"qkv": Linear(d, (nh + 2 * nkv) * hd), "o": Linear(nh * hd, d),
                                                       "gu": Linear(d, 2 * ff), "down": Linear(ff, d)})
                                        for _ in range(shape["layers"]))
            self.head = Linear(d, shape["vocab"])
            self.ones = torch.ones(d, device="cuda", dtype=torch.bfloat16)

        def setup_cache(self, batch, ctx):   # buffers: static addresses that CUDA graphs may write
            self.kv = nn.ModuleList(KV(batch, ctx) for _ in range(shape["layers"]))

        def forward(self, tok, pos):
            h = self.emb(tok)
            b = h.shape[0]
            for lay, kv in zip(self.layers, self.kv):
                kc, vc = kv.k, kv.v
                q, k, v = lay["qkv"](F.rms_norm(h, (d,), self.ones)).split([nh * hd, nkv * hd, nkv * hd], dim=-1)
                kc.index_copy_(2, pos, k.view(b, nkv, 1, hd))
                vc.index_copy_(2, pos, v.view(b, nkv, 1, hd))
                att = F.scaled_dot_product_attention(q.view(b, nkv, nh // nkv, hd), kc, vc)
                h = h + lay["o"](att.reshape(b, nh * hd))
                g, u = lay["gu"](F.rms_norm(h, (d,), self.ones)).chunk(2, dim=-1)
                h = h + lay["down"](F.silu(g) * u)
            return self.head(F.rms_norm(h, (d,), self.ones)).argmax(-1)

    return Model()


def measure_gptfast(torch, F, shape: dict, budget_s: float = 300.0, log=print) -> list[dict]:
    """Decode steps of :func:`gptfast_model` compiled as gpt-fast does (``torch.compile(mode="reduce-overhead",
    fullgraph=True)``, Inductor coordinate-descent tuning): wall milliseconds per step over 50 steps fed back
    token to token from Python (host costs included, as gpt-fast's tokens/s counts them), context 1,024."""
    import torch._inductor.config as ic
    ic.coordinate_descent_tuning = True
    start, out = time.perf_counter(), []
    for fmt, batches in (("bf16", (1, 8)), ("int8", (1,)), ("int4", (1,))):
        model = gptfast_model(torch, F, shape, fmt)
        for b in batches:
            if time.perf_counter() - start > budget_s:
                return out
            with torch.no_grad():
                model.setup_cache(b, 1024)
                step = torch.compile(model, mode="reduce-overhead", fullgraph=True)
                tok, pos = torch.zeros(b, dtype=torch.long, device="cuda"), torch.tensor([1023], device="cuda")
                t = time.perf_counter()
                for _ in range(5):
                    tok = step(tok, pos).clone()
                torch.cuda.synchronize()
                compile_s = time.perf_counter() - t
                t = time.perf_counter()
                for _ in range(50):
                    tok = step(tok, pos).clone()
                torch.cuda.synchronize()
            out.append({"format": fmt, "batch": b, "ctx": 1024, "ms_per_step": (time.perf_counter() - t) / 50 * 1e3,
                        "compile_s": round(compile_s, 1)})
            log(out[-1])
            torch._dynamo.reset()
        del model
        torch.cuda.empty_cache()
    return out


def main() -> None:
    import torch
    import torch.nn.functional as F

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="measured.csv")
    ap.add_argument("--setup", default="measured_setup.json")
    ap.add_argument("--hardware", default="h200-sxm", help="roofline device id of the GPU under test")
    ap.add_argument("--sections", default="memory,gemm,int4,launch,decode,prefill,kernels,gptfast,moe,int8,grouped,"
                                          "power,power_gemm,power_wait",
                    help="comma-separated sections to run")
    args = ap.parse_args()
    bench = Bench(torch)
    props = torch.cuda.get_device_properties(0)
    setup = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda,
             "capability": list(torch.cuda.get_device_capability(0)), "sms": props.multi_processor_count,
             "memory_bytes": props.total_memory}
    try:
        import subprocess
        setup["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm,power.limit",
                                          "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    except Exception as e:  # noqa: BLE001
        setup["driver"] = f"{type(e).__name__}"
    t0 = time.perf_counter()
    shape, w = LLAMA_8B, None
    sections = [("memory", lambda: measure_memory(torch, bench)), ("gemm", lambda: measure_gemm(torch, bench)),
                ("int4", lambda: measure_int4(torch, bench)), ("launch", lambda: measure_launch(torch, bench)),
                ("decode", lambda: measure_decode(torch, F, bench, w, shape)),
                ("prefill", lambda: measure_prefill(torch, F, bench, w, shape)),
                ("kernels", lambda: count_kernels(torch, F, w, shape)),
                ("gptfast", lambda: measure_gptfast(torch, F, shape)),
                ("moe", lambda: measure_moe(torch, F, bench)), ("int8", lambda: measure_int8(torch, F, bench)),
                ("grouped", lambda: measure_grouped(torch, bench)),
                ("power", lambda: measure_power(torch, F, w, shape)), ("power_gemm", lambda: measure_power_gemm(torch)),
                ("power_wait", lambda: measure_power_wait(torch, F, w, shape))]
    wanted = args.sections.split(",")
    for name, fn in sections:
        if name not in wanted:
            continue
        if name in ("gptfast", "moe", "int8", "grouped"):
            w = None   # free the eager model's weights
            torch.cuda.empty_cache()
        if name in ("decode", "prefill", "kernels", "power", "power_wait") and w is None:
            w = llama_weights(torch, shape)
        start = time.perf_counter()
        try:
            setup[name] = fn()
        except Exception as e:  # noqa: BLE001 - record the failure, keep the other sections
            setup[name + "_error"] = f"{type(e).__name__}: {e}"[:1000]
        setup.setdefault("section_s", {})[name] = round(time.perf_counter() - start, 2)
        torch.cuda.empty_cache()
        with open(args.setup, "w") as f:
            json.dump(setup, f, indent=1)
        print(name, setup["section_s"][name], "s", flush=True)
    setup["total_s"] = round(time.perf_counter() - t0, 2)
    with open(args.setup, "w") as f:
        json.dump(setup, f, indent=1)
    gpu, tv = setup["gpu"], torch.__version__
    write_rows(args.out, decode_rows(setup.get("decode", []), ctx=1024, hardware=args.hardware, torch_version=tv,
                                     gpu=gpu) + prefill_rows(setup.get("prefill", []), hardware=args.hardware,
                                                             torch_version=tv, gpu=gpu)
               + gptfast_rows(setup.get("gptfast", []), hardware=args.hardware, torch_version=tv, gpu=gpu)
               + moe_rows(setup.get("moe", []), hardware=args.hardware, torch_version=tv, gpu=gpu))
    print(json.dumps(setup, indent=1))


if __name__ == "__main__":
    main()
