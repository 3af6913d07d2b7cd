"""When a scheduler lets waiting prompts in (roofline.serving.admission): the balance rule's period against a
simulation of TensorRT-LLM's rule, polling against the engine's event simulation, and the rows that carry them."""

from __future__ import annotations

import json
import math

import attrs
import numpy as np
import pytest
import queue_oracle as oracle

from roofline.errors import RooflineError, WorkloadError
from roofline.evidence.validate import predict_row, read_rows, row_chunking, row_params, shipped_data
from roofline.serving.admission import Admission
from roofline.serving.load import engine_load
from roofline.specs.params import shipped_profile


def simulate_balance(rate_per_s: float, step_s: float, ranks: int, timeout: int, wait: int,
                     iterations: int = 40000, seed: int = 0) -> float:
    """Mean time from a context request's arrival to its release under TensorRT-LLM's attention-DP balance
    (PyExecutor._balance_adp_requests) while every rank has generation requests (a loaded engine; a rank without
    any releases at once, which the closed form's at-once share carries): requests go to the ranks round-robin;
    while not every rank has one, a counter of iterations releases whatever waits when it reaches the timeout (and
    restarts, counting even when nothing waits); once every rank has one, ``wait`` iterations more, then release."""
    rng = np.random.default_rng(seed)
    t, count, batching, waiting, waits = 0.0, 0, 0, [], []
    nxt = rng.exponential(1 / rate_per_s)
    for _ in range(iterations):
        t += step_s
        while nxt < t:
            waiting.append(nxt)
            nxt += rng.exponential(1 / rate_per_s)
        release = False
        if len(waiting) >= ranks:
            count = 0
            if batching < wait:
                batching += 1
            else:
                batching, release = 0, True
        else:
            count += 1
            if count >= timeout:
                count, release = 0, True
        if release and waiting:
            waits += [t - a for a in waiting]
            waiting = []
    return float(np.mean(waits))


@pytest.mark.parametrize("rate, step, ranks, timeout, wait", [
    (5.0, 0.066, 8, 9, 3), (20.0, 0.066, 8, 9, 3), (2.0, 0.05, 8, 50, 10), (5.0, 0.05, 8, 50, 10),
    (50.0, 0.05, 8, 50, 10), (200.0, 0.05, 8, 50, 10)])
def test_balance_period_matches_a_simulation_of_the_rule(rate, step, ranks, timeout, wait):
    """The mean time to release, from arrival (the step it lands in included: d / 2), within 10% of the rule
    simulated: P d / 2 with P = min(timeout, ranks / (rate d) + wait)."""
    a = Admission(balance_ranks=ranks, balance_timeout_steps=timeout, balance_wait_steps=wait)
    model = float(a.mean_wait_s(rate, step)) + step / 2
    assert model == pytest.approx(simulate_balance(rate, step, ranks, timeout, wait), rel=0.10)


#: the oracle's cases polled every 4 and 9 steps
POLLED = ["lognormal 400/200 (CV 1), decode-heavy", "fixed 1000/100, prefill-heavy",
          "Llama-2-70B FP8 on h100-sxm:2 (physics), MLPerf lengths"]


@pytest.mark.parametrize("name", POLLED)
@pytest.mark.parametrize("poll", [4, 9])
def test_polled_ttft_meets_the_event_simulation(name, poll):
    """With prompts let in every P steps, TTFT's mean and p50 within 12% and p90/p99 within 16% of the event
    simulation of the same engine polling (tests/queue_oracle.py), E2E p50 within 6%, at 0.3-0.9 of capacity."""
    engine, lengths, _ = oracle.cases()[name]
    engine = attrs.evolve(engine, admission=Admission(poll_steps=poll))
    cap = engine.capacity_per_s(lengths)
    for u in (0.3, 0.6, 0.9):
        sim = oracle.run(engine, lengths, u * cap, n=30000, seed=1)
        r = engine_load(engine, lengths, [u * cap])
        got = {"mean": r.ttft_mean_s[0], "p50": r.ttft_p50_s[0], "p90": r.ttft_p90_s[0], "p99": r.ttft_p99_s[0]}
        want = {"mean": sim.ttft_s.mean(), **{f"p{q}": np.percentile(sim.ttft_s, q) for q in (50, 90, 99)}}
        for k, tol in (("mean", 0.12), ("p50", 0.12), ("p90", 0.16), ("p99", 0.16)):
            assert got[k] == pytest.approx(want[k], rel=tol), (u, k)
        assert r.e2e_p50_s[0] == pytest.approx(np.percentile(sim.e2e_s, 50), rel=0.06)


def test_admitting_every_step_changes_nothing_and_polling_never_helps():
    """A period of one step (here the balance with a one-step timeout, which runs the wait's code) is no wait;
    more steps between admissions never shorten TTFT."""
    engine, lengths, _ = oracle.cases()[POLLED[0]]
    rates = np.array([0.3, 0.6, 0.9]) * engine.capacity_per_s(lengths)
    base = engine_load(engine, lengths, rates)
    one = Admission(balance_ranks=8, balance_timeout_steps=1)
    assert not one.immediate
    same = engine_load(attrs.evolve(engine, admission=one), lengths, rates)
    assert np.allclose(base.ttft_p99_s, same.ttft_p99_s) and np.allclose(base.e2e_mean_s, same.e2e_mean_s)
    last = base
    for poll in (2, 4, 9):
        r = engine_load(attrs.evolve(engine, admission=Admission(poll_steps=poll)), lengths, rates)
        assert np.all(r.ttft_p50_s > last.ttft_p50_s) and np.all(r.ttft_p99_s > last.ttft_p99_s)
        assert np.allclose(r.tpot_mean_s, base.tpot_mean_s)   # the steps are not what polling changes
        last = r


def test_an_idle_engine_lets_prompts_in_at_once():
    """At a vanishing load no sequence runs when a prompt arrives: polling and the balance add (almost) nothing
    (vLLM's V0 engine schedules at once when idle; the balance releases when a rank has no generation request)."""
    engine, lengths, _ = oracle.cases()[POLLED[0]]
    rate = [1e-4 * engine.capacity_per_s(lengths)]
    base = float(engine_load(engine, lengths, rate).ttft_mean_s[0])
    for a in (Admission(poll_steps=9), Admission(balance_ranks=8)):
        assert float(engine_load(attrs.evolve(engine, admission=a), lengths, rate).ttft_mean_s[0]) < 1.05 * base


@pytest.mark.parametrize("field, value", [("poll_steps", 0), ("poll_steps", 1.5), ("poll_steps", True),
                                          ("balance_ranks", 0), ("balance_timeout_steps", 0),
                                          ("balance_wait_steps", -1)])
def test_bad_admission_settings_are_refused(field, value):
    with pytest.raises(WorkloadError, match=field):
        Admission(**{field: value})


def _row(rid: str, **changes: str):
    row = {r.id: r for r in read_rows(shipped_data())}[rid]
    return attrs.evolve(row, fields={**row.fields, **changes})


def test_the_attention_dp_balance_wait_is_in_the_deepseek_server_ttft():
    """MLPerf v5.1 DeepSeek-R1 Server on 8 B200s (attention DP over 8 ranks, balance timeout 9, wait 3): its mean
    TTFT with the balance's wait is several steps longer than without it."""
    prof = shipped_profile()
    on, off = _row("ML069"), _row("ML069", dp_balance="no")
    assert on.get("dp_balance") == "yes:9:3"
    with_wait, without = (predict_row(r, row_params(prof, r)) for r in (on, off))
    assert with_wait > 2.5 * without


def test_dp_balance_column_parses_yes_no_and_iterations():
    prof = shipped_profile()
    r = _row("ML069", dp_balance="yes")
    assert row_chunking(r, row_params(prof, r)).attention_dp_balance is True
    for bad in ("yes:9", "yes:a:b", "maybe", "no:9:3"):
        with pytest.raises(RooflineError, match="dp_balance"):
            predict_row(_row("ML069", dp_balance=bad), row_params(prof, r))
    assert math.isfinite(predict_row(_row("ML069", dp_balance="yes"), row_params(prof, r)))


def test_an_admission_wait_on_a_prefill_pool_is_refused():
    """The wait is modelled on an aggregated engine's steps: a disaggregated placement with one is refused (the
    sizing lists its disaggregated options as not sized instead of silently dropping the wait)."""
    from roofline.serving.load import Workload, deployment
    from roofline.serving.serve import Placement
    from roofline.specs.lengths import Lengths
    from roofline.specs.resolve import resolve_group, resolve_model
    g = resolve_group("h100-sxm:2")
    split = Placement(name="split", decode=g, prefill=g)
    w = Workload(lengths=Lengths.fixed(500, 100))
    with pytest.raises(WorkloadError, match="aggregated engines only"):
        deployment(resolve_model("llama-3.1-8b"), split, w, admission=Admission(poll_steps=4))
    assert deployment(resolve_model("llama-3.1-8b"), split, w, admission=Admission()).capacity_per_s > 0


def test_placements_and_size_at_a_rate_poll_and_say_so(run_cli):
    """`placements --rate --poll-steps` polls the aggregated placements' queues (TTFT p99 longer) and gives a
    split placement a reason; `size --rate --poll-steps` records the setting in its JSON."""
    def loads(*extra):
        code, out, _ = run_cli("placements", "--target", "llama-3.1-8b", "--devices", "h100-sxm", "--rate", "1",
                               "--isl", "1000", "--osl", "200", "--json", *extra)
        assert code == 0
        return {p["name"]: p["load"] for p in json.loads(out)["placements"]}
    plain, polled = loads(), loads("--poll-steps", "9")
    together = "decode h100-sxm, prefill on the decode group"
    assert polled[together]["ttft_p99_s"] > 1.2 * plain[together]["ttft_p99_s"]
    assert "aggregated engines only" in polled["decode h100-sxm, prefill h100-sxm"]["reason"]
    code, out, _ = run_cli("size", "llama-3.1-8b", "--devices", "h100-sxm:1", "--rate", "2", "--p99-ttft-ms", "2000",
                           "--poll-steps", "9", "--json")
    assert code == 0 and json.loads(out)["poll_steps"] == 9
