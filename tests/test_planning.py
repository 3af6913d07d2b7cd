"""Planning answers: sizing under targets, costs, engine command lines, and chunked sweeps on executors."""

import json
import math
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import roofline as rl
from roofline.errors import SpecError, WorkloadError
from roofline.physics.energy import DEFAULT_POWER, group_busy_w
from roofline.serving.emit import launch_command
from roofline.serving.serve import Placement, Request
from roofline.serving.sizing import Target
from roofline.serving.sweep import pareto_mask
from roofline.serving_api import evaluate_serving, size, sweep
from roofline.specs.prices import HOURS_PER_YEAR, Prices, load_prices, shipped_prices

REQ = Request(input_tokens=1024, output_tokens=512)
MODEL = rl.load_model("llama-3.1-70b")


def per_user(group, batch, placement=None):
    p = placement or Placement(name="agg", decode=group)
    r = evaluate_serving(MODEL, p, REQ, batch=batch)
    return float(r.tokens_per_s_per_user)


def option(opts, placement):
    return next(o for o in opts if o.placement == placement)


# ------------------------------------------------------------------- sizing
def test_sizing_hand_checked():
    """Target = the speed at batch 100 on b200:2: 450 users need ceil(450/100) = 5 replicas of 90 users."""
    g = rl.resolve_group("b200:2")
    v = per_user(g, 100)
    assert per_user(g, 101) < v * (1 - 1e-9) < per_user(g, 99)
    prices = Prices().with_overrides({"b200": 10.0})
    o = option(size(MODEL, [g], Target(users=450, min_tokens_per_s_per_user=v * (1 - 1e-9), request=REQ),
                    prices=prices), "aggregated")
    assert (o.replicas, o.batch_per_replica, o.devices, o.group) == (5, 90, 10, "b200:2")
    assert o.tokens_per_s_per_user == pytest.approx(per_user(g, 90))
    # $/Mtok by hand: 2 devices at $10/h, over 90 users each at their speed
    assert o.usd_per_million_output_tokens == pytest.approx(2 * 10 / 3600 / (90 * per_user(g, 90)) * 1e6)


def test_disaggregated_sizing_deploys_whole_prefill_groups():
    """The replicas' prefill share (a fraction of a group each, provisioned to the request rate) adds up and rounds
    up to whole prefill groups of the decode group's shape: the devices a deployment can actually run, and what
    the emitted launch command's note tells the user to start."""
    g = rl.resolve_group("b200:2")
    o = option(size(MODEL, [g], Target(users=200, min_tokens_per_s_per_user=20.0, request=REQ)), "disaggregated")
    r = evaluate_serving(MODEL, Placement(name="d", decode=g, prefill=g), REQ, batch=float(o.batch_per_replica))
    share = (float(r.devices) - g.count) / g.count   # prefill groups per replica, a fraction
    assert 0 < share < 1 and o.prefill_groups == math.ceil(o.replicas * share)
    assert o.devices == (o.replicas + o.prefill_groups) * g.count
    note = " ".join(launch_command("vllm", MODEL, o, request=REQ).notes)
    assert f"runs {o.prefill_groups} prefill instance(s) of the same command, on b200:2 each" in note


def test_disaggregated_sizing_charges_the_whole_prefill_groups_it_deploys():
    """tok/s/kW and $/Mtok are the deployment's: the devices rounding up to whole prefill groups adds draw idle
    power and cost their price per hour, and serve no extra tokens (the same prompts spread over them)."""
    from roofline.physics.energy import idle_w
    g = rl.resolve_group("b200:2")
    prices = Prices().with_overrides({"b200": 10.0}, usd_per_kwh=0.1)
    o = option(size(MODEL, [g], Target(users=200, min_tokens_per_s_per_user=20.0, request=REQ), prices=prices),
               "disaggregated")
    r = evaluate_serving(MODEL, Placement(name="d", decode=g, prefill=g), REQ, batch=float(o.batch_per_replica),
                         prices=prices)
    extra = o.devices - o.replicas * float(r.devices)
    assert extra > 0.01   # the case this checks: whole groups hold more devices than the share keeps busy
    tokens_per_s = o.replicas * float(r.tokens_per_s)
    power_w = o.replicas * float(r.power_w) + extra * idle_w(g.device)
    assert o.tokens_per_s_per_kw == pytest.approx(tokens_per_s / power_w * 1000)
    usd_per_h = o.replicas * float(r.usd_per_hour) + extra * (10.0 + idle_w(g.device) / 1000 * 0.1)
    assert o.usd_per_million_output_tokens == pytest.approx(usd_per_h / 3600 / tokens_per_s * 1e6)
    assert o.tokens_per_s_per_kw < float(r.tokens_per_s_per_kw)


def test_sizing_search_is_the_fewest_devices_over_shapes():
    """Against a brute force over every TP of the layout: no shape serves the users with fewer devices."""
    target = Target(users=300, min_tokens_per_s_per_user=30.0, request=REQ)
    best = option(size(MODEL, [rl.load_device("h200-sxm")], target), "aggregated")
    brute = []
    for tp in (1, 2, 4, 8):
        g = rl.DeviceGroup(device=rl.load_device("h200-sxm"), tp=tp)
        r = evaluate_serving(MODEL, Placement(name="x", decode=g), REQ, batch=np.arange(1.0, 301.0))
        ok = np.flatnonzero(r.fits & (np.nan_to_num(r.tokens_per_s_per_user) >= 30.0))
        if ok.size:
            brute.append(math.ceil(300 / (ok[-1] + 1)) * tp)
    assert best.devices == min(brute)


def test_sizing_speculative_picks_the_best_gamma_at_its_batch():
    draft = rl.load_model("llama-3.1-8b")
    acc = rl.Acceptance.geometric(0.8)
    g = rl.resolve_group("b200:2")
    o = option(size(MODEL, [g], Target(users=64, min_tokens_per_s_per_user=40.0, request=REQ), draft=draft,
                    acceptance=acc), "speculative")
    assert o.feasible and 1 <= o.gamma <= 16
    p = Placement(name="s", decode=g, draft_model=draft, draft_kind="model")
    r = evaluate_serving(MODEL, p, REQ, batch=o.batch_per_replica, gamma=np.arange(1, 17), acceptance=acc)
    assert o.tokens_per_s_per_user == pytest.approx(np.nanmax(r.tokens_per_s_per_user))
    assert o.gamma == int(np.nanargmax(r.tokens_per_s_per_user)) + 1


def test_sizing_says_why_a_kind_cannot_meet_the_target():
    g = rl.resolve_group("b200:2")
    ttft = float(evaluate_serving(MODEL, Placement(name="x", decode=g), REQ, batch=1).ttft_s)
    o = option(size(MODEL, [g], Target(users=10, min_tokens_per_s_per_user=1.0, max_ttft_s=ttft / 2, request=REQ)),
               "aggregated")
    assert not o.feasible and o.devices == 0 and "TTFT" in o.reason
    cannot = size(MODEL, [rl.load_device("groq-lpu")],
                  Target(users=10, min_tokens_per_s_per_user=1.0, request=REQ), formats={"activations": "bf16"})
    assert all(not o.feasible and "bf16" in o.reason for o in cannot)


@pytest.mark.parametrize("bad", [dict(users=0), dict(min_tokens_per_s_per_user=-1.0),
                                 dict(min_tokens_per_s_per_user=math.nan), dict(max_ttft_s=0.0)])
def test_sizing_targets_are_validated(bad):
    kw = dict(users=10, min_tokens_per_s_per_user=10.0, request=REQ) | bad
    with pytest.raises(WorkloadError):
        Target(**kw)


# -------------------------------------------------------------------- costs
def test_cost_per_million_tokens_by_hand():
    """$3.60/h is $0.001/s: a million tokens cost 1000 / (tokens/s) dollars; electricity adds W x $/kWh."""
    g = rl.resolve_group("b200")
    p = Placement(name="x", decode=g)
    prices = Prices().with_overrides({"b200": 3.6})
    r = evaluate_serving("llama-3.1-8b", p, REQ, batch=64, prices=prices)
    assert float(r.usd_per_million_output_tokens) == pytest.approx(1000 / float(r.tokens_per_s))
    ratio = REQ.input_tokens / REQ.output_tokens
    assert float(r.usd_per_million_total_tokens) == pytest.approx(1000 / (float(r.tokens_per_s) * (1 + ratio)))
    assert math.isnan(float(r.usd_per_million_input_tokens))     # prefill shares the devices: not split off
    with_power = evaluate_serving("llama-3.1-8b", p, REQ, batch=64,
                                  prices=prices.with_overrides({}, usd_per_kwh=0.10))
    extra = float(with_power.power_w) / 1000 * 0.10 / 3600 / float(r.tokens_per_s) * 1e6
    assert float(with_power.usd_per_million_output_tokens) == pytest.approx(1000 / float(r.tokens_per_s) + extra)


def test_disaggregated_input_cost_is_the_prefill_groups_share():
    g = rl.resolve_group("b200")
    p = Placement(name="d", decode=g, prefill=g)
    prices = Prices().with_overrides({"b200": 3.6})
    r = evaluate_serving("llama-3.1-8b", p, REQ, batch=64, prices=prices)
    prefill_devices = float(r.devices) - 1.0
    input_rate = float(r.tokens_per_s) * REQ.input_tokens / REQ.output_tokens
    assert float(r.usd_per_million_input_tokens) == pytest.approx(prefill_devices * 0.001 / input_rate * 1e6)


def test_unpriced_devices_cost_nan_not_zero():
    r = evaluate_serving("llama-3.1-8b", Placement(name="x", decode=rl.resolve_group("b200")), REQ, batch=8,
                         prices=Prices())
    assert math.isnan(float(r.usd_per_million_output_tokens))


def test_shipped_prices_are_sourced_and_name_known_devices():
    known = set(rl.list_devices())
    prices = shipped_prices()
    assert len(prices.by_device) >= 8
    for dev, p in prices.by_device.items():
        assert dev in known, f"prices.toml prices unknown device {dev}"
        assert p.source.startswith("https://") and p.date and 0.1 < p.usd_per_hour < 100


def test_price_files_fail_loudly(tmp_path):
    f = tmp_path / "p.toml"
    f.write_text('[device.b200]\nusd_per_hour = 5\n')
    with pytest.raises(SpecError, match=r"device\.b200.*source"):
        load_prices(f)
    f.write_text('[device.b200]\nusd_per_hour = -5\nsource = "https://example.com"\n')
    with pytest.raises(SpecError, match="positive"):
        load_prices(f)
    f.write_text('[device.b200]\ncapex_usd = 40000\nlifetime_years = 4\nsource = "https://example.com"\n')
    assert load_prices(f).usd_per_hour("b200") == pytest.approx(40000 / (4 * HOURS_PER_YEAR))
    with pytest.raises(WorkloadError):
        Prices().with_overrides({"b200": -1.0})
    with pytest.raises(WorkloadError):
        Prices().with_overrides({}, usd_per_kwh=math.inf)


# ----------------------------------------------------------------- emitting
# The engines' documented flags (the tests' own copy, from the docs, not from roofline's code):
DOCUMENTED = {
    # https://docs.vllm.ai/en/latest/configuration/engine_args.html, .../features/spec_decode.html
    # .../features/quantization/fp8.html (--quantization fp8: a 16-bit checkpoint quantized on load)
    "vllm": {"--tensor-parallel-size", "--pipeline-parallel-size", "--enable-expert-parallel", "--max-num-seqs",
             "--max-model-len", "--kv-cache-dtype", "--gpu-memory-utilization", "--speculative-config",
             "--quantization"},
    # https://docs.sglang.io/advanced_features/server_arguments.html, .../speculative_decoding.html
    "sglang": {"--model-path", "--tp-size", "--pp-size", "--ep-size", "--max-running-requests", "--context-length",
               "--kv-cache-dtype", "--mem-fraction-static", "--speculative-algorithm",
               "--speculative-draft-model-path", "--speculative-num-steps", "--speculative-eagle-topk",
               "--speculative-num-draft-tokens", "--quantization"},   # .../quantization.html
    # https://nvidia.github.io/TensorRT-LLM/commands/trtllm-serve.html
    "trtllm": {"--tp_size", "--pp_size", "--ep_size", "--max_batch_size", "--max_seq_len",
               "--kv_cache_free_gpu_memory_fraction", "--extra_llm_api_options"},
}
KV_CHOICES = {"vllm": {"auto", "fp8", "fp8_e4m3", "fp8_e5m2"}, "sglang": {"auto", "fp8_e4m3", "fp8_e5m2", "bf16"}}
FLAG_OF = {"vllm": ("--tensor-parallel-size", "--pipeline-parallel-size", "--max-num-seqs", "--max-model-len"),
           "sglang": ("--tp-size", "--pp-size", "--max-running-requests", "--context-length"),
           "trtllm": ("--tp_size", "--pp_size", "--max_batch_size", "--max_seq_len")}


def _sized(kv="bf16", draft=None, weights=None):
    g = rl.resolve_group("b200:2")
    t = Target(users=200, min_tokens_per_s_per_user=30.0, request=REQ)
    opts = size(MODEL, [g], t, formats={"kv": kv, "weights": weights}, draft=draft,
                acceptance=rl.Acceptance.geometric(0.8) if draft else None)
    return option(opts, "speculative" if draft else "aggregated")


def _value(argv, flag):
    return argv[argv.index(flag) + 1]


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
@pytest.mark.parametrize("kv", ["bf16", "fp8"])
def test_emitted_flags_are_documented_and_carry_the_sizing(engine, kv):
    o = _sized(kv)
    cmd = launch_command(engine, MODEL, o, request=REQ)
    flags = [w for w in cmd.argv if w.startswith("--")]
    assert set(flags) <= DOCUMENTED[engine], set(flags) - DOCUMENTED[engine]
    assert len(flags) == len(set(flags))
    tp, pp, seqs, length = FLAG_OF[engine]
    assert _value(cmd.argv, tp) == "2" and _value(cmd.argv, pp) == "1"
    assert _value(cmd.argv, seqs) == str(o.batch_per_replica)
    assert _value(cmd.argv, length) == str(REQ.input_tokens + REQ.output_tokens)
    assert "meta-llama/Llama-3.1-70B-Instruct" in cmd.argv     # the checkpoint people serve, not the base one
    if engine in KV_CHOICES:
        assert _value(cmd.argv, "--kv-cache-dtype") in KV_CHOICES[engine]
        assert (_value(cmd.argv, "--kv-cache-dtype") == "auto") == (kv == "bf16")
    else:
        yaml = "".join(cmd.files.values())
        assert ("dtype: fp8" in yaml) == (kv == "fp8")
    assert cmd.text.count(" \\\n  --") == len(flags)      # one flag per continued line


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_emitted_speculative_settings_use_the_best_gamma(engine):
    o = _sized(draft=rl.load_model("llama-3.1-8b"))
    cmd = launch_command(engine, MODEL, o, request=REQ)
    assert {w for w in cmd.argv if w.startswith("--")} <= DOCUMENTED[engine]
    if engine == "vllm":
        cfg = json.loads(_value(cmd.argv, "--speculative-config"))
        assert cfg["num_speculative_tokens"] == o.gamma and cfg["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    elif engine == "sglang":
        assert _value(cmd.argv, "--speculative-num-steps") == str(o.gamma)
        assert _value(cmd.argv, "--speculative-num-draft-tokens") == str(o.gamma + 1)
        assert _value(cmd.argv, "--speculative-draft-model-path") == "meta-llama/Llama-3.1-8B-Instruct"
    else:
        yaml = "".join(cmd.files.values())
        assert f"max_draft_len: {o.gamma}" in yaml and "decoding_type: DraftTarget" in yaml


def test_trtllm_launch_keeps_only_the_window_on_sliding_layers():
    """The sizing counts a sliding layer's KV for its window only; TensorRT-LLM does that only when told each
    layer's attention window (kv_cache_config.max_attention_window), so the YAML lists them: gpt-oss-20b's
    alternating 128-token sliding and full layers. A model without sliding layers gets no such line."""
    m = rl.load_model("gpt-oss-20b")
    t = Target(users=64, min_tokens_per_s_per_user=30.0, request=REQ)
    o = option(size(m, [rl.resolve_group("b200")], t, formats={"kv": "fp8"}), "aggregated")
    yaml = "".join(launch_command("trtllm", m, o, request=REQ).files.values())
    length = REQ.input_tokens + REQ.output_tokens
    windows = [128 if kind == "sliding" else length for kind in m.layer_types]
    assert f"  max_attention_window: [{', '.join(map(str, windows))}]" in yaml.splitlines()
    assert yaml.startswith("kv_cache_config:\n  dtype: fp8\n")
    assert "max_attention_window" not in "".join(launch_command("trtllm", MODEL, _sized("fp8"),
                                                                request=REQ).files.values())


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_emitted_command_serves_the_weight_format_it_was_sized_with(engine):
    """Sized with FP8 weights from a BF16 checkpoint: vLLM and SGLang quantize on load (--quantization fp8);
    trtllm-serve serves pre-quantized checkpoints, so it gets a note instead; a format no engine quantizes to on
    load (int4-g128) gets the note on every engine; BF16 needs neither."""
    fp8 = launch_command(engine, MODEL, _sized(weights="fp8"), request=REQ)
    assert ("--quantization" in fp8.argv) == (engine != "trtllm")
    if engine != "trtllm":
        assert _value(fp8.argv, "--quantization") == "fp8" and not fp8.notes
    else:
        assert any("serve a checkpoint quantized to fp8" in n for n in fp8.notes)
    int4 = launch_command(engine, MODEL, _sized(weights="int4-g128"), request=REQ)
    assert "--quantization" not in int4.argv and any("quantized to int4-g128" in n for n in int4.notes)
    plain = launch_command(engine, MODEL, _sized(), request=REQ)
    assert "--quantization" not in plain.argv and not plain.notes


def test_a_given_shape_that_cannot_hold_the_model_says_what_does_not_fit():
    """ID:N sized on that shape only: when the weights alone exceed its memory the reason is the memory (as
    `stage` says it), not that no batch reaches the speed."""
    big = rl.load_model("llama-3.1-405b")
    o = option(size(big, [rl.resolve_group("h100-sxm:2x2")], Target(users=10, min_tokens_per_s_per_user=1.0,
                                                                    request=REQ)), "aggregated")
    assert not o.feasible and "does not fit on 4x h100-sxm" in o.reason and "is usable" in o.reason


def test_emit_refuses_what_an_engine_cannot_run():
    o = option(size(MODEL, [rl.resolve_group("groq-lpu:8x100")], Target(users=10, min_tokens_per_s_per_user=1.0,
                                                                       request=REQ)), "aggregated")
    assert o.feasible
    with pytest.raises(WorkloadError, match="does not run on groq-lpu"):
        launch_command("vllm", MODEL, o, request=REQ)
    with pytest.raises(WorkloadError, match="unknown engine"):
        launch_command("tgi", MODEL, _sized(), request=REQ)


# ------------------------------------------------------------------- sweeps
def _dominated_brute(v):
    n = len(v)
    keep = np.ones(n, bool)
    for i in range(n):
        for j in range(n):
            if i != j and np.all(v[j] >= v[i]) and (np.any(v[j] > v[i]) or j < i):
                keep[i] = False
                break
    return keep


@given(st.integers(1, 3).flatmap(lambda k: st.lists(st.lists(st.integers(0, 4), min_size=k, max_size=k),
                                                    min_size=1, max_size=30)))
def test_pareto_mask_matches_a_brute_force(rows):
    v = np.array(rows, dtype=float)
    assert np.array_equal(pareto_mask(v), _dominated_brute(v))


GROUPS = ["b200", "b200:2", "h200-sxm:2"]
BATCH = np.arange(1, 65)
CONTEXT = np.array([512, 4096, 16384, 65536, 131072])


def _direct_frontier():
    """The whole grid evaluated at once, then one frontier (no chunks): what the chunked sweep must equal."""
    pts = []
    for gi, name in enumerate(GROUPS):
        g = rl.resolve_group(name)
        B, L = np.meshgrid(BATCH.astype(float), CONTEXT.astype(float), indexing="ij")
        r = rl.decode_step(MODEL, g, batch=B, context=L, on_infeasible="nan")
        kw = r.tokens_per_s / (group_busy_w(g, r, DEFAULT_POWER) * DEFAULT_POWER.pue / 1000)
        for b, c, x, y in zip(B.ravel(), L.ravel(), np.ravel(1 / r.time_s), np.ravel(kw)):
            if np.isfinite(x) and np.isfinite(y):
                pts.append((gi, b, c, x, y))
    a = np.array(pts)
    return {tuple(p[:3]) for p in a[pareto_mask(a[:, 3:])]}


@pytest.mark.parametrize("chunk", [7, 100, 10**6])
def test_chunked_sweep_equals_the_whole_grid_frontier(chunk):
    seen = []
    r = sweep(MODEL, GROUPS, batch=BATCH, context=CONTEXT, chunk=chunk, progress=lambda d, t: seen.append((d, t)))
    assert seen[-1] == (r.chunks, r.chunks) and [d for d, _ in seen] == list(range(1, r.chunks + 1))
    got = {(float(g), float(b), float(c)) for g, b, c in zip(r.group_index, r.batch, r.context)}
    assert got == _direct_frontier()
    assert r.points == len(GROUPS) * BATCH.size * CONTEXT.size and r.infeasible > 0
    assert r.chunks == sum(math.ceil(BATCH.size * CONTEXT.size / chunk) for _ in GROUPS)


def test_sweep_on_a_process_pool_gives_the_same_frontier():
    fast = rl.override(rl.load_device("b200"), "hbm.bandwidth", "16TB/s")   # a what-if travels to workers
    groups = [rl.DeviceGroup(device=fast, tp=1), "h200-sxm:2"]
    here = sweep(MODEL, groups, batch=BATCH, context=CONTEXT, chunk=50)
    with ProcessPoolExecutor(2) as ex:
        there = sweep(MODEL, groups, batch=BATCH, context=CONTEXT, chunk=50, executor=ex)
    assert np.array_equal(here.batch, there.batch) and np.array_equal(here.group_index, there.group_index)
    assert np.allclose(here.metrics["tokens_per_s_per_kw"], there.metrics["tokens_per_s_per_kw"])


def test_sweep_cost_objective_and_bad_objectives():
    r = sweep(MODEL, ["b200:2", "groq-lpu:8x100"], batch=BATCH, context=CONTEXT,
              objective=("tokens_per_s_per_user", "usd_per_million_output_tokens"))
    assert len(r) and set(r.group) == {"b200:2"}           # Groq has no shipped price: its points are infeasible
    timed = sweep(MODEL, ["groq-lpu:8x100"], batch=BATCH, context=CONTEXT)
    assert len(timed) and set(timed.group) == {"groq-lpu:8x100"}    # though they run (fp16, its native format)
    assert np.all(np.diff(r.metrics["tokens_per_s_per_user"]) <= 0)
    assert np.all(np.diff(r.metrics["usd_per_million_output_tokens"]) <= 1e-12)   # slower is cheaper
    for bad in [(), ("speed",), ("time_s", "time_s")]:
        with pytest.raises(WorkloadError):
            sweep(MODEL, ["b200"], batch=BATCH, context=CONTEXT, objective=bad)
    with pytest.raises(WorkloadError):
        sweep(MODEL, ["b200"], batch=BATCH, context=CONTEXT, chunk=0)


# ---------------------------------------------------------------------- CLI
def test_size_command_json_and_table(run_cli):
    code, out, err = run_cli("size", "gpt-oss-120b", "--devices", "b200,h200-sxm,corsair", "--users", "500",
                             "--min-tokens-per-s-per-user", "50", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["lower_bound"] is True
    feasible = [o for o in data["options"] if o["feasible"]]
    assert {o["device"] for o in feasible} >= {"b200", "h200-sxm"}
    for o in feasible:
        assert isinstance(o["devices"], int) and o["devices"] >= o["replicas"] >= 1
        assert o["tokens_per_s_per_user"] >= 50
        for key in ("device", "placement", "replicas", "ttft_s", "usd_per_million_output_tokens"):
            assert key in o
    assert all(o["usd_per_million_output_tokens"] > 0 for o in feasible if o["device"] in ("b200", "h200-sxm"))
    assert all(o["usd_per_million_output_tokens"] is None for o in feasible if o["device"] == "corsair")
    code, out, _ = run_cli("size", "gpt-oss-120b", "--devices", "b200", "--users", "500",
                           "--min-tokens-per-s-per-user", "50", "--emit", "vllm")
    assert code == 0 and "lower bound" in out and "vllm serve openai/gpt-oss-120b" in out


def test_size_reports_the_formats_its_options_ran_as_every_command_does(run_cli):
    """size's JSON formats are the dict every other command gives (weights, experts, kv, activations and the
    stack's LM head), the same as stage's for the same model, device and stack; the sizing input it was given
    stays on Option.formats."""
    from roofline.specs.formats import FORMAT_KEYS
    args = ("llama-3.1-8b", "--weights", "fp8", "--stack", "vllm", "--json")
    code, out, err = run_cli("size", *args[:1], "--devices", "h100-sxm", "--users", "10",
                             "--min-tokens-per-s-per-user", "30", *args[1:])
    assert code == 0, err
    sized = json.loads(out)["options"][0]["formats"]
    staged = json.loads(run_cli("stage", args[0], "h100-sxm", "--batch", "1", *args[1:])[1])["stages"][0]["formats"]
    assert tuple(sized) == FORMAT_KEYS and sized == staged
    o = rl.size("llama-3.1-8b", ["h100-sxm"], rl.Target(users=10, min_tokens_per_s_per_user=30,
                                                         request=rl.Request(input_tokens=1000, output_tokens=200)),
                formats={"weights": "fp8"})[0]
    assert "head" not in o.formats and o.target_formats["weights"] == "fp8" and "head" in o.target_formats


def test_size_lists_an_option_once_when_two_device_names_find_it(run_cli):
    """``h100-sxm`` (searched over shapes) and ``h100-sxm:1`` (that shape) beside it find the same one-GPU
    option: it is listed once."""
    code, out, err = run_cli("size", "llama-3.1-8b", "--devices", "h100-sxm,h100-sxm:1", "--users", "100",
                             "--min-tokens-per-s-per-user", "50", "--json")
    assert code == 0, err
    keys = [(o["group"], o["placement"], o["replicas"]) for o in json.loads(out)["options"] if o["feasible"]]
    assert len(keys) == len(set(keys)) and ("h100-sxm", "disaggregated", 1) in keys


def test_size_exits_one_when_nothing_meets_the_target(run_cli):
    """No option reaches the speed: the table and JSON still say why, and the exit status says no (1)."""
    argv = ("size", "llama-3.1-8b", "--devices", "h100-sxm:1", "--users", "4", "--min-tokens-per-s-per-user", "1e6")
    code, out, err = run_cli(*argv)
    assert code == 1 and "no option meets the target" in out and not err
    code, out, _ = run_cli(*argv, "--json")
    assert code == 1 and not any(o["feasible"] for o in json.loads(out)["options"])
    code, _, _ = run_cli(*argv[:-1], "1")
    assert code == 0


def test_size_command_bad_input_is_one_line(run_cli):
    base = ("size", "gpt-oss-120b", "--users", "500", "--min-tokens-per-s-per-user", "50")
    for argv, status in [((*base, "--devices", "b200", "--usd-per-device-hour", "b200"), 2),
                         ((*base, "--devices", "b200", "--usd-per-device-hour", "b200=-3"), 2),
                         ((*base, "--devices", "b200,b200"), 2),
                         ((*base, "--devices", "b200", "--alpha", "0.8"), 2),
                         ((*base, "--devices", "nosuch"), 1)]:
        code, out, err = run_cli(*argv)
        assert code == status and err.count("\n") == 1 and "Traceback" not in err, (argv, err)


def test_pareto_cost_axis_and_compare_cost(run_cli):
    args = ("pareto", "--target", "llama-3.1-8b", "--placement", "a: decode=b200", "--placement",
            "g: decode=groq-lpu:8x10", "--batch", "1,8,64", "--axis", "usd", "--weights", "fp16", "--kv", "fp16",
            "--activations", "fp16")
    code, _, err = run_cli(*args)
    assert code == 2 and "groq-lpu" in err and "--usd-per-device-hour" in err
    code, out, err = run_cli(*args, "--usd-per-device-hour", "groq-lpu=0.5")
    # each frontier says whose workload it is
    assert code == 0 and "llama-3.1-8b, 8192 in / 1024 out, continuous" in " ".join(out.split())
    code, out, err = run_cli(*args, "--usd-per-device-hour", "groq-lpu=0.5", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["axis"] == "usd" and "cost_optimised" in data["comparisons"][0]
    for c in data["configurations"]:
        usd = [p["usd_per_million_output_tokens"] for p in c["frontier"]]
        assert usd == sorted(usd, reverse=True)   # most interactive first: cost falls along the frontier
    code, out, _ = run_cli("compare", "llama-3.1-8b", "b200", "--json", "--usd-per-device-hour", "b200=3.6")
    row = json.loads(out)["rows"][0]
    tps = [d["tokens_per_s"] for d in row["decode"]]
    assert row["usd_per_million_output_tokens"] == pytest.approx([1000 / t for t in tps])


def test_readme_python_example_runs():
    """The README's "From Python" block, as written, runs."""
    import contextlib
    import io
    import re
    from pathlib import Path
    text = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    block = re.search(r"## From Python\s+```python\n(.*?)```", text, re.S).group(1)
    with contextlib.redirect_stdout(io.StringIO()) as out:
        exec(compile(block, "README.md", "exec"), {})
    assert "vllm serve" in out.getvalue()


def test_the_sizings_take_records_below_the_door():
    """serving.sizing.size, load_sizing.size_at_rate and placements.enumerate_placements take records; given an id
    they say that the public functions resolve ids (issue 51: names resolved once, at the door)."""
    from roofline.serving import load_sizing, placements, sizing
    t = Target(users=1, min_tokens_per_s_per_user=1.0, request=REQ)
    with pytest.raises(WorkloadError, match="resolved by the public functions"):
        sizing.size("llama-3.1-8b", [rl.load_device("h100-sxm")], t)
    with pytest.raises(WorkloadError, match="resolved by the public functions"):
        sizing.size(rl.load_model("llama-3.1-8b"), "h100-sxm", t)
    with pytest.raises(WorkloadError, match="resolved by the public functions"):
        load_sizing.size_at_rate("llama-3.1-8b", [rl.load_device("h100-sxm")],
                                 load_sizing.LoadTarget(rate_per_s=1.0, workload=rl.Workload(lengths=rl.Lengths.fixed(1024, 512)),
                                                       limits={"ttft_p99_s": 1.0}))
    with pytest.raises(WorkloadError, match="resolved by the public functions"):
        placements.enumerate_placements(rl.load_model("llama-3.1-8b"), ["h100-sxm"], REQ, batch=1)


def test_the_readme_counts_what_ships():
    """The README's counts of devices and of shipped measurements are the shipped ones (a review found 31 devices
    and 2,087 rows where 33 and 2,107 ship)."""
    import csv
    import re
    from pathlib import Path

    import roofline as rl
    root = Path(__file__).resolve().parents[1]
    text = " ".join((root / "README.md").read_text().split())
    devices = int(re.search(r"`roofline devices` lists the (\d+) devices", text).group(1))
    assert devices == len(rl.list_devices())
    rows = int(re.search(r"reads ([\d,]+) published measurements", text).group(1).replace(",", ""))
    with open(root / "roofline" / "validation" / "measurements.csv", newline="") as f:
        assert rows == sum(1 for _ in csv.DictReader(f))
