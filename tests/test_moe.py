"""MoE physics beyond uniform independent routing (issue 48): routing locality between consecutive tokens."""

import attrs
import numpy as np
import pytest

import roofline as rl
from roofline.errors import SpecError
from roofline.physics.work import expected_experts_touched, routing_draws
from roofline.specs.hf_config import model_from_hf_config


def _simulate_copying_router(E, k, sequences, tokens_each, locality, trials, rng):
    """Distinct experts touched by ``sequences`` sequences of ``tokens_each`` tokens whose every token after the
    first copies its predecessor's experts with probability ``locality``, else draws k of E afresh."""
    counts = []
    for _ in range(trials):
        hit = np.zeros(E, bool)
        for _s in range(sequences):
            chosen = rng.choice(E, k, replace=False)
            hit[chosen] = True
            for _t in range(tokens_each - 1):
                if rng.random() >= locality:
                    chosen = rng.choice(E, k, replace=False)
                    hit[chosen] = True
        counts.append(hit.sum())
    return float(np.mean(counts))


@pytest.mark.parametrize("E,k,B,n,lam", [(8, 2, 1, 5, 0.3), (256, 8, 1, 4, 0.5), (128, 4, 4, 8, 0.2),
                                         (32, 4, 2, 16, 0.9)])
def test_experts_a_sequence_touches_match_a_simulation_of_the_copying_router(E, k, B, n, lam):
    rng = np.random.default_rng(11)
    closed = float(expected_experts_touched(E, k, routing_draws(E, k, B * n, B, lam)))
    sim = _simulate_copying_router(E, k, B, n, lam, 3000, rng)
    assert closed == pytest.approx(sim, rel=0.03), (closed, sim)


def test_routing_locality_limits():
    E, k = 256, 8
    t = np.array([1.0, 4.0, 64.0])
    assert np.all(routing_draws(E, k, t, 1.0, 0.0) == t)                     # independent: every token a draw
    assert np.allclose(routing_draws(E, k, t, 1.0, 1.0), 1.0)                # all copy: one draw per sequence
    assert np.all(routing_draws(E, k, t, t, 0.7) == t)                       # one token per sequence: no copies
    d = [float(routing_draws(E, k, 16.0, 2.0, lam)) for lam in (0.0, 0.2, 0.5, 0.9)]
    assert all(a > b for a, b in zip(d, d[1:]))                               # more locality, fewer draws


def test_a_verify_pass_reads_fewer_experts_when_consecutive_tokens_share_them():
    """Verifying 5 tokens of one sequence on DeepSeek-R1: with locality the pass touches fewer experts, so
    it reads fewer expert bytes; decode (one token per sequence) is unchanged."""
    m = rl.load_model("deepseek-r1")
    near = attrs.evolve(m, routing_locality=0.5)
    g = rl.DeviceGroup(device=rl.load_device("h200-sxm"), tp=8)
    v0, v1 = (rl.verify(x, g, batch=1, context=1024, gamma=4) for x in (m, near))
    assert float(v1.bytes_per_device) < float(v0.bytes_per_device)
    expert = m.num_moe_layers * m.expert_params() * 1.0 / 8          # fp8 experts, per GPU, per touched expert
    touched = [float(expected_experts_touched(256, 8, routing_draws(256, 8, 5.0, 1.0, lam))) for lam in (0.0, 0.5)]
    assert float(v0.bytes_per_device) - float(v1.bytes_per_device) == pytest.approx(
        (touched[0] - touched[1]) * expert, rel=0.02)
    d0, d1 = (rl.decode_step(x, g, batch=4, context=1024) for x in (m, near))
    assert float(d0.bytes_per_device) == float(d1.bytes_per_device)


def test_a_preset_may_carry_a_routing_locality_and_a_bad_one_is_refused(tmp_path):
    cfg = {"model_type": "mixtral", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 8, "num_experts_per_tok": 2,
           "vocab_size": 100}
    assert model_from_hf_config({**cfg, "_routing_locality": 0.25}).routing_locality == 0.25
    assert model_from_hf_config(cfg).routing_locality == 0.0
    with pytest.raises(SpecError, match="_routing_locality"):
        model_from_hf_config({**cfg, "_routing_locality": 1.5})


def _decode(stack, device, **kw):
    params = rl.specs.params.shipped_profile().for_stack(stack)
    return rl.decode_step("gpt-oss-120b", rl.DeviceGroup(device=rl.load_device(device)), batch=64, context=2048,
                          params=params, **kw)


def test_tensorrt_llm_runs_mxfp4_experts_with_mxfp8_activations_on_blackwell_only():
    """TensorRT-LLM's default MoE backend on Blackwell multiplies MXFP4 experts with MXFP8 activations (its gpt-oss
    deployment guide): no unpacking there, at the FP8 rate. On Hopper (no FP4 units) and under vLLM (whose default
    Blackwell kernel is BF16 x MXFP4) the experts unpack to the 16-bit activations."""
    trt = _decode("tensorrt-llm", "b200")
    assert trt.formats.experts == "w4a8-mxfp4" and float(trt.dequant_s) == 0.0
    for stack, device in (("tensorrt-llm", "h200-sxm"), ("vllm", "b200")):
        r = _decode(stack, device)
        assert r.formats.experts == "mxfp4" and float(r.dequant_s) > 0.0, (stack, device)
    given = _decode("tensorrt-llm", "b200", activations="fp8")     # 8-bit activations already: left as given
    assert given.formats.experts == "mxfp4"


@pytest.mark.parametrize("ep,dispatch_us,combine_us", [(16, 118, 195), (32, 155, 273), (64, 173, 314),
                                                       (128, 192, 369), (256, 194, 360)])
def test_wide_expert_all_to_all_follows_deepeps_published_latencies(ep, dispatch_us, combine_us):
    """DeepEP's low-latency kernels (H800, 400 Gb/s CX7 per GPU, NVLink inside a node; 128 tokens per rank, hidden
    7168, top-8, FP8 dispatch, BF16 combine; docs/legacy.md @dd758ca): the all-to-all over ep ranks in nodes of 8,
    with the H100 spec's links and the GPU profile's efficiencies, within 15% of the table. A latency of ep - 1 hops
    (a ring) would put EP256 at 3x the measurement."""
    from roofline.physics.comms import wide_alltoall_s
    from roofline.specs.execution import resolve_profile
    dev = rl.load_device("h100-sxm")
    prof = resolve_profile(dev, rl.default_params())
    inner = (dev.get("scale_up.bandwidth") * prof.link_bandwidth_fraction, prof.link_hop_latency_s)
    outer = (dev.scale_out.bandwidth_bytes_per_s * prof.link_bandwidth_fraction, prof.link_hop_latency_s)
    per_rank = 128 * 8 * 7168
    for bytes_each, measured_us in ((1.0, dispatch_us), (2.0, combine_us)):
        t = wide_alltoall_s(per_rank * bytes_each, ep, 8, inner, outer, prof.collective_base_s)
        assert t * 1e6 == pytest.approx(measured_us, rel=0.15)


def test_the_busiest_expert_parallel_rank_computes_its_skewed_share():
    """At a batch large enough for compute to bind, EP8's expert matmuls take 1 + slope x 3 times the balanced
    time on the busiest rank; a slope of 0 (perfect balance, as EPLB approaches) removes it."""
    from roofline.physics.work import expert_load_imbalance
    assert expert_load_imbalance(1, 0.17) == 1.0 and expert_load_imbalance(8, 0.17) == pytest.approx(1.51)
    base = rl.specs.params.shipped_profile().for_stack("vllm")
    g = rl.DeviceGroup(device=rl.load_device("h200-sxm"), tp=8, ep=8)
    m = rl.load_model("qwen3-235b-a22b")
    flat, skew = (rl.decode_step(m, g, batch=4096, context=128, params=attrs.evolve(base, expert_load_slope=s))
                  for s in (0.0, 0.17))
    extra = float(skew.compute_s) - float(flat.compute_s)
    assert extra > 0
    no_ep = rl.decode_step(m, rl.DeviceGroup(device=rl.load_device("h200-sxm"), tp=8), batch=4096, context=128,
                           params=attrs.evolve(base, expert_load_slope=0.17))
    assert float(no_ep.compute_s) == pytest.approx(float(flat.compute_s), rel=1e-9)   # TP experts: no skew


def test_mixtrals_routing_locality_is_its_papers_repeat_rate():
    """The preset's lambda from Mixtral's Table 5 (share of consecutive tokens with a common first-or-second-choice
    expert, layers 0/15/31 over eight Pile subsets): r = q + (1 - q) lambda with q = 1 - (6/8)(5/7) for random
    top-2 of 8 routing."""
    layers = ([46.5, 44.9, 49.9, 49.5, 46.9, 48.6, 48.2, 49.8], [62.3, 67.0, 66.9, 63.1, 61.9, 61.6, 64.6, 62.1],
              [52.9, 44.5, 49.2, 52.2, 51.3, 51.8, 53.6, 51.8])
    r = np.mean([np.mean(x) for x in layers]) / 100
    q = 1 - (6 / 8) * (5 / 7)
    assert rl.load_model("mixtral-8x7b").routing_locality == pytest.approx((r - q) / (1 - q), abs=0.001)
    assert rl.load_model("deepseek-r1").routing_locality == 0.0   # no published measurement: independent


@pytest.mark.parametrize("n,ranks", [(1, 4), (2, 4), (3, 8), (8, 8), (20, 4), (90, 8)])
def test_the_busiest_data_parallel_rank_holds_what_a_simulation_of_random_placement_gives(n, ranks):
    """E[largest count] of n prompt chunks placed uniformly on the ranks: the exact form (n <= 64) and the
    Poisson form above it, against 20,000 random placements (within 2%)."""
    from roofline.physics.work import busiest_rank_chunks
    rng = np.random.default_rng(7)
    sim = np.mean([np.bincount(rng.integers(0, ranks, n), minlength=ranks).max() for _ in range(20_000)])
    assert float(busiest_rank_chunks(n, ranks)) == pytest.approx(sim, rel=0.02)
    assert float(busiest_rank_chunks(1, ranks)) == 1.0 and float(busiest_rank_chunks(n, 1)) == n


def test_an_unbalanced_data_parallel_step_waits_for_the_rank_holding_the_prompt():
    """A decode step carrying one whole prompt under attention DP 4: without synchronised prompt phases its rank
    runs the prompt's attention alone, so the step is longer than with them by 3x the prompt's attention-side
    time (4x on one rank instead of 1x spread); the MoE part is the same. Without data parallelism the switch
    changes nothing."""
    from roofline.physics.timing import evaluate_pass
    from roofline.specs.formats import Formats
    m = rl.load_model("qwen3-235b-a22b")
    f = Formats.for_model(m)
    base = rl.specs.params.shipped_profile().for_stack("tensorrt-llm")
    dev = rl.load_device("b200")

    def step(group, balanced, chunks):
        return evaluate_pass(m, group, f, batch=256.0, new_tokens=1.0, prefix_tokens=1500.0, logits_per_seq=1.0,
                             mla_absorbed=True, stage="decode", params=attrs.evolve(base, attention_dp_balance=balanced),
                             chunks=chunks, chunk_tokens=1000.0, chunk_prefix=0.0)
    dep = rl.DeviceGroup(device=dev, tp=4, ep=4, dp=4)
    slow, fast = float(step(dep, False, 1.0).time_s), float(step(dep, True, 1.0).time_s)
    assert slow > fast
    assert float(step(dep, False, 0.0).time_s) == float(step(dep, True, 0.0).time_s)   # no prompt: no difference
    tp = rl.DeviceGroup(device=dev, tp=4, ep=4)
    assert float(step(tp, False, 1.0).time_s) == float(step(tp, True, 1.0).time_s)


def test_data_parallel_ranks_gather_their_tokens_for_the_experts_by_default():
    """Under attention DP the default engines all-gather every rank's tokens and reduce-scatter the expert outputs
    (vLLM's allgather_reducescatter, TensorRT-LLM's CUTLASS MoE): a MoE layer's exchange moves what tensor-parallel
    experts' all-reduce moves, so DEP4's MoE communication equals TP4's; the all-to-all of top-k copies (DeepEP)
    is a choice, and with 8 experts per token over 4 ranks it moves more."""
    from roofline.physics.comms import group_communication_s
    from roofline.specs.formats import get_format
    m = rl.load_model("qwen3-235b-a22b")
    dev = rl.load_device("b200")
    base = rl.specs.params.shipped_profile().for_stack("tensorrt-llm")
    act, tokens = get_format("bf16"), 2048.0
    dep, tp = rl.DeviceGroup(device=dev, tp=4, ep=4, dp=4), rl.DeviceGroup(device=dev, tp=4, ep=4)
    gather = group_communication_s(m, dep, act, tokens, base)
    assert m.num_moe_layers == m.num_layers   # every layer: TP4 all-reduces after attention and after the experts
    moe_tp = group_communication_s(m, tp, act, tokens, base) / 2
    assert gather == pytest.approx(moe_tp, rel=1e-9)   # DEP4: attention is data-parallel, the experts' exchange stays
    a2a = group_communication_s(m, dep, act, tokens, attrs.evolve(base, moe_dispatch="alltoall"))
    assert a2a > gather
