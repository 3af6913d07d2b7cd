"""Served load: the closed forms of roofline.serving.load against a discrete-event simulation of the same engine
(tests/queue_oracle.py), their invariants, the public door and its errors."""

from __future__ import annotations

import math

import attrs
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from queue_oracle import simulate_engine, simulate_pool

import roofline as rl
from roofline.errors import WorkloadError
from roofline.serving.load import Engine, Workload, engine_load
from roofline.serving.queueing import backward_counts, erlang_c, step_chain, wait_tail
from roofline.serving.serve import Placement
from roofline.serving_api import deployment, max_rate, serve_at_rate
from roofline.specs.lengths import Lengths, shipped_lengths

BATCH = np.arange(1, 257, dtype=float)


def synthetic(lengths: Lengths, *, cost_s: float = 20e-6, budget: int = 2048, slots: int = 256,
              whole: bool = False) -> Engine:
    """An engine whose decode step is 20 ms + 50 us per sequence and whose prompt tokens cost ``cost_s`` each."""
    return Engine(batch=BATCH[:slots], step_s=0.020 + 0.00005 * BATCH[:slots], slots=slots, budget=budget,
                  prompt_tokens=lengths.input_tokens, prompt_cost_s=lengths.input_tokens * cost_s,
                  whole_prompts=whole)


def compare(engine: Engine, lengths: Lengths, utilisation: float, cv2: float = 1.0, n: int = 30000,
            seeds: int = 2) -> dict:
    """Relative errors of the closed forms against the simulation at ``utilisation`` of the engine's capacity,
    the simulation's samples pooled over ``seeds`` independent runs (a single run's p99 near capacity moves by
    +-15% with its seed: the slots fill in rare, long episodes)."""
    cap = engine_load(engine, lengths, [1e-6]).capacity_per_s
    lam = utilisation * cap
    r = engine_load(engine, lengths, [lam], arrival_cv2=cv2)
    per_token = engine.prompt_cost_s / engine.prompt_tokens
    runs = []
    for seed in range(seeds):
        rng = np.random.default_rng(100 + seed)
        pick = rng.choice(lengths.weights.size, size=20000, p=lengths.weights)
        runs.append(simulate_engine(rate_per_s=lam, inputs=engine.prompt_tokens[pick],
                                    outputs=lengths.output_tokens[pick], token_cost_s=per_token[pick],
                                    step_s=lambda b: float(engine.d(b)), budget=engine.budget, slots=engine.slots,
                                    n=n, cv2=cv2, whole=engine.whole_prompts, seed=seed))
    pooled = {k: np.concatenate([getattr(s, k) for s in runs]) for k in ("ttft_s", "tpot_s", "e2e_s", "itl_s",
                                                                          "itl_weight")}
    s = attrs.evolve(runs[0], **pooled, batch_mean=float(np.mean([x.batch_mean for x in runs])))
    errs = {}
    for name, sim in (("ttft", s.ttft_s), ("tpot", s.tpot_s), ("e2e", s.e2e_s)):
        for p in (50, 90, 99):
            errs[f"{name}_p{p}"] = float(r.at(name, p)[0]) / np.percentile(sim, p) - 1
    for p in (50, 90, 99):   # a step law with an atom: read the simulation's quantile within a band of levels
        got = float(r.at("itl", p)[0])
        lo, hi = s.itl_quantile(max(p / 100 - 0.03, 0)), s.itl_quantile(min(p / 100 + 0.005, 0.999))
        errs[f"itl_p{p}"] = 0.0 if lo * 0.9 <= got <= hi * 1.1 else got / s.itl_quantile(p / 100) - 1
    errs["batch"] = float(r.batch_mean[0]) / s.batch_mean - 1
    return errs


LOGNORMAL = Lengths.lognormal(400, 200, cv=1.0)
FIXED = Lengths.fixed(1000, 100)

#: (case, engine, lengths, arrivals' squared CV, tolerance of p50 and p90): decode-heavy and prefill-heavy,
#: Poisson and bursty (whose clusters the closed forms follow less closely: 11% at p90, docs/load.md)
CASES = {
    "lognormal decode-heavy": (synthetic(LOGNORMAL), LOGNORMAL, 1.0, 0.10),
    "fixed 1000/100 prefill-heavy": (synthetic(FIXED), FIXED, 1.0, 0.10),
    "lognormal bursty (cv2 4)": (synthetic(LOGNORMAL), LOGNORMAL, 4.0, 0.15),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("utilisation", [0.3, 0.6])
def test_percentiles_match_the_simulation_up_to_moderate_load(case, utilisation):
    """Up to 0.6 of capacity every p50 and p90 is within 10% of the simulation (15% for bursty arrivals) and every
    p99 within 20% (docs/load.md lists the measured errors, 0.9 included)."""
    engine, lengths, cv2, tol = CASES[case]
    errs = compare(engine, lengths, utilisation, cv2)
    assert abs(errs["batch"]) < 0.05, errs
    bad = {k: round(v, 3) for k, v in errs.items() if k != "batch"
           and abs(v) > (0.20 if k.endswith("p99") else tol)}
    assert not bad, bad


def test_heavy_load_stays_within_the_documented_envelope():
    """At 0.9 of capacity the medians stay within 10%; the p99 TTFT is under-predicted (the batch's spread
    near the slot limit is wider than the birth-death law gives), within the 45% docs/load.md states."""
    engine, lengths, cv2, _ = CASES["lognormal decode-heavy"]
    errs = compare(engine, lengths, 0.9, cv2, seeds=4)
    assert all(abs(errs[f"{k}_p50"]) < 0.10 for k in ("ttft", "tpot", "e2e", "itl")), errs
    assert -0.45 < errs["ttft_p99"] < 0.05, errs


def test_physics_engine_matches_the_simulation():
    """An engine priced by the physics (Llama-2-70B FP8 on two H100s, the MLPerf Llama-2 lengths) against the
    simulation of the same steps."""
    lengths = shipped_lengths("mlperf-llama2-70b")
    d = deployment("llama-2-70b", Placement.build("h100", decode="h100-sxm:2"), Workload(lengths=lengths),
                   formats={"weights": "fp8", "kv": "fp8"})
    assert d.engine.overhead_s > 0   # the stack's per-request time: added to TTFT, not simulated
    errs = compare(attrs.evolve(d.engine, overhead_s=0.0), lengths, 0.5, n=12000)
    bad = {k: round(v, 3) for k, v in errs.items() if abs(v) > (0.20 if k.endswith("p99") else 0.10)}
    assert not bad, bad


def test_pool_wait_is_exact_for_mm1_and_md1_means_and_tracks_a_simulated_pool():
    lam = np.array([0.3, 0.6, 0.9])
    u = (np.arange(4000) + 0.5) / 4000
    expo = -np.log1p(-u)
    mm1 = wait_tail(lam, expo, np.full(expo.size, 1 / expo.size))
    assert mm1.mean_s == pytest.approx(lam / (1 - lam), rel=0.01)        # M/M/1: rho / (mu - lambda)
    assert mm1.theta_per_s == pytest.approx(1 - lam, rel=0.05)           # its tail: exp(-(mu - lambda) x)
    md1 = wait_tail(lam, [1.0], [1.0])
    assert md1.mean_s == pytest.approx(lam / (2 * (1 - lam)))            # Pollaczek-Khinchine
    assert erlang_c(4, np.array([2.0]))[0] == pytest.approx(4 / 23)      # Erlang C(4 servers, 2 erlangs)
    service = np.array([0.5, 1.0, 3.0])
    w = wait_tail(np.array([1.2]), service, np.full(3, 1 / 3), servers=2)
    sim = simulate_pool(rate_per_s=1.2, service_s=service, servers=2, n=60000)
    assert float(w.mean_s[0]) == pytest.approx(sim.mean(), rel=0.15)
    for q in (0.9, 0.99):
        analytic = -math.log((1 - q) / float(w.p[0])) / float(w.theta_per_s[0])
        assert analytic == pytest.approx(np.quantile(sim, q), rel=0.15)


def test_step_chain_keeps_the_flow_balance():
    """The chain's mean step equals d / (1 - lambda c E[n]): every prompt token is carried once."""
    lam = np.array([5.0, 20.0, 28.0])
    c = step_chain(lam, np.full(3, 0.02), np.full(3, 1900.0), 20e-6, np.array([1000.0]), np.array([1.0]))
    assert c.mean_step_s == pytest.approx(0.02 / (1 - lam * 1000 * 20e-6), rel=1e-6)
    assert c.pi.sum(axis=-1) == pytest.approx(1.0)


def test_backward_counts_are_poisson_for_poisson_arrivals_and_clustered_for_bursty():
    from scipy.stats import poisson
    p = backward_counts(np.array([0.5]), np.array([4.0]), 1.0)[0]
    assert p[:10] == pytest.approx(poisson.pmf(np.arange(10), 2.0), abs=1e-9)
    bursty = backward_counts(np.array([0.05]), np.array([4.0]), 4.0)[0]
    assert 1 - bursty[0] > 2 * (1 - math.exp(-0.2))   # an arrival finds another just before it far more often


@settings(max_examples=15, deadline=None)
@given(st.floats(0.05, 0.95), st.floats(0.05, 0.95))
def test_a_higher_rate_never_lowers_a_percentile(u1, u2):
    """Up to the step chain's token grid (its cell width follows the load, so a percentile read off the grid's
    atoms can step back by a fraction of a cell between two nearby rates: under 1%)."""
    engine, lengths, _, _ = CASES["lognormal decode-heavy"]
    cap = engine_load(engine, lengths, [1e-6]).capacity_per_s
    lo, hi = sorted((u1, u2))
    r = engine_load(engine, lengths, [lo * cap, hi * cap])
    for name in ("ttft", "itl", "tpot", "e2e"):
        for p in (50, 90, 99):
            a, b = r.at(name, p)
            assert b >= a * (1 - 0.01), (name, p, lo, hi)


def test_rates_at_or_above_capacity_are_flagged_not_raised():
    engine, lengths, _, _ = CASES["lognormal decode-heavy"]
    cap = engine_load(engine, lengths, [1e-6]).capacity_per_s
    r = engine_load(engine, lengths, [0.5 * cap, 1.2 * cap])
    assert r.stable.tolist() == [True, False]
    assert math.isnan(float(r.ttft_p99_s[1])) and math.isfinite(float(r.ttft_p99_s[0]))


def test_max_rate_meets_its_limits_and_tighter_limits_never_allow_more():
    placement = Placement.build("h100", decode="h100-sxm:2")
    work = Workload(lengths=Lengths.lognormal(1000, 200, cv=0.8))
    kw = dict(formats={"weights": "fp8", "kv": "fp8"})
    loose, r = max_rate("llama-3.1-70b", placement, work, {"ttft_p99_s": 2.0, "tpot_p99_s": 0.2}, **kw)
    tight, t = max_rate("llama-3.1-70b", placement, work, {"ttft_p99_s": 0.5, "tpot_p99_s": 0.05}, **kw)
    assert 0 < tight < loose
    assert r.ttft_p99_s[0] <= 2.0 and r.tpot_p99_s[0] <= 0.2
    assert t.ttft_p99_s[0] <= 0.5 and t.tpot_p99_s[0] <= 0.05


def test_disaggregated_pool_and_replicas():
    work = Workload(lengths=Lengths.lognormal(2000, 300, cv=0.5))
    agg = serve_at_rate("llama-3.1-8b", Placement.build("a", decode="h100-sxm:1"), work, [2.0, 8.0], replicas=2)
    dis = serve_at_rate("llama-3.1-8b", Placement.build("d", decode="h100-sxm:1", prefill="h100-sxm:1"), work,
                        [2.0, 8.0], replicas=2, prefill_groups=2)
    assert agg.stable.all() and dis.stable.all()
    # no prompt rides a disaggregated decode step: its gaps stay short once prompts would (at a vanishing load both
    # are a step at the batch's upper atom, a fraction of a sequence apart: 0.1%)
    assert (dis.itl_p99_s <= agg.itl_p99_s * (1 + 1e-3)).all() and dis.itl_p99_s[1] < agg.itl_p99_s[1] / 2
    assert (dis.prefill_utilisation > 0).all() and (dis.ttft_p99_s > dis.ttft_p50_s).all()


def test_prefix_hits_lower_ttft():
    p = Placement.build("a", decode="h100-sxm:1")
    base = Workload(lengths=Lengths.lognormal(4000, 200, cv=0.5))
    hit = Workload(lengths=base.lengths, prefix_hit=0.8)
    a, b = (serve_at_rate("llama-3.1-8b", p, w, [3.0]) for w in (base, hit))
    assert b.ttft_p50_s[0] < a.ttft_p50_s[0] and b.ttft_p99_s[0] < a.ttft_p99_s[0]


@pytest.mark.parametrize("bad, match", [
    (dict(rate_per_s=[-1.0]), "arrival rate"),
    (dict(rate_per_s=[float("nan")]), "arrival rate"),
    (dict(workload="lognormal"), "workload must be a Workload"),
])
def test_bad_input_is_a_typed_error(bad, match):
    kw = dict(model="llama-3.1-8b", placement=Placement.build("a", decode="h100-sxm:1"),
              workload=Workload(lengths=LOGNORMAL), rate_per_s=[1.0])
    kw.update(bad)
    with pytest.raises(WorkloadError, match=match):
        serve_at_rate(**kw)


def test_workload_and_lengths_refuse_nonsense(tmp_path):
    with pytest.raises(WorkloadError, match="prefix_hit"):
        Workload(lengths=LOGNORMAL, prefix_hit=1.0)
    with pytest.raises(WorkloadError, match="squared coefficient"):
        Workload(lengths=LOGNORMAL, arrival_cv2=0.0)
    with pytest.raises(WorkloadError, match="token counts"):
        Lengths.fixed(0, 10)
    f = tmp_path / "l.csv"
    f.write_text("# x\ninput_tokens,output_tokens,weight\n10,abc,1\n")
    with pytest.raises(WorkloadError, match="three numbers"):
        Lengths.from_file(f)
    with pytest.raises(WorkloadError, match="shipped"):
        shipped_lengths("sharegpt")
    with pytest.raises(WorkloadError, match="speculates"):
        serve_at_rate("llama-3.1-8b", Placement.build("s", decode="h100-sxm:1", draft_kind="mtp"),
                      Workload(lengths=LOGNORMAL), [1.0])


def test_shipped_histograms_keep_their_means():
    """Each shipped length histogram states its per-sample means in docs; the atoms keep them."""
    llama = shipped_lengths("mlperf-llama2-70b")
    assert llama.mean_input_tokens == pytest.approx(222.33, rel=0.005)
    assert Lengths.lognormal(400, 200, cv=1.0).mean_input_tokens == pytest.approx(400, rel=0.01)


def test_public_api_exports():
    for name in ("serve_at_rate", "max_rate", "Workload", "Lengths", "LoadResult", "size_at_rate", "LoadTarget"):
        assert hasattr(rl, name)


def test_size_at_rate_meets_its_limits_and_more_load_never_needs_fewer_devices():
    from roofline.serving.load_sizing import LoadTarget, size_at_rate
    work = Workload(lengths=Lengths.lognormal(1024, 512, cv=0.8))
    sized = {}
    for rate in (5.0, 20.0):
        target = LoadTarget(rate_per_s=rate, workload=work, limits={"ttft_p99_s": 1.0, "itl_p99_s": 0.06})
        options = size_at_rate("llama-3.1-70b", ["h100-sxm"], target)
        ok = [o for o in options if o.feasible]
        assert ok, options
        for o in ok:   # what was sized meets the limits, evaluated again from scratch
            placement = o.placement_record
            r = serve_at_rate("llama-3.1-70b", placement, work, [rate], replicas=o.replicas,
                              prefill_groups=max(o.prefill_groups, 1))
            assert r.ttft_p99_s[0] <= 1.0 * (1 + 1e-6) and r.itl_p99_s[0] <= 0.06 * (1 + 1e-6)
            assert 0 < o.utilisation < 1
        sized[rate] = {o.placement: o.devices for o in ok}
    for kind, n in sized[5.0].items():
        assert sized[20.0].get(kind, math.inf) >= n


def test_size_rate_command(run_cli):
    import json
    code, out, err = run_cli("size", "llama-3.1-8b", "--devices", "h100-sxm", "--rate", "30", "--p99-ttft-ms", "500",
                             "--p99-itl-ms", "40", "--lengths", "lognormal:0.5", "--isl", "800", "--osl", "300",
                             "--json")
    assert code == 0, err
    data = json.loads(out)
    feasible = [o for o in data["options"] if o["feasible"]]
    assert feasible and data["rate_per_s"] == 30
    for o in feasible:
        assert {"ttft_p50_s", "ttft_p99_s", "itl_p50_s", "itl_p99_s", "utilisation"} <= set(o)
        assert o["ttft_p99_s"] <= 0.5 and o["itl_p99_s"] <= 0.04
    code, out, err = run_cli("size", "llama-3.1-8b", "--devices", "h100-sxm", "--rate", "30")
    assert code == 2 and "latency limit" in err and "Traceback" not in err
    code, out, err = run_cli("size", "llama-3.1-8b", "--devices", "h100-sxm", "--rate", "30", "--p99-ttft-ms", "500",
                             "--lengths", "sharegpt")
    assert code == 1 and "shipped" in err


def test_placements_rate_adds_each_placements_percentiles(run_cli):
    import json
    code, out, err = run_cli("placements", "--target", "llama-3.1-8b", "--devices", "h100-sxm,b200", "--rate", "20",
                             "--lengths", "lognormal:0.8", "--isl", "2000", "--osl", "300", "--json")
    assert code == 0, err
    data = json.loads(out)
    loads = [p["load"] for p in data["placements"]]
    assert data["rate_per_s"] == 20 and any("over capacity" in x.get("reason", "") for x in loads)
    ok = [x for x in loads if "ttft_p99_s" in x]
    assert ok and all(x["ttft_p99_s"] >= x["ttft_p50_s"] > 0 and 0 < x["utilisation"] < 1 for x in ok)
    code, out, err = run_cli("placements", "--target", "llama-3.1-8b", "--devices", "b200", "--rate", "20")
    assert code == 0 and "one replica of each placement at 20 requests/s" in out


def test_vllm_serves_with_its_own_scheduler_defaults():
    """vLLM's server caps running requests at 1024 (8,192 tokens a step) on GPUs of 70 GiB or more but A100s,
    at 256 (2,048) on others; sizing under that stack holds them, other stacks are left to memory."""
    from roofline.serving.load_sizing import engine_defaults
    assert engine_defaults("vllm", rl.load_device("h100-sxm")) == (1024, 8192)
    assert engine_defaults("vllm", rl.load_device("a100-sxm-80gb")) == (256, 2048)
    assert engine_defaults("vllm", rl.load_device("l40s")) == (256, 2048)
    assert engine_defaults("trtllm", rl.load_device("h100-sxm")) == (None, None)
    target = rl.LoadTarget(rate_per_s=5.0, workload=Workload(lengths=Lengths.fixed(512, 128)),
                           limits={"ttft_p99_s": 2.0})
    vllm = [o for o in rl.size_at_rate("llama-3.1-8b", "a100-sxm-80gb", target, stack="vllm") if o.feasible]
    free = [o for o in rl.size_at_rate("llama-3.1-8b", "a100-sxm-80gb", target) if o.feasible]
    assert vllm and all(o.batch_per_replica <= 256 for o in vllm)
    assert free and max(o.batch_per_replica for o in free) > 256
