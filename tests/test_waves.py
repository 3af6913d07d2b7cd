"""Lock-step waves: a fixed-length --max-concurrency benchmark on a prefill-first scheduler (SGLang, ATOM), whose
requests of a wave all end on one step, so the next wave's prompts arrive together and wait for one another's
prefill (serving mode ``waves``, the row column ``serving = waves``)."""

import attrs
import numpy as np
import pytest

import roofline as rl
from roofline import api as stages
from roofline.errors import WorkloadError
from roofline.evidence.validate import predict_row, read_rows, row_params, shipped_data, shipped_profile
from roofline.serving.serve import Placement, Request
from roofline.serving_api import evaluate_serving
from roofline.specs.params import default_params

MODEL, GROUP = rl.load_model("llama-3.1-8b"), rl.resolve_group("h100-sxm")
PARAMS = attrs.evolve(default_params(), request_overhead_s=0.0)   # a chunking stack: steps packed to the budget
WHOLE = attrs.evolve(PARAMS, chunked_prefill=False)                  # ATOM, vLLM V0: whole prompts a step
HERE = Placement(name="aggregated", decode=GROUP)


def _waves(batch, isl=1000, osl=500, budget=8192, params=PARAMS, model=MODEL, placement=HERE):
    return evaluate_serving(model, placement, Request(input_tokens=isl, output_tokens=osl), batch=batch, mode="waves",
                            chunk=budget, params=params)


@pytest.mark.parametrize("batch,isl,budget", [(64, 1000, 8192), (37, 1000, 8192), (256, 1000, 20000),
                                              (5, 3000, 2048), (8, 1000, 8192)])
def test_whole_prompts_a_step_replayed_step_by_step(batch, isl, budget):
    """Replayed as ATOM's scheduler runs it: as many waiting prompts as the budget holds whole (one alone when it
    is longer), that prefill step run, and every prompt in it gets its first token when the step ends."""
    r = _waves(batch, isl=isl, budget=budget, params=WHOLE)
    clock, firsts, waiting = 0.0, [], batch
    while waiting:
        take = min(waiting, max(1, budget // isl))
        clock += stages.prefill(MODEL, GROUP, prompt=isl, batch=take, params=WHOLE).time_s.item()
        firsts += [clock] * take
        waiting -= take
    assert r.ttft_s.item() == pytest.approx(np.mean(firsts), rel=1e-9)
    assert r.prefill_s.item() == pytest.approx(clock, rel=1e-9)


@pytest.mark.parametrize("batch,isl,budget", [(64, 1000, 8192), (37, 3200, 8192), (5, 3000, 2048), (128, 1024, 2048)])
def test_packed_steps_replayed_token_by_token(batch, isl, budget):
    """Replayed as SGLang fills a step, the next prompt cut to the budget left: the steps take the wave's tokens in
    order, budget by budget, and a prompt's first token comes when the step holding its last token ends. Against
    the wave's own prefill time W (a step's time is its share of W's tokens), every prompt's step is counted."""
    r = _waves(batch, isl=isl, budget=budget)
    wave_s = r.prefill_s.item()
    step_s = wave_s * budget / (batch * isl)
    done, firsts, queue = 0, [], [isl] * batch
    while queue:
        room = budget
        done += 1
        while queue and room:
            take = min(room, queue[0])
            queue[0] -= take
            room -= take
            if queue[0] == 0:
                queue.pop(0)
                firsts.append(min(done * step_s, wave_s))
    assert len(firsts) == batch
    assert r.ttft_s.item() == pytest.approx(np.mean(firsts), rel=1e-9)


def test_every_request_of_a_wave_ends_on_its_last_step():
    """E2E runs from the wave's arrival to its last decode step, the same for all; TPOT is what a benchmark divides
    out, (E2E - TTFT) / (osl - 1), so it carries the prefills after a request's own; throughput is the wave's."""
    r, osl = _waves(128), 500
    e2e = r.prefill_s + (osl - 1) * r.step_s
    np.testing.assert_allclose(r.e2e_s, e2e)
    np.testing.assert_allclose(r.tpot_s, (e2e - r.ttft_s) / (osl - 1))
    assert r.tpot_s.item() > r.step_s.item()
    np.testing.assert_allclose(r.tokens_per_s, 128 * osl / e2e)


def test_a_wave_one_step_holds_is_a_static_batch():
    """Eight 1,000-token prompts fit one 8,192-token step: the wave is prefilled at once, as a static batch is."""
    waves = _waves(8, params=WHOLE)
    static = evaluate_serving(MODEL, HERE, Request(input_tokens=1000, output_tokens=500), batch=8, mode="static",
                              params=WHOLE)
    for name in ("ttft_s", "e2e_s", "tokens_per_s", "step_s"):
        assert getattr(waves, name).item() == pytest.approx(getattr(static, name).item(), rel=1e-9), name


def test_a_step_whose_prompts_do_not_fit_runs_one_prompt_at_a_time():
    """32 prompts of 16,000 tokens on 4 H100s with a budget that would take them all at once: their activations do
    not fit, so, as a static batch, the wave runs one prompt a step; its E2E and throughput are the static
    batch's, and the mean prompt waits (32 + 1) / 2 of its 32 steps."""
    model, group = rl.load_model("llama-3.1-70b"), rl.resolve_group("h100-sxm:4")
    here = Placement(name="aggregated", decode=group)
    waves = _waves(32, isl=16000, osl=100, budget=10**6, params=WHOLE, model=model, placement=here)
    static = evaluate_serving(model, here, Request(input_tokens=16000, output_tokens=100), batch=32, mode="static",
                              params=WHOLE)
    assert bool(waves.fits.item()) and bool(static.fits.item())
    for name in ("e2e_s", "tokens_per_s"):
        assert getattr(waves, name).item() == pytest.approx(getattr(static, name).item(), rel=1e-9), name
    assert waves.ttft_s.item() == pytest.approx(waves.prefill_s.item() * 33 / 64, rel=1e-9)


def test_a_long_wave_waits_about_half_its_prefill_where_a_staggered_prompt_waits_for_its_own():
    """256 prompts of 1,000 tokens, 8 per step: 32 steps, the mean prompt done after (32 + 1) / 2 of them; the
    steady state (arrivals staggered) prefills one prompt and waits for a step or two."""
    waves = _waves(256, params=WHOLE)
    steady = evaluate_serving(MODEL, HERE, Request(input_tokens=1000, output_tokens=500), batch=256,
                              mode="continuous", params=WHOLE)
    assert waves.ttft_s.item() == pytest.approx(waves.prefill_s.item() * (32 + 1) / (2 * 32), rel=1e-9)
    assert waves.ttft_s.item() > 10 * steady.ttft_s.item()


def test_waves_need_the_prompts_on_the_decode_group():
    split = Placement(name="disaggregated", prefill=GROUP, decode=GROUP)
    with pytest.raises(WorkloadError, match="waves"):
        evaluate_serving(MODEL, split, Request(input_tokens=1000, output_tokens=500), batch=8, mode="waves")


def _row(tmp_path, batch=128, serving="waves", requests="", metric="ttft_ms"):
    """A row in the shipped file's full format (its serving, requests and token_budget columns)."""
    header = open(shipped_data()).readline()
    fields = dict.fromkeys(header.strip().split(","), "") | dict(
        id="WV1", source="https://example.org", stack="SGLang 0.5.0", hardware="h100-sxm", n_devices="1", tp="1",
        model="llama-3.1-8b", weight_dtype="bf16", kv_dtype="bf16", batch=str(batch), serving=serving,
        requests=str(requests), token_budget="8192", isl="1000", osl="1000", spec_method="none", draft_len="0",
        metric=metric, value="1.0", grade="B")
    path = tmp_path / "w.csv"
    path.write_text(header + ",".join(fields.values()) + "\n")
    return read_rows(path)[0]


def test_a_waves_row_predicts_the_waves_ttft(tmp_path):
    prof = shipped_profile()
    waves, steady = _row(tmp_path), _row(tmp_path, serving="continuous")
    params = row_params(prof, waves)
    assert predict_row(waves, params) > 10 * predict_row(steady, params)


def test_an_offline_run_of_waves_counts_each_waves_whole_e2e(tmp_path):
    """384 requests at concurrency 128: three waves, each taking its E2E (prefill stalls included), so the run's
    throughput is the wave's, not the decode steps' alone."""
    prof = shipped_profile()
    row = _row(tmp_path, requests=384, metric="output_tokens_per_s_total")
    one_wave = _row(tmp_path, metric="output_tokens_per_s_total")
    params = row_params(prof, row)
    assert predict_row(row, params) == pytest.approx(predict_row(one_wave, params), rel=1e-9)
    ttft = predict_row(_row(tmp_path, metric="ttft_ms"), params) / 1e3
    itl = predict_row(_row(tmp_path, metric="itl_ms"), params) / 1e3
    e2e = ttft + 999 * itl
    assert predict_row(row, params) == pytest.approx(128 * 1000 / e2e, rel=1e-6)


# ------------------------------------------------------------------ a disaggregated deployment's prefill pool
def _gb200_interactive(**change):
    """MLPerf v5.1 GB200 NVL72 Interactive (ML082): 14 context servers at TP4 in front of 2 generation servers at TP8."""
    row = next(r for r in read_rows(shipped_data()) if r.id == "ML082")
    return attrs.evolve(row, fields={**row.fields, **change})


def test_a_prefill_pool_takes_its_devices_out_of_the_decode_replicas():
    """The pool's 56 GPUs prefill; the decode replicas are the other 16 at TP8 (two of them), and per device divides
    by all 72. Without the pool the same 72 GPUs are nine aggregated TP8 replicas, a different deployment."""
    prof = shipped_profile()
    row = _gb200_interactive()
    assert (row.get("prefill_tp"), row.get("prefill_groups"), row.get("tp"), row.get("n_devices")) == ("4", "14", "8", "72")
    params = row_params(prof, row)
    total = predict_row(row, params)
    per_device = predict_row(_gb200_interactive(metric="output_tokens_per_s_per_device"), params)
    assert per_device == pytest.approx(total / 72, rel=1e-9)
    aggregated = predict_row(_gb200_interactive(prefill_tp="", prefill_groups=""), params)
    assert aggregated != pytest.approx(total, rel=0.05)


@pytest.mark.parametrize("change,reason", [
    (dict(prefill_groups=""), "both prefill_tp and prefill_groups"),
    (dict(tp=""), "decode groups' tp"),
    (dict(prefill_groups="20"), "less the prefill pool's 80"),
    (dict(batch="64"), "batch = slo rows"),
    (dict(prefill_tp="1", prefill_groups="56"), "does not fit a prefill group of 1"),
    (dict(prefill_tp="3", prefill_groups="8", n_devices="40"), "prefill_tp 3: tp 3 does not divide"),
])
def test_a_prefill_pool_that_cannot_be_placed_is_refused_with_the_reason(change, reason):
    from roofline.errors import RooflineError
    with pytest.raises(RooflineError, match=reason):
        predict_row(_gb200_interactive(**change), row_params(shipped_profile(), _gb200_interactive()))


def test_a_poisson_rate_is_refused_for_modes_without_arrivals(run_cli):
    """The --rate table queues Poisson arrivals on continuous batching: a static batch or a lock-step wave has none."""
    for mode in ("static", "waves"):
        code, _, err = run_cli("placements", "--target", "llama-3.1-8b", "--devices", "h100", "--batch", "64",
                               "--mode", mode, "--rate", "5")
        assert code == 2 and "no arrivals to queue" in err and len(err.strip().splitlines()) == 1


def test_waves_refuse_polling_and_have_no_tpot_for_one_output_token():
    """A wave's prompts arrive together, so a scheduler's polling interval has nothing to delay (refused, not
    ignored); with one output token there is no time per output token to report."""
    with pytest.raises(WorkloadError, match="poll_steps"):
        evaluate_serving(MODEL, HERE, Request(input_tokens=1000, output_tokens=500), batch=8, mode="waves",
                         poll_steps=8)
    one = _waves(64, osl=1)
    assert np.isnan(one.tpot_s.item()) and np.isfinite(one.ttft_s.item())


def test_a_partial_last_wave_of_an_offline_run_counts_its_own_e2e(tmp_path):
    """400 requests at concurrency 128: three full waves and one of 16, each taking its own E2E."""
    prof = shipped_profile()
    row = _row(tmp_path, requests=400, metric="output_tokens_per_s_total")
    params = row_params(prof, row)
    e2e = {}
    for b in (128, 16):
        ttft = predict_row(_row(tmp_path, batch=b, metric="ttft_ms"), params) / 1e3
        itl = predict_row(_row(tmp_path, batch=b, metric="itl_ms"), params) / 1e3
        e2e[b] = ttft + 999 * itl
    assert predict_row(row, params) == pytest.approx(400 * 1000 / (3 * e2e[128] + e2e[16]), rel=1e-6)
