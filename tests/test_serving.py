"""Placements, requests, energy, frontiers and what-ifs (issue: placements and the frontier)."""

import json

import attrs
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import roofline as rl
from roofline.errors import WorkloadError
from roofline.physics.speculative import Acceptance
from roofline.serving.frontier import compare_frontiers, pareto_frontier
from roofline.serving.serve import Placement, Request
from roofline.serving.whatif import elasticities
from roofline.serving_api import enumerate_placements, evaluate_serving

REQ = Request(input_tokens=8192, output_tokens=1024)
ACC = Acceptance.alpha_by_gamma({5: 0.926, 40: 0.962})   # docs/gimlet.md §1.3
BATCH = np.array([1, 4, 16, 64, 256])[:, None]
GAMMA = np.arange(1, 21)[None, :]


def configs(corsair=None, gpu=None):
    gpu = gpu or rl.load_device("b200")
    corsair = corsair or rl.load_device("corsair")
    g8 = rl.DeviceGroup(device=gpu, tp=8)
    return [
        Placement(name="disaggregated GPUs", prefill=g8, decode=g8),
        Placement(name="GPU speculation", prefill=g8, decode=g8, draft_model=rl.load_model("gpt-oss-draft-1.6b"),
                  draft_kind="model"),
        Placement(name="Corsair draft", prefill=g8, decode=g8, draft=rl.DeviceGroup(device=corsair, tp=2),
                  draft_model=rl.load_model("gpt-oss-draft-1.6b"), draft_kind="model"),
    ]


def frontier_of(p):
    r = evaluate_serving("gpt-oss-120b", p, REQ, batch=BATCH, gamma=GAMMA if p.speculative else 0,
                         acceptance=ACC if p.speculative else None)
    return r, pareto_frontier(r.tokens_per_s_per_user, r.tokens_per_s_per_kw, r.fits)


def test_done_when_three_configurations():
    results = [frontier_of(p) for p in configs()]
    for r, f in results:
        ok = r.fits
        assert ok.any() and len(f) >= 1
        for field in (r.ttft_s, r.e2e_s, r.tokens_per_s_per_user, r.tokens_per_s_per_kw, r.energy_per_token_j):
            assert np.all(np.isfinite(field[ok])) and np.all(field[ok] > 0)
        np.testing.assert_allclose(r.e2e_s[ok], (r.ttft_s + (REQ.output_tokens - 1) * r.tpot_s)[ok])
    base = results[0][1]
    for _, f in results[1:]:
        c = compare_frontiers(base, f)
        assert np.isfinite(c.interactivity_optimised) and c.interactivity_optimised > 1


def test_what_if_bandwidth_moves_the_answer_in_the_expected_direction():
    corsair = rl.load_device("corsair")
    _, base = frontier_of(configs()[2])
    _, fast = frontier_of(configs(corsair=rl.override(corsair, "sram.bandwidth", "300 TB/s"))[2])
    _, slow = frontier_of(configs(corsair=rl.override(corsair, "sram.bandwidth", "1 TB/s"))[2])
    assert fast.interactivity.max() >= base.interactivity.max() > slow.interactivity.max()
    b200 = rl.load_device("b200")
    _, gpu = frontier_of(configs()[0])
    _, gpu_fast = frontier_of(configs(gpu=rl.override(b200, "hbm.bandwidth", "15.4 TB/s"))[0])
    assert gpu_fast.interactivity.max() > gpu.interactivity.max()
    assert gpu_fast.efficiency.max() > gpu.efficiency.max()


def test_draft_transfer_is_the_same_round_transfer_as_the_spec_command():
    # a serving step and a standalone speculative round ship the same bytes over the same link
    from roofline.serving_api import speculative_round
    r = evaluate_serving("gpt-oss-120b", configs()[2], REQ, batch=BATCH, gamma=GAMMA, acceptance=ACC)
    s = speculative_round(target="gpt-oss-120b", verify_on="b200:8", draft="gpt-oss-draft-1.6b", draft_on="corsair:2",
                          batch=BATCH, context=REQ.input_tokens, acceptance=ACC, gamma=GAMMA)
    np.testing.assert_allclose(r.transfer_s, np.broadcast_to(s.transfer_s, r.transfer_s.shape))
    # greedy: gamma int32 ids forward, two int32 back per sequence, latency paid each way (docs/theory.md §5.5)
    np.testing.assert_allclose(r.transfer_s, 2 * 10e-6 + BATCH * (GAMMA * 4 + 8) / 63e9)
    assert np.all(evaluate_serving("gpt-oss-120b", configs()[1], REQ, batch=BATCH, gamma=GAMMA,
                                   acceptance=ACC).transfer_s == 0)


def test_continuous_throughput_and_energy_identities():
    r = evaluate_serving("gpt-oss-120b", configs()[2], REQ, batch=BATCH, gamma=GAMMA, acceptance=ACC)
    ok = r.fits
    np.testing.assert_allclose(r.tokens_per_s[ok], (r.batch * r.expected_tokens / r.step_s)[ok])
    np.testing.assert_allclose(r.energy_per_token_j[ok], (r.power_w / r.tokens_per_s)[ok])
    np.testing.assert_allclose(r.energy_per_request_j[ok], r.energy_per_token_j[ok] * REQ.output_tokens)
    assert set(r.power_by_group_w) == {"decode", "draft", "prefill"}
    np.testing.assert_allclose(sum(r.power_by_group_w.values())[ok], r.power_w[ok])
    # the two Corsair cards draw between their idle and their TDP
    assert np.all((r.power_by_group_w["draft"][ok] >= 2 * 0.12 * 600 - 1e-9) & (r.power_by_group_w["draft"][ok] <= 1200))
    # power lies between the fleet's idle and TDP draw (10 devices plus the fractional prefill groups)
    tdp = 8 * 1000 + 2 * 600 + (r.devices - 10) * 1000
    assert np.all(r.power_w[ok] <= tdp[ok] + 1e-9)
    assert np.all(r.power_w[ok] >= 0.12 * tdp[ok] - 1e-9)


def test_kv_transfer_over_a_slow_link_costs_ttft():
    g = rl.DeviceGroup(device=rl.load_device("h100-sxm"), tp=2)
    fast = Placement(name="nvlink", prefill=g, decode=g, kv_link=rl.get_link("nvlink"))
    tcp = Placement(name="tcp", prefill=g, decode=g, kv_link=rl.get_link("tcp-100g"))
    slow = Placement(name="slow", prefill=g, decode=g, kv_link=rl.get_link("1GB/s,50us"))
    req = Request(input_tokens=8192, output_tokens=128)
    a, t, b = (evaluate_serving("llama-3.1-70b", p, req, batch=4) for p in (fast, tcp, slow))
    # 2.68 GB of KV per prompt: 6 ms on NVLink, 215 ms on 100 GbE, both hidden behind the ~1.1 s prefill by
    # layer-wise streaming (docs/theory.md §5.6); at 1 GB/s the 2.7 s transfer is not
    assert a.kv_transfer_s == 0 and t.kv_transfer_s == 0
    expected = 0.05e-3 + 2.684e9 / 1e9 - float(a.prefill_s) * (1 - 1 / 80)
    assert expected > 0.5
    assert float(b.kv_transfer_s) == pytest.approx(expected, rel=0.01)
    assert b.ttft_s == pytest.approx(float(a.ttft_s + b.kv_transfer_s))


def test_static_and_aggregated_modes():
    g = rl.DeviceGroup(device=rl.load_device("h200-sxm"), tp=1)
    agg = Placement(name="agg", decode=g)
    s = evaluate_serving("llama-3.1-8b", agg, Request(input_tokens=1024, output_tokens=256), batch=16, mode="static")
    p = rl.prefill("llama-3.1-8b", g, prompt=1024, batch=16)
    assert s.ttft_s == pytest.approx(float(p.time_s) + rl.resolve_profile(g.device).request_overhead_s)
    assert s.tokens_per_s == pytest.approx(16 * 256 / float(s.e2e_s))
    c = evaluate_serving("llama-3.1-8b", agg, Request(input_tokens=1024, output_tokens=256), batch=16)
    assert c.tpot_s > rl.decode_step("llama-3.1-8b", g, batch=16, context=1152).time_s  # carries prefill tokens


def test_a_static_batch_too_large_to_prefill_at_once_is_prefilled_prompt_by_prompt():
    """Llama-3.1-8B on 8 A100s, 128 prompts of 32k tokens in one static batch: the prompts' activations do not fit at
    once, so the batch is prefilled one prompt after another (128 passes of one prompt) and the run is feasible; a
    batch whose prefill fits at once keeps its one pass."""
    g = rl.resolve_group("a100-sxm-80gb:8")
    agg, req = Placement(name="agg", decode=g), Request(input_tokens=32000, output_tokens=64)
    assert not bool(rl.prefill("llama-3.1-8b", g, prompt=32000, batch=128, on_infeasible="nan").fits)
    one = float(rl.prefill("llama-3.1-8b", g, prompt=32000, batch=1).time_s)
    s = evaluate_serving("llama-3.1-8b", agg, req, batch=np.array([2, 128]), mode="static")
    overhead = rl.resolve_profile(g.device).request_overhead_s
    assert bool(np.all(s.fits))
    assert s.ttft_s[1] == pytest.approx(128 * one + overhead, rel=1e-9)
    assert s.ttft_s[0] == pytest.approx(float(rl.prefill("llama-3.1-8b", g, prompt=32000, batch=2).time_s) + overhead)


def test_infeasible_points_are_flagged_not_raised():
    g = rl.DeviceGroup(device=rl.load_device("h100-sxm"), tp=1)
    r = evaluate_serving("gpt-oss-120b", Placement(name="one", decode=g), REQ, batch=np.array([1, 4096]))
    assert list(r.fits) == [True, False] and np.isnan(r.e2e_s[1])


def test_bad_serving_inputs():
    p = configs()[1]
    with pytest.raises(WorkloadError, match="acceptance"):
        evaluate_serving("gpt-oss-120b", p, REQ, batch=1, gamma=3)
    with pytest.raises(WorkloadError, match="gamma must be 0"):
        evaluate_serving("gpt-oss-120b", configs()[0], REQ, batch=1, gamma=3)
    with pytest.raises(WorkloadError, match="mode"):
        evaluate_serving("gpt-oss-120b", configs()[0], REQ, batch=1, mode="batchy")
    with pytest.raises(WorkloadError, match="input_tokens"):
        Request(input_tokens=0, output_tokens=5)
    with pytest.raises(WorkloadError, match="output_tokens"):
        Request(input_tokens=5, output_tokens=np.array([1, 2]))


# -------------------------------------------------------------- frontiers
points = st.lists(st.tuples(st.floats(1, 1e4), st.floats(1, 1e5), st.booleans()), min_size=1, max_size=40)


@given(points)
def test_frontier_is_exactly_the_non_dominated_set(pts):
    x, y = np.array([p[0] for p in pts]), np.array([p[1] for p in pts])
    ok = np.array([p[2] for p in pts])
    f = pareto_frontier(x, y, ok)
    for i in np.flatnonzero(ok):
        dominated = np.any(ok & (x >= x[i]) & (y >= y[i]) & ((x > x[i]) | (y > y[i])))
        on = i in set(f.index.tolist()) or any((x[j] == x[i]) and (y[j] == y[i]) for j in f.index)
        assert dominated != on or (not dominated and on)
    assert np.all(np.diff(f.interactivity) <= 0) and np.all(np.diff(f.efficiency) > 0)


def test_compare_frontiers_ratios():
    base = pareto_frontier([100, 200, 300], [3000, 2000, 1000])
    twice = pareto_frontier([200, 400, 600], [3000, 2000, 1000])
    c = compare_frontiers(base, twice)
    np.testing.assert_allclose(c.interactivity_ratio, 2.0)
    assert c.interactivity_optimised == pytest.approx(2.0) and c.efficiency_optimised == pytest.approx(2.0)
    short = pareto_frontier([500, 450], [1500, 2000])   # never reaches the baseline's 3,000 tok/s/kW
    c = compare_frontiers(base, short)
    assert c.efficiency_optimised_at == 3000 and np.isnan(c.efficiency_optimised)
    # the older names, which the Corsair example still reads, are the same figures
    assert c.energy_optimised_throughput_per_kw == 3000 and np.isnan(c.energy_optimised)
    assert c.max_ratio == pytest.approx(450 / 200)


def test_elasticities_of_memory_bound_decode():
    """Batch-1 decode answers to bandwidth; to FLOP/s only through the exposed share of its compute (none with
    full overlap); never to capacity."""
    from roofline.specs.params import shipped_profile
    h200 = rl.load_device("h200-sxm")
    for eta in (1.0, shipped_profile().default.overlap_efficiency):
        p = attrs.evolve(shipped_profile().default, overlap_efficiency=eta)
        el = elasticities(lambda d: float(rl.decode_step("llama-3.1-8b", d, batch=1, context=4096, params=p).time_s),
                          h200)
        assert -1 <= el["hbm.bandwidth"] < -0.5 and el["hbm.capacity"] == pytest.approx(0, abs=1e-9)
        assert (el["compute.bf16"] == pytest.approx(0, abs=1e-9)) if eta == 1 else (-0.3 < el["compute.bf16"] < 0)


def test_elasticities_skip_a_count_of_links(run_cli):
    """A mesh's count of peer links is a whole number with no 1% step: elasticities leave it out (the link's
    bandwidth keeps its elasticity) and `compare --elasticity` on an AMD group runs."""
    mi300x = rl.load_device("mi300x")
    el = elasticities(lambda d: float(rl.prefill("llama-3.1-70b", rl.DeviceGroup(device=d, tp=8), prompt=8192).time_s),
                      mi300x)
    assert "scale_up.peers" not in el and el["scale_up.bandwidth"] < 0
    code, out, err = run_cli("compare", "llama-3.1-70b", "mi300x:8", "--elasticity")
    assert code == 0 and not err and "scale_up.bandwidth" in out


def test_enumerate_placements_lists_infeasible_with_reason():
    cands = enumerate_placements("llama-3.1-70b", ["h100-sxm", "corsair", "sohu"], Request(input_tokens=2048,
                                 output_tokens=256), batch=4, target_formats={"kv": "bf16", "activations": "bf16"})
    by = {c.name: c for c in cands}
    h = by["decode h100-sxm, prefill on the decode group"]
    assert h.placement is not None and h.placement.decode.tp == 2     # 141 GB of BF16 needs two H100s
    sohu = by["decode sohu, prefill on the decode group"]
    assert sohu.placement is None and sohu.failures[0].device == "sohu" and "sohu" in sohu.reason
    assert "corsair has no native bf16" in by["decode corsair, prefill on the decode group"].reason


# ------------------------------------------------------------------ CLI
PARETO = ["pareto", "--target", "gpt-oss-120b", "--draft", "gpt-oss-draft-1.6b", "--alpha-by-gamma", "5:0.926,40:0.962",
          "--placement", "disagg: prefill=b200:8, decode=b200:8",
          "--placement", "gpu-spec: prefill=b200:8, verify=b200:8, draft=target",
          "--placement", "corsair: prefill=b200:8, verify=b200:8, draft=corsair:2",
          "--batch", "1,8,64", "--gamma", "1..12"]


def test_pareto_command(run_cli):
    code, out, err = run_cli(*PARETO, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert [c["name"] for c in data["configurations"]] == ["disagg", "gpu-spec", "corsair"]
    for c in data["configurations"]:
        assert c["frontier"] and {"tokens_per_s_per_user", "tokens_per_s_per_kw", "e2e_s"} <= set(c["frontier"][0])
    assert data["comparisons"][1]["interactivity_optimised"] > 1
    code, out, _ = run_cli(*PARETO)
    assert code == 0 and "interactivity at equal tokens/s per kW" in out


def test_pareto_what_if_set(run_cli):
    def best(*extra):
        data = json.loads(run_cli(*PARETO, "--json", *extra)[1])
        return max(p["tokens_per_s_per_user"] for p in data["configurations"][2]["frontier"])
    assert best("--set", "corsair.sram.bandwidth=300TB/s") >= best() > best("--set", "corsair.sram.bandwidth=1TB/s")


def test_placements_and_compare_commands(run_cli):
    code, out, err = run_cli("placements", "--target", "gpt-oss-120b", "--devices", "b200,corsair", "--draft",
                             "gpt-oss-draft-1.6b", "--alpha", "0.926", "--batch", "4", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert any(p["feasible"] for p in data["placements"])
    assert all(p["reason"] for p in data["placements"] if not p["feasible"])
    assert data["gamma"] == 5   # the default draft length the speculative placements ran at, said
    code, out, _ = run_cli("placements", "--target", "gpt-oss-120b", "--devices", "b200,corsair", "--draft",
                           "gpt-oss-draft-1.6b", "--alpha", "0.926", "--batch", "4", "--gamma", "3")
    assert code == 0 and "gamma 3 (speculative)" in " ".join(out.split())
    code, out, err = run_cli("compare", "gpt-oss-120b", "h200-sxm", "b200", "fast=h200-sxm.hbm.bandwidth=9.6TB/s",
                             "--batch", "1", "--json")
    assert code == 0, err
    rows = {r["name"]: r for r in json.loads(out)["rows"]}
    assert rows["fast"]["decode"][0]["time_s"] < rows["h200-sxm"]["decode"][0]["time_s"]


@pytest.mark.parametrize("args,code,needle", [
    (["pareto", "--target", "gpt-oss-120b"], 2, "--placement"),
    (["pareto", "--target", "gpt-oss-120b", "--placement", "x"], 2, "NAME: decode"),
    (["pareto", "--target", "gpt-oss-120b", "--placement", "x: prefill=b200:8"], 2, "needs decode"),
    (["pareto", "--target", "gpt-oss-120b", "--placement", "x: decode=b200:8, draft=target"], 2, "--draft"),
    (["placements", "--target", "gpt-oss-120b", "--devices", "b2000"], 1, "did you mean"),
])
def test_serving_cli_errors(run_cli, args, code, needle):
    got, _, err = run_cli(*args)
    assert got == code, err
    assert needle in err and len(err.strip().splitlines()) == 1


def test_pareto_plot(run_cli, tmp_path):
    out = tmp_path / "frontier.png"
    code, _, err = run_cli("pareto", "--target", "gpt-oss-120b", "--placement", "x: decode=b200:8", "--batch", "1,8",
                           "--plot", str(out))
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert code == 1 and "pip install 'roofline[plot]'" in err
    else:
        assert code == 0 and out.stat().st_size > 1000


def test_diagnose_command_and_errors(run_cli, tmp_path):
    from pathlib import Path
    sample = Path(__file__).resolve().parent.parent / "examples" / "data" / "vllm_benchmark_sample.json"
    code, out, err = run_cli("diagnose", "llama-3.3-70b", "h100-sxm:2", "--vllm-json", str(sample), "--weights", "fp8",
                             "--kv", "fp8", "--activations", "fp8", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["batch"] == 50 and d["isl"] == 5000 and d["serving"] == "continuous"
    assert 0 < d["mbu"] < 1 and 0 < d["mfu"] < 1
    bad = tmp_path / "bad.json"
    bad.write_text('{"completed": 10}')
    for args, needle in ((["--vllm-json", str(bad)], "missing or not a non-negative number"),
                         (["--vllm-json", str(tmp_path)], "directory"),
                         (["--batch", "1", "--isl", "5", "--osl", "9"], "give the measured rate"),
                         (["--batch", "1", "--isl", "5", "--osl", "9", "--tpot-ms", "-3"], "--tpot-ms: must be > 0")):
        code, _, err = run_cli("diagnose", "llama-2-7b", "a100-sxm-80gb", *args)
        assert code in (1, 2) and needle in err and len(err.strip().splitlines()) == 1


def test_scheduler_options_reach_the_serving_model(run_cli):
    """--poll-steps and --token-budget are the scheduler knobs the validation rows carry (SGLang's
    --scheduler-recv-interval, the step's token budget): a polling scheduler makes a mixed-batch request wait
    (N - 1) / 2 more steps, prefill on its own group does not wait for it, and the JSON says what was asked."""
    def run(*extra):
        code, out, err = run_cli("placements", "--target", "llama-3.1-8b", "--devices", "h100-sxm", "--batch", "16",
                                 "--json", *extra)
        assert code == 0, err
        data = json.loads(out)
        return data, {p["name"]: p["metrics"] for p in data["placements"]}
    _, base = run()
    data, polled = run("--poll-steps", "16")
    _, chunked = run("--token-budget", "2048")
    assert data["request"]["poll_steps"] == 16 and data["request"]["token_budget"] == 8192
    mixed = next(n for n in base if "on the decode group" in n)
    split = next(n for n in base if n != mixed)
    assert polled[mixed]["ttft_s"] > base[mixed]["ttft_s"]
    # a smaller budget splits the 8192-token prompts into more, shorter steps shared with decoding
    assert chunked[mixed]["tokens_per_s_per_user"] != pytest.approx(base[mixed]["tokens_per_s_per_user"], rel=1e-3)
    for other in (polled, chunked):
        assert other[split]["ttft_s"] == pytest.approx(base[split]["ttft_s"])
    pareto = {}
    for n in ("1", "16"):
        code, out, err = run_cli("pareto", "--target", "llama-3.1-8b", "--placement", "x: decode=h100-sxm", "--batch",
                                 "16", "--poll-steps", n, "--json")
        assert code == 0, err
        pareto[n] = json.loads(out)["configurations"][0]["frontier"][0]["ttft_s"]
    assert pareto["16"] > pareto["1"]
    # batch 16 of 8192-in / 1024-out prompts needs 16 decode + 16 x 8 prompt tokens per step
    code, out, _ = run_cli("placements", "--target", "llama-3.1-8b", "--devices", "h100-sxm", "--batch", "16",
                           "--token-budget", "8")
    said = " ".join(out.split())
    assert code == 0 and "token budget (8) cannot keep up" in said and "at least 144 tokens" in said
    code, _, err = run_cli("pareto", "--target", "llama-3.1-8b", "--placement", "x: decode=h100-sxm", "--batch", "16",
                           "--token-budget", "143")
    assert code == 1 and "raise --token-budget" in err
    assert run_cli("pareto", "--target", "llama-3.1-8b", "--placement", "x: decode=h100-sxm", "--batch", "16",
                   "--token-budget", "144")[0] == 0
    # memory is said first: 512 sequences of 8k prompts do not fit one H100, whatever the budget
    r = rl.evaluate_serving("llama-3.1-8b", rl.Placement.build("one", decode="h100-sxm"),
                            rl.Request(input_tokens=8192, output_tokens=1024), batch=np.array([16, 512]), chunk=64)
    assert list(r.fits_memory) == [True, False] and not r.budget_keeps_up.any() and not r.fits.any()
    assert list(r.budget_starved) == [True, False] and r.token_budget == 64
    assert "token budget (64) cannot keep up" in r.why_infeasible(0) and "at least 144 tokens" in r.why_infeasible(0)
    assert r.why_infeasible(1).startswith("does not fit at this batch: needs ") and r.memory_reason == ""   # batch 16 holds it
    assert rl.evaluate_serving("llama-3.1-8b", rl.Placement.build("one", decode="h100-sxm"),
                               rl.Request(input_tokens=8192, output_tokens=1024), batch=16).why_infeasible() == ""
    # without an index, a sweep says why its first infeasible point is (it used to ask point 0 only: "")
    r = rl.evaluate_serving("gpt-oss-120b", rl.Placement.build("x", decode="h200-sxm"),
                            rl.Request(input_tokens=8192, output_tokens=1024), batch=np.array([1, 400]))
    assert list(r.fits) == [True, False] and r.why_infeasible() == r.why_infeasible(1) != "" == r.why_infeasible(0)
    assert "GB per device" in r.why_infeasible(1)
    # a speculative scan says why its first infeasible point is, though others fit
    s = rl.speculative_round("llama-3.1-70b", verify_on="h100-sxm:2", draft="llama-3.1-8b", acceptance=0.8,
                             gamma=np.arange(1, 5)[None, :], batch=np.array([1, 64])[:, None], context=8192)
    assert s.fits[0].all() and not s.fits[1].any()
    assert s.why_infeasible() == s.infeasible_reason and "does not fit on 2x h100-sxm (TP2) for verify" in s.infeasible_reason
    code, _, err = run_cli("pareto", "--target", "llama-3.1-8b", "--placement", "x: decode=h100-sxm", "--batch", "512",
                           "--token-budget", "64")
    assert code == 1 and "llama-3.1-8b does not fit on h100-sxm" in err and "token budget" not in err
    # static batches have no scheduler to set
    code, _, err = run_cli("placements", "--target", "llama-3.1-8b", "--devices", "h100-sxm", "--mode", "static",
                           "--poll-steps", "8")
    assert code == 2 and "--mode static" in err and len(err.strip().splitlines()) == 1
    for opt, bad in (("--poll-steps", "0"), ("--token-budget", "1.5")):
        code, _, err = run_cli("pareto", "--target", "llama-3.1-8b", "--placement", "x: decode=h100-sxm", opt, bad)
        assert code == 2 and opt in err and len(err.strip().splitlines()) == 1


def test_serving_result_says_what_does_not_fit_when_nothing_does():
    """Where no point holds the model, the result names the stage that does not fit and its bytes against the
    usable memory (as `stage` says it): the decode group, or a prefill group too small for the weights."""
    req = rl.Request(input_tokens=1024, output_tokens=256)
    r = rl.evaluate_serving("llama-3.1-405b", rl.Placement.build("one", decode="h100-sxm"), req, batch=np.array([1, 8]))
    assert r.memory_reason.startswith("llama-3.1-405b does not fit on h100-sxm for decode: needs")
    assert "GB is usable" in r.memory_reason and r.why_infeasible(1) == r.memory_reason
    r = rl.evaluate_serving("llama-3.1-70b", rl.Placement.build("d", prefill="h100-sxm", decode="h100-sxm:8"), req,
                            batch=8)
    assert r.memory_reason.startswith("llama-3.1-70b does not fit on h100-sxm for prefill: needs")
    assert rl.evaluate_serving("llama-3.1-70b", rl.Placement.build("d", prefill="h100-sxm:2", decode="h100-sxm:8"),
                               req, batch=8).memory_reason == ""


def test_token_budget_binds_each_microbatch_of_a_pipeline():
    """A pipeline's microbatches are scheduled one by one, each against the whole token budget (vLLM keeps one
    scheduler per virtual engine): B/m sequences' decode and prompt tokens per pass, m = min(B, pp)."""
    request = rl.Request(input_tokens=1024, output_tokens=128)   # 8 prompt tokens per decode token
    pp = rl.evaluate_serving("llama-3.1-405b", rl.Placement.build("pp", decode="h100-sxm:8x2"), request,
                             batch=np.array([112, 120]), chunk=512)
    assert list(pp.token_budget_needed) == [504, 540] and list(pp.budget_keeps_up) == [True, False]
    assert pp.fits[0] and not pp.fits[1] and "at least 540 tokens" in pp.why_infeasible(1)
    # the same 16 GPUs as one tensor-parallel group schedule the whole batch in one pass
    tp = rl.evaluate_serving("llama-3.1-405b", rl.Placement.build("tp", decode="h100-sxm:16"), request,
                             batch=np.array([56, 112]), chunk=512)
    assert list(tp.token_budget_needed) == [504, 1008] and list(tp.budget_keeps_up) == [True, False]


def test_diagnose_says_a_far_slower_run_as_a_ratio_without_e_notation(run_cli):
    base = ("diagnose", "llama-3.1-8b", "h100-sxm", "--batch", "1", "--isl", "5", "--osl", "1000", "--json")
    far = json.loads(run_cli(*base, "--tpot-ms", "1000")[1])["advice"]
    assert "the measured 1,000 ms being" in far and "x that" in far and "e+" not in far
    near = json.loads(run_cli(*base, "--tpot-ms", "9")[1])["advice"]
    assert "below the measured 9 ms" in near


def test_diagnose_measures_bandwidth_against_the_tiers_the_bytes_are_in():
    """On a chip with SRAM and LPDDR (Corsair) an 8B model's weights sit in LPDDR: the achieved bandwidth is
    measured against LPDDR's peak, so a rate above what LPDDR allows is refused as impossible (not 0.35% of the
    SRAM's 150 TB/s), and a possible one is a sizeable share of it."""
    from roofline.evidence.diagnose import Measurement, diagnose
    run = dict(batch=8, input_tokens=1024, output_tokens=256, serving="static")
    with pytest.raises(WorkloadError, match="of peak bandwidth on corsair: impossible"):
        diagnose("llama-3.1-8b", "corsair", Measurement.from_rates(tokens_per_s_total=500, **run))
    d = diagnose("llama-3.1-8b", "corsair", Measurement.from_rates(tokens_per_s_total=200, **run))
    lpddr = rl.load_device("corsair").get("lpddr.bandwidth")
    assert lpddr < d.peak_bytes_per_s < 1.5 * lpddr and 0.3 < d.mbu < 1   # a quarter of the weights in SRAM
    one = diagnose("llama-3.1-8b", "h100-sxm", Measurement.from_rates(tokens_per_s_total=200, **run))
    assert one.peak_bytes_per_s == rl.load_device("h100-sxm").get("hbm.bandwidth")


def test_diagnose_suggests_formats_the_device_runs():
    """A bandwidth-bound run is told to shrink its weights into formats its device runs: no FP8 on an A100
    (int8 and int4 weight-only there), mxint4 on Corsair, not FP8/FP4 everywhere."""
    from roofline.evidence.diagnose import _narrower_formats
    dev = rl.load_device
    assert _narrower_formats(dev("a100-sxm-80gb"), 16) == ["w8a8-int8", "int4-g128"]
    assert _narrower_formats(dev("b200"), 16) == ["fp8", "w8a8-int8", "nvfp4", "int4-g128"]
    assert _narrower_formats(dev("corsair"), 8.25) == ["mxint4"]


def test_ngram_medusa_and_tree_drafts_cost_what_they_run():
    """n-gram lookup runs no draft pass; Medusa's heads run once per round whatever the draft length; a tree of
    tokens verified costs the target more than a chain of gamma + 1 (and an array of gammas equals the scalars)."""
    req, acc = Request(input_tokens=500, output_tokens=200), Acceptance.geometric(0.7)

    def run(kind, gamma, tree=None):
        p = Placement.build("p", decode="h100-sxm:1", draft_kind=kind)
        p = attrs.evolve(p, tree_tokens=tree)
        return evaluate_serving("llama-3.1-8b", p, req, batch=4, gamma=gamma, acceptance=acc, mode="static")
    ngram = run("ngram", np.array([2, 5]))
    assert np.all(ngram.draft_s == 0) and np.all(ngram.verify_s > 0)
    medusa = run("medusa", np.array([2, 5]))
    assert medusa.draft_s[0] == pytest.approx(medusa.draft_s[1]) and medusa.draft_s[0] > 0
    eagle = run("eagle", np.array([2, 5]))
    assert eagle.draft_s[1] > eagle.draft_s[0]
    assert float(run("eagle", 5, tree=60).verify_s) > float(run("eagle", 5).verify_s) == pytest.approx(eagle.verify_s[1])


def test_input_range_contains_the_point_and_names_the_driver():
    """roofline.serving.sensitivity.input_range on a constructed result, 3a + b - c (a moves it most): the range
    contains the point, the driver is a, each input's own span is its effect, the corners combine the inputs
    (a one-at-a-time sweep alone would miss the compound low and high), and an unreachable setting is listed
    and left out of the range."""
    from roofline.serving.sensitivity import input_range

    def f(x):
        return None if x["c"] == 9 else 3 * x["a"] + x["b"] - x["c"]
    point = {"a": 1.0, "b": 1.0, "c": 1.0}
    r = input_range(f, point, {"a": [0.0, 2.0], "b": [0.0, 3.0], "c": [0.0, 2.0, 9]})
    assert r.point == 3.0 and r.low <= r.point <= r.high
    assert r.driver == "a"
    assert r.by_input == {"a": (0.0, 6.0), "b": (2.0, 5.0), "c": (2.0, 4.0)}
    assert (r.low, r.high) == (-2.0, 9.0)   # a=0, b=0, c=2 and a=2, b=3, c=0: neither is a one-at-a-time setting
    assert r.corners == {"low": {"a": 0.0, "b": 0.0, "c": 2.0}, "high": {"a": 2.0, "b": 3.0, "c": 0.0}}
    assert r.unreachable == [{"c": 9}]
    assert set(r.to_dict()) == {"point", "low", "high", "driver", "by_input", "corners", "unreachable"}
    flat = input_range(lambda x: 1.0, {"a": 1}, {"a": [2]})
    assert (flat.low, flat.high, flat.driver) == (1.0, 1.0, None)
    with pytest.raises(WorkloadError):
        input_range(f, point, {"d": [1.0]})
