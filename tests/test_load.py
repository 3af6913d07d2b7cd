"""Served load: the closed forms of roofline.serving.load against a discrete-event simulation of the same engine
(tests/queue_oracle.py), their invariants, the public door and its errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import attrs
import numpy as np
import pytest
import queue_oracle as oracle
from hypothesis import given, settings
from hypothesis import strategies as st
from queue_oracle import simulate_gim_busy, simulate_pool

import roofline as rl
from roofline.errors import WorkloadError
from roofline.serving.load import Engine, Workload, engine_load
from roofline.serving.queueing import (
    WaitTail,
    arrival_wait_share,
    backward_counts,
    erlang_c,
    gim_ratio,
    quantiles_with_wait,
    renewal_mean,
    spread_quantiles,
    step_chain,
    wait_tail,
    wait_then_wait,
)
from roofline.serving.serve import Placement
from roofline.serving_api import deployment, max_rate, serve_at_rate
from roofline.specs.lengths import Lengths, shipped_lengths

#: The oracle run long at utilisation 0.3, 0.6 and 0.9 of each case's capacity, its samples pooled over 8 to 16 runs
#: (scripts/load_oracle.py writes it, and docs/load.md's table from it).
STORED = Path(__file__).resolve().parent.parent / "docs" / "load_oracle.json"
#: The synthetic cases (the physics case moves with every refit: it is checked live, at moderate load).
SYNTHETIC = [name for name in oracle.cases() if "physics" not in name]
DECODE_HEAVY = oracle.cases()["lognormal 400/200 (CV 1), decode-heavy"][:2]
LOGNORMAL = DECODE_HEAVY[1]
#: Where the bound is not 10% (docs/load.md): bursty arrivals (c_a^2 = 4) at 0.9 put 12% of arrivals behind full
#: slots, so their p90 sits on the knee of the slot wait, where a tenth less of that share (the closed forms: 11.9%)
#: moves it by a quarter (-23%); at 0.3 their clusters spread the prompt backlog more than the chain's
#: negative-binomial count per step (-10.2%).
BOUNDS = {("lognormal 400/200, bursty arrivals (c_a^2 = 4)", "0.9", "ttft_p90"): 0.20,
          ("lognormal 400/200, bursty arrivals (c_a^2 = 4)", "0.3", "ttft_p90"): 0.11}


def compare(engine: Engine, lengths: Lengths, rate: float, cv2: float = 1.0, n: int = 30000, seeds: int = 2) -> dict:
    """Relative errors of the closed forms against the simulation at ``rate``, its samples pooled over ``seeds``
    independent runs."""
    runs = [oracle.run(engine, lengths, rate, cv2=cv2, n=n, seed=seed) for seed in range(seeds)]
    hist = {k: sum(oracle.histograms(s)[k] for s in runs) for k in oracle.METRICS}
    point = {"rate_per_s": rate, "arrival_cv2": cv2, "batch_mean": float(np.mean([s.batch_mean for s in runs])),
             "pooled": {f"{k}_p{p}": oracle.quantile(hist[k], p / 100) for k in oracle.METRICS for p in (50, 90, 99)},
             "itl_band": {f"itl_p{p}": [oracle.quantile(hist["itl"], max(p / 100 + oracle.ITL_BAND[0], 0.0)),
                                        oracle.quantile(hist["itl"], min(p / 100 + oracle.ITL_BAND[1], 0.999))]
                          for p in (50, 90, 99)}}
    return oracle.model_errors(point, engine, lengths)


@pytest.mark.parametrize("name", SYNTHETIC)
def test_percentiles_meet_the_pooled_oracle_at_utilisation_03_to_09(name):
    """TTFT, TPOT, ITL and E2E at p50, p90 and p99 within 10% of the oracle's pooled samples at 0.3, 0.6 and 0.9 of
    capacity (but :data:`BOUNDS`), and the mean batch within 5%. The points are
    stored: a change to the oracle, the cases or the capacity asks for scripts/load_oracle.py again."""
    engine, lengths, _ = oracle.cases()[name]
    points = json.loads(STORED.read_text())[name]
    assert sorted(points) == ["0.3", "0.6", "0.9"]
    bad = {}
    for u, point in points.items():
        assert point["rate_per_s"] == pytest.approx(float(u) * engine.capacity_per_s(lengths), rel=1e-9), \
            "the capacity moved: run scripts/load_oracle.py"
        for k, v in oracle.model_errors(point, engine, lengths).items():
            if abs(v) > (0.05 if k == "batch" else BOUNDS.get((name, u, k), 0.10)):
                bad[u, k] = round(v, 3)
    assert not bad, bad


def test_the_stored_oracle_is_this_oracle():
    """Two short runs of the oracle at 0.6 of capacity land on the stored pooled percentiles (p50 and p90 within
    4%, p99 within 8%): the stored table was made by this oracle on these cases."""
    for name in ("lognormal 400/200 (CV 1), decode-heavy", "fixed 1000/100, prefill-heavy"):
        engine, lengths, cv2 = oracle.cases()[name]
        point = json.loads(STORED.read_text())[name]["0.6"]
        runs = [oracle.run(engine, lengths, point["rate_per_s"], cv2=cv2, n=30000, seed=1000 + seed) for seed in range(2)]
        for k in ("ttft", "tpot", "e2e"):
            sim = np.concatenate([getattr(s, f"{k}_s") for s in runs])
            for p in (50, 90, 99):
                assert np.percentile(sim, p) == pytest.approx(point["pooled"][f"{k}_p{p}"], rel=0.08 if p == 99 else 0.04)


def test_physics_engine_matches_the_simulation():
    """An engine priced by the physics (Llama-2-70B FP8 on two H100s, the MLPerf Llama-2 lengths) against the
    simulation of the same steps at 0.5 of its capacity."""
    lengths = shipped_lengths("mlperf-llama2-70b")
    d = deployment("llama-2-70b", Placement.build("h100", decode="h100-sxm:2"), Workload(lengths=lengths),
                   formats={"weights": "fp8", "kv": "fp8"})
    assert d.engine.overhead_s > 0   # the stack's per-request time: added to TTFT, not simulated
    engine = attrs.evolve(d.engine, overhead_s=0.0)
    errs = compare(engine, lengths, 0.5 * engine.capacity_per_s(lengths), n=12000)
    bad = {k: round(v, 3) for k, v in errs.items() if abs(v) > (0.05 if k == "batch" else 0.10)}
    assert not bad, bad


def test_smoother_than_poisson_arrivals_meet_the_oracle_and_never_wait_longer():
    """Gamma gaps of squared CV 0.25 (steadier than Poisson): every percentile within 10% of a fresh simulation at
    0.3 of capacity (their prompts' count per step was a binomial of fractional trials, TTFT p99 +105% there),
    and on the physics engine a smoother arrival stream never raises a p99 at the same rate (beyond 1%: the
    count per step is a whole number of trials)."""
    engine, lengths, _ = oracle.cases()["lognormal 400/200 (CV 1), decode-heavy"]
    errs = compare(engine, lengths, 0.3 * engine.capacity_per_s(lengths), cv2=0.25, n=20000)
    bad = {k: round(v, 3) for k, v in errs.items() if abs(v) > (0.05 if k == "batch" else 0.10)}
    assert not bad, bad
    lengths = shipped_lengths("mlperf-llama2-70b")
    p99 = {cv2: rl.serve_at_rate("llama-2-70b", Placement.build("h100", decode="h100-sxm:2"),
                                 Workload(lengths=lengths, arrival_cv2=cv2), [0.5, 2.0, 5.0, 9.0],
                                 formats={"weights": "fp8", "kv": "fp8"})
           for cv2 in (0.1, 0.25, 0.5, 1.0, 2.0)}
    for a, b in zip(list(p99), list(p99)[1:]):
        assert np.all(p99[a].ttft_p99_s <= p99[b].ttft_p99_s * (1 + 1e-2)), (a, b)
        assert np.all(p99[a].tpot_p99_s <= p99[b].tpot_p99_s * (1 + 1e-2)), (a, b)


def test_a_light_load_gaps_tokens_by_the_steps_that_run():
    """Where the engine mostly idles (a request every 1,000 s), a token's gap is one decode step of the few that
    run, not a prompt's prefill (the tokens' atoms were the idle batch's, weightless, and the quantile fell on a
    prefill step: ITL p99 1.04 s, so `max_rate` found no rate at all under a 100 ms ITL limit); the gap only
    grows with the rate."""
    w = Workload(lengths=Lengths.lognormal(1024, 1024, cv=0.8))
    p = Placement.build("a", decode="h100-sxm:2")
    rates = [0.0005, 0.001, 0.002, 0.01, 0.05, 0.2]
    r = rl.serve_at_rate("llama-3.1-70b", p, w, rates)
    d = deployment("llama-3.1-70b", p, w).engine.d(np.array([1.0]))[0]
    assert r.itl_p99_s[0] == pytest.approx(d, rel=0.02) and r.itl_p50_s[0] == pytest.approx(d, rel=0.02)
    assert np.all(np.diff(r.itl_p99_s) >= -1e-4 * r.itl_p99_s[:-1])
    rate, _ = max_rate("llama-3.1-70b", p, w, {"itl_p99_s": 0.1})
    assert rate > 0.2


def test_spread_quantiles_are_those_of_samples_drawn_from_the_mixture():
    """Atoms spread evenly over value +- half width (points where it is 0): the bisected quantiles against the
    empirical quantiles of a million draws from the same mixture."""
    rng = np.random.default_rng(7)
    v, h = np.array([0.02, 0.05, 0.08, 0.2]), np.array([0.0, 0.01, 0.03, 0.0])
    w = np.array([0.55, 0.25, 0.15, 0.05])
    pick = rng.choice(4, size=1_000_000, p=w)
    draws = v[pick] + h[pick] * rng.uniform(-1.0, 1.0, size=pick.size)
    got = spread_quantiles(v[None, :], h[None, :], w[None, :], [0.3, 0.6, 0.9, 0.99])[0]
    assert got == pytest.approx(np.quantile(draws, [0.3, 0.6, 0.9, 0.99]), rel=5e-3)


def test_the_gap_percentiles_do_not_step_back_a_backlog_cell_with_the_rate():
    """The step chain's backlog grid moves with the load; read as points its cells made the ITL p99 fall 90 -> 80 ms
    (-11%) between 9.5 and 9.6 requests/s on the MLPerf lengths (a cell is 13.6 ms of prefill there). Spread over
    their cells, the ITL percentiles move by under 2% against the trend between neighbouring rates."""
    r = rl.serve_at_rate("llama-2-70b", Placement.build("a", decode="h100-sxm:2"),
                         Workload(lengths=shipped_lengths("mlperf-llama2-70b")), np.arange(9.0, 10.01, 0.05),
                         formats={"weights": "fp8", "kv": "fp8"})
    for p in (r.itl_p90_s, r.itl_p99_s):
        assert np.all(p[1:] >= p[:-1] * 0.98), np.round(p * 1e3, 1)


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


def test_busy_period_moments_behind_tpot_follow_from_takacs_equation():
    """The moments the TPOT's prompt cost uses (roofline.serving.load._Life): a prompt's busy period B has
    E[B] = E[a] / (1 - rho) and E[B^2] = E[a^2] / (1 - rho)^3, and the busy period started by a request's decode
    time x has mean x / (1 - rho) and variance lambda x E[a^2] / (1 - rho)^3; both from Takacs' equation
    B*(s) = A*(s + lambda - lambda B*(s)) and Y*(s) = exp(-x (s + lambda - lambda B*(s))), to second order (sympy)."""
    import sympy as sp
    s, lam, m1, m2, x, b1, b2 = sp.symbols("s lambda m1 m2 x b1 b2")
    busy = 1 - b1 * s + b2 * s ** 2 / 2
    inner = s + lam - lam * busy
    eq = sp.expand(busy - (1 - m1 * inner + m2 * inner ** 2 / 2))
    sol = sp.solve([eq.coeff(s, 1), eq.coeff(s, 2)], [b1, b2], dict=True)[0]
    rho = lam * m1
    assert sp.simplify(sol[b1] - m1 / (1 - rho)) == 0 and sp.simplify(sol[b2] - m2 / (1 - rho) ** 3) == 0
    started = sp.exp(-x * (s + lam - lam * busy.subs(sol)))
    mean = -sp.diff(started, s).subs(s, 0)
    var = sp.diff(started, s, 2).subs(s, 0) - mean ** 2
    assert sp.simplify(mean - x / (1 - rho)) == 0 and sp.simplify(var - lam * x * m2 / (1 - rho) ** 3) == 0


def test_gim_ratio_is_the_chance_to_wait_in_a_simulated_gi_m_1_queue():
    """For GI/M/1 an arrival waits with probability sigma, the root of sigma = A*(mu (1 - sigma)): Poisson arrivals
    give rho; Gamma gaps of squared CV 4 wait far more often, and a simulated queue agrees."""
    assert gim_ratio(np.array([0.7]), np.array([1.0]), 1.0)[0] == pytest.approx(0.7)
    sigma = float(gim_ratio(np.array([0.7]), np.array([1.0]), 4.0)[0])
    assert sigma == pytest.approx((1 + (1 - sigma) * 4 / 0.7) ** -0.25, abs=1e-9) and sigma > 0.85
    u = (np.arange(4000) + 0.5) / 4000
    wait = simulate_pool(rate_per_s=0.7, service_s=-np.log1p(-u), servers=1, n=200000, cv2=4.0)
    assert np.mean(wait > 0) == pytest.approx(sigma, abs=0.02)


@pytest.mark.parametrize(("rho", "cv2"), [(0.6, 4.0), (0.9, 4.0), (0.9, 0.5)])
def test_arrivals_see_every_server_busy_sigma_over_rho_as_often_as_time_does(rho, cv2):
    """GI/M/c (c = 4): the share of arrivals finding every server busy is sigma / rho times the share of time they
    are, in a simulated queue (bursty gaps see the busy servers more often, smooth ones less, Poisson as often)."""
    sigma = float(gim_ratio(np.array([4 * rho]), np.array([4.0]), cv2)[0])
    seen, busy = simulate_gim_busy(rate_per_s=4 * rho, servers=4, n=200000, cv2=cv2, seed=3)
    assert float(arrival_wait_share(busy, sigma, rho)) == pytest.approx(seen, rel=0.04)
    assert abs(seen / busy - 1) > 0.03   # the correction is not negligible in these cases
    assert float(arrival_wait_share(0.3, 0.7, 0.7)) == pytest.approx(0.3)   # Poisson: PASTA


@settings(max_examples=25, deadline=None)
@given(st.sampled_from([1e-150, 1e-3, 0.05, 0.3, 0.9]), st.floats(0.5, 50.0), st.integers(0, 2**31 - 1))
def test_quantiles_with_a_wait_solve_the_convolution(p, theta, seed):
    """The closed-form quantiles of points plus an exponential wait against the convolution's distribution function
    bisected numerically (a wait too rare to matter leaves the points' own quantiles)."""
    rng = np.random.default_rng(seed)
    values, weights = rng.gamma(2.0, 0.05, size=(2, 200)), rng.random((2, 200))
    wait = WaitTail(p=np.full(2, p), theta_per_s=np.full(2, theta), mean_s=np.full(2, p / theta), rho=np.full(2, 0.5))
    got = quantiles_with_wait(values, weights, wait, [0.5, 0.9, 0.99])
    w = weights / weights.sum(axis=-1, keepdims=True)
    for row in range(2):
        for j, q in enumerate((0.5, 0.9, 0.99)):
            lo, hi = 0.0, values.max() + 50.0 / theta
            for _ in range(100):
                t = (lo + hi) / 2
                gap = t - values[row]
                cdf = np.sum(w[row] * np.where(gap >= 0, 1 - p * np.exp(-theta * np.maximum(gap, 0)), 0.0))
                lo, hi = (lo, t) if cdf >= q else (t, hi)
            assert got[row, j] == pytest.approx(hi, rel=1e-6, abs=1e-9)


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


@pytest.mark.parametrize("cv2", [0.3, 0.5, 1.0, 2.0, 4.0])
def test_the_renewal_mean_holds_however_long_the_window(cv2):
    """The mean count of renewal arrivals (Gamma gaps) in a window after an arrival is the renewal function
    sum_k P(Gamma(k / cv2) <= rate w / cv2), here summed to 5,000 terms; summing the counts' pmf, which lumps
    every count beyond MAX_BACKWARD into the last, put 100 expected arrivals at 48 (Poisson exactly rate x w)."""
    from scipy.special import gammainc
    m = np.array([0.5, 5.0, 20.0, 30.0, 45.0, 100.0, 500.0])
    w, lam = m / 10.0, np.full(m.shape, 10.0)
    full = [np.sum(gammainc(np.arange(1, 5001) / cv2, x / cv2)) for x in m]
    assert renewal_mean(w, lam, cv2) == pytest.approx(full, rel=2e-3)


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 40), st.integers(1, 12), st.integers(0, 2**31 - 1))
def test_the_banded_state_reduction_is_the_full_one(g, down, seed):
    """A chain that falls at most ``down`` states a transition (the step chain: a step carries at most its room)
    has the same stationary law by the banded GTH reduction as by the full one, and that law solves pi P = pi."""
    from roofline.serving.queueing import _stationary
    rng = np.random.default_rng(seed)
    i, j = np.indices((g, g))
    p = rng.random((2, g, g)) * (j >= i - down) * (rng.random((2, g, g)) < 0.7)
    p[..., np.arange(g), np.minimum(np.arange(g) + 1, g - 1)] += 0.1    # every state leads up, so one class
    p[..., np.arange(1, g), np.arange(g - 1)] += 0.1                    # and down
    p /= p.sum(axis=-1, keepdims=True)
    banded, full = _stationary(p, down=down), _stationary(p)
    assert banded == pytest.approx(full, rel=1e-9, abs=1e-300)
    assert np.einsum("bi,bij->bj", banded, p) == pytest.approx(banded, rel=1e-9, abs=1e-15)


def test_the_step_chain_never_falls_further_than_a_steps_room():
    """What the banded reduction assumes of the step chain: from backlog cell i no transition reaches a cell
    below i - room / width."""
    lam = np.array([5.0, 20.0, 28.0])
    c = step_chain(lam, np.full(3, 0.02), np.full(3, 1900.0), 20e-6, np.array([300.0, 2500.0]), np.array([0.6, 0.4]))
    g = c.transition.shape[-1]
    i, j = np.indices((g, g))
    for k in range(3):
        down = int(round(1900.0 / float(c.width[k])))
        assert np.all(c.transition[k][j < i - down] == 0)
        assert np.any(c.transition[k][j == i - down] > 0)


@settings(max_examples=15, deadline=None)
@given(st.floats(0.05, 0.95), st.floats(0.05, 0.95))
def test_a_higher_rate_never_lowers_a_percentile(u1, u2):
    """Up to the step chain's token grid (its cell width follows the load, so a percentile read off the grid's
    atoms can step back by a fraction of a cell between two nearby rates: under 1%), Poisson or bursty arrivals.
    (Fixed lengths: the next test.)"""
    engine, lengths = DECODE_HEAVY
    cap = engine_load(engine, lengths, [1e-6]).capacity_per_s
    lo, hi = sorted((u1, u2))
    for cv2 in (1.0, 4.0):
        r = engine_load(engine, lengths, [lo * cap, hi * cap], arrival_cv2=cv2)
        for name in ("ttft", "itl", "tpot", "e2e"):
            for p in (50, 90, 99):
                a, b = r.at(name, p)
                assert b >= a * (1 - 0.01), (name, p, lo, hi, cv2)


def test_fixed_prompts_tail_latencies_never_fall_as_the_rate_rises():
    """One prompt length is the lumpiest law of the tokens ahead of an arrival (whole prompts or none): read at
    each slice's middle level, its atoms jumped a whole prompt and back as the chain's grid moved with the load (a
    review: Llama-3.1-70B on h100-sxm:2 with 4,096-token prompts, p99 TTFT 1,378 -> 1,541 -> 1,356 ms between 0.31
    and 0.32 requests/s, and `size --rate` sized 1, 2, then 1 replica). Averaged over each slice they move
    continuously and only up: over fine sweeps of the load the p99 of TTFT and E2E never fall (the mean TTFT
    moves with the chain's grid by under 0.1%).
    (What is left comes from the chain's own grid: with 1,000-token prompts the p99 TTFT still dips up to 7%
    between neighbouring loads, docs/load.md.)"""
    engine, lengths = oracle.cases()["fixed 4000/50, prefill-dominated"][:2]
    cap = engine_load(engine, lengths, [1e-6]).capacity_per_s
    swept = [engine_load(engine, lengths, np.linspace(0.1, 0.9, 81) * cap),
             rl.serve_at_rate("llama-3.1-70b", Placement.build("a", decode="h100-sxm:2"),
                              Workload(lengths=Lengths.fixed(4096, 128)), np.linspace(0.28, 0.34, 25))]
    for r in swept:
        for name, slack in (("ttft_p99_s", 1e-9), ("e2e_p99_s", 1e-9), ("ttft_mean_s", 1e-3)):   # the mean: the grid's
            v = np.asarray(getattr(r, name))
            assert np.all(np.diff(v) >= -slack * v[1:]), (name, np.round(v * 1e3, 1))


def test_rates_at_or_above_capacity_are_flagged_not_raised():
    engine, lengths = DECODE_HEAVY
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
    from roofline.serving.load_sizing import LoadTarget
    from roofline.serving_api import size_at_rate
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


@given(need=st.integers(1, 5000), start=st.integers(1, 300), most=st.integers(1, 6000))
def test_the_replica_search_finds_the_fewest_and_never_tries_beyond_its_bound(need, start, most):
    """_fewest on a monotone predicate (meets from ``need`` replicas up): the smallest count in [start, most] that
    meets, None where even ``most`` misses, and no count above ``most`` tried (the bound that spares a shape's
    evaluations once another shape needs fewer devices); where even ``most`` misses, two tries (a tight limit on
    every shape once took 190 evaluations and 5 s: each doubled to 100,000 replicas)."""
    from roofline.serving.load_sizing import _fewest
    tried = []

    def at(n: int) -> tuple[bool, int]:
        tried.append(n)
        return n >= need, n
    found = _fewest(at, start, most)
    expect = max(need, start) if max(need, start) <= most else None
    assert (found[0] if found else None) == expect
    assert max(tried, default=0) <= most
    if expect is None:   # a limit no count meets (a latency floor above it): two tries, not a doubling to ``most``
        assert len(tried) <= 2
    assert len(tried) == len(set(tried)) and len(tried) <= 2 * math.ceil(math.log2(most + 1)) + 2   # no count twice


@pytest.mark.parametrize("rate", [20.0, 2.0])
def test_sizing_a_rate_bounded_by_the_best_shape_chooses_what_sizing_every_shape_does(rate):
    """size_at_rate stops a shape's search once it cannot beat or tie the fewest devices found (fewer
    evaluations); the answer must be the one sizing every shape to its end gives, ties in devices broken by the
    lower p99 TTFT (at 2 requests/s three b200:2 replicas tie six single B200s and wait less: a review found the
    bound had dropped that tie)."""
    import roofline.serving.load_sizing as sizing
    target = sizing.LoadTarget(rate_per_s=rate, workload=Workload(lengths=Lengths.lognormal(1024, 1024, cv=0.8)),
                               limits={"ttft_p99_s": 1.0, "itl_p99_s": 0.05})
    bounded = rl.size_at_rate("llama-3.1-70b", "b200", target)
    unbounded_sized = sizing._sized

    def every_shape(*a, **k):
        k.pop("at_most", None)
        return unbounded_sized(*a, **k)
    sizing._sized = every_shape
    try:
        full = rl.size_at_rate("llama-3.1-70b", "b200", target)
    finally:
        sizing._sized = unbounded_sized
    key = [(o.placement, o.devices, o.group, o.ttft_p99_s) for o in full]
    assert [(o.placement, o.devices, o.group, o.ttft_p99_s) for o in bounded] == key
    assert all(o.feasible for o in bounded)


def test_sizing_a_rate_at_a_confidence_meets_the_limits_at_the_pessimistic_end(run_cli):
    """size --rate --confidence 0.9: each device kind's p99 limits lowered by the upper 90% quantile of its
    percentiles' errors at a request rate (the load_ttft / load_tpot intervals), so the sized options' predicted
    p99s, times those factors, still meet the limits; it never needs fewer devices than the plain sizing, and the
    table says how it was sized."""
    from roofline.serving.load_sizing import LoadTarget, pessimistic_limits
    target = LoadTarget(rate_per_s=5, workload=Workload(lengths=Lengths.lognormal(1024, 1024, cv=0.8)),
                        limits={"ttft_p99_s": 1.0, "itl_p99_s": 0.06})
    plain = {o.placement: o for o in rl.size_at_rate("llama-3.1-70b", "h100-sxm", target) if o.feasible}
    sure = {o.placement: o for o in rl.size_at_rate("llama-3.1-70b", "h100-sxm", target, confidence=0.9) if o.feasible}
    ttft, tpot = (rl.interval("h100-sxm", k, level=0.8).high_factor for k in ("load_ttft", "load_tpot"))
    assert ttft > 1 and tpot > 1
    goal = pessimistic_limits(target, rl.load_device("h100-sxm"), 0.9)
    assert goal.limits == pytest.approx({"ttft_p99_s": 1.0 / ttft, "itl_p99_s": 0.06 / tpot})
    assert pessimistic_limits(target, rl.load_device("h100-sxm"), 0.5) is target
    other = attrs.evolve(target, limits={"ttft_p90_s": 1.0, "e2e_p50_s": 30.0})   # any percentile a limit may name
    assert pessimistic_limits(other, rl.load_device("h100-sxm"), 0.9).limits == pytest.approx(
        {"ttft_p90_s": 1.0 / ttft, "e2e_p50_s": 30.0 / tpot})
    surer = {o.placement: o for o in rl.size_at_rate("llama-3.1-70b", "h100-sxm", target, confidence=0.95)
             if o.feasible}
    assert all(surer[k].devices >= o.devices for k, o in sure.items() if k in surer)   # more sure: never fewer
    assert sure and set(sure) <= set(plain)
    for kind, o in sure.items():
        assert o.devices >= plain[kind].devices
        assert o.ttft_p99_s * ttft <= 1.0 * (1 + 1e-6) and o.itl_p99_s * tpot <= 0.06 * (1 + 1e-6)
    code, out, err = run_cli("size", "llama-3.1-70b", "--devices", "h100-sxm", "--rate", "5", "--p99-ttft-ms", "1000",
                             "--p99-itl-ms", "60", "--lengths", "lognormal:0.8", "--confidence", "0.9")
    assert code == 0, err
    assert "Sized at confidence 0.9" in " ".join(out.split())
    data = json.loads(run_cli("size", "llama-3.1-70b", "--devices", "h100-sxm", "--rate", "5", "--p99-ttft-ms",
                              "1000", "--p99-itl-ms", "60", "--lengths", "lognormal:0.8", "--confidence", "0.9",
                              "--json")[1])
    assert data["confidence"] == 0.9 and data["limits"] == {"ttft_p99_s": 1.0, "itl_p99_s": 0.06}
    assert data["sized_limits"]["h100-sxm"] == pytest.approx(goal.limits)   # what it sized against, unbounded
    with pytest.raises(WorkloadError, match="confidence"):
        rl.size_at_rate("llama-3.1-70b", "h100-sxm", target, confidence=1.0)


@pytest.mark.parametrize(("p1", "t1", "p2", "t2"), [(0.01, 10.0, 0.3, 1.0), (0.3, 1.0, 0.01, 10.0), (0.2, 2.0, 0.2, 2.0),
                                              (0.5, 5.0, 0.05, 0.5), (0.0, 0.0, 0.4, 3.0)])
def test_two_waits_sum_as_a_simulation_of_both(p1, t1, p2, t2):
    """A prefill pool's wait then a decode slot's (each zero, or exponential with the given share): the slower
    tail exact, the faster as atoms, against two million draws of the sum (p90 and p99 within 4%; a frequent
    short wait plus a rare long one is where a single exponential of the same mean missed by half)."""
    rng = np.random.default_rng(11)
    n = 2_000_000
    draws = sum(np.where(rng.random(n) < p, rng.exponential(1 / t if t else 1.0, n), 0.0) for p, t in ((p1, t1), (p2, t2)))
    first = WaitTail(p=np.array([p1]), theta_per_s=np.array([t1]), mean_s=np.array([p1 / t1 if t1 else 0.0]),
                     rho=np.array([0.5]))
    slow, values, weights = wait_then_wait(first, [p2], [p2 / t2])
    got = quantiles_with_wait(values, weights, slow, [0.9, 0.99])[0]
    assert got == pytest.approx(np.quantile(draws, [0.9, 0.99]), rel=0.04)


def test_a_full_decode_pool_holds_disaggregated_requests():
    """Disaggregated: a prompt done in the prefill pool waits for a decode slot when every one is taken; near the
    decode replicas' capacity that wait dominates TTFT and E2E (it was left out: at 0.95 of capacity the TTFT p99
    was the prefill pool's alone, and sizing chose decode replicas 92-98% busy)."""
    from roofline.serving.load import deployment as priced
    w = Workload(lengths=Lengths.lognormal(1024, 1024, cv=0.8))
    d = priced(rl.load_model("llama-3.1-70b"), Placement.build("d", decode="b200:2", prefill="b200:2"), w,
               max_slots=128, prefill_groups=2)
    r = d.at(np.array([0.5, 0.95]) * d.capacity_per_s)
    assert r.slot_wait_share[0] < 0.01 < 0.1 < r.slot_wait_share[1]
    assert r.ttft_p99_s[1] > 10 * r.ttft_p99_s[0] and r.e2e_p99_s[1] > r.e2e_p99_s[0] + 5.0
    assert r.ttft_mean_s[1] - r.ttft_mean_s[0] == pytest.approx(r.slot_wait_mean_s[1] - r.slot_wait_mean_s[0], rel=0.05)


def test_burstier_arrivals_never_need_fewer_devices():
    """Each replica count is priced at the burstiness its share of the arrivals has: pricing every count at the
    unthinned burstiness let burstier arrivals size fewer B200s (32, 29, 26 at c_a^2 1, 4, 8), because prompts
    bunched into fewer steps lower the ITL p99 the search read."""
    from roofline.serving.load_sizing import LoadTarget
    from roofline.serving_api import size_at_rate
    devices: dict[str, list[int]] = {}
    for cv2 in (1.0, 8.0):
        target = LoadTarget(rate_per_s=20.0, workload=Workload(lengths=Lengths.lognormal(1024, 1024, cv=0.8),
                                                               arrival_cv2=cv2),
                            limits={"ttft_p99_s": 1.0, "itl_p99_s": 0.05})
        for o in size_at_rate("llama-3.1-70b", ["b200"], target, stack="vllm"):
            if o.feasible:
                devices.setdefault(o.placement, []).append(o.devices)
    assert set(devices) == {"aggregated", "disaggregated"} and all(len(v) == 2 for v in devices.values())
    assert all(a <= b for v in devices.values() for a, b in zip(v, v[1:])), devices


def test_size_rate_command(run_cli):
    import json
    code, out, err = run_cli("size", "llama-3.1-8b", "--devices", "h100-sxm", "--rate", "30", "--p99-ttft-ms", "500",
                             "--p99-itl-ms", "40", "--lengths", "lognormal:0.5", "--isl", "800", "--osl", "300",
                             "--json")
    assert code == 0, err
    data = json.loads(out)
    feasible = [o for o in data["options"] if o["feasible"]]
    assert feasible and data["rate_per_s"] == 30
    assert data["tokens_per_s"] == pytest.approx(30 * data["lengths"]["mean_output_tokens"])   # a number, not text
    for o in feasible:
        assert {"ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "itl_p50_s", "itl_p99_s", "tpot_p50_s", "e2e_p90_s",
                "utilisation", "decode_utilisation", "batch_mean", "slot_wait_share"} <= set(o)
        assert o["batch_mean"] <= o["batch_per_replica"] and o["utilisation"] >= o["decode_utilisation"]
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


def test_pareto_rate_adds_each_frontier_points_percentiles(run_cli):
    """`pareto --rate` queues the rate on one replica per frontier point, the point's batch capping the running
    requests: a cap below what the rate needs is over capacity, and above it a larger cap never waits longer."""
    import json
    args = ("pareto", "--target", "llama-3.1-8b", "--placement", "h100: decode=h100-sxm", "--isl", "1000",
            "--osl", "200", "--rate", "5")
    code, out, err = run_cli(*args, "--json")
    assert code == 0, err
    data = json.loads(out)
    points = data["configurations"][0]["frontier"]
    assert data["rate_per_s"] == 5 and all("load" in p for p in points)
    assert "over capacity" in points[0]["load"]["reason"]   # batch 1 carries under one request/s
    ok = [p for p in points if "ttft_p99_s" in p["load"]]
    assert len(ok) >= 2 and all(p["load"]["ttft_p99_s"] >= p["load"]["ttft_p50_s"] > 0 for p in ok)
    p99 = [p["load"]["ttft_p99_s"] for p in sorted(ok, key=lambda p: p["batch"])]
    assert all(a >= b * (1 - 1e-9) for a, b in zip(p99, p99[1:]))
    code, out, err = run_cli(*args)
    assert code == 0 and "one replica at 5 requests/s" in out
    code, out, err = run_cli(*args, "--csv")
    assert code == 0 and {"load_ttft_p99_s", "load_rate_per_s"} <= set(out.splitlines()[0].split(","))
    code, _, err = run_cli(*args[:-2], "--burstiness", "4")
    assert code == 2 and "--burstiness applies to a request rate" in err


@pytest.mark.parametrize("command", [("placements", "--devices", "h100-sxm"), ("pareto", "--placement", "a: decode=h100-sxm")])
@pytest.mark.parametrize("bad", [("--prefix-hit", "1.5"), ("--burstiness", "0"), ("--lengths", "nosuch"),
                                 ("--rate", "0")])
def test_placements_and_pareto_refuse_a_bad_workload_once(run_cli, command, bad):
    """A bad --prefix-hit, --burstiness, --lengths or --rate fails the command with one line (it was repeated in
    every row of a table that exited 0)."""
    args = [command[0], "--target", "llama-3.1-8b", *command[1:], "--rate", "5", *bad]
    code, out, err = run_cli(*args)
    assert code in (1, 2) and out == "" and len(err.strip().splitlines()) == 1, (code, err)


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


@pytest.mark.parametrize("extra,flag", [
    (("--users", "50", "--min-tokens-per-s-per-user", "30", "--p99-itl-ms", "50"), "--p99-itl-ms"),
    (("--users", "50", "--min-tokens-per-s-per-user", "30", "--max-seqs", "4"), "--max-seqs"),
    (("--users", "50", "--min-tokens-per-s-per-user", "30", "--lengths", "mlperf-llama2-70b"), "--lengths"),
    (("--users", "50", "--min-tokens-per-s-per-user", "30", "--burstiness", "9"), "--burstiness"),
    (("--rate", "5", "--p99-ttft-ms", "1000", "--min-tokens-per-s-per-user", "100"), "--min-tokens-per-s-per-user"),
    (("--rate", "5", "--p99-ttft-ms", "1000", "--ttft-ms", "10"), "--max-ttft-ms"),
])
def test_size_refuses_the_other_modes_options(run_cli, extra, flag):
    """A limit or workload option of the other sizing mode is a usage error, not a table that silently ignores it
    (a p99 limit under --users, a per-user speed under --rate)."""
    code, out, err = run_cli("size", "llama-3.1-8b", "--devices", "h100-sxm", *extra)
    assert code == 2 and err.startswith("roofline: usage error:") and flag in err and not out


def test_placements_refuses_a_rate_workload_without_a_rate(run_cli):
    code, _, err = run_cli("placements", "--target", "llama-3.1-8b", "--devices", "h100-sxm", "--prefix-hit", "0.5")
    assert code == 2 and "--prefix-hit applies to a request rate" in err


def test_one_token_outputs_have_no_gap_to_bound(run_cli, tmp_path):
    """Lengths whose every output is one token: ITL and TPOT are undefined (NaN, null in JSON), not a step's
    length, and a sizing that limits them is refused with one line naming the limit."""
    lengths = Lengths.from_file(_write(tmp_path / "one.csv", "input_tokens,output_tokens,weight\n500,1,1\n900,1,1\n"))
    r = rl.serve_at_rate("llama-3.1-8b", Placement.build("a", decode="h100-sxm"), Workload(lengths=lengths), [1.0, 5.0])
    assert np.all(np.isnan(r.itl_p99_s)) and np.all(np.isnan(r.tpot_p99_s)) and np.all(r.ttft_p99_s > 0)
    code, _, err = run_cli("size", "llama-3.1-8b", "--devices", "h100-sxm", "--rate", "5", "--p99-ttft-ms", "500",
                           "--p99-itl-ms", "50", "--lengths", str(tmp_path / "one.csv"))
    assert code == 1 and "no gap between tokens for itl_p99_s" in err and len(err.strip().splitlines()) == 1


def _write(path, text):
    path.write_text(text)
    return str(path)


def test_a_bad_lengths_file_is_named_with_its_row(run_cli, tmp_path):
    """A lengths histogram with a zero-token row says which file and row, not a numpy repr of the column (a review)."""
    bad = tmp_path / "bad.csv"
    bad.write_text("input_tokens,output_tokens,weight\n100,50,1\n0,20,1\n")
    code, _, err = run_cli("size", "llama-3.1-8b", "--devices", "h100-sxm", "--rate", "1", "--p99-ttft-ms", "1000",
                           "--p99-itl-ms", "50", "--lengths", str(bad))
    assert code == 1 and f"lengths file {bad}: row 2: input_tokens must be a token count >= 1, got 0" in err
    assert "array(" not in err and len(err.strip().splitlines()) == 1


def test_burstiness_outside_its_range_is_one_kind_of_error(run_cli):
    """0 and 1000 are both outside [0.01, 100]: one message and one exit status for both (0 was a usage error, 1000
    bad input, a review found)."""
    said = []
    for value in ("0", "1000"):
        code, _, err = run_cli("size", "llama-3.1-8b", "--devices", "h100-sxm", "--rate", "1", "--p99-ttft-ms", "1000",
                               "--burstiness", value)
        said.append((code, "[0.01, 100]" in err))
    assert said == [(1, True), (1, True)]


@given(weights=st.lists(st.floats(0.0, 1.0), min_size=2, max_size=40), shift=st.integers(1, 5))
def test_slice_atoms_keep_the_mean_and_move_up_with_the_law(weights, shift):
    """queueing.atoms: the slices' mean positions, weighted by the slices' widths, are the law's mean exactly (the
    quantile function integrates to the mean); shifting the law up shifts every atom up by as much."""
    from roofline.serving.queueing import atoms
    pmf = np.array(weights)
    if pmf.sum() < 1e-6:   # a law's weights (the chain's are probabilities, summing to 1)
        pmf[0] = 1.0
    edges = (0.0, 0.3, 0.6, 0.85, 0.95, 0.99, 1.0)
    pos, w = atoms(pmf[None, :], edges)
    assert float(np.sum(pos * w)) == pytest.approx(float(pmf @ np.arange(pmf.size) / pmf.sum()), rel=1e-9, abs=1e-9)
    up, _ = atoms(np.concatenate([np.zeros(shift), pmf])[None, :], edges)
    assert np.allclose(up, pos + shift)
