"""GPU-fidelity physics: each test fails without its piece of physics (issue: GPU fidelity)."""

import numpy as np
import pytest
from conftest import validation_header

import roofline as rl
from roofline.evidence.validate import read_rows, shipped_data, validate
from roofline.physics.comms import allreduce_s, auto_allreduce_s, oneshot_allreduce_s
from roofline.physics.work import expert_shard_imbalance
from roofline.serving.serve import Placement, Request, evaluate_serving
from roofline.specs.execution import resolve_profile
from roofline.specs.params import STACK_COLLECTIVES, shipped_profile


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
    header = validation_header()
    rows = ["E1,https://x,vLLM,h100-sxm,1,1,,1,llama-3.1-8b,bf16,,bf16,64,continuous,500,300,none,0,,"
            "energy_per_token_j,0.2,A,",
            "E2,https://x,vLLM,h100-sxm,1,1,,1,llama-3.1-8b,bf16,,bf16,64,continuous,500,300,none,0,,power_w,500,A,",
            "E3,https://x,MLPerf,h100-sxm,8,1,,1,llama-3.1-8b,bf16,,bf16,64,continuous,500,300,none,0,,"
            "system_power_w,5000,A,",
            "E4,https://x,vLLM,h100-sxm,1,1,,1,llama-3.1-8b,bf16,,bf16,64,continuous,500,300,none,0,,"
            "output_tokens_per_s_total,3000,A,"]
    p = tmp_path / "e.csv"
    p.write_text(header + "\n".join(rows) + "\n")
    v = validate(read_rows(p))
    got = {r["id"]: r for r in v.rows}
    r = evaluate_serving("llama-3.1-8b", Placement(name="x", decode=rl.resolve_group("h100-sxm")),
                         Request(input_tokens=500, output_tokens=300), batch=64,
                         params=shipped_profile().for_stack("vLLM"))
    assert got["E1"]["predicted"] == pytest.approx(float(r.energy_per_token_j))
    assert got["E2"]["predicted"] == pytest.approx(float(r.power_w))
    assert got["E1"]["kind"] == got["E2"]["kind"] == "energy" and got["E4"]["kind"] == "time"
    assert "wall power" in {s["id"]: s["reason"] for s in v.skipped}["E3"]
    assert set(v.summary["by_kind"]) == {"energy", "time"}


def test_gpu_busy_floor_is_the_energy_fit():
    """hardware_specs/execution/gpu.toml's busy floor is what `roofline calibrate --energy` fits on the shipped
    power rows (a hand edit, or new rows without a refit, fails here), and it beats no floor."""
    from roofline.evidence.calibrate import fit_power_floor
    fit = fit_power_floor(read_rows(shipped_data()), shipped_profile())
    assert fit.floor_fraction == pytest.approx(resolve_profile(rl.load_device("h100-sxm")).busy_floor_fraction)
    assert np.median(np.abs(list(fit.fitted_rows.values()))) < fit.median_abs_error_before
    assert len(fit.checked_rows) >= 30


def test_request_overhead_only_where_a_server_answers(tmp_path):
    """A stack timed in-process (trtllm-bench, gptSessionBenchmark, MLPerf, gpt-fast) has no API server before
    its first token; a served stack pays its family's per-request overhead on TTFT and nowhere else."""
    header = validation_header()
    base = ("{id},https://x,{stack},h100-sxm,1,1,,1,llama-3.1-8b,bf16,,bf16,8,continuous,1000,200,none,0,,"
            "{metric},100,A,")
    rows = [base.format(id=i, stack=s, metric=m) for i, s, m in [
        ("A", "TensorRT-LLM v0.5 (gptSessionBenchmark)", "ttft_ms"), ("B", "TensorRT-LLM 1.2 (trtllm-serve)", "ttft_ms"),
        ("C", "TensorRT-LLM v0.5 (gptSessionBenchmark)", "itl_ms"), ("D", "TensorRT-LLM 1.2 (trtllm-serve)", "itl_ms")]]
    p = tmp_path / "r.csv"
    p.write_text(header + "\n".join(rows) + "\n")
    got = {r["id"]: r["predicted"] for r in validate(read_rows(p)).rows}
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
