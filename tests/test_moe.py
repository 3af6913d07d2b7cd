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
