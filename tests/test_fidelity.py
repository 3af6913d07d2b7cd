"""GPU-fidelity physics: each test fails without its piece of physics (issue: GPU fidelity)."""

import json
import re
from pathlib import Path

import attrs
import numpy as np
import pytest
from conftest import validate_rows

import roofline as rl
from roofline.evidence.validate import predict_row, read_rows, shipped_data
from roofline.physics.comms import allreduce_s, auto_allreduce_s, oneshot_allreduce_s
from roofline.physics.memory import stored_weight_bytes
from roofline.physics.timing import (
    activation_bytes_per_device,
    attention_class,
    compute_class,
    evaluate_pass,
    measured_share,
    mix,
    overlapped,
)
from roofline.physics.work import (
    count_work,
    expected_experts_touched,
    expert_load_imbalance,
    expert_shard_imbalance,
    kernels_per_pass,
    with_prompt_chunks,
)
from roofline.serving.serve import Placement, Request, offline_tokens_per_s, prefill_queue_s
from roofline.serving_api import evaluate_serving
from roofline.specs.execution import resolve_profile
from roofline.specs.formats import Formats, get_format
from roofline.specs.params import STACK_COLLECTIVES, family_chain, shipped_profile, stack_family
from roofline.specs.resolve import resolve_model


def _simulated_imbalance(E, k, tokens, ep, trials, rng):
    per = E // ep
    maxes, means = [], []
    for _ in range(trials):
        hit = np.zeros(E, bool)
        for _t in range(tokens):
            hit[rng.choice(E, k, replace=False)] = True
        counts = hit.reshape(ep, per).sum(axis=1)
        maxes.append(counts.max())
        means.append(counts.mean())
    return np.mean(maxes) / np.mean(means)


@pytest.mark.parametrize("E,k,ep", [(128, 4, 8), (256, 8, 8), (32, 4, 4)])
def test_busiest_expert_shard_matches_a_simulation_of_top_k_routing(E, k, ep):
    rng = np.random.default_rng(7)
    for tokens in (1, 4, 32):
        closed = float(expert_shard_imbalance(E, k, tokens, ep))
        sim = _simulated_imbalance(E, k, tokens, ep, 1500, rng)
        assert closed == pytest.approx(sim, rel=0.10), (tokens, closed, sim)


def test_expert_shard_imbalance_limits():
    n = np.array([0.0, 1.0, 16.0, 1e6])
    r = expert_shard_imbalance(128, 4, n, 8)
    assert r[0] == 1.0 and r[1] == pytest.approx(3.22, abs=0.02) and r[-1] == pytest.approx(1.0)
    assert np.all(np.diff(r[1:]) < 0)                                  # more tokens, more even
    assert np.all(expert_shard_imbalance(128, 4, n, 1) == 1.0)         # no expert parallelism


def test_expert_parallel_decode_pays_the_busiest_shard():
    """gpt-oss-120b at batch 1 on 8 GPUs: with EP8 the busiest GPU reads 3.22x the mean expert bytes (4 of 128
    experts over 8 shards), where TP8 splits every touched expert evenly."""
    m = rl.load_model("gpt-oss-120b")
    dev = rl.load_device("h200-sxm")
    ep = rl.decode_step(m, rl.DeviceGroup(device=dev, tp=8, ep=8), batch=1, context=1024)
    tp = rl.decode_step(m, rl.DeviceGroup(device=dev, tp=8), batch=1, context=1024)
    expert_mean = m.num_moe_layers * m.experts_per_token * m.expert_params() * 4.25 / 8 / 8   # mxfp4, per GPU
    extra = float(ep.bytes_per_device) - float(tp.bytes_per_device)
    assert extra == pytest.approx((float(expert_shard_imbalance(128, 4, 1, 8)) - 1) * expert_mean, rel=0.02)


def test_expert_parallel_moe_communicates_like_tensor_parallel_unless_attention_is_data_parallel():
    """With attention tensor-parallel (dp = 1) every rank holds every token: expert parallelism changes which
    experts a rank computes, and their outputs combine in one all-reduce per MoE layer, as with TP experts. With
    attention data-parallel the default engines all-gather the tokens and reduce-scatter the outputs, the same
    exchange; with an all-to-all dispatch (``moe_dispatch = "alltoall"``: DeepEP) the tokens are dispatched to and
    combined from the experts' ranks: two all-to-alls of their top-k copies per MoE layer instead of that
    all-reduce, each rank sending its own 1/dp of the tokens and the busiest receiving its skewed share
    (:func:`expert_load_imbalance`)."""
    from roofline.physics.comms import alltoall_s, group_communication_s
    m, dev = rl.load_model("deepseek-r1"), rl.load_device("b200")
    params = attrs.evolve(resolve_profile(dev, shipped_profile().default), collective="auto")
    act, tokens = get_format("bf16"), np.array([4.0, 256.0])

    def comm(p=params, **shape):
        return group_communication_s(m, rl.DeviceGroup(device=dev, tp=4, **shape), act, tokens, p)
    assert np.allclose(comm(ep=4), comm())
    assert np.allclose(comm(ep=4, dp=4), comm(dp=4))   # gathered: the experts' exchange is TP's all-reduce
    a2a = attrs.evolve(params, moe_dispatch="alltoall")
    bw = dev.get("scale_up.bandwidth") * params.link_bandwidth_fraction
    ar_bw = dev.get("scale_up.bandwidth") * params.allreduce_bandwidth_fraction
    hop = dev.scale_up.latency_s if dev.scale_up.latency_s is not None else params.link_hop_latency_s
    hidden, base = tokens * m.hidden_size * 2, params.collective_base_s
    routed = hidden / 4 * m.experts_per_token * expert_load_imbalance(4, params.expert_load_slope)  # per rank
    swap = m.num_moe_layers * (2 * alltoall_s(routed, 4, bw, hop, base) - auto_allreduce_s(hidden, 4, ar_bw, hop, base))
    assert np.allclose(comm(a2a, ep=4, dp=4), comm(a2a, dp=4) + swap) and np.all(swap > 0)


def test_collective_choice_by_message_size():
    bw, hop, base = 450e9, 1e-6, 5e-6
    small, large = 16e3, 64e6
    assert auto_allreduce_s(small, 8, bw, hop, base) == pytest.approx(oneshot_allreduce_s(small, 8, bw, hop, base))
    assert oneshot_allreduce_s(small, 8, bw, hop, base) < allreduce_s(small, 8, bw, hop, base)
    assert auto_allreduce_s(large, 8, bw, hop, base) == pytest.approx(allreduce_s(large, 8, bw, hop, base))


def test_stacks_run_their_own_all_reduce():
    h100 = rl.load_device("h100-sxm")
    prof = shipped_profile()
    for stack, algo in (("gpt-fast (PyTorch)", "ring"), ("TensorRT-LLM v1.0", "auto"), ("vLLM 0.10", "auto")):
        assert resolve_profile(h100, prof.for_stack(stack)).collective == algo
    assert STACK_COLLECTIVES["sglang"] == "auto"
    # a calibration (which carries no family-level fields) still gets the family file's: the gpu family's
    assert resolve_profile(h100, prof.default).collective == "auto"
    assert resolve_profile(h100, prof.default).pipeline_hop_s == resolve_profile(h100).pipeline_hop_s


def test_continuous_batching_holds_the_mean_context():
    """A paged KV cache in steady state holds B x (isl + osl/2) tokens: more sequences fit than in a static
    batch, which needs the final context."""
    g = rl.resolve_group("h100-sxm")
    req = Request(input_tokens=1024, output_tokens=4096)
    b = np.arange(1.0, 400.0)
    p = Placement(name="x", decode=g)
    cont = evaluate_serving("llama-3.1-8b", p, req, batch=b, mode="continuous")
    stat = evaluate_serving("llama-3.1-8b", p, req, batch=b, mode="static")
    b_cont, b_stat = b[cont.fits].max(), b[stat.fits].max()
    steady = rl.max_batch("llama-3.1-8b", g, context=1024 + 2048)
    final = rl.max_batch("llama-3.1-8b", g, context=1024 + 4096)
    assert b_cont > 1.5 * b_stat
    assert b_cont <= steady and b_stat <= final


def test_energy_rows_are_validated_apart(tmp_path):
    rows = ["E1,https://x,vLLM,h100-sxm,1,1,,1,llama-3.1-8b,bf16,,bf16,64,continuous,500,300,none,0,,"
            "energy_per_token_j,0.2,A,",
            "E2,https://x,vLLM,h100-sxm,1,1,,1,llama-3.1-8b,bf16,,bf16,64,continuous,500,300,none,0,,power_w,500,A,",
            "E3,https://x,MLPerf,h100-sxm,8,1,,1,llama-3.1-8b,bf16,,bf16,64,continuous,500,300,none,0,,"
            "system_power_w,5000,A,",
            "E4,https://x,vLLM,h100-sxm,1,1,,1,llama-3.1-8b,bf16,,bf16,64,continuous,500,300,none,0,,"
            "output_tokens_per_s_total,3000,A,"]
    v = validate_rows(tmp_path, *rows)
    got = {r["id"]: r for r in v.rows}
    r = evaluate_serving("llama-3.1-8b", Placement(name="x", decode=rl.resolve_group("h100-sxm")),
                         Request(input_tokens=500, output_tokens=300), batch=64,
                         params=shipped_profile().for_stack("vLLM"))
    assert got["E1"]["predicted"] == pytest.approx(float(r.energy_per_token_j))
    assert got["E2"]["predicted"] == pytest.approx(float(r.power_w))
    assert got["E1"]["kind"] == got["E2"]["kind"] == "energy" and got["E4"]["kind"] == "time"
    assert "wall power" in {s["id"]: s["reason"] for s in v.skipped}["E3"]
    assert set(v.summary["by_kind"]) == {"energy", "time"}


def test_gpu_busy_floors_are_the_energy_fit():
    """hardware_specs/execution/gpu.toml's fitted busy floors (bandwidth-bound work, collectives) are where
    `roofline calibrate --energy`'s grids have their least squared log error on the shipped power rows (a hand
    edit, or new rows without a refit, moves them off that minimum and fails here): each is checked against its
    grid neighbours, the others fixed; the floors by bound beat no floor and the single floor of 0.73 of TDP they
    replace. The search itself is run on a few rows."""
    from roofline.evidence.power_fit import NO_FLOOR, POWER_GRIDS, _energy_errors, _floor_costs, fit_power_floor, row_family
    gpu = [r for r in read_rows(shipped_data()) if row_family(r) == "gpu"]
    power = [r for r in gpu if r.get("metric") == "power_w"]
    energy = [r for r in gpu if r.get("metric") == "energy_per_token_j"]
    assert len(power) >= 30 and len(energy) >= 30
    prof = resolve_profile(rl.load_device("h100-sxm"))
    shipped = {k: getattr(prof, k) for k in POWER_GRIDS}
    one_floor = dict.fromkeys(NO_FLOOR, 0.73)   # the single floor of every busy second, before issue 49
    points = [shipped, NO_FLOOR, one_floor]
    for name, grid in POWER_GRIDS.items():
        i = int(np.argmin(np.abs(grid - shipped[name])))
        assert grid[i] == pytest.approx(shipped[name]) and 0 < i < len(grid) - 1
        points += [{**shipped, name: float(grid[i - 1])}, {**shipped, name: float(grid[i + 1])}]
    at, none, single, *neighbours = _floor_costs(points, power, shipped_profile())
    assert at <= min(neighbours) and at < single < none
    few = power[::8]
    fit = fit_power_floor(few, shipped_profile(), jobs=2)   # the same numbers as one process
    assert all(fit.floors[k] in POWER_GRIDS[k] for k in POWER_GRIDS) and len(fit.fitted_rows) == len(few)
    assert fit.floor_fraction == fit.floors["busy_floor_fraction"]
    # power within 10% (14% with the single floor); the J-per-token rows, not fitted, are the check: issue 13's
    # goal was a median within 20% (their error is mostly the runs' throughput: docs/validation.md); the refit with
    # the NU rows put it at 20.05%, the refit on measured GEMM shares (eleventh December session: held-out time 9.43%
    # -> 9.36%, these runs' own throughput rows 16.0% -> 15.2%) at 22.0%, and B200's sourced idle power (fifteenth
    # session: 138.5 W where 120 W was assumed; the collectives' floor refit 0.63 -> 0.62) at 21.3%, so the guard is
    # 22.5%: a regression beyond it fails, the goal itself is missed
    fitted = _energy_errors(power, shipped_profile(), shipped)
    assert np.median(np.abs(list(fitted.values()))) <= 0.10
    checked = _energy_errors(energy, shipped_profile(), shipped)
    assert len(checked) >= 30 and np.median(np.abs(list(checked.values()))) <= 0.225


def test_request_overhead_only_where_a_server_answers(tmp_path):
    """A stack timed in-process (trtllm-bench, gptSessionBenchmark, MLPerf, gpt-fast) has no API server before
    its first token; a served stack pays its family's per-request overhead on TTFT and nowhere else."""
    base = ("{id},https://x,{stack},h100-sxm,1,1,,1,llama-3.1-8b,bf16,,bf16,8,continuous,1000,200,none,0,,"
            "{metric},100,A,")
    rows = [base.format(id=i, stack=s, metric=m) for i, s, m in [
        ("A", "TensorRT-LLM v0.5 (gptSessionBenchmark)", "ttft_ms"), ("B", "TensorRT-LLM 1.2 (trtllm-serve)", "ttft_ms"),
        ("C", "TensorRT-LLM v0.5 (gptSessionBenchmark)", "itl_ms"), ("D", "TensorRT-LLM 1.2 (trtllm-serve)", "itl_ms")]]
    got = {r["id"]: r["predicted"] for r in validate_rows(tmp_path, *rows).rows}
    overhead_ms = shipped_profile().for_stack("TensorRT-LLM").request_overhead_s * 1e3
    assert overhead_ms > 0
    assert got["B"] - got["A"] == pytest.approx(overhead_ms) and got["C"] == pytest.approx(got["D"])


def test_expert_matmuls_run_at_their_routed_rows_efficiency():
    """gpt-oss at 1,278 tokens: each expert multiplies ~40 rows, so with T_half = 64 its matmuls run 2.5x
    slower than a matmul over the whole pass would."""
    from roofline.physics.timing import _expert_slowdown
    from roofline.physics.work import count_work, expected_experts_touched
    from roofline.specs.formats import Formats
    m = rl.load_model("gpt-oss-120b")
    w = count_work(m, Formats.for_model(m), batch=np.array(1278.0), new_tokens=1.0, prefix_tokens=1024.0,
                   logits_per_seq=1.0, mla_absorbed=True)
    params = rl.EngineParams(compute_half_tokens=64.0)
    rows = 1278 * 4 / float(expected_experts_touched(128, 4, 1278))
    assert 35 < rows < 45
    want = (1278 / (1278 + 64)) / (rows / (rows + 64))
    assert float(_expert_slowdown(w, params)) == pytest.approx(want)
    assert float(_expert_slowdown(w, rl.EngineParams(compute_half_tokens=0.0))) == 1.0


def test_prefill_keeps_its_own_share_of_the_efficiency():
    g = rl.resolve_group("h100-sxm")
    base = rl.EngineParams(compute_fraction=0.8, step_overhead_s=0.0, layer_overhead_s=0.0)
    half = rl.EngineParams(compute_fraction=0.8, prefill_compute_scale=0.5, step_overhead_s=0.0, layer_overhead_s=0.0)
    p1, p2 = (rl.prefill("llama-3.1-8b", g, prompt=8192, params=p) for p in (base, half))
    assert float(p2.compute_s) == pytest.approx(2 * float(p1.compute_s))
    d1, d2 = (rl.decode_step("llama-3.1-8b", g, batch=64, context=2048, params=p) for p in (base, half))
    assert float(d2.time_s) == pytest.approx(float(d1.time_s))


def test_dp_attention_stops_replicating_the_latent_cache():
    """DeepSeek's MLA cache is one latent head: under TP8 every rank holds every sequence's cache; with DP
    attention over 8 each rank holds 1/8 of the sequences (at the price of the attention weights per rank)."""
    dev = rl.load_device("b200")
    fmt = dict(weights="fp8", kv="fp8", activations="fp8")
    tp = rl.max_batch("deepseek-r1", rl.DeviceGroup(device=dev, tp=8, ep=8), context=4096, **fmt)
    dp = rl.max_batch("deepseek-r1", rl.DeviceGroup(device=dev, tp=8, ep=8, dp=8), context=4096, **fmt)
    assert 6 < dp / tp <= 8
    with pytest.raises(rl.WorkloadError, match="dp"):
        rl.DeviceGroup(device=dev, tp=8, dp=3)



def _continuous(model, group, isl, osl, batch, **kw):
    return evaluate_serving(model, Placement(name="x", decode=rl.resolve_group(group)),
                            Request(input_tokens=isl, output_tokens=osl), batch=batch, mode="continuous", **kw)


def _step(model, group, batch, new_tokens, context, chunks=0.0, chunk_tokens=0.0, **formats):
    m, p = resolve_model(model), shipped_profile().default
    return evaluate_pass(m, rl.resolve_group(group), Formats.for_model(m, **formats), batch=batch,
                         new_tokens=new_tokens, prefix_tokens=context, logits_per_seq=1.0, mla_absorbed=True,
                         stage="decode", params=p, chunks=chunks, chunk_tokens=chunk_tokens)


def test_prompts_arrive_as_chunks_not_spread_over_every_step():
    """A MoE step that carried B x isl/osl prompt tokens in every step would route them through ~90 of
    gpt-oss's 128 experts each step; prefilled as 8k-token chunks, most steps decode only and read the
    few experts their B tokens pick, so the mean step costs about what a decode step costs."""
    fmt = dict(weights="bf16", experts="mxfp4")
    r = _continuous("gpt-oss-120b", "b200:2", 8192, 1024, 4.0, target_formats=fmt,
                    params=shipped_profile().default)
    decode = _step("gpt-oss-120b", "b200:2", 4.0, 1.0, 8192 + 512, **fmt)
    spread = _step("gpt-oss-120b", "b200:2", 4.0, 1.0 + 8192 / 1024, 8192 + 512, **fmt)
    assert float(spread.bytes_per_device) > 3 * float(decode.bytes_per_device)
    assert float(r.step_s) < 1.5 * float(decode.time_s) < float(spread.time_s)


def test_mixed_steps_match_a_simulated_schedule():
    """The mean step over chunk shares equals a step-by-step schedule: B sequences, each prefilled as one
    chunk then decoded, staggered so a prompt arrives every osl / B steps; each step
    is timed with the tokens it actually carries (one decode token per sequence, plus the arriving chunk)."""
    model, isl, osl, B = "llama-3.1-8b", 4096, 64, 4       # one chunk holds a prompt (budget 8192)
    plain = _step(model, "h100-sxm", float(B), 1.0, isl + osl / 2)
    with_chunk = _step(model, "h100-sxm", float(B), 1.0, isl + osl / 2, chunks=1.0, chunk_tokens=float(isl))
    steps = [float(with_chunk.time_s)] + [float(plain.time_s)] * (osl // B - 1)
    r = _continuous(model, "h100-sxm", isl, osl, float(B), params=shipped_profile().default)
    assert float(r.step_s) == pytest.approx(float(np.mean(steps)), rel=0.02)
    # the chunk's step is compute-bound, its compute is not hidden, and it costs many decode steps
    assert float(with_chunk.compute_s) > float(with_chunk.memory_s)
    assert float(with_chunk.time_s) >= float(with_chunk.compute_s) > 5 * float(plain.time_s)


def test_a_riding_chunk_costs_what_its_prefill_costs():
    """A chunk riding along a decode pass adds exactly the FLOP of prefilling it alone (its attention in
    the prefill form: MLA not absorbed, causal over its own prompt), and MoE reads the experts of the union
    of tokens once."""
    m = resolve_model("deepseek-r1")
    fmt = Formats(weights="fp8", kv="fp8", activations="fp8")
    decode = count_work(m, fmt, batch=64.0, new_tokens=1.0, prefix_tokens=9000.0)
    chunk = count_work(m, fmt, batch=1.0, new_tokens=8192.0, prefix_tokens=0.0, logits_per_seq=0.0,
                       mla_absorbed=False)
    fused = with_prompt_chunks(m, fmt, decode, chunks=1.0, chunk_tokens=8192.0, chunk_prefix=0.0)
    for k in decode.flop:
        assert float(fused.flop[k]) == pytest.approx(float(decode.flop[k] + chunk.flop[k]))
    absorbed = count_work(m, fmt, batch=1.0, new_tokens=8192.0, prefix_tokens=0.0, logits_per_seq=0.0)
    assert float(chunk.flop["attention_core"]) < 0.5 * float(absorbed.flop["attention_core"])
    assert float(fused.weight_bytes["experts"]) < float(decode.weight_bytes["experts"] + chunk.weight_bytes["experts"])
    assert float(fused.weight_bytes["experts"]) == pytest.approx(float(chunk.weight_bytes["experts"]), rel=0.01)


@pytest.mark.parametrize("rho", [0.2, 0.5, 0.8])
def test_prefill_queue_matches_a_simulated_m_d_1_queue(rho):
    """Pollaczek-Khinchine's mean wait against Lindley's recursion over Poisson arrivals, fixed service."""
    rng = np.random.default_rng(3)
    s = 0.05
    gaps = rng.exponential(s / rho, 400_000)
    wait, total = 0.0, 0.0
    for g in gaps:                       # W_{n+1} = max(0, W_n + s - gap)
        wait = max(0.0, wait + s - g)
        total += wait
    assert float(prefill_queue_s(rho / s, s)) == pytest.approx(total / gaps.size, rel=0.05)


def test_ttft_under_load_waits_for_the_prompts_ahead():
    """At concurrency the prompts queue for the prefill: TTFT grows beyond one prefill plus one step."""
    r = _continuous("gpt-oss-120b", "h100-sxm:4", 8192, 1024, np.array([4.0, 64.0]),
                    target_formats=dict(weights="bf16", experts="mxfp4"), params=shipped_profile().default)
    overhead = shipped_profile().default.request_overhead_s
    alone = r.ttft_s - r.step_s - overhead
    assert alone[1] > 1.1 * alone[0]


def test_attention_runs_at_sixteen_bits_over_an_fp8_cache():
    """FP8 weights, activations and KV cache: the projections run at the FP8 rate, attention's score and
    value matmuls at the BF16 rate (kernels dequantise the cache), so a long-context step's compute is at
    least its attention FLOP over the BF16 peak."""
    dev = rl.load_device("h100-sxm")
    fp8 = Formats(weights="fp8", kv="fp8", activations="fp8")
    assert attention_class(fp8, dev) == "bf16"
    assert attention_class(Formats(weights="bf16", kv="bf16", activations="bf16"), dev) == "bf16"
    m, p = resolve_model("llama-3.1-8b"), rl.EngineParams(compute_fraction=1.0, compute_half_tokens=0.0)
    r = evaluate_pass(m, rl.resolve_group("h100-sxm"), fp8, batch=64.0, new_tokens=1.0, prefix_tokens=32768.0,
                      logits_per_seq=1.0, mla_absorbed=True, stage="decode", params=p)
    attention_flop = 64 * m.num_layers * 4 * m.num_heads * m.head_dim * 32768   # QK^T and PV, 2 FLOP per MAC
    assert float(r.compute_s) >= attention_flop / dev.get("compute.bf16")


def test_tensorrt_llm_reserves_the_final_context_at_admission():
    """TensorRT-LLM's GUARANTEED_NO_EVICT reserves prompt + maximum output per admitted request, so its
    largest continuous batch is the one that fits at the final context; vLLM pages (mean context)."""
    h100 = rl.load_device("h100-sxm")
    prof = shipped_profile()
    trt, vllm = prof.for_stack("TensorRT-LLM v1.0"), prof.for_stack("vLLM 0.10")
    assert resolve_profile(h100, trt).kv_admission == "reserve"
    assert resolve_profile(h100, vllm).kv_admission == "paged"
    req, b = Request(input_tokens=1024, output_tokens=4096), np.arange(1.0, 400.0)
    place = Placement(name="x", decode=rl.resolve_group("h100-sxm"))
    largest = {name: b[evaluate_serving("llama-3.1-8b", place, req, batch=b, mode="continuous", params=p).fits].max()
               for name, p in (("trt", trt), ("vllm", vllm))}
    assert largest["vllm"] > 1.5 * largest["trt"]
    assert largest["trt"] <= rl.max_batch("llama-3.1-8b", "h100-sxm", context=1024 + 4096)


def test_fixed_cost_grows_with_kernels_by_layer_kind():
    """Per-kernel fixed cost x kernels counted by layer kind: an MLA + routed-expert layer launches about twice
    the kernels of a dense GQA layer, so DeepSeek-R1's fixed cost per layer is about twice Llama's."""
    llama, ds = (resolve_model(m) for m in ("llama-3.3-70b", "deepseek-r1"))
    assert kernels_per_pass(ds) / ds.num_layers > 1.8 * kernels_per_pass(llama) / llama.num_layers
    p = rl.EngineParams(step_overhead_s=0.0, layer_overhead_s=0.0, kernel_overhead_s=4e-6)
    per_layer = {}
    for m in (llama, ds):
        r = evaluate_pass(m, rl.resolve_group("h200-sxm:8"), Formats(weights="fp8", kv="fp8", activations="fp8"),
                          batch=1.0, new_tokens=1.0, prefix_tokens=1000.0, logits_per_seq=1.0, mla_absorbed=True,
                          stage="decode", params=p)
        per_layer[m.id] = float(r.overhead_s) / m.num_layers
    assert per_layer["deepseek-r1"] > 1.8 * per_layer["llama-3.3-70b"]


def test_weight_unpacking_is_identified_by_the_fit():
    """The unpacking cost of weight-only formats is fitted (hidden under the weight stream at small batch, paid
    per 64-row slice at large batch, the rows now tell it apart) and the shipped fit identifies it: its standard
    error is well below its value, and it is within a factor of two of what a W4A16 microbenchmark implies
    (torchao's HQQ Triton kernel on an A6000: ~14 ops per element under this model, cited in gpu.toml)."""
    from roofline.evidence.calibrate import BOUNDS, DEQUANT_START, _gpu_base
    from roofline.specs.execution import family_profile
    assert "dequant_ops_per_element" in BOUNDS and _gpu_base().dequant_ops_per_element == DEQUANT_START > 0
    fam = family_profile("gpu")
    assert "hqq" in fam.provenance["dequant_ops_per_element"].lower()
    assert fam.profile.dequant_tile_rows == 64 and "marlin" in fam.provenance["dequant_tile_rows"]
    prof = shipped_profile()
    params = open(prof.path).read().split("\n[params]\n")[1].split("\n[")[0]   # the pooled set, with uncertainties
    value, se = re.search(r"^dequant_ops_per_element = (\S+)  # \+/- (\S+)$", params, re.M).groups()
    assert float(value) == prof.default.dequant_ops_per_element
    assert 14 / 2 < float(value) < 14 * 2 and float(se) < float(value) / 2


def _pass(model, group, fmt, params, tokens, stage):
    return evaluate_pass(model, group, fmt, batch=1.0, new_tokens=tokens, prefix_tokens=0.0, logits_per_seq=1.0,
                         mla_absorbed=False, stage=stage, params=params)


def test_weight_unpacking_hides_in_the_weight_stream_until_the_rows_outgrow_a_slice():
    """Unpacking int4 weights runs beside their loads (Marlin): one decoded token hides it under the weight
    traffic, while a 4,096-token prompt unpacks every weight once per 64-row slice (64 times), counted by hand."""
    model, group = resolve_model("llama-3.1-8b"), rl.resolve_group("h100-sxm")
    fmt = Formats(weights="int4-g128", kv="bf16", activations="bf16")
    none = attrs.evolve(resolve_profile(group.device), dequant_ops_per_element=0.0, head_format=None)
    ops = attrs.evolve(none, dequant_ops_per_element=4.0, dequant_tile_rows=64.0)
    rate = group.device.get("compute.fp32") * ops.compute_fraction
    matmuls = model.num_layers * (model.attention_params_per_layer() + model.dense_mlp_params())
    per_slice = matmuls * 4.0 / rate                      # the layers' matmuls multiply every token
    head = model.lm_head_params() * 4.0 / rate           # the LM head one logit row: always one slice
    one, one_free = _pass(model, group, fmt, ops, 1.0, "decode"), _pass(model, group, fmt, none, 1.0, "decode")
    assert float(one.dequant_s) == pytest.approx(per_slice + head, rel=0.02)
    assert float(one.dequant_s) < float(one.memory_s) and float(one.time_s) == pytest.approx(float(one_free.time_s))
    long = _pass(model, group, fmt, ops, 4096.0, "prefill")
    assert float(long.dequant_s) == pytest.approx(64 * per_slice + head, rel=0.02)
    assert float(long.time_s) > float(_pass(model, group, fmt, none, 4096.0, "prefill").time_s)


def _microbench_runs() -> list[dict]:
    return json.loads((Path(__file__).parents[1] / "roofline" / "validation" / "h200_microbench.json").read_text())["runs"]


def test_gpt_fast_int4_unpacks_per_few_rows_as_tinygemm_measures():
    """gpt-fast's int4 matmul is tinygemm, whose cost grows with every ~4 token rows where Marlin's serves 64
    (WEIGHT_ONLY_KERNELS): an int4 decode step's unpacking time grows with the batch as the measured kernel's
    time does on an H200 (roofline/validation/h200_microbench.json, 8 to 64 tokens, where unpacking binds), within
    25%; vLLM's (Marlin) stays one unpacking up to 64 rows; an int8 gpt-fast step keeps the family's slices."""
    runs = _microbench_runs()
    measured = {}
    for run in runs:
        for shape in {(g["k"], g["n"]) for g in run.get("int4", [])}:
            times = {g["tokens"]: g["int4_s"] for g in run["int4"] if (g["k"], g["n"]) == shape}
            for tokens in (8, 16, 32, 64):
                measured.setdefault(tokens, []).append(times[tokens] / times[1])
    assert sorted(measured) == [8, 16, 32, 64] and all(len(r) == 4 for r in measured.values())   # 2 runs x 2 shapes
    model, group = resolve_model("llama-3.1-8b"), rl.resolve_group("h200-sxm")
    dev, prof = group.device, shipped_profile()
    gptfast, vllm = (resolve_profile(dev, prof.for_stack(s, dev.vendor, dev.isa)) for s in ("gpt-fast", "vllm"))

    def unpack_s(params, batch, weights="int4-g128"):
        return float(evaluate_pass(model, group, Formats(weights=weights, kv="bf16", activations="bf16"),
                                   batch=float(batch), new_tokens=1.0, prefix_tokens=0.0, logits_per_seq=1.0,
                                   mla_absorbed=False, stage="decode", params=params).dequant_s)
    for tokens, ratios in measured.items():
        predicted = unpack_s(gptfast, tokens) / unpack_s(gptfast, 1)
        assert all(abs(predicted / r - 1) < 0.25 for r in ratios), (tokens, predicted, ratios)
        assert unpack_s(vllm, tokens) == pytest.approx(unpack_s(vllm, 1))
        assert unpack_s(gptfast, tokens, "int8") == pytest.approx(unpack_s(gptfast, 1, "int8"))
    assert (gptfast.weight_only_kernel, vllm.weight_only_kernel) == ("tinygemm", None)


def test_the_fitted_unpacking_cost_is_what_tinygemm_measures_at_one_token():
    """The fitted unpacking cost (identified by the published weight-only rows) agrees with our own H200
    micro-benchmark: one token through tinygemm, where unpacking binds (roofline/validation/h200_microbench.json),
    implies 16-19 ops per element at the fitted gpt-fast share of the FP32 rate. Its time also holds the launch
    and the weight stream's tail, so it bounds the fitted value from above; a fit that drove the cost toward 0
    (as one did before the unpacking overlapped the weight stream) would fall below half of it."""
    runs = _microbench_runs()
    dev = rl.load_device("h200-sxm")
    p = resolve_profile(dev, shipped_profile().for_stack("gpt-fast", dev.vendor, dev.isa))
    rate_ops_per_s = dev.get("compute.fp32") * p.compute_fraction
    implied = [g["int4_s"] * rate_ops_per_s / (g["k"] * g["n"]) for r in runs for g in r.get("int4", [])
               if g["tokens"] == 1]
    assert len(implied) == 4
    assert all(0.5 * ops < p.dequant_ops_per_element <= ops for ops in implied), (p.dequant_ops_per_element, implied)


def test_the_experts_a_batch_touches_are_what_a_random_router_touched_on_an_h200():
    """E (1 - (1 - k/E)^B) experts per layer (docs/theory.md §2.7) is what the Mixtral-shaped decode loop on an
    H200 touched under a random router (roofline/validation/h200_microbench.json, moe: the mean over 32 layers,
    two runs at batch 1 .. 128): within 0.3 experts of 8, about three standard errors of a 32-layer mean. Counting
    k experts per token (capped at E) misses batch 4 by over 2."""
    measured = [m for r in _microbench_runs() for m in r.get("moe", []) if "batch" in m]
    assert len(measured) == 16 and {m["batch"] for m in measured} == {1, 2, 4, 8, 16, 32, 64, 128}
    for m in measured:
        assert float(expected_experts_touched(8, 2, m["batch"])) == pytest.approx(m["experts_touched"], abs=0.3), m
    assert abs(min(8, 2 * 4) - np.mean([m["experts_touched"] for m in measured if m["batch"] == 4])) > 2


def test_moe_decode_time_grows_with_the_experts_a_batch_touches():
    """A decode step of a bf16 Mixtral-shaped model on an H200 (roofline/validation/h200_measured.csv, MX rows:
    experts streamed by a grouped GEMM, replayed from a CUDA graph) takes 0.34 of its batch-16 time at batch 1,
    0.53 at 2, 0.74 at 4 and 0.93 at 8, as the touched experts grow from 2 to 8; the predicted steps keep those
    shares within 10%. The absolute time is not asserted here: PyTorch's grouped GEMM streams the experts at
    0.62-0.88 of one cuBLAS matmul per expert (microbench ``grouped``), a kernel the serving calibration never saw
    (docs/validation.md). Reading every expert at every batch would put batch 1 at 0.96 of batch 16."""
    from roofline.evidence.validate import row_params
    rows = {r.id: r for r in read_rows(Path(__file__).parents[1] / "roofline" / "validation" / "h200_measured.csv")
            if r.id.startswith("MX")}
    prof = shipped_profile()
    predicted = {rid: predict_row(r, row_params(prof, r)) for rid, r in rows.items()}
    measured = {rid: float(r.get("value")) for rid, r in rows.items()}
    for b in (1, 2, 4, 8):
        share = measured[f"MX{b}"] / measured["MX16"]
        assert predicted[f"MX{b}"] / predicted["MX16"] == pytest.approx(share, rel=0.10), (b, share)
    assert measured["MX1"] / measured["MX16"] < 0.4


def test_the_gpu_power_weights_are_what_an_h200_draws():
    """The GPU family's power weights (hardware_specs/execution/gpu.toml) are what two held loads on an H200 draw
    of its idle-to-TDP range (h200_microbench.json, power: a copy at full bandwidth, a saturated GEMM), and with
    them the linear model gives the board's power along one bf16 GEMM from 1 to 4,096 token rows (power_gemm)
    within 3%, its time shares the achieved bytes/s over the copy's and FLOP/s over the largest GEMM's. The
    earlier even split (0.5 each) puts a weight stream 25% low."""
    from roofline.physics.energy import busy_power_w
    from roofline.specs.devices import override
    runs = _microbench_runs()
    power = next(r["power"] for r in runs if "power" in r)
    sweep = next(r["power_gemm"] for r in runs if "power_gemm" in r)
    idle_w = power["idle"]["power_w"]
    dev = override(rl.load_device("h200-sxm"), "power.idle", f"{idle_w} W")
    p, tdp = resolve_profile(dev), dev.get("power.tdp")
    assert p.memory_power_weight == pytest.approx((power["copy"]["power_w"] - idle_w) / (tdp - idle_w), abs=0.01)
    assert p.compute_power_weight == pytest.approx((power["gemm"]["power_w"] - idle_w) / (tdp - idle_w), abs=0.01)
    copy_bytes_per_s = 2 * 4 * 2**30 / power["copy"]["s_per_call"]   # 4 GiB read and 4 GiB written per call
    top_flop_per_s = max(g["flop_per_s"] for g in sweep)
    assert len(sweep) == 6

    def watts(g, wc, wm):
        return float(busy_power_w(dev, time_s=1.0, compute_s=g["flop_per_s"] / top_flop_per_s,
                                  memory_s=g["bytes_per_s"] / copy_bytes_per_s, compute_weight=wc, memory_weight=wm))
    for g in sweep:
        assert watts(g, p.compute_power_weight, p.memory_power_weight) == pytest.approx(g["power_w"], rel=0.03), g
    assert watts(sweep[0], 0.5, 0.5) < 0.8 * sweep[0]["power_w"]


def test_a_familys_power_weights_reach_every_stage_and_its_power():
    """The power weights travel from the execution profile to each stage and its busy power: a what-if of
    either (``--set DEV.execution.memory_power_weight=...``) changes the stage's power as the linear model
    says (busy floor set to 0 so the weights show)."""
    from roofline.physics.energy import idle_w, stage_power_w
    from roofline.specs.devices import override
    base = rl.load_device("h200-sxm")
    for floor in ("busy", "compute", "communication", "fixed"):
        base = override(base, f"execution.{floor}_floor_fraction", 0.0)
    seen = set()
    for wc, wm in ((None, None), (0.3, 0.9)):
        dev = base if wc is None else override(override(base, "execution.compute_power_weight", wc),
                                               "execution.memory_power_weight", wm)
        s = rl.decode_step("llama-3.1-8b", rl.DeviceGroup(device=dev), batch=64, context=1024)
        p = resolve_profile(dev)
        assert (s.compute_power_weight, s.memory_power_weight) == (p.compute_power_weight, p.memory_power_weight)
        u = (p.compute_power_weight * float(s.compute_s) + p.memory_power_weight * float(s.memory_s)) / float(s.time_s)
        idle, tdp = idle_w(dev), dev.get("power.tdp")
        assert float(stage_power_w(dev, s)) == pytest.approx(idle + (tdp - idle) * min(u, 1.0), rel=1e-9)
        seen.add(round(float(stage_power_w(dev, s)), 3))
    assert len(seen) == 2 and resolve_profile(base).memory_power_weight == 0.76


def test_the_stage_table_shows_unpacking_only_where_a_format_needs_it(run_cli):
    """A weight-only format gets a dequant column (and ``dequant_s`` in JSON); a native format does not."""
    code, out, err = run_cli("stage", "llama-3.1-8b", "h100-sxm", "--weights", "int4-g128", "--batch", "1,64")
    assert code == 0, err
    header = next(line for line in out.splitlines() if line.startswith("batch"))
    assert "dequant" in header.split()
    code, out, _ = run_cli("stage", "llama-3.1-8b", "h100-sxm", "--batch", "1,64")
    assert code == 0 and "dequant" not in next(line for line in out.splitlines() if line.startswith("batch"))
    code, out, _ = run_cli("stage", "llama-3.1-8b", "h100-sxm", "--weights", "int4-g128", "--json")
    rows = json.loads(out)["stages"][1]["rows"]
    assert rows[0]["dequant_s"] > 0


def test_routed_experts_unpack_once_per_slice_of_their_own_rows():
    """A MoE expert multiplies only the tokens routed to it: gpt-oss-120b's MXFP4 experts (4 of 128 per token)
    under BF16 activations unpack once while each expert's share stays within one 64-row slice, and a
    32,768-token prompt (1,024 rows per expert) unpacks them 16 times."""
    model, group = resolve_model("gpt-oss-120b"), rl.resolve_group("h200-sxm")
    fmt = Formats(weights="bf16", experts="mxfp4", kv="bf16", activations="bf16")
    ops = attrs.evolve(resolve_profile(group.device), dequant_ops_per_element=4.0, dequant_tile_rows=64.0)
    rate = group.device.get("compute.fp32") * ops.compute_fraction
    all_experts = model.num_moe_layers * model.num_experts * model.expert_params() * 4.0 / rate
    small = _pass(model, group, fmt, ops, 512.0, "prefill")   # 16 rows per expert, every expert touched
    assert float(small.dequant_s) == pytest.approx(all_experts, rel=0.01)
    big = _pass(model, group, fmt, ops, 32768.0, "prefill")
    assert float(big.dequant_s) == pytest.approx(16 * all_experts, rel=0.01)


def test_a_device_count_alone_takes_the_submitters_best_layout(tmp_path):
    """An MLPerf Offline row that gives only its device count is predicted on the split into replicas x TP
    with the highest throughput (what a submitter tuning for throughput runs), not on the family's TP8."""
    base = ("{id},https://x,vLLM 0.10,h100-sxm,8,{tp},,1,llama-3.1-8b,bf16,,bf16,max,continuous,1000,200,none,0,,"
            "output_tokens_per_s_total,100,A,")
    rows = [base.format(id=f"T{t or 0}", tp=t) for t in ("", 1, 2, 4, 8)]
    got = {r["id"]: r["predicted"] for r in validate_rows(tmp_path, *rows).rows}
    explicit = [got[f"T{t}"] for t in (1, 2, 4, 8)]
    assert got["T0"] == pytest.approx(max(explicit))
    assert got["T0"] > got["T8"]


def test_prompt_queue_stays_below_saturation():
    """The queue's service time is what a prompt's chunks add to the steps, so the share of step time spent
    on prompts stays below 1: TTFT grows smoothly with the batch, with no jump at a utilisation cap."""
    b = np.arange(1.0, 257.0)
    r = _continuous("llama-3.1-8b", "h100-sxm", 1024, 128, b, params=shipped_profile().default)
    ok = r.fits
    ttft = r.ttft_s[ok]
    assert ok.sum() > 100
    assert np.all(np.diff(ttft[1:]) > 0)                     # grows with the batch
    assert np.max(ttft[2:] / ttft[1:-1]) < 1.2                # and smoothly


def test_token_budget_bounds_the_steady_batch():
    """A step holds at most the token budget: B decode tokens plus the B isl / osl prompt tokens the steps need
    on average. At 8k in / 1k out that caps the batch near 8192 / 9 = 910 whatever the memory."""
    b = np.array([800.0, 900.0, 920.0, 1000.0])
    r = _continuous("llama-3.1-8b", "b200:8", 8192, 1024, b, params=shipped_profile().default)
    assert list(r.fits) == [True, True, False, False]
    wide = _continuous("llama-3.1-8b", "b200:8", 8192, 1024, b, params=shipped_profile().default, chunk=16384)
    assert wide.fits.all()


def test_an_engine_that_does_not_chunk_admits_whole_prompts():
    """TensorRT-LLM does not chunk prompts by default; trtllm-bench then raises max_num_tokens to hold a whole
    prompt beside the batch. At 32k in / 1k out a chunking engine's 8,192-token steps sustain at most
    8192 / 33 = 248 sequences, one admitting whole prompts up to osl x (one prompt per step) = 1,024."""
    from roofline.serving.serve import _prompt_chunks, _token_budget
    b = np.array([240.0, 300.0, 1000.0, 1100.0])
    chunking = attrs.evolve(shipped_profile().default, chunked_prefill=True)
    r = _continuous("llama-3.1-8b", "b200:8", 32768, 1024, b[:2], params=chunking)
    assert list(r.fits) == [True, False]
    whole = _continuous("llama-3.1-8b", "b200:8", 32768, 1024, b[:2], params=attrs.evolve(chunking, chunked_prefill=False))
    assert list(whole.fits) == [True, True]
    one = np.ones(4)
    placement, request = Placement(name="x", decode=rl.resolve_group("b200:8")), Request(input_tokens=32768,
                                                                                        output_tokens=1024)
    plan = _prompt_chunks(placement, request, 8192, B=b, G=0 * one, whole=True)
    budget = _token_budget(placement, request, 8192, B=b, G=0 * one, E=one, whole=True)
    assert list(budget.keeps_up) == [True, True, True, False] and (plan.tokens == 32768).all()
    assert shipped_profile().for_stack("TensorRT-LLM 1.0").chunked_prefill is False
    assert shipped_profile().for_stack("vLLM 0.11").chunked_prefill is True
    # a lone 20k-token prompt: one pass where the stack does not chunk, three (weights read thrice) where it does
    ttft = {c: float(_continuous("llama-3.1-8b", "h100-sxm", 20000, 200, np.array([1.0]), params=attrs.evolve(
        chunking, chunked_prefill=c)).ttft_s[0]) for c in (True, False)}
    assert ttft[False] < ttft[True]


def test_offline_waves_against_a_simulated_run():
    """N equal requests queued at once, B at a time: a step-by-step run (every step decodes the running
    batch, a finished batch is replaced by the next requests) gives the closed form's throughput."""
    def tpot(b):
        return 0.010 + 0.0001 * b          # a memory-bound step that grows with the batch
    osl = 50
    for requests, batch in ((1000, 300), (900, 300), (301, 300), (50, 300)):
        queued, time_s, tokens = requests, 0.0, 0
        while queued:
            running = min(batch, queued)
            queued -= running
            time_s += osl * tpot(running)
            tokens += running * osl
        closed = float(offline_tokens_per_s(float(requests), float(batch), tpot(batch), tpot(requests % batch)))
        assert closed == pytest.approx(tokens / time_s)
    assert float(offline_tokens_per_s(900.0, 300.0, tpot(300), tpot(0))) == pytest.approx(300 / tpot(300))
    with pytest.raises(rl.WorkloadError):
        offline_tokens_per_s(0.0, 300.0, 0.01, 0.01)


def test_rocm_builds_are_their_own_stack_families():
    """vLLM and SGLang on AMD run other kernels, built per ISA: their rows get the ISA build's parameters, and a
    profile without one falls back along the chain to the ROCm build, then to the stack's CUDA family."""
    assert stack_family("SGLang 0.5.5", "AMD") == "sglang-rocm" and stack_family("SGLang 0.5.5", "NVIDIA") == "sglang"
    assert stack_family("SGLang 0.5.5", "AMD", "gfx942") == "sglang-rocm-gfx942"
    assert stack_family("SGLang 0.5.5", "NVIDIA", "sm_90") == "sglang"
    assert stack_family("TensorRT-LLM 1.2", "AMD", "gfx942") == "tensorrt-llm"
    assert family_chain("sglang-rocm-gfx942") == ["sglang-rocm-gfx942", "sglang-rocm", "sglang"]
    assert family_chain("tensorrt-llm") == ["tensorrt-llm"] and family_chain("gpt-fast") == ["gpt-fast"]
    assert rl.load_device("mi300x").isa == rl.load_device("mi325x").isa == "gfx942"
    assert rl.load_device("mi355x").isa == "gfx950" and rl.load_device("h100-sxm").isa == ""
    prof = shipped_profile()
    settings = dict(collective="auto", kv_admission="paged", chunked_prefill=True, head_format="bf16")
    assert prof.for_stack("SGLang 0.5.5", "AMD", "gfx942") == attrs.evolve(prof.families["sglang-rocm-gfx942"], **settings)
    rocm = attrs.evolve(prof, families={"sglang-rocm": prof.families["sglang-rocm-gfx950"], "sglang": prof.families["sglang"]})
    assert rocm.for_stack("SGLang", "AMD", "gfx942") == attrs.evolve(prof.families["sglang-rocm-gfx950"], **settings)
    bare = attrs.evolve(prof, families={"sglang": prof.families["sglang"]})
    assert bare.for_stack("SGLang", "AMD", "gfx942") == attrs.evolve(prof.families["sglang"], **settings)


def test_gfx942_sglang_pays_its_own_kernel_gap():
    """DeepSeek-R1 FP8 on MI300X/MI325X under SGLang's gfx942 build takes ~27 ms per token at 4 concurrent
    requests, at 1.8x the H200's 4.8 TB/s-bound 12 ms, and barely more at 16 (~32 ms): a fixed cost per kernel
    (unfused MLA paths, untuned FP8 block-scale GEMM tiles), not bandwidth. The build's own kernel gap carries
    it (at its 10 us bound, still 20-30% short: the partially pooled fit draws the build's other fixed costs toward
    the other stacks'); with the CUDA stacks' shared gap the same rows come out more than
    twice as fast as measured."""
    prof = shipped_profile()
    rows = [r for r in read_rows(shipped_data()) if r.get("hardware") in ("mi300x", "mi325x")
            and r.get("model") == "deepseek-r1" and r.get("batch") == "4" and r.get("metric") == "itl_ms"
            and r.get("stack").startswith("SGLang 0.5")]   # early-2025 builds (0.4.2: 46 ms) are another matter
    assert len(rows) >= 4
    own = prof.families["sglang-rocm-gfx942"]
    shared = attrs.evolve(own, kernel_overhead_s=prof.families["sglang"].kernel_overhead_s)
    for r in rows:
        measured = float(r.get("value"))
        assert abs(predict_row(r, own) / measured - 1) < 0.3, r.id
        assert predict_row(r, shared) / measured - 1 < -0.5, r.id


def test_fp4_matmuls_keep_their_own_share_of_fp8_efficiency():
    m, g = resolve_model("llama-3.3-70b"), rl.resolve_group("b200")
    fp4 = Formats(weights="nvfp4", kv="fp8", activations="fp8")   # NVFP4 matmuls run at the fp4 class
    p = rl.EngineParams(compute_half_tokens=0.0, step_overhead_s=0.0, layer_overhead_s=0.0)

    def compute(params):
        return float(evaluate_pass(m, g, fp4, batch=1.0, new_tokens=4096.0, prefix_tokens=0.0, logits_per_seq=1.0,
                                   mla_absorbed=False, stage="prefill", params=params).compute_s)
    assert compute(attrs.evolve(p, fp4_compute_scale=0.5)) > 1.8 * compute(p)


@pytest.mark.parametrize("experts,activations,cls,dequantised", [
    ("mxfp4", "bf16", "bf16", True),          # W4A16: no MMA takes a 4-bit and a 16-bit operand
    ("mxfp4", "mxfp8", "fp8", False),         # W4A8: Blackwell's mixed f8f6f4 MMA at the FP8 rate
    ("mxfp4", "mxfp4", "fp4", False),         # both operands 4-bit: kind::mxf4, the FP4 rate
    ("w4a8-mxfp4", "bf16", "fp8", False),     # gpt-oss in TensorRT-LLM on Blackwell
    ("w4a4-mxfp4", "fp8", "fp4", False),      # AMD Quark w_mxfp4_a_mxfp4
    ("nvfp4", "fp8", "fp4", False),           # NVFP4 recipes quantise activations to NVFP4 (W4A4)
    ("fp8", "bf16", "fp8", False),            # FP8 recipes quantise activations to FP8 (W8A8)
])
def test_a_matmul_runs_at_its_wider_operands_rate(experts, activations, cls, dequantised):
    """CUTLASS's SM100 table: kind::f8f6f4 / mxf8f6f4 (any mix of 4-, 6- and 8-bit operands) run at the FP8
    rate, only kind::mxf4 / mxf4nvf4 (both 4-bit) at the FP4 rate; MXFP4 checkpoints differ in what they pair
    the weights with, NVFP4 and FP8 recipes quantise the activations to match."""
    assert compute_class(get_format(experts), get_format(activations), rl.load_device("b200")) == (cls, dequantised)
    # Hopper has no 4-bit units: MXFP4 weights are unpacked, to the activations' format or to FP8 (W4A8)
    h100 = rl.load_device("h100-sxm")
    assert compute_class(get_format("mxfp4"), get_format("bf16"), h100) == ("bf16", True)
    assert compute_class(get_format("w4a8-mxfp4"), get_format("bf16"), h100) == ("fp8", True)
    # no mixed MMA takes a 4-bit float and an integer operand
    assert compute_class(get_format("mxfp4"), get_format("w8a8-int8"), rl.load_device("b200")) == ("int8", True)


@pytest.mark.parametrize("device,fmt,activations", [("corsair", "mxint4", "bf16"), ("corsair", "mxint8", "bf16"),
                                                    ("groq-lpu", "int8", "fp16"), ("b200", "fp8", "fp8")])
def test_formats_that_quantise_their_activations_keep_their_own_rate(device, fmt, activations):
    """Only plain MXFP4 takes the wider operand's rate; the other native formats multiply at their own class
    (d-Matrix's MX integers, FP8 W8A8) and weight-only int8 at the activations'."""
    f, dev = get_format(fmt), rl.load_device(device)
    expect = (activations, True) if f.weight_only else (f.compute, False)
    assert compute_class(f, get_format(activations), dev) == expect


def test_gpt_oss_prefill_on_blackwell_is_charged_its_recipes_rate():
    """gpt-oss's MoE prefill on a B200: W4A8 (MXFP8 x MXFP4, TensorRT-LLM's Blackwell recipe) takes about
    twice the expert matmul time of an all-FP4 pass, and W4A16 about twice that again."""
    m, g = resolve_model("gpt-oss-120b"), rl.resolve_group("b200")
    p = rl.EngineParams(compute_half_tokens=0.0, step_overhead_s=0.0, layer_overhead_s=0.0, kernel_overhead_s=0.0,
                        low_precision_compute_scale=1.0, fp4_compute_scale=1.0)

    def compute(experts):
        f = Formats(weights="bf16", experts=experts, kv="fp8", activations="bf16")
        return float(evaluate_pass(m, g, f, batch=1.0, new_tokens=8192.0, prefix_tokens=0.0, logits_per_seq=1.0,
                                   mla_absorbed=False, stage="prefill", params=p).compute_s)
    w4a4, w4a8, w4a16 = compute("w4a4-mxfp4"), compute("w4a8-mxfp4"), compute("mxfp4")
    assert w4a4 < w4a8 < w4a16 and w4a16 - w4a4 > 2.5 * (w4a8 - w4a4)


def test_rows_at_a_latency_limited_load_are_recorded_not_predicted(tmp_path):
    row = ("S1,https://x,MLPerf v5.1 NVIDIA TensorRT-LLM,h100-sxm,8,2,,1,llama-2-70b,fp8,,fp8,slo,continuous,222,294,"
           "none,0,,output_tokens_per_s_total,20000,B,")
    v = validate_rows(tmp_path, row)
    assert not v.rows and "latency limits" in v.skipped[0]["reason"]


def test_mixed_pass_where_one_kind_does_not_fit():
    """The mean step fits only where every kind of step that runs fits: a share of 0 does not count."""
    m, g = resolve_model("llama-3.1-8b"), rl.resolve_group("h100-sxm")
    p, f = shipped_profile().default, Formats(weights="bf16", kv="bf16", activations="bf16")
    ok = evaluate_pass(m, g, f, batch=8.0, new_tokens=1.0, prefix_tokens=1000.0, logits_per_seq=1.0,
                       mla_absorbed=True, stage="decode", params=p)
    big = evaluate_pass(m, g, f, batch=8.0, new_tokens=1.0, prefix_tokens=1000.0, logits_per_seq=1.0,
                        mla_absorbed=True, stage="decode", params=p, chunks=1.0, chunk_tokens=4e6)
    assert bool(ok.fits) and not bool(big.fits)
    assert bool(mix([ok, big], [1.0, 0.0], stage="decode").fits)
    assert not bool(mix([ok, big], [0.9, 0.1], stage="decode").fits)


def test_tensorrt_llm_keeps_the_whole_context_on_sliding_window_layers():
    """gpt-oss alternates 128-token sliding-window and full layers. vLLM's hybrid KV cache manager keeps only the
    window on sliding layers; TensorRT-LLM (no kv_cache_config.max_attention_window) keeps the whole context
    on every layer and masks the window in its kernel, so at 9k tokens its cache is ~2x larger per sequence
    and its largest batch ~half, while the bytes the kernel reads stay the window's."""
    m = resolve_model("gpt-oss-20b")
    L = np.array([100.0, 9000.0])
    per_layer_token = m.kv_elements_per_token_per_layer() * 1.0        # fp8 cache: one byte per element
    assert np.allclose(m.kv_cache_bytes(L, "fp8", windowed=False), m.num_layers * per_layer_token * L)
    assert np.allclose(m.kv_cache_bytes(L, "fp8"), per_layer_token * (12 * L + 12 * np.minimum(L, 128)))
    prof = shipped_profile()
    trt, vllm = prof.for_stack("TensorRT-LLM 1.0"), prof.for_stack("vLLM 0.11")
    assert (trt.windowed_kv, vllm.windowed_kv) == (False, True)
    kw = dict(context=9000, weights="bf16", experts="mxfp4", kv="fp8")
    b_trt, b_vllm = (int(rl.max_batch(m, "b200", params=p, **kw)) for p in (trt, vllm))
    assert b_trt / b_vllm == pytest.approx((12 * 9001 + 12 * 128) / (24 * 9001), rel=0.05)
    reads = [float(rl.decode_step(m, "b200", batch=64, context=9000, params=p, experts="mxfp4", kv="fp8")
                   .bytes_per_device) for p in (trt, vllm)]
    assert reads[0] == pytest.approx(reads[1])


def test_quantised_checkpoints_keep_the_embedding_and_lm_head_at_16_bits():
    """Model Optimizer's FP8/NVFP4 checkpoints (TensorRT-LLM, vLLM, SGLang) leave the LM head unquantised and no
    toolchain quantises the embedding table; gpt-fast quantises every nn.Linear, its output head included. For
    Llama-3.1-70B in FP8 that is 2.1 GB more stored (a detailed count: each parameter once, the head's twice),
    the LM head's bytes read twice over each decode step, and a smaller batch where the weights nearly fill
    the device."""
    m = resolve_model("llama-3.1-70b")
    head = m.embedding_params() + m.lm_head_params()
    prof = shipped_profile()
    trt, fast = prof.for_stack("TensorRT-LLM 1.0"), prof.for_stack("gpt-fast")
    assert (trt.head_format, prof.for_stack("vLLM 0.11").head_format, fast.head_format) == ("bf16", "bf16", None)
    fp8 = Formats(weights="fp8", kv="fp8", activations="fp8")
    kept = fp8.with_toolchain_head(trt.head_format)
    assert kept.head == "bf16" and fp8.with_toolchain_head(fast.head_format) is fp8
    assert Formats().with_toolchain_head("bf16") == Formats()        # no wider than bf16 weights: unchanged
    assert stored_weight_bytes(m, kept) == sum(m.param_breakdown().values()) + head
    assert stored_weight_bytes(m, kept) - stored_weight_bytes(m, fp8) == pytest.approx(2.1e9, rel=0.01)
    kw = dict(context=1000, weights="fp8", kv="fp8", activations="fp8")
    untied = attrs.evolve(trt, head_format=None)
    reads = [float(rl.decode_step(m, "h100-sxm:2", batch=1, params=p, **kw).bytes_per_device) for p in (trt, untied)]
    assert reads[0] - reads[1] == pytest.approx((m.lm_head_params() + m.hidden_size) / 2)   # one more byte each, tp 2
    usable = resolve_profile(rl.resolve_group("h100-sxm").device, trt).usable_memory_fraction * 81559 * 2 ** 20
    free = [usable - stored_weight_bytes(m, f) for f in (kept, fp8)]
    b_kept, b_fp8 = (int(rl.max_batch(m, "h100-sxm", params=p, **kw)) for p in (trt, untied))
    assert b_kept / b_fp8 == pytest.approx(free[0] / free[1], rel=0.05) and b_kept < 0.85 * b_fp8


def test_the_head_format_is_an_option_of_every_command_that_takes_formats(run_cli):
    """``--lm-head`` names the embedding and LM head format outright: the stage table stores and reads it (without
    ``--stack pooled``, which sets no toolchain, the head is quantised with the weights; the default stack, vLLM,
    keeps it bf16), and the serving commands carry it into their groups."""
    m = resolve_model("llama-3.1-70b")
    head = m.embedding_params() + m.lm_head_params()
    base = ("stage", "llama-3.1-70b", "h100-sxm:2", "--weights", "fp8", "--kv", "fp8", "--json")
    decode = {}
    for extra in (("--stack", "pooled"), ("--stack", "pooled", "--lm-head", "bf16"), (), ("--lm-head", "fp8")):
        code, out, err = run_cli(*base, *extra)
        assert code == 0, err
        decode[extra] = json.loads(out)["stages"][1]
    plain, wide = decode[("--stack", "pooled")], decode[("--stack", "pooled", "--lm-head", "bf16")]
    assert (plain["formats"]["head"], wide["formats"]["head"]) == ("fp8", "bf16")
    assert (decode[()]["formats"]["head"], decode[("--lm-head", "fp8")]["formats"]["head"]) == ("bf16", "fp8")
    stored = [d["rows"][0]["weights_per_device_bytes"] for d in (plain, wide)]
    assert stored[1] - stored[0] == pytest.approx(head / 2)            # one more byte per head weight, tp 2
    spec = ("spec", "--target", "llama-3.1-70b", "--draft", "llama-3.1-8b", "--draft-on", "h100-sxm",
            "--verify-on", "h100-sxm:4", "--alpha", "0.8", "--gamma", "2", "--weights", "fp8", "--json")
    verify = [json.dumps(json.loads(run_cli(*spec, *extra)[1])) for extra in ((), ("--lm-head", "fp8"))]
    assert verify[0] != verify[1]
    code, _, err = run_cli(*base, "--lm-head", "bf17")
    assert code == 2 and "unknown format 'bf17'" in err and "Traceback" not in err   # a usage error, as --stack


def test_long_output_gpt_oss_rows_need_the_unwindowed_cache():
    """The published trtllm-bench gpt-oss rows at 1k in / 8k and 32k out on B200 and GB200 (max throughput,
    capacity-bound): within 15% (median) with every layer holding the whole context; sliding layers holding
    only their window would make them >10 points faster (about 17: a larger batch)."""
    from roofline.evidence.validate import predict_row
    prof = shipped_profile()
    rows = [r for r in read_rows(shipped_data()) if (r.get("model") or "").startswith("gpt-oss")
            and "trtllm-bench" in (r.get("stack") or "") and r.get("hardware") in ("b200", "gb200")
            and r.get("isl") == "1024" and r.get("osl") in ("8192", "32768")]
    assert len(rows) == 8
    err = {w: np.median([predict_row(r, attrs.evolve(prof.for_stack(r.get("stack")), windowed_kv=w))
                         / float(r.get("value")) - 1 for r in rows]) for w in (False, True)}
    assert abs(err[False]) < 0.15 and err[True] - err[False] > 0.10, err


def _simulated_poll_wait(poll_steps, step_s, rng, n=20000):
    """Mean wait of requests arriving at uniform random times for a scheduler that polls every poll_steps steps."""
    arrive = rng.uniform(0, 1000 * poll_steps * step_s, n)
    return float(np.mean(np.ceil(arrive / (poll_steps * step_s)) * poll_steps * step_s - arrive))


def test_a_scheduler_that_polls_every_n_steps_delays_the_first_token():
    """SGLang's --scheduler-recv-interval N looks for new requests every N decode steps: a request arriving at a
    random time waits N/2 steps for the poll (a simulation), (N - 1)/2 more than polling every step, added to
    TTFT only (decode is unchanged), and not at all when nothing else is running."""
    b = np.array([1.0, 16.0, 64.0])
    base, polled = (_continuous("llama-3.1-8b", "h100-sxm", 1024, 1024, b, poll_steps=n,
                                params=shipped_profile().default) for n in (1, 30))
    wait = polled.ttft_s - base.ttft_s
    rng = np.random.default_rng(3)
    sim = np.array([_simulated_poll_wait(30, s, rng) - _simulated_poll_wait(1, s, rng) for s in base.tpot_s])
    assert wait[0] == 0.0
    assert wait[1:] == pytest.approx(sim[1:], rel=0.03)
    assert np.allclose(polled.tpot_s, base.tpot_s) and np.allclose(polled.tokens_per_s, base.tokens_per_s)
    with pytest.raises(rl.RooflineError, match="poll_steps"):
        _continuous("llama-3.1-8b", "h100-sxm", 1024, 1024, b, poll_steps=0)


def test_sglang_b200_ttft_grows_with_the_poll_interval_its_runs_set():
    """InferenceMAX's SGLang B200 runs set --scheduler-recv-interval 10 below concurrency 16 and 30 from 16 (its
    H200 runs leave the default 1): measured median TTFT at 1k/1k FP8 grows 4.0x from concurrency 4 to 64 on
    B200 and 1.3x on H200. Predicted with the runs' poll settings the B200 growth is over 2.5x; without, under 1.5x."""
    from roofline.evidence.validate import Row, predict_row
    rows = {r.id: r for r in read_rows(shipped_data())}
    prof = shipped_profile()

    def growth(a, b, drop_poll=False):
        def pred(i):
            r = rows[i]
            if drop_poll:
                r = Row(id=r.id, fields={**r.fields, "poll_steps": ""})
            return predict_row(r, prof.for_stack(r.get("stack")))
        return pred(b) / pred(a)
    assert float(rows["IM143"].get("value")) / float(rows["IM135"].get("value")) == pytest.approx(4.02, abs=0.01)
    assert rows["IM135"].get("poll_steps") == "10" and rows["IM143"].get("poll_steps") == "30"
    assert growth("IM135", "IM143") > 2.5 and growth("IM135", "IM143", drop_poll=True) < 1.5
    assert growth("IM159", "IM167") < 1.5    # H200: polls every step


def _decode(device, overlap, batch, context, model="llama-3.3-70b", eta=None):
    """One decode pass with the device's ``overlap`` (and ``overlap_efficiency`` eta, if given) set as its spec
    file's ``[execution]`` table would."""
    m, dev = rl.load_model(model), rl.load_device(device)
    dev = attrs.evolve(dev, execution={**dev.execution, "overlap": overlap,
                                       **({} if eta is None else {"overlap_efficiency": eta})})
    return evaluate_pass(m, rl.DeviceGroup(device=dev), Formats(weights="fp8", kv="fp8", activations="fp8"),
                         batch=batch, new_tokens=1, prefix_tokens=context, logits_per_seq=1, mla_absorbed=False,
                         stage="decode", params=shipped_profile().default)


def test_gpu_kernels_overlap_only_their_own_traffic():
    """On a GPU the matmul kernels and the attention kernels run in turn: a large-batch, long-context decode
    step whose matmuls are compute-bound and whose attention waits on KV reads pays both (the per-operator
    roofline), where one roofline over the pass would hide the KV reads under the matmuls' compute."""
    assert resolve_profile(rl.load_device("h200-sxm")).overlap == "kernel"
    assert resolve_profile(rl.load_device("groq-lpu")).overlap == "pass"
    one = _decode("h200-sxm", "pass", 384, 1024)
    per_kernel = _decode("h200-sxm", "kernel", 384, 1024)
    assert bool(one.fits)
    # a detailed count: the attention core's FLOP at the attention rate, the KV bytes at the achieved bandwidth
    m, dev = rl.load_model("llama-3.3-70b"), rl.load_device("h200-sxm")
    p = resolve_profile(dev, shipped_profile().default)
    kv_bytes = 384 * m.kv_cache_bytes(1024, "fp8")          # every sequence reads its whole cache
    kv_s = kv_bytes / (dev.get("hbm.bandwidth") * p.memory_bandwidth_fraction)
    core_flop = 384 * m.num_layers * m.num_heads * m.head_dim * 1024 * 4   # QK^T and PV, 2 FLOP per MAC
    assert float(one.compute_s) > float(one.memory_s) > kv_s              # the matmuls dominate a single roofline
    core_s = float(per_kernel.compute_s) - float(_matmul_compute(m, dev, shipped_profile().default))
    rate = dev.get("compute.bf16") * measured_share(dev, "bf16") * p.compute_fraction   # the measured share of the peak
    assert core_s == pytest.approx(core_flop / rate, rel=0.05)
    eta = p.overlap_efficiency
    expected = (overlapped(float(one.compute_s) - core_s, float(one.memory_s) - kv_s, eta) + overlapped(core_s, kv_s, eta)
                + float(one.communication_s) + float(one.overhead_s))
    assert float(per_kernel.time_s) == pytest.approx(expected, rel=0.02)
    # with the roofline's max inside each group (the fit's eta is near the serial end, where both near the sum)
    one, per_kernel = _decode("h200-sxm", "pass", 384, 1024, eta=1), _decode("h200-sxm", "kernel", 384, 1024, eta=1)
    assert float(one.time_s) < float(per_kernel.time_s) < float(per_kernel.time_serial_s)


def _matmul_compute(m, dev, p):
    """The pass's matmul time alone (no attention core): the same batch at zero context."""
    r = evaluate_pass(m, rl.DeviceGroup(device=dev), Formats(weights="fp8", kv="fp8", activations="fp8"), batch=384,
                      new_tokens=1, prefix_tokens=0, logits_per_seq=1, mla_absorbed=False, stage="decode", params=p)
    return r.compute_s


def test_overlapping_per_kernel_lies_between_one_roofline_and_the_serial_sum():
    """Over a grid of batches and contexts: never faster than one roofline over the pass, never slower than
    compute and memory in series; equal to the single roofline where one resource bounds every kernel (with
    full overlap inside each roofline, eta = 1: the grouping is what is tested)."""
    batch, context = np.array([[1.0], [8.0], [64.0], [256.0], [512.0]]), np.array([128.0, 1024.0, 8192.0])
    one, per_kernel = _decode("b200", "pass", batch, context, eta=1.0), _decode("b200", "kernel", batch, context, eta=1.0)
    ok = per_kernel.fits
    assert ok.sum() >= 10
    assert np.all(per_kernel.time_s[ok] >= one.time_s[ok] * (1 - 1e-12))
    assert np.all(per_kernel.time_s[ok] <= per_kernel.time_serial_s[ok] * (1 + 1e-12))
    assert np.any(per_kernel.time_s[ok] > one.time_s[ok] * 1.05)
    assert np.any(np.isclose(per_kernel.time_s[ok], one.time_s[ok], rtol=0.01))


def test_overlap_is_a_what_if_with_a_clear_error(run_cli):
    """``--set DEVICE.execution.overlap=pass`` times a GPU as one roofline per pass; a word outside the choices
    is one line naming the field, the value and the choices."""
    def decode(*extra):
        code, out, err = run_cli("stage", "llama-3.1-8b", "h100-sxm", "--batch", "768", "--context", "768",
                                 "--prompt", "128", "--kv", "fp8", "--json", "--set",
                                 "h100-sxm.execution.overlap_efficiency=1", *extra)
        assert code == 0, err
        return json.loads(out)["stages"][1]["rows"][0]["time_s"]
    per_kernel, one = decode(), decode("--set", "h100-sxm.execution.overlap=pass")
    assert per_kernel > 1.2 * one     # compute-bound matmuls and KV-bound attention, balanced
    code, out, err = run_cli("stage", "llama-3.1-8b", "h100-sxm", "--set", "h100-sxm.execution.overlap=maybe")
    assert code == 1 and err.strip() == ("roofline: error: h100-sxm.execution.overlap = 'maybe': must be one of "
                                         "pass, kernel")
    code, out, err = run_cli("stage", "llama-3.1-8b", "h100-sxm", "--set", "h100-sxm.execution.overlap_efficiency=1")
    assert "max(attention compute, KV reads)" in " ".join(out.split())


def test_overlapped_lies_between_the_roofline_bounds():
    """R(c, m) = max(c, m) + (1 - eta) min(c, m): the roofline's max at eta = 1, the serial sum at eta = 0, in
    between otherwise and never faster as eta falls; it broadcasts."""
    c, m = np.array([[1.0], [3.0], [0.0]]), np.array([2.0, 0.5])
    assert np.array_equal(overlapped(c, m, 1.0), np.maximum(c, m))
    assert np.array_equal(overlapped(c, m, 0.0), c + m)
    assert overlapped(3.0, 1.0, 0.25) == 3.0 + 0.75 * 1.0   # the shorter term, three quarters exposed
    etas = np.linspace(0, 1, 11)
    grid = np.array([overlapped(c, m, e) for e in etas])
    assert np.all(np.diff(grid, axis=0) <= 0) and np.all(grid >= np.maximum(c, m)) and np.all(grid <= c + m)


def test_overlap_efficiency_is_a_what_if_with_a_clear_error(run_cli):
    """``--set DEVICE.execution.overlap_efficiency=0`` times every kernel group serially: the time becomes the
    serial upper bound the JSON reports beside it; 1 is the roofline's max; a value outside [0, 1] is one line."""
    def row(value):
        code, out, err = run_cli("stage", "llama-3.1-8b", "h100-sxm", "--batch", "128", "--context", "1024", "--json",
                                 "--set", f"h100-sxm.execution.overlap_efficiency={value}")
        assert code == 0, err
        return json.loads(out)["stages"][1]["rows"][0]
    serial, overlapped_row = row(0), row(1)
    assert serial["time_s"] == pytest.approx(serial["time_serial_s"], rel=1e-12)
    assert overlapped_row["time_s"] < 0.9 * serial["time_s"]
    code, out, err = run_cli("stage", "llama-3.1-8b", "h100-sxm", "--set", "h100-sxm.execution.overlap_efficiency=1.5")
    assert code == 1 and len(err.strip().splitlines()) == 1
    assert "h100-sxm.execution.overlap_efficiency" in err and "1.5" in err


def test_the_gpu_profile_fixes_what_the_rows_leave_at_a_bound():
    """Fitted free, eta (the overlap share) and T_half (the small-matmul ramp) went to their lower bound of 0 in
    every calibration without being identified; the GPU family file fixes them there with its reasoning instead
    of fitting them (docs/theory.md §1.2), the calibration carries the fixed value, and the dataflow families
    keep the roofline's max (an estimate, eta = 1)."""
    from roofline.evidence.calibrate import BOUNDS, _gpu_base
    from roofline.specs.execution import family_profile
    gpu = family_profile("gpu")
    for name in ("overlap_efficiency", "compute_half_tokens"):
        assert name not in BOUNDS and getattr(gpu.profile, name) == 0.0
        assert getattr(_gpu_base(), name) == 0.0   # where the calibration starts, and stays: it does not fit it
        assert gpu.provenance[name].startswith("estimate") and "lower bound" in gpu.provenance[name]
        assert getattr(shipped_profile().default, name) == 0.0
        assert name not in shipped_profile().not_identified("default")
    assert resolve_profile(rl.load_device("h200-sxm")).overlap_efficiency == 0.0
    for device in ("groq-lpu", "cerebras-wse-3", "corsair"):
        assert resolve_profile(rl.load_device(device)).overlap_efficiency == 1.0


@pytest.mark.parametrize("device,tp,pp,context", [("gb200", 1, 1, 65536), ("h100-sxm", 2, 2, 8192)])
def test_the_kernel_groups_reproduce_the_time_across_tiers_and_stages(device, tp, pp, context):
    """With KV spilled to a second tier (a GB200 whose LPDDR took the KV cache, which engines do not do: the
    shipped spec's LPDDR holds weights only) or pipeline stages, the attention group's terms are parts of the
    pass's compute and memory, and the reported terms give back the time."""
    m, dev = rl.load_model("llama-3.3-70b"), rl.load_device(device)
    if device == "gb200":
        dev = attrs.evolve(dev, memory=[attrs.evolve(t, holds=("weights", "kv", "workspace")) for t in dev.memory])
    r = evaluate_pass(m, rl.DeviceGroup(device=dev, tp=tp, pp=pp), Formats(weights="fp8", kv="fp8", activations="fp8"),
                      batch=np.array([1.0, 16.0, 24.0]), new_tokens=1, prefix_tokens=context, logits_per_seq=1,
                      mla_absorbed=False, stage="decode", params=shipped_profile().default)
    if device == "gb200":
        assert len(r.memory_by_tier_s) == 2 and np.all(r.memory_by_tier_s["lpddr"][1:] > 0)   # spilled
    assert np.all(r.kv_memory_s <= r.memory_s) and np.all(r.attention_compute_s <= r.compute_s)
    c, mem, a, k = r.compute_s, r.memory_s, r.attention_compute_s, r.kv_memory_s
    eta = resolve_profile(dev, shipped_profile().default).overlap_efficiency
    again = overlapped(c - a, mem - k, eta) + overlapped(a, k, eta) + r.communication_s + r.overhead_s
    ok = r.fits
    assert ok.sum() >= 2 and np.allclose(r.time_s[ok], again[ok], rtol=1e-12)
    assert np.all(r.time_s[ok] <= r.time_serial_s[ok] * (1 + 1e-12))


def test_every_choice_field_names_its_words():
    from roofline.specs.params import CHOICES, PROFILE_FIELDS
    assert {n for n, (_attr, kind) in PROFILE_FIELDS.items() if kind == "choice"} == set(CHOICES)


def test_hierarchical_allreduce_is_the_sum_of_its_steps():
    """The closed form equals the algorithm's steps counted one by one: a reduce-scatter inside each domain of d
    ranks (d - 1 steps of M/d on the scale-up link), a ring all-reduce of each rank's M/d shard across the n
    domains (2(n - 1) steps of M/(d n) on its NIC), an all-gather inside the domain (d - 1 steps of M/d); one
    domain is the plain all-reduce; a pipeline's boundaries leave a domain once per domain filled."""
    from roofline.physics.comms import _domain_crossings, hierarchical_allreduce_s
    m, up, out, hop_up, hop_out, base = 4e6, 400e9, 40e9, 1e-6, 3e-6, 5e-6
    for p, d in ((16, 8), (64, 8), (72, 72), (32, 4)):
        n = p // d
        steps = [(m / d / up, hop_up)] * (d - 1) + [(m / (d * n) / out, hop_out)] * (2 * (n - 1)) \
            + [(m / d / up, hop_up)] * (d - 1)
        explicit = base + sum(t + h for t, h in steps)
        got = hierarchical_allreduce_s(m, p, d, allreduce_s, (up, hop_up), (out, hop_out), base)
        assert got == pytest.approx(explicit), (p, d)
    assert hierarchical_allreduce_s(m, 8, 8, allreduce_s, (up, hop_up), (out, hop_out), base) == pytest.approx(
        allreduce_s(m, 8, up, hop_up, base))
    # pipelines on 8-GPU nodes: TP8 x PP2 crosses once, TP4 x PP4 once (two stages per node), TP2 x PP8 once
    # (four per node), TP1 x PP32 three times (four nodes), TP16 x PP2 at its one boundary; inside a node never
    assert [_domain_crossings(tp, pp, 8) for tp, pp in ((8, 2), (4, 4), (2, 8), (1, 32), (16, 2), (2, 4))] == [
        1, 1, 1, 3, 1, 0]


def test_a_full_mesh_drives_one_link_per_peer():
    """MI300X links to each of its seven peers directly (a full mesh): a collective over p GPUs moves its data
    over p - 1 links at once. A detailed count: p - 1 concurrent rings each carry M / (p - 1) over their own link,
    2 (p - 1) / p of it per rank, so a TP8 pass costs a seventh of the one-link charge; two GPUs share one link
    either way; a stage crossing is one link."""
    from roofline.physics.comms import group_communication_s
    from roofline.specs.devices import override
    dev = rl.load_device("mi300x")
    assert dev.scale_up.peers == 7 and rl.load_device("h100-sxm").scale_up.peers is None   # NVLink is switched
    m, fmt, tokens = rl.load_model("llama-3.1-70b"), get_format("bf16"), 8192.0
    p = attrs.evolve(shipped_profile().default, collective="ring", collective_base_s=0.0, link_hop_latency_s=0.0)

    def comm(device, tp, pp=1):
        return float(group_communication_s(m, rl.DeviceGroup(device=device, tp=tp, pp=pp), fmt, tokens, p))
    one_link = override(dev, "scale_up.peers", 1)
    link = dev.get("scale_up.bandwidth") * p.link_bandwidth_fraction            # a pipeline hop's share
    ar_link = dev.get("scale_up.bandwidth") * p.allreduce_bandwidth_fraction    # the all-reduce's
    message = tokens * m.hidden_size * 2
    rings = [2 * 7 / 8 * (message / 7) / ar_link] * 7           # seven rings at once: the pass waits for one
    assert comm(dev, 8) == pytest.approx(2 * m.num_layers * max(rings))
    assert comm(one_link, 8) == pytest.approx(7 * comm(dev, 8))
    assert comm(dev, 2) == pytest.approx(comm(one_link, 2))
    assert comm(dev, 1, pp=2) == pytest.approx(comm(one_link, 1, pp=2)) == pytest.approx(message / link)


def test_mesh_peers_are_a_sourced_whole_number(run_cli, tmp_path):
    """``peers`` is a whole number of links with a source in a spec file and in a what-if; anything else is one
    line naming the field."""
    code, out, err = run_cli("stage", "llama-3.1-70b", "mi300x:8", "--set", "mi300x.scale_up.peers=2.5")
    assert code == 1 and "peers" in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    from roofline.specs.devices import specs_dir
    text = (specs_dir() / "mi300x.toml").read_text().replace('peers = { value = 7, source = "xgmi"', 'peers = { value = 7')
    bad = tmp_path / "mi300x.toml"
    bad.write_text(text)
    code, out, err = run_cli("show", str(bad))
    assert code == 1 and "scale_up.peers" in err and "source" in err and len(err.strip().splitlines()) == 1
    bad.write_text((specs_dir() / "mi300x.toml").read_text().replace("peers = { value = 7,", "peers = { value = 6.5,"))
    code, out, err = run_cli("show", str(bad))
    assert code == 1 and "'scale_up.peers' = 6.5" in err and "whole number" in err and len(err.strip().splitlines()) == 1


def _megatron_rank_elements(m, tp, ep=1, dp=1):
    """Activation elements one rank reads and writes per token per layer, kernel by kernel, under Megatron
    tensor parallelism: (input width, output width) of each; column-parallel matmuls read the whole input,
    row-parallel ones write a whole-width partial sum, norms run whole on every rank; routed experts see 1/ep
    of the routed tokens, attention 1/dp of the tokens."""
    d, hd = m.hidden_size, m.head_dim
    norms = m.norms_per_layer * [(2 * d / dp, 2 * d / dp)]   # fused add + RMSNorm: x and the residual, in and out
    attention = [(d / dp, hd * (m.num_heads + 2 * m.num_kv_heads) / tp), (hd * m.num_heads / tp, d / dp)]
    if not m.is_moe:
        i = m.intermediate_size
        mlp = [(d, 2 * i / tp), (2 * i / tp, i / tp), (i / tp, d)]   # gate/up, SiLU-and-mul, down
    else:   # router; per routed token gate/up, SiLU-and-mul, down over its expert slice; the weighted combine
        k, i = m.experts_per_token, m.expert_intermediate_size
        mlp = [(d / ep, m.num_experts / ep)] + k * [(d / ep, 2 * i / tp), (2 * i / tp, i / tp), (i / tp, d / ep)]
        mlp += [(k * d / ep, d / ep)]
    return sum(a + b for a, b in norms + attention + mlp)


@pytest.mark.parametrize("model,tp,ep,dp", [("llama-3.1-70b", 1, 1, 1), ("llama-3.1-70b", 8, 1, 1),
                                            ("qwen3-235b-a22b", 8, 1, 1), ("qwen3-235b-a22b", 8, 8, 8)])
def test_tensor_parallel_ranks_move_the_whole_width_activations(model, tp, ep, dp):
    """Tensor parallelism splits the inner widths of a layer's activations but not its d-wide inputs and
    outputs: each rank moves what a kernel-by-kernel count of Megatron's layout says (a layer's traffic divided
    by tp undercounts Qwen3-235B's under TP8 5.3x)."""
    m = rl.load_model(model)
    group = rl.DeviceGroup(device=rl.load_device("h200-sxm"), tp=tp, ep=ep, dp=dp)
    fmt = Formats.for_model(m)
    tokens = 1000.0
    work = count_work(m, fmt, batch=1.0, new_tokens=tokens, prefix_tokens=0.0, logits_per_seq=0.0)
    per_rank = float(activation_bytes_per_device(work, group))
    expected = tokens * m.num_layers * _megatron_rank_elements(m, tp, ep, dp) * fmt.activation.bytes_per_element
    assert per_rank == pytest.approx(expected, rel=1e-9)
    if tp > 1 and ep == 1:
        assert per_rank > 1.5 * float(work.activation_bytes) / tp


def test_scheduler_cap_bounds_the_max_batch_of_a_vllm_offline_run():
    """AMD's vLLM 0.6 throughput runs of Llama 3.1 405B on 8 MI300X (benchmark_throughput.py, 2,000 prompts) set
    no --max-num-seqs, so vLLM's default 256 caps the running batch although 192 GB GPUs hold thousands of
    sequences at 128/2048. With the cap the predicted output rate follows the measured one (within 25% at
    128/128 and 128/2048); sized by memory alone it is 1.4-2x the measurement. A batch above the cap is
    refused, not predicted."""
    from roofline.evidence.validate import Row, row_params
    rows = {r.id: r for r in read_rows(shipped_data())}
    prof = shipped_profile()
    for i in ("OT053", "OT054"):
        r = rows[i]
        assert r.get("max_batch") == "256"
        capped = predict_row(r, row_params(prof, r))
        free = predict_row(Row(id=i, fields={**r.fields, "max_batch": ""}), row_params(prof, r))
        measured = float(r.get("value"))
        assert abs(capped / measured - 1) < 0.25 and free / measured > 1.3
    over = Row(id="x", fields={**rows["OT053"].fields, "batch": "512"})
    with pytest.raises(rl.RooflineError, match="max_batch 256"):
        predict_row(over, prof.default)


def test_the_busy_floor_follows_what_bounds_the_step():
    """The busy floor by bound (roofline.physics.energy.busy_floor_w): fixed-cost time draws the idle power our
    H200 drew while waiting on launches (power_wait: one-element kernels, eager or from a graph, 123-125 W against its 124-126 W
    idle within 3%), collectives their own floor, and work a floor that rises from the bandwidth-bound to the compute-bound
    one as compute's share of it grows, reaching the latter at compute_floor_share; four equal floors are one
    floor of all busy time (the other families); an array call equals a stack of scalar calls. On our H200's
    graph-replayed decode steps and 8K prefill (h200_microbench.json run 5, a publication the floors were not
    fitted on) the shipped model is within 20% and better than the single 0.73 floor it replaced."""
    from roofline.physics.energy import busy_floor_w, busy_power_w, stage_power_w
    from roofline.specs.devices import override
    runs = _microbench_runs()
    dev = rl.load_device("h200-sxm")
    p, tdp, idle = resolve_profile(dev), dev.get("power.tdp"), dev.idle_w
    floors = {k: getattr(p, k) for k in ("compute_floor_fraction", "compute_floor_share",
                                          "communication_floor_fraction", "fixed_floor_fraction")}
    for wait in (r["power_wait"] for r in runs if "power_wait" in r):
        for k in ("tiny_kernels_eager", "tiny_kernels_graph"):
            got = busy_power_w(dev, time_s=1.0, compute_s=0.0, memory_s=0.0, overhead_s=1.0, compute_weight=0.98,
                               memory_weight=0.76, floor_fraction=p.busy_floor_fraction, **floors)
            assert float(got) == idle == pytest.approx(wait[k]["power_w"], rel=0.03)

    def floor(c, m, x=0.0, o=0.0, **kw):
        return busy_floor_w(dev, time_s=c + m + x + o, compute_s=c, memory_s=m, communication_s=x, overhead_s=o,
                            **({"floor_fraction": p.busy_floor_fraction, **floors} | kw))
    r_sat = p.compute_floor_share
    assert float(floor(0.0, 1.0)) == pytest.approx(p.busy_floor_fraction * tdp)
    assert float(floor(r_sat, 1 - r_sat)) == float(floor(0.9, 0.1)) == pytest.approx(p.compute_floor_fraction * tdp)
    assert float(floor(0.0, 0.0, x=1.0)) == pytest.approx(p.communication_floor_fraction * tdp)
    shares = np.linspace(0, 1, 11)
    rising = floor(shares, 1 - shares)
    assert np.all(np.diff(rising) >= 0)
    np.testing.assert_allclose(rising, [float(floor(c, 1 - c)) for c in shares], rtol=1e-12)
    one = floor(0.2, 0.5, x=0.2, o=0.1, floor_fraction=0.5, compute_floor_fraction=None,
                communication_floor_fraction=None, fixed_floor_fraction=None)
    assert float(one) == pytest.approx(0.5 * tdp)   # one floor for all busy time, as before
    decode = next(r["power"] for r in runs if "power" in r)
    errors, single = [], []
    for d in decode["decode"]:
        s = rl.decode_step("llama-3.1-8b", rl.DeviceGroup(device=dev), batch=d["batch"], context=1024,
                           params=shipped_profile().for_stack("pooled"))
        errors.append(float(stage_power_w(dev, s)) / d["power_w"] - 1)
        old = override(dev, "execution.busy_floor_fraction", 0.73)
        for k in ("compute", "communication", "fixed"):
            old = override(old, f"execution.{k}_floor_fraction", 0.73)
        single.append(float(stage_power_w(old, s)) / d["power_w"] - 1)
    assert max(np.abs(errors)) <= 0.20 and np.median(np.abs(errors)) < np.median(np.abs(single))
