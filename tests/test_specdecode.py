"""Draft and verify placed on device groups: round time, transfer, energy, and the spec command."""

import json

import numpy as np
import pytest

import roofline as rl
from roofline.errors import WorkloadError
from roofline.physics.speculative import Acceptance
from roofline.serving.speculation import optimal_gamma
from roofline.serving_api import speculative_round

KW = dict(target="gpt-oss-120b", verify_on="b200:8", draft="gpt-oss-draft-1.6b", batch=1, context=8192)


def test_gamma_zero_is_plain_decoding():
    r = speculative_round(**KW, draft_on="corsair:2", acceptance=0.926, gamma=0)
    assert r.expected_tokens == 1 and r.draft_s == 0 and r.transfer_s == 0
    assert r.round_s == pytest.approx(r.baseline_decode_s, rel=1e-12)
    assert r.speedup == pytest.approx(1.0)


def test_round_is_draft_plus_verify_plus_transfer():
    g = np.arange(1, 9)
    r = speculative_round(**KW, draft_on="corsair:2", acceptance=0.926, gamma=g)
    d = rl.draft("gpt-oss-draft-1.6b", rl.DeviceGroup(device=rl.load_device("corsair"), tp=2), batch=1, context=8192,
                 gamma=g, weights="mxint8", kv="mxint8", activations="mxint8")
    v = rl.verify("gpt-oss-120b", rl.DeviceGroup(device=rl.load_device("b200"), tp=8), batch=1, context=8192, gamma=g)
    np.testing.assert_allclose(r.round_s, d.time_s + v.time_s + r.transfer_s)
    # greedy sends gamma token ids and gets back 8 bytes over PCIe Gen5: latency-dominated (docs/theory.md §5.5)
    np.testing.assert_allclose(r.transfer_s, 2 * 10e-6 + (g * 4 + 8) / 63e9)
    np.testing.assert_allclose(r.tokens_per_s_per_user, r.expected_tokens / r.round_s)


def test_extra_flop_of_speculation():
    r = speculative_round(**KW, draft_on="corsair:2", acceptance=0.926, gamma=np.array([0, 1, 5, 20]))
    # gamma = 0 is plain decoding; drafting and verifying rejected positions cost FLOP per accepted token
    assert r.extra_flop_fraction[0] == pytest.approx(0.0, abs=1e-9)
    assert np.all(np.diff(r.extra_flop_fraction) > 0)


def test_lossless_sampling_ships_probability_rows():
    greedy = speculative_round(**KW, draft_on="corsair:2", acceptance=0.9, gamma=4)
    lossless = speculative_round(**KW, draft_on="corsair:2", acceptance=0.9, gamma=4, sampling="lossless")
    # 4 x 201,088 fp32 = 3.2 MB: ~51 us at 63 GB/s (docs/theory.md §5.5)
    assert float(lossless.transfer_s - greedy.transfer_s) == pytest.approx(4 * 201088 * 4 / 63e9, rel=1e-6)


def test_a_head_on_a_pipelined_target_drafts_on_one_stage():
    """EAGLE's code spreads a 70B target over two GPUs (device_map auto: two pipeline stages) and keeps its one-layer
    head beside the LM head: the head's passes take one stage's device, as they would on an unpipelined group of the
    same tensor parallelism (a one-layer head split into two stages was refused)."""
    import attrs

    from roofline.specs.links import LINKS
    g = rl.DeviceGroup(device=rl.load_device("a100-sxm-80gb"), tp=1, pp=2)
    kw = dict(target="llama-3.3-70b", batch=1, context=500, acceptance=Acceptance.measured({6: 4.0}),
              gamma=6, draft_kind="eagle")
    piped = speculative_round(**kw, verify_on=g)
    alone = speculative_round(**kw, verify_on=g, draft_on=attrs.evolve(g, pp=1), link=LINKS["nvlink"])
    assert float(piped.draft_s) == pytest.approx(float(alone.draft_s), rel=1e-12)
    assert float(piped.transfer_s) == 0 and float(piped.speedup) > 1


def test_a_head_on_devices_of_its_own_gets_the_targets_hidden_states_every_round():
    """EAGLE and MTP heads draft from the target's hidden states: on a separate group they come back over the link
    with the verdict, one per verified position (gamma + 1, hidden size x bf16), so a batch of 64 pays for 5 x 64
    rows of 2,880 values at gamma 4; a draft model needs token ids only (docs/theory.md §5.5)."""
    kw = dict(target="gpt-oss-120b", verify_on="b200:8", batch=np.array([1, 64]), context=8192, acceptance=0.8,
              gamma=4)
    model = speculative_round(**kw, draft="gpt-oss-draft-1.6b", draft_on="h100-sxm")
    for kind in ("eagle", "mtp"):
        head = speculative_round(**kw, draft_kind=kind, draft_on="h100-sxm")
        extra = np.array([1, 64]) * 5 * 2880 * 2 / 63e9
        np.testing.assert_allclose(head.transfer_s - model.transfer_s, extra, rtol=1e-9)
    shared = speculative_round(**kw, draft_kind="eagle")   # on the target's own devices nothing moves
    assert np.all(shared.transfer_s == 0)


def test_same_devices_no_transfer_and_shared_memory():
    r = speculative_round(**KW, acceptance=0.926, gamma=np.arange(0, 6))
    assert np.all(r.transfer_s == 0) and r.link == "same devices"
    assert 1 <= optimal_gamma(r) <= 5


def test_higher_acceptance_never_slower():
    lo = speculative_round(**KW, draft_on="corsair:2", acceptance=0.7, gamma=np.arange(1, 20))
    hi = speculative_round(**KW, draft_on="corsair:2", acceptance=0.95, gamma=np.arange(1, 20))
    assert np.all(hi.tokens_per_s_per_user >= lo.tokens_per_s_per_user)


def test_what_if_faster_draft_memory_speeds_up_rounds():
    corsair = rl.load_device("corsair")
    slow_sram = rl.override(corsair, "sram.bandwidth", "1 TB/s")  # slow enough to bind the draft step
    base = speculative_round(**KW, draft_on=rl.DeviceGroup(device=corsair, tp=2), acceptance=0.926, gamma=5)
    slow = speculative_round(**KW, draft_on=rl.DeviceGroup(device=slow_sram, tp=2), acceptance=0.926, gamma=5)
    assert slow.draft_s > base.draft_s and slow.tokens_per_s_per_user < base.tokens_per_s_per_user


def test_energy_accounts_both_groups():
    r = speculative_round(**KW, draft_on="corsair:2", acceptance=0.926, gamma=5)
    assert np.isfinite(r.energy_per_token_j) and r.energy_per_token_j > 0
    # the round draws at least the idle power of all ten devices
    idle = 8 * 0.12 * 1000 + 2 * 0.12 * 600
    assert r.power_w >= idle
    tpu = speculative_round(target="gpt-oss-120b", verify_on="tpu-7x:8", draft="gpt-oss-draft-1.6b",
                            acceptance=0.9, gamma=3, context=1024, target_formats={"experts": "bf16"})
    assert np.isnan(tpu.energy_per_token_j) and "power.tdp" in tpu.energy_note


def test_mtp_head_draft():
    r = speculative_round(target="deepseek-r1", verify_on="b200:8", draft_kind="mtp", head_layers=1,
                          acceptance=Acceptance.measured({2: 2.58, 4: 2.99}), gamma=np.array([2, 4]), context=1024,
                          target_formats={"experts": "nvfp4"})
    assert np.all(r.fits) and np.all(r.speedup > 1)


def test_bad_inputs():
    with pytest.raises(WorkloadError, match="vocabulary"):
        speculative_round(target="gpt-oss-120b", verify_on="b200:8", draft="llama-3.1-8b", acceptance=0.9, gamma=3)
    with pytest.raises(WorkloadError, match="alpha"):
        speculative_round(**KW, acceptance=1.5, gamma=3)
    with pytest.raises(WorkloadError, match="gamma"):
        speculative_round(**KW, acceptance=0.9, gamma=-2)
    with pytest.raises(WorkloadError, match="draft_kind"):
        speculative_round(**KW, acceptance=0.9, gamma=2, draft_kind="medusa")
    with pytest.raises(WorkloadError, match="needs a draft model"):
        speculative_round(target="gpt-oss-120b", verify_on="b200:8", acceptance=0.9, gamma=2)


def test_spec_command(run_cli):
    args = ["spec", "--target", "gpt-oss-120b", "--draft", "gpt-oss-draft-1.6b", "--draft-on", "corsair:2",
            "--verify-on", "b200:8", "--alpha", "0.926", "--gamma", "1..40"]
    code, out, err = run_cli(*args)
    assert code == 0, err
    assert "tok/s/user" in out and "*" in out
    code, out, _ = run_cli(*args, "--json")
    data = json.loads(out)
    assert len(data["rows"]) == 40 and sum(r["best"] for r in data["rows"]) == 1
    best = max((r for r in data["rows"] if r["fits"]), key=lambda r: r["tokens_per_s_per_user"])
    assert best["gamma"] == data["best_gamma"]
    assert data["rows"][4]["expected_tokens"] == pytest.approx(4.99, abs=0.005)


@pytest.mark.parametrize("extra,code,needle", [
    (["--alpha", "1.5"], 2, "alpha must be in [0, 1]"),   # like --alpha nan: a malformed option value
    (["--alpha", "0.9", "--gamma", "-1"], 2, "--gamma"),
    (["--alpha", "0.9", "--acceptance-length", "5:3"], 2, "exactly one"),
    (["--acceptance-length", "4:9"], 2, "--acceptance-length: acceptance length tau = 9.0 exceeds gamma + 1"),
    (["--alpha-by-gamma", "4:1.5"], 2, "--alpha-by-gamma: alpha must be in [0, 1]"),
    (["--alpha", "0.9", "--draft", "llama-3.1-8b"], 1, "vocabulary"),
    (["--alpha", "0.9", "--draft-on", "corsair:2", "--link", "carrier-pigeon"], 1, "unknown link"),
])
def test_spec_errors(run_cli, extra, code, needle):
    base = ["spec", "--target", "gpt-oss-120b", "--draft", "gpt-oss-draft-1.6b", "--verify-on", "b200:8",
            "--gamma", "1..4"]
    got, _, err = run_cli(*base, *extra)
    assert got == code, err
    assert needle in err and len(err.strip().splitlines()) == 1


def test_spec_command_keeps_pipeline_groups(run_cli):
    base = ["spec", "--target", "gpt-oss-120b", "--draft", "gpt-oss-draft-1.6b", "--verify-on", "b200:8",
            "--alpha", "0.9", "--gamma", "2", "--json"]
    pp = json.loads(run_cli(*base, "--draft-on", "corsair:1x2")[1])
    tp = json.loads(run_cli(*base, "--draft-on", "corsair:2")[1])
    assert "PP2" in pp["draft_group"] and "TP2" in tp["draft_group"]
    assert pp["rows"][0]["draft_s"] != tp["rows"][0]["draft_s"]


@pytest.mark.parametrize("draft_on, cards", [("corsair:2", 2), ("corsair:1x2", 2), ("corsair:1", 1)])
def test_round_energy_counts_every_device_of_each_group(draft_on, cards):
    # detailed count: each device draws busy power while its stage runs and idle power for the rest of the round,
    # whether its group splits the model by tensor (TP) or by layer (PP)
    from roofline import resolve_group as parse_group
    from roofline.physics.energy import busy_power_w, idle_w
    g = np.array([1, 5])
    r = speculative_round(**KW, draft_on=draft_on, acceptance=0.926, gamma=g)
    dg, tg = parse_group(draft_on), rl.DeviceGroup(device=rl.load_device("b200"), tp=8)
    d = rl.draft("gpt-oss-draft-1.6b", dg, batch=1, context=8192, gamma=g, weights="mxint8", kv="mxint8",
                 activations="mxint8")
    v = rl.verify("gpt-oss-120b", tg, batch=1, context=8192, gamma=g)

    def device_j(dev, res):
        floor = res.busy_floor_fraction    # the family's busy floor (a share of TDP; the GPU one is fitted on power)
        prof = rl.resolve_profile(dev)
        assert floor == prof.busy_floor_fraction
        assert (res.compute_power_weight, res.memory_power_weight) == (prof.compute_power_weight,
                                                                       prof.memory_power_weight)
        # the floor by bound: fixed-cost and collective time at their own floors (the family's fields)
        busy = busy_power_w(dev, time_s=res.time_s, compute_s=res.compute_s, memory_s=res.memory_s,
                            floor_fraction=floor, compute_weight=res.compute_power_weight,
                            memory_weight=res.memory_power_weight, communication_s=res.communication_s,
                            overhead_s=res.overhead_s, compute_floor_fraction=prof.compute_floor_fraction,
                            compute_floor_share=prof.compute_floor_share,
                            communication_floor_fraction=prof.communication_floor_fraction,
                            fixed_floor_fraction=prof.fixed_floor_fraction)
        return busy * res.time_s + idle_w(dev) * (r.round_s - res.time_s)

    energy = cards * device_j(dg.device, d) + 8 * device_j(tg.device, v)
    np.testing.assert_allclose(r.energy_per_token_j, energy / r.expected_tokens, rtol=1e-9)


def test_gamma_zero_has_no_draft_bound():
    """At gamma 0 nothing is drafted: its draft bound reads "none", not the bound of a draft that never ran."""
    s = rl.speculative_round("gpt-oss-120b", verify_on="b200:8", draft="gpt-oss-draft-1.6b", acceptance=0.9,
                             gamma=np.arange(0, 3))
    assert list(s.draft_bound) == ["none", s.draft_bound[1], s.draft_bound[2]] and "none" not in s.draft_bound[1:]


def test_optimal_gamma_on_a_grid_is_each_points_own():
    """On a batch x gamma grid each batch has its own best gamma (the scan over gamma alone at that batch), NaN
    where none fits; one best for the whole grid would be batch 1's answer given to batch 64 too."""
    kw = dict(draft="gpt-oss-draft-1.6b", verify_on="b200:8", draft_on="b200:8", acceptance=0.8)
    gammas = np.arange(1, 11)
    grid = speculative_round("gpt-oss-120b", gamma=gammas[None, :], batch=[[1], [64], [10**6]], **kw)
    best = optimal_gamma(grid)
    alone = [optimal_gamma(speculative_round("gpt-oss-120b", gamma=gammas, batch=b, **kw)) for b in (1, 64)]
    assert best.shape == (3,) and list(best[:2]) == alone and alone[0] != alone[1] and np.isnan(best[2])
    with pytest.raises(rl.WorkloadError, match="varies along 2 axes"):
        optimal_gamma(speculative_round("gpt-oss-120b", gamma=[[1, 2], [3, 4]], **kw))


def test_a_draft_model_with_a_head_draft_kind_is_refused_and_a_missing_mtp_head_said():
    """`--draft D --draft-kind mtp` used to draft with the target's head and ignore D; now it is an error. An MTP
    head of a model whose checkpoint has none is a what-if, and the draft's name says so."""
    with pytest.raises(WorkloadError, match="not with the draft model gpt-oss-draft-1.6b"):
        speculative_round("gpt-oss-120b", draft="gpt-oss-draft-1.6b", draft_kind="mtp", verify_on="b200:8",
                          acceptance=0.9, gamma=2)
    assert speculative_round("gpt-oss-120b", draft_kind="mtp", verify_on="b200:8", acceptance=0.9,
                             gamma=2).draft.endswith("(1 layer, not in the checkpoint)")
    assert speculative_round("deepseek-r1", draft_kind="mtp", verify_on="b200:8", acceptance=0.9,
                             gamma=2).draft.endswith("mtp head (1 layer)")


def test_spec_says_the_formats_target_and_draft_ran_in(run_cli):
    """The draft's formats default to its device's native one (mxint8 on Corsair), the target's to the checkpoint's
    (gpt-oss's MXFP4 experts): the table and the JSON say which applied."""
    argv = ("spec", "--target", "gpt-oss-120b", "--draft", "gpt-oss-draft-1.6b", "--draft-on", "corsair:2",
            "--verify-on", "b200:8", "--alpha", "0.926", "--gamma", "2")
    d = json.loads(run_cli(*argv, "--json")[1])
    assert d["target_formats"] == {"weights": "bf16", "experts": "mxfp4", "kv": "bf16", "activations": "bf16",
                                   "head": "bf16"}
    assert d["draft_formats"] == dict.fromkeys(("weights", "experts", "kv", "activations", "head"), "mxint8")
    said = " ".join(run_cli(*argv)[1].split())
    assert "Formats: target bf16 (experts mxfp4); draft mxint8 throughout." in said


def test_an_array_of_alphas_sweeps_the_acceptance_as_any_workload_axis():
    """A geometric acceptance's alpha broadcasts against batch and gamma: each alpha gives, to the last bit, the
    points a call with that alpha alone gives, in speculative_round and in evaluate_serving; optimal_gamma answers
    per alpha; tables (positional, measured) stay one per call; alphas outside [0, 1] and shapes that do not
    broadcast are refused."""
    alphas = np.array([0.6, 0.8, 0.926])[:, None]
    gammas = np.arange(1, 9)
    kw = dict(draft="gpt-oss-draft-1.6b", draft_on="corsair:2", verify_on="b200:8", gamma=gammas)
    many = speculative_round("gpt-oss-120b", acceptance=alphas, **kw)
    assert many.tokens_per_s_per_user.shape == (3, 8) and many.acceptance.startswith("alpha = 0.6, 0.8, 0.926")
    assert np.array_equal(many.alpha, np.broadcast_to(alphas, (3, 8)))
    for i, a in enumerate(alphas[:, 0]):
        one = speculative_round("gpt-oss-120b", acceptance=float(a), **kw)
        for f in ("tokens_per_s_per_user", "energy_per_token_j", "round_s", "expected_tokens", "speedup"):
            assert np.array_equal(getattr(many, f)[i], getattr(one, f)), f
        assert optimal_gamma(many)[i] == optimal_gamma(one)
    assert Acceptance.geometric(alphas) == Acceptance.geometric(alphas.copy()) != Acceptance.geometric(0.6)
    placement = rl.Placement.build("spec", decode="b200:8", draft="corsair:2", draft_model="gpt-oss-draft-1.6b")
    request = rl.Request(input_tokens=8192, output_tokens=1024)
    grid = rl.evaluate_serving("gpt-oss-120b", placement, request, batch=np.array([1, 64])[:, None], gamma=gammas,
                               acceptance=alphas[:, :, None])
    assert grid.tokens_per_s_per_user.shape == (3, 2, 8)
    alone = rl.evaluate_serving("gpt-oss-120b", placement, request, batch=np.array([1, 64])[:, None], gamma=gammas,
                                acceptance=0.8)
    for f in ("tokens_per_s_per_user", "ttft_s", "tokens_per_s_per_kw", "energy_per_token_j"):
        assert np.array_equal(np.broadcast_to(getattr(grid, f), (3, 2, 8))[1], getattr(alone, f)), f
    assert np.array_equal(grid.alpha, np.broadcast_to(alphas[:, :, None], (3, 2, 8)))   # which alpha each point is
    assert np.all(alone.alpha == 0.8) and grid.to_dict()["alpha"][2][0][0] == 0.926
    plain = rl.Placement.build("plain", decode="b200:8")   # nothing drafted: the alphas add no axis, only NaN
    flat = rl.evaluate_serving("gpt-oss-120b", plain, request, batch=[1, 64], acceptance=alphas)
    assert flat.tokens_per_s_per_user.shape == (2,) and np.all(np.isnan(flat.alpha))
    with pytest.raises(WorkloadError, match="do not broadcast"):
        speculative_round("gpt-oss-120b", acceptance=np.array([0.6, 0.8, 0.9]), **kw)
    with pytest.raises(WorkloadError, match=r"alpha must be in \[0, 1\]"):
        Acceptance.geometric([0.5, 1.2])
    target = rl.Target(users=100, min_tokens_per_s_per_user=50, request=request)
    with pytest.raises(WorkloadError, match="size takes one acceptance"):
        rl.size("gpt-oss-120b", ["b200"], target, draft="gpt-oss-draft-1.6b", acceptance=Acceptance.geometric(alphas))
    sized = rl.size("gpt-oss-120b", ["b200"], target, draft="gpt-oss-draft-1.6b", acceptance=np.float64(0.8))
    assert sized == rl.size("gpt-oss-120b", ["b200"], target, draft="gpt-oss-draft-1.6b",
                            acceptance=Acceptance.geometric(0.8)) and any(o.feasible for o in sized)
    # a speculative option says the formats its draft ran in (the draft on b200: bf16), the others none
    assert {o.placement: dict(o.draft_formats).get("weights") for o in sized if o.feasible} == {
        "speculative": "bf16", "aggregated": None, "disaggregated": None}


def test_spec_command_sweeps_several_alphas(run_cli):
    """`spec --alpha 0.7,0.926` is one table with an alpha column, each alpha's best gamma starred as that alpha
    alone would star it (and its rows its own run's); --json says each row's alpha; a list is spec's only, and an
    alpha outside [0, 1] in it is a usage error."""
    argv = ("spec", "--target", "gpt-oss-120b", "--draft", "gpt-oss-draft-1.6b", "--draft-on", "corsair:2",
            "--verify-on", "b200:8", "--gamma", "1..6")
    both = json.loads(run_cli(*argv, "--alpha", "0.7,0.926", "--json")[1])
    assert both["alpha_sweep"] and len(both["rows"]) == 12
    for a in ("0.7", "0.926"):
        alone = json.loads(run_cli(*argv, "--alpha", a, "--json")[1])
        assert not alone["alpha_sweep"]
        mine = [{k: v for k, v in row.items() if k != "alpha"} for row in both["rows"] if row["alpha"] == float(a)]
        assert mine == [{k: v for k, v in row.items() if k != "alpha"} for row in alone["rows"]]
    code, out, _ = run_cli(*argv, "--alpha", "0.7,0.926")
    stars = [line.split()[:2] for line in out.splitlines() if len(line.split()) > 1 and line.split()[1].endswith("*")]
    assert code == 0 and stars == [["0.7", f"{both['best_gamma'][0]}*"], ["0.926", f"{both['best_gamma'][1]}*"]]
    assert "* = most tok/s/user at that alpha." in " ".join(out.split())
    assert both["best"] == [{"alpha": float(a), "batch": 1, "gamma": g} for a, g in zip((0.7, 0.926), both["best_gamma"])]
    code, _, err = run_cli(*argv, "--alpha", "0.7,1.2")
    assert code == 2 and "--alpha must be in [0, 1]" in err
    code, _, err = run_cli(*argv, "--alpha", "0.7,0.9,0.7")
    assert code == 2 and "--alpha lists 0.7 more than once" in err
    # speculation that does not pay is said for the alpha (and batch) where it does not
    code, out, _ = run_cli(*argv, "--alpha", "0.1,0.9", "--batch", "1,8")
    said = " ".join(out.split())
    assert "speed-up < 1 at alpha 0.1, batch 1; alpha 0.1, batch 8): speculation does not pay" in said
    code, _, err = run_cli("placements", "--target", "llama-3.1-70b", "--draft", "llama-3.1-8b", "--devices", "b200",
                           "--alpha", "0.7,0.9")
    assert code == 2 and "--alpha takes one number here, got '0.7,0.9' (`roofline spec` sweeps a list)" in err


def test_spec_records_its_context_and_sampling_and_counts_are_whole(run_cli):
    """Two scans at 8k and 32k, greedy or lossless, must be told apart from their JSON and CSV alone; gamma and
    batch are whole numbers there (they were floats, 1.0)."""
    import csv
    import io
    import json
    args = ("spec", "--target", "llama-3.1-70b", "--draft", "llama-3.2-1b", "--verify-on", "h100-sxm:4",
            "--alpha", "0.8", "--gamma", "1..3", "--batch", "1,8", "--context", "32k", "--sampling", "lossless")
    code, out, err = run_cli(*args, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["context"] == 32000 and data["sampling"] == "lossless"
    assert all(isinstance(r["gamma"], int) and isinstance(r["batch"], int) and r["context"] == 32000
               for r in data["rows"])
    code, out, err = run_cli(*args, "--csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0 and rows and all(r["gamma"].isdigit() and r["sampling"] == "lossless" and r["context"] == "32000"
                                      for r in rows)
