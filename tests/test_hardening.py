"""Bad input everywhere: typed errors in Python, one line and a non-zero exit in the CLI, never a wrong number."""

import re

import numpy as np
import pytest
from conftest import validate_rows, write_rows
from hypothesis import given, settings
from hypothesis import strategies as st

import roofline as rl
from roofline.errors import RooflineError
from roofline.serving.serve import Placement, Request
from roofline.serving_api import evaluate_serving

# ------------------------------------------------------------------ CLI matrix
BAD = [
    # unknown ids, with suggestions
    (["show", "h100-sxn"], 1, "did you mean"),
    (["stage", "llama-3.1-8", "h100"], 1, "did you mean"),
    (["stage", "llama-3.1-8b", "h10O"], 1, "did you mean"),
    (["stage", "llama-3.1-8b", "h100", "--weights", "bf61"], 2, "did you mean"),   # none of the formats: usage
    (["spec", "--target", "gpt-oss-120b", "--draft", "gpt-oss-draft-1.6b", "--verify-on", "b20:8", "--alpha", "0.9"], 1,
     "did you mean"),
    (["compare", "llama-3.1-8b", "h100", "b2OO"], 1, "did you mean"),
    (["diagnose", "llama-3.1-8b", "h100", "--batch", "1", "--isl", "5", "--osl", "5", "--tokens-per-s", "9",
      "--weights", "fp9"], 2, "did you mean"),
    # malformed numbers and units
    (["stage", "llama-3.1-8b", "h100", "--batch", "1,x"], 2, "--batch"),
    (["stage", "llama-3.1-8b", "h100", "--context", "8x"], 2, "--context"),
    (["stage", "llama-3.1-8b", "h100", "--set", "h100.hbm.bandwidth=3.35"], 1, "has no unit"),
    (["stage", "llama-3.1-8b", "h100", "--set", "h100.hbm.bandwidth=3 GB"], 1, "not a bandwidth unit"),
    (["stage", "llama-3.1-8b", "h100", "--set", "h100.hbm.bandwidth=nan TB/s"], 1, "number"),
    (["stage", "llama-3.1-8b", "h100", "--set", "h100.hbm.bandwith=3TB/s"], 1, "did you mean"),
    # zero, negative, NaN, inf, absurd
    (["stage", "llama-3.1-8b", "h100", "--batch", "0"], 2, "--batch"),
    (["stage", "llama-3.1-8b", "h100", "--tp", "-2"], 2, "--tp"),
    (["stage", "llama-3.1-8b", "h100", "--set", "h100.hbm.bandwidth=0 TB/s"], 1, "positive"),
    (["stage", "llama-3.1-8b", "h100", "--set", "h100.hbm.bandwidth=inf TB/s"], 1, "number"),
    (["stage", "llama-3.1-8b", "h100", "--batch", "1000000000"], 1, "does not fit"),
    (["stage", "llama-3.1-8b", "h100", "--context", "99999999999"], 1, "does not fit"),
    (["diagnose", "llama-3.1-8b", "h100", "--batch", "1", "--isl", "5", "--osl", "5", "--tokens-per-s-per-user",
      "nan"], 2, "--tokens-per-s-per-user: expected a finite number"),
    # speculation
    (["spec", "--target", "gpt-oss-120b", "--draft", "gpt-oss-draft-1.6b", "--verify-on", "b200:8", "--alpha", "-0.1"],
     2, "alpha must be in [0, 1]"),
    (["spec", "--target", "gpt-oss-120b", "--draft", "gpt-oss-draft-1.6b", "--verify-on", "b200:8", "--alpha", "nan"], 2,
     "--alpha"),
    (["spec", "--target", "gpt-oss-120b", "--draft", "gpt-oss-draft-1.6b", "--verify-on", "b200:x", "--alpha", "0.9"], 1,
     "ID:TP"),
    (["pareto", "--target", "gpt-oss-120b", "--placement", "a: decode=b200:8", "--batch", "0"], 2, "--batch"),
    (["placements", "--target", "gpt-oss-120b", "--devices", "b200", "--isl", "0"], 2, "--isl"),
    # usage
    ([], 2, ""), (["stage"], 2, "required"), (["formula"], 2, "required"), (["validate", "--nope"], 2, "unrecognized"),
]


@pytest.mark.parametrize("args,code,needle", BAD, ids=lambda a: " ".join(a) if isinstance(a, list) else str(a))
def test_cli_bad_input_matrix(run_cli, args, code, needle):
    got, out, err = run_cli(*args)
    assert got == code, (out, err)
    if args:
        assert needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


FILES = {
    "empty": b"", "truncated": b'schema = 1\nid = "h100-sxm"\n[[memory]]\nname = "hbm"\ncapacity = { value = "80 GiB"',
    "binary": bytes(range(256)) * 4, "json_as_toml": b'{"schema": 1}',
}


@pytest.mark.parametrize("kind", sorted(FILES))
@pytest.mark.parametrize("command", ["show", "stage", "validate", "calibrate", "diagnose", "profile"])
def test_cli_bad_files(run_cli, tmp_path, kind, command):
    ext = {"show": ".toml", "stage": ".toml", "validate": ".csv", "calibrate": ".csv", "diagnose": ".json",
           "profile": ".toml"}[command]
    f = tmp_path / f"bad{ext}"
    f.write_bytes(FILES[kind])
    argv = {"show": ["show", str(f)], "stage": ["stage", "llama-3.1-8b", str(f)],
            "validate": ["validate", "--data", str(f)], "calibrate": ["calibrate", "--data", str(f)],
            "diagnose": ["diagnose", "llama-3.1-8b", "h100", "--vllm-json", str(f)],
            "profile": ["stage", "llama-3.1-8b", "h100", "--profile", str(f)]}[command]
    code, _, err = run_cli(*argv)
    assert code == 1 and str(f) in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("argv", [["stage", "llama-3.1-8b", "{d}"], ["stage", "{d}", "h100"], ["validate", "--data", "{d}"],
                                  ["show", "{d}/nope.toml"], ["stage", "{d}/nope/config.json", "h100"]])
def test_cli_directories_and_missing_paths(run_cli, tmp_path, argv):
    code, _, err = run_cli(*[a.format(d=tmp_path) for a in argv])
    assert code == 1 and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_huge_spec_file_is_refused(tmp_path):
    f = tmp_path / "huge.toml"
    f.write_bytes(b"# " + b"x" * 2_000_000)
    with pytest.raises(rl.SpecError, match="too large"):
        rl.load_device(f)


def test_debug_shows_the_traceback():
    from roofline.ui.cli import main
    with pytest.raises(rl.NotFoundError):
        main(["--debug", "show", "h10"])


# ------------------------------------------------------- public functions
values = st.one_of(st.integers(-5, 10**7), st.floats(allow_nan=True, allow_infinity=True), st.just(1e30),
                   st.text(max_size=3), st.lists(st.integers(-2, 3000), min_size=1, max_size=3), st.none())


def _check_times(r):
    t = np.asarray(r.time_s, dtype=float)
    fits = np.broadcast_to(np.asarray(r.fits), t.shape)
    assert np.all(np.isnan(t[~fits]))
    assert np.all(np.isfinite(t[fits])) and np.all(t[fits] >= 0)   # 0: a draft of gamma = 0 does not run


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["decode_step", "prefill", "verify", "draft"]), values, values, values,
       st.sampled_from(["llama-3.1-8b", "gpt-oss-120b", "deepseek-r1", "gpt-oss-draft-1.6b"]),
       st.sampled_from(["h100-sxm", "b200", "corsair", "groq-3-lpu:1x4", "sohu"]))
def test_stage_functions_only_raise_project_errors(fn, a, b, c, model, device):
    from roofline import resolve_group as parse_group
    kwargs = {"decode_step": dict(batch=a, context=b), "prefill": dict(prompt=a, batch=b, prefix=c),
              "verify": dict(batch=a, context=b, gamma=c), "draft": dict(batch=a, context=b, gamma=c)}[fn]
    try:
        r = getattr(rl, fn)(model, parse_group(device), on_infeasible="nan", **kwargs)
    except RooflineError:
        return
    _check_times(r)


@settings(max_examples=40, deadline=None)
@given(values, values, values)
def test_speculative_closed_forms_only_raise_project_errors(a, g, tau):
    for call in (lambda: rl.expected_tokens(a, g), lambda: rl.alpha_from_acceptance_length(tau, g),
                 lambda: rl.speedup_closed_form(a, g, 0.1), lambda: rl.Acceptance.geometric(a).expected_tokens(g)):
        try:
            out = np.asarray(call(), dtype=float)
        except RooflineError:
            continue
        assert np.all(np.isfinite(out)) and np.all(out >= 0)


@settings(max_examples=25, deadline=None)
@given(st.integers(-3, 20000), st.integers(-3, 5000), values, st.sampled_from(["static", "continuous", "x"]))
def test_serving_only_raises_project_errors(isl, osl, batch, mode):
    try:
        req = Request(input_tokens=isl, output_tokens=osl)
    except RooflineError:
        return
    p = Placement.build("p", decode="h200-sxm:1")
    try:
        r = evaluate_serving("llama-3.1-8b", p, req, batch=batch, mode=mode)
    except RooflineError:
        return
    e2e = np.asarray(r.e2e_s, dtype=float)
    assert np.all(np.isnan(e2e[~r.fits])) and np.all(e2e[r.fits] > 0)


def test_sweeps_mark_infeasible_instead_of_failing():
    r = rl.decode_step("llama-3.1-70b", "h100-sxm", batch=np.array([1, 2]), context=np.array([[10], [10**7]]))
    assert not r.fits.any() and np.isnan(r.time_s).all()
    s = rl.speculative_round("gpt-oss-120b", verify_on="h100-sxm:1", draft="gpt-oss-draft-1.6b", acceptance=0.9,
                             gamma=np.arange(0, 4), batch=4096)
    assert not s.fits.any() and np.isnan(s.tokens_per_s_per_user).all()
    with pytest.raises(rl.InfeasibleError, match="no gamma in the scan fits in memory: gpt-oss-120b does not fit on "):
        rl.optimal_gamma(s)   # says which stage does not fit and by how much, as `stage` does
    assert "needs" in s.infeasible_reason and "is usable" in s.infeasible_reason


# ------------------------------------------------ the reliability cases of issue 14
def test_non_regular_and_absurd_inputs_are_one_line_errors(run_cli, tmp_path):
    import os
    fifo = tmp_path / "pipe.toml"
    os.mkfifo(fifo)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    huge = tmp_path / "huge" / "config.json"
    huge.parent.mkdir()
    huge.write_text('{"model_type": "llama", "hidden_size": 1' + "0" * 400 + ', "num_attention_heads": 8, '
                    '"num_hidden_layers": 2, "intermediate_size": 8, "vocab_size": 8}')
    cases = [
        (["show", "/dev/zero"], 1, "not a regular file"), (["show", str(fifo)], 1, "not a regular file"),
        (["diagnose", "llama-2-7b", "a100-sxm-80gb", "--vllm-json", str(deep)], 1, "nested too deeply"),
        (["show", "x" * 10_000], 1, "neither a device nor a model"),
        (["stage", str(huge), "h100-sxm"], 1, "no transformer is this large"),
        (["spec", "--target", "gpt-oss-120b", "--draft", "gpt-oss-draft-1.6b", "--verify-on", "b200:8",
          "--acceptance-length", "1e400:2"], 2, "finite"),
        (["spec", "--target", "gpt-oss-120b", "--draft", "gpt-oss-draft-1.6b", "--verify-on", "b200:8",
          "--alpha-by-gamma", "2.5:0.9"], 2, "whole gammas"),
        (["spec", "--target", "gpt-oss-120b", "--draft", "gpt-oss-draft-1.6b", "--verify-on", "b200:8",
          "--alpha-by-gamma", "5:0.9,5:0.8"], 2, "given twice"),
        (["pareto", "--target", "gpt-oss-120b", "--placement", "a: decode=b200:8, head-layers=x"], 2, "head-layers"),
        (["diagnose", "llama-2-7b", "a100-sxm-80gb", "--batch", "1", "--isl", "0", "--osl", "5",
          "--tpot-ms", "9"], 2, "--isl"),
        (["diagnose", "llama-2-7b", "a100-sxm-80gb", "--batch", "1", "--isl", "nan", "--osl", "5",
          "--tpot-ms", "9"], 2, "--isl"),
        (["diagnose", "llama-2-7b", "a100-sxm-80gb", "--batch", "1", "--isl", "5", "--osl", "200",
          "--tokens-per-s-per-user", "10000"], 1, "impossible"),
        (["stage", "llama-3.1-8b", "h100", "--plot", str(tmp_path / "out.txt")], 1, ".png"),
        (["stage", "llama-3.1-8b", "h100", "--plot", str(tmp_path)], 1, ".png"),
        (["stage", "llama-3.1-8b", "h100", "--set", "h100.hbm.bandwidth=6.7TB/s", "--set",
          "h100.hbm.bandwidth=7TB/s"], 2, "twice"),
        (["stage", "llama-3.1-8b", "h100", "--set", "b200.hbm.bandwidth=6.7TB/s"], 1, "not a device of this command"),
        (["stage", "llama-3.1-8b", "h100", "--set", "hbm.bandwidth=6.7TB/s"], 1, "not a device of this command"),
        (["stage", "llama-3.1-8b", "h100", "--set", "h100.compute.bf16=1e-300 FLOP/s"], 1, "plausible"),
        (["stage", "llama-3.1-8b", "h100", "--set", "h100.power.idle=900W"], 1, "exceeds TDP"),
        (["stage", "llama-3.1-8b", "h100", "--set", "h100.hbm.bandwidth=4,8 TB/s"], 1, "decimals"),
        (["stage", "llama-3.1-8b", "h100", "--tp", "9999999999999999999"], 2, "--tp"),
        (["stage", "llama-3.1-8b", "h100", "--tp", "3"], 1, "does not divide the 32 attention heads"),
        (["devices", "--profile", "nope.toml"], 2, "unrecognized"),
        (["pareto", "--target", "llama-3.1-405b", "--placement", "a: decode=l40s"], 1, "no configuration"),
        (["calibrate", "--data", str(tmp_path / "m.csv"), "--out", str(tmp_path / "m.csv")], 1, "overwrite"),
        (["calibrate", "--out", str(tmp_path / "no" / "dir" / "p.toml")], 1, "no such directory"),
    ]
    (tmp_path / "m.csv").write_text("id\n")
    for argv, code, needle in cases:
        got, _, err = run_cli(*argv)
        assert got == code and needle in err, (argv, got, err)
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, (argv, err)


def test_validation_skips_bad_rows_and_fails_when_nothing_is_left(run_cli, tmp_path):
    good = ("A1,https://x,gpt-fast,h100-sxm,1,1,,1,llama-3.1-8b,bf16,,bf16,1,static,5,200,none,0,,"
            "decode_tokens_per_s_per_user,150,A,")
    v = validate_rows(tmp_path, good, good.replace("A1,", "A2,").replace(",static,5,", ",static,inf,"))
    assert [r["id"] for r in v.rows] == ["A1"] and "whole finite number" in v.skipped[0]["reason"]
    p = write_rows(tmp_path / "m.csv", good.replace(",static,5,", ",static,inf,"))
    code, _, err = run_cli("validate", "--data", str(p))
    assert code == 1 and "no row could be predicted" in err


def test_api_errors_are_roofline_errors():
    b200 = rl.load_device("b200")
    calls = [lambda: rl.DeviceGroup(device=b200, tp=-1), lambda: rl.EngineParams(step_overhead_s=-1),
             lambda: rl.draft("llama-3.1-8b", "b200", batch=1, context=1, gamma=[]),
             lambda: rl.acceptance_rate_from_length(-5, 3), lambda: rl.acceptance_rate_from_length(10, 3),
             lambda: rl.Request(input_tokens=-5, output_tokens=5),
             lambda: rl.Request(input_tokens=np.array([1, 2]), output_tokens=5),
             lambda: rl.decode_step("llama-3.1-8b", "b200", batch=1, context=[]),
             lambda: rl.PowerModel(pue=0.5), lambda: rl.GroupLink(name="x", bandwidth_bytes_per_s=0, latency_s=0),
             lambda: rl.decode_step("llama-3.1-8b", "b200", batch=np.ones((10_000, 1)), context=np.ones(10_000)),
             lambda: rl.override(b200, "power.idle", "2000 W"),
             lambda: rl.EngineParams(step_overhead_s=10**400)]   # a whole number too large for a float
    for call in calls:
        with pytest.raises(RooflineError):
            call()
    with pytest.raises(rl.WorkloadError, match="context"):
        rl.decode_step("llama-3.1-8b", "b200", batch=1, context=2.5)


def test_calibrate_writes_profiles_safely(tmp_path):
    from roofline.evidence.calibrate import Fit, save_profile
    from roofline.specs.params import load_profile, shipped_profile
    pooled = shipped_profile().default
    fit = Fit(profile=rl.Profile(default=pooled, families={"gpt-fast": pooled}),
              standard_errors={"default": {"step_overhead_s": 1.0}}, rows=["x"], skipped=[], median_abs_error=0.1,
              loo_median_abs_error=None, loo_errors=None)
    out = tmp_path / "p.toml"
    weird = 'C:\\data\\"quoted" file.csv'
    save_profile(fit, str(out), data=weird)
    import tomllib
    assert tomllib.loads(out.read_text())["fit"]["data"] == weird
    assert load_profile(out).default == pooled
    assert "not identified" in out.read_text()     # a standard error larger than the value itself
    assert not list(tmp_path.glob(".p.toml.*"))   # no temporary file left behind


def test_counts_in_what_ifs_and_stage_lengths_are_checked(run_cli):
    """A device count must be whole (max_tp 2.5 or inf is an error naming the field), and --context 0 says
    that no prompt is left to prefill instead of blaming a --prompt the user never gave."""
    for v in ("2.5", "inf"):
        code, _, err = run_cli("stage", "llama-3.1-8b", "h200-sxm", "--set", f"h200-sxm.execution.max_tp={v}")
        assert code == 1 and "max_tp" in err and len(err.strip().splitlines()) == 1, (v, err)
    code, _, err = run_cli("stage", "llama-3.1-8b", "h100", "--context", "0")
    assert code == 2 and "--context 0" in err and "--prompt N" in err
    assert run_cli("stage", "llama-3.1-8b", "h100", "--context", "0", "--prompt", "128")[0] == 0


def test_spec_keys_ids_and_booleans_are_checked(run_cli, tmp_path):
    """A misspelt top-level table is an error naming the key (it would otherwise vanish), a spec error names its
    file once, two measurement rows under one id are refused, and True is not a batch."""
    from roofline.specs.devices import device_index
    text = device_index()["h100-sxm"].read_text()
    (tmp_path / "x.toml").write_text("compte = 3\n" + text.replace('id = "h100-sxm"', 'id = "x"'))
    code, _, err = run_cli("show", str(tmp_path / "x.toml"))
    assert code == 1 and "'compte'" in err and "did you mean 'compute'" in err.lower()
    (tmp_path / "y.toml").write_text(text.replace('id = "h100-sxm"', 'id = "y"').replace("\ntdp = ", "\ntdpp = "))
    code, _, err = run_cli("show", str(tmp_path / "y.toml"))
    assert code == 1 and "power.tdp" in err and err.count("y.toml") == 1
    from roofline.evidence.validate import shipped_data
    lines = open(shipped_data()).read().splitlines()
    (tmp_path / "dup.csv").write_text("\n".join([lines[0], lines[1], lines[2], lines[2]]) + "\n")
    code, _, err = run_cli("validate", "--data", str(tmp_path / "dup.csv"))
    assert code == 1 and "repeats line 3" in err
    for bad in (True, [True, False]):
        with pytest.raises(rl.WorkloadError, match="batch"):
            rl.decode_step("llama-3.1-8b", "h200-sxm", batch=bad, context=100)


# ------------------------------------------------------------------ the Python API's edges (a new user's review)
def test_size_takes_ids_and_prices_its_rounded_up_prefill_groups():
    """size() takes what the other functions take (a model id, device ids, ID:N, numpy scalars) and, with the
    default prices, charges the whole prefill groups a disaggregated option deploys, as the CLI does."""
    req = rl.Request(input_tokens=1024, output_tokens=1024)
    target = rl.Target(users=500, min_tokens_per_s_per_user=np.float32(50), request=req)
    assert isinstance(target.min_tokens_per_s_per_user, float)

    def disagg(prices):
        return next(o for o in rl.size("gpt-oss-120b", ["b200"], target, prices=prices) if o.placement == "disaggregated")
    default, shipped = disagg(None), disagg(rl.shipped_prices())
    assert default.prefill_groups >= 1 and default.usd_per_million_output_tokens == shipped.usd_per_million_output_tokens
    assert rl.size("gpt-oss-120b", "b200:4", target)[0].group == "b200:4"
    with pytest.raises(rl.WorkloadError, match="give at least one device"):
        rl.size("gpt-oss-120b", [], target)
    with pytest.raises(rl.WorkloadError, match="must be a positive number"):
        rl.Target(users=5, min_tokens_per_s_per_user=True, request=req)


def test_a_misspelt_formats_key_is_named():
    req, p = rl.Request(input_tokens=64, output_tokens=64), rl.Placement.build("x", decode="h100-sxm")
    calls = [lambda: rl.sweep("llama-3.1-8b", ["h100-sxm"], batch=[1, 2], context=[1024], formats={"weight": "fp8"}),
             lambda: rl.evaluate_serving("llama-3.1-8b", p, req, batch=1, target_formats={"kvv": "fp8"}),
             lambda: rl.size("llama-3.1-8b", ["h100-sxm"], rl.Target(users=1, min_tokens_per_s_per_user=1, request=req),
                             formats={"weight": "fp8"}),
             lambda: rl.speculative_round("gpt-oss-120b", verify_on="b200:8", draft="gpt-oss-draft-1.6b", gamma=3,
                                          acceptance=0.9, target_formats={"weight": "fp8"})]
    for call in calls:
        with pytest.raises(rl.WorkloadError, match="unknown key .*the keys are weights, experts, kv, activations, head"):
            call()
    assert rl.sweep("llama-3.1-8b", "h100-sxm", batch=[1], context=[1024]).groups == ("h100-sxm",)   # one group


@pytest.mark.parametrize("old, new, field", [
    ("[links.scale_out]", "[links.scaleout]", "links.scaleout"),
    ("[power]", "[power]\ntdpp = 5", "power.tdpp"),
    ('[[memory]]\nname = "hbm"', '[[memory]]\nname = "hbm"\nbandwith = 1', "memory[0].bandwith"),
])
def test_spec_files_refuse_unknown_keys_in_every_table(tmp_path, old, new, field):
    from roofline.specs.devices import specs_dir
    text = (specs_dir() / "h100-sxm.toml").read_text().replace('id = "h100-sxm"', 'id = "typo"')
    assert old in text
    (tmp_path / "typo.toml").write_text(text.replace(old, new, 1))
    with pytest.raises(rl.SpecError, match=f"field '{re.escape(field)}'.*is not a key"):
        rl.load_device(tmp_path / "typo.toml")


def test_override_takes_ids_and_groups_and_refuses_unit_mistakes():
    assert rl.override("h100-sxm", "hbm.bandwidth", "6.7 TB/s").get("hbm.bandwidth") == 6.7e12
    g = rl.override(rl.resolve_group("h100-sxm:2"), "hbm.bandwidth", "6.7 TB/s")
    assert g.shape == "h100-sxm:2" and g.device.get("hbm.bandwidth") == 6.7e12
    for path, bare in (("hbm.capacity", 80), ("execution.layer_overhead", 5), ("hbm.bandwidth", 6.7)):
        with pytest.raises(rl.SpecError, match="not a plausible value"):
            rl.override("h100-sxm", path, bare)
    assert rl.override("h100-sxm", "execution.layer_overhead", 5e-6).get("execution.layer_overhead") == 5e-6
    assert rl.override("b200", "scale_up.latency", "2 s").get("scale_up.latency") == 2.0   # a unit: as written
    with pytest.raises(rl.SpecError, match="not a plausible value"):
        rl.override("corsair", "power.tdp", 6e5)
    with pytest.raises(rl.SpecError, match="max_tp = 8.5: must be a whole number"):
        rl.override("corsair", "execution.max_tp", 8.5)


def test_records_built_by_hand_fail_where_they_are_built():
    with pytest.raises(rl.WorkloadError, match="a draft group needs a draft_model"):
        rl.Placement.build("x", decode="h100-sxm", draft="h100-sxm")
    with pytest.raises(rl.WorkloadError, match="must be one of geometric"):
        rl.Acceptance("bogus")
    with pytest.raises(rl.WorkloadError, match="needs its values"):
        rl.Acceptance("geometric")
    with pytest.raises(rl.WorkloadError, match="exceeds gamma"):   # checked as Acceptance.measured checks it
        rl.Acceptance("measured", table={2: 5.0})
    with pytest.raises(rl.WorkloadError, match=r"alpha must be in \[0, 1\]"):
        rl.Acceptance("geometric", alpha=np.array([0.5, 1.6]))
    mine = np.array([0.5, 0.6])
    built = rl.Acceptance("geometric", alpha=mine)   # an array of alphas is kept as a read-only copy
    mine[0] = 2.0
    assert built == rl.Acceptance.geometric([0.5, 0.6]) and not built.alpha.flags.writeable
    assert rl.Acceptance("geometric", alpha=np.float64(0.5)).alpha == 0.5 and rl.Acceptance.geometric(0.5).alpha == 0.5
    with pytest.raises(rl.WorkloadError, match="Placement.decode must be a DeviceGroup.*Placement.build"):
        rl.Placement(name="x", decode="b200")
    with pytest.raises(rl.WorkloadError, match="Target.request must be a Request"):
        rl.Target(users=1, min_tokens_per_s_per_user=1, request={"input_tokens": 5})
    with pytest.raises(rl.WorkloadError, match="draft_formats must be a mapping"):
        rl.speculative_round("gpt-oss-120b", verify_on="b200:8", draft="gpt-oss-draft-1.6b", draft_on="corsair:2",
                             gamma=3, acceptance=0.9, draft_formats="mxint8")
    with pytest.raises(rl.WorkloadError, match="sampling must be one of greedy, lossless"):
        rl.speculative_round("gpt-oss-120b", verify_on="b200:8", draft="gpt-oss-draft-1.6b", gamma=3, acceptance=0.9,
                             sampling="nucleus")
    with pytest.raises(rl.WorkloadError, match="one alpha and one c"):
        rl.optimal_gamma_closed_form(np.array([0.8, 0.9]), 0.05)
    with pytest.raises(rl.UnitError, match="kinds: "):
        rl.parse_quantity("5 us", "time")
    with pytest.raises(rl.SpecError, match="a config is a dict"):
        rl.model_from_hf_config([1, 2])


def test_results_do_not_follow_the_callers_arrays():
    b = np.array([1.0, 2.0, 4.0])
    r = rl.decode_step("llama-3.1-8b", "h100-sxm", batch=b, context=1024)
    b[:] = [64.0, 128.0, 8.0]
    assert list(r.batch) == [1.0, 2.0, 4.0]


def test_layouts_and_formats_that_cannot_exist_are_refused(run_cli):
    """A GPU pipeline holds whole layers (no more stages than layers; a dataflow chip may spread a layer over
    chips); activations need a format that computes (int8 alone is weight-only); a launch command for a request
    beyond the model's context is refused."""
    with pytest.raises(rl.WorkloadError, match="more pipeline stages than the 32 layers"):
        rl.decode_step("llama-3.1-8b", "h100-sxm:1x33", batch=1, context=128)
    assert rl.decode_step("llama-3.1-8b", "h100-sxm:1x32", batch=1, context=128).fits
    assert rl.decode_step("llama-3.1-8b", "groq-lpu:1x80", batch=1, context=128, weights="fp16").time_s > 0
    with pytest.raises(rl.WorkloadError, match="weight-only format"):
        rl.decode_step("llama-3.1-8b", "h100-sxm", batch=1, context=128, activations="int4-g128")
    # a format the device cannot compute is named, not quietly run in another (fp8 activations on Groq's LPU at its
    # fp16 rate, bf16 weights on Corsair "unpacked" to int8)
    with pytest.raises(rl.UnknownSpecError, match="groq-lpu has no native fp8 units"):
        rl.decode_step("llama-3.1-8b", "groq-lpu:8x16", batch=1, context=128, activations="fp8")
    with pytest.raises(rl.UnknownSpecError, match="corsair has no native bf16 units"):
        rl.decode_step("llama-3.1-8b", "corsair:4", batch=1, context=128, weights="bf16")
    assert rl.decode_step("llama-3.1-8b", "a100-sxm-80gb", batch=1, context=128, weights="fp8").fits   # unpacked
    code, _, err = run_cli("stage", "llama-3.1-8b", "groq-lpu:8x41", "--weights", "int8", "--activations", "bf16")
    assert code == 1 and "for its int8 units w8a8-int8, int8 weights and activations" in err
    req = rl.Request(input_tokens=1024, output_tokens=1024)
    opt = rl.size("llama-3.1-8b", ["h100-sxm"], rl.Target(users=4, min_tokens_per_s_per_user=20, request=req))[0]
    with pytest.raises(rl.WorkloadError, match="beyond its 131,072-token context"):
        rl.launch_command("vllm", rl.load_model("llama-3.1-8b"), opt,
                          request=rl.Request(input_tokens=500_000, output_tokens=500_000))


def test_fewer_sequences_than_data_parallel_ranks_leave_one_rank_the_whole_attention():
    """Attention data-parallel ranks run whole sequences: one sequence on dp 4 is one rank's attention, not a
    quarter on each (so batch-1 prefill is slower with --dp 4 than without); from dp sequences up, unchanged."""
    one = {dp: rl.prefill("llama-3.1-70b", rl.resolve_group("h100-sxm:4", dp=dp), prompt=8192) for dp in (1, 4)}
    assert one[4].flop_per_device > 1.5 * one[1].flop_per_device and one[4].time_s > one[1].time_s
    four = {dp: rl.prefill("llama-3.1-70b", rl.resolve_group("h100-sxm:4", dp=dp), prompt=8192, batch=4)
            for dp in (1, 4)}
    assert four[4].flop_per_device == pytest.approx(four[1].flop_per_device)


def test_writing_into_a_result_cannot_change_later_answers():
    """The pass counts of a small workload are remembered and shared by later calls with the same batch; a
    result's footprint.work is read-only: writing into it raises instead of silently changing every later decode
    time (a review found `w.weight_bytes["mlp"] *= 0` halved them)."""
    import numpy as np
    first = rl.decode_step("llama-3.1-8b", "h100-sxm", batch=np.array([1, 8]), context=4096)
    w = first.footprint.work
    with pytest.raises(TypeError):
        w.weight_bytes["mlp"] *= 0
    with pytest.raises(TypeError):
        w.flop["attention"] = 0.0
    with pytest.raises(ValueError):
        w.kv_read_bytes[...] = 0
    again = rl.decode_step("llama-3.1-8b", "h100-sxm", batch=np.array([1, 8]), context=4096)
    assert again.footprint.work.weight_bytes is w.weight_bytes and np.array_equal(again.time_s, first.time_s)


def test_an_execution_field_the_spec_file_leaves_to_its_family_says_where_it_is():
    """Device.get reads the spec file; an execution field it does not set comes from the family's profile, and
    the error says so (it used to say the field is not published)."""
    with pytest.raises(rl.UnknownSpecError, match=r"not set in its spec file.*resolve_profile\(device\)\.layer_overhead_s"):
        rl.load_device("h100-sxm").get("execution.layer_overhead")
    assert rl.load_device("tpu-v6e").get("execution.m_tile") == 256


def test_inputs_that_would_change_nothing_or_mislead_are_refused(tmp_path):
    """Expert parallelism on a dense model, a DeepSeek config whose dense prefix covers every layer, memory tiers
    listed slower first, a quantization group size that is not a number: each refused or read as written,
    never silently turned into another model (a review found each accepted)."""
    import json
    from pathlib import Path
    with pytest.raises(rl.WorkloadError, match="ep=4 spreads routed experts.*llama-3.1-8b has none"):
        rl.decode_step("llama-3.1-8b", "h100-sxm:4", ep=4, batch=1, context=128)
    cfg = json.loads((Path(rl.__file__).parent / "presets" / "deepseek-r1.json").read_text())
    with pytest.raises(rl.SpecError, match="first_k_dense_replace.*leaves no MoE layer"):
        rl.model_from_hf_config({**cfg, "first_k_dense_replace": 100})
    spec = (Path(rl.__file__).parents[1] / "hardware_specs" / "corsair.toml").read_text()
    tiers = spec.split("[[memory]]")
    swapped = tmp_path / "corsair.toml"
    swapped.write_text(tiers[0] + "[[memory]]" + tiers[2].rstrip() + "\n\n[[memory]]" + tiers[1])
    with pytest.raises(rl.SpecError, match="listed fastest first"):
        rl.load_device(str(swapped))
    llama = json.loads((Path(rl.__file__).parent / "presets" / "llama-3.1-8b.json").read_text())
    for group, fmt in (("128", "int4-g128"), (None, "int4-g128")):
        quant = {"quant_method": "awq", "bits": 4, **({"group_size": group} if group else {})}
        assert rl.model_from_hf_config({**llama, "quantization_config": quant}).checkpoint_weight_format == fmt
    odd = rl.model_from_hf_config({**llama, "quantization_config": {"quant_method": "gptq", "bits": 4,
                                                                    "group_size": "a lot"}})
    assert odd.checkpoint_weight_format is None and odd.unread_quantization


def test_format_records_are_taken_wherever_formats_are():
    """A result's Formats passed back into a call (target_formats=r.target_formats, size(formats=...)), and a
    Format where a name is expected, run as their names do (they were refused as 'not a mapping' / 'not a
    string')."""
    import json

    import numpy as np
    req = rl.Request(input_tokens=100, output_tokens=10)
    place = rl.Placement.build("x", decode="h100-sxm")
    r = rl.evaluate_serving("llama-3.1-8b", place, req, batch=4, target_formats={"weights": "fp8"})
    again = rl.evaluate_serving("llama-3.1-8b", place, req, batch=4, target_formats=r.target_formats)
    assert again.target_formats == r.target_formats and np.array_equal(again.tpot_s, r.tpot_s)
    step = rl.decode_step("llama-3.1-8b", "h100-sxm", batch=1, context=128, weights=rl.get_format("fp8"))
    assert step.formats.weights == "fp8" and step.formats == rl.decode_step(
        "llama-3.1-8b", "h100-sxm", batch=1, context=128, weights="fp8").formats
    m = rl.load_model("llama-3.1-8b")
    assert m.kv_cache_bytes_per_token(rl.get_format("bf16")) == m.kv_cache_bytes_per_token("bf16")
    target = rl.Target(users=10, min_tokens_per_s_per_user=30, request=req)
    option = rl.size(m, ["h100-sxm"], target, formats=rl.Formats(weights="fp8"))[0]
    assert option.formats["weights"] == "fp8"   # and it gives to_dict() as the other result records do
    assert json.loads(json.dumps(option.to_dict()))["target_formats"]["weights"] == "fp8"
