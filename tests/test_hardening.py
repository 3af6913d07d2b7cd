"""Bad input everywhere: typed errors in Python, one line and a non-zero exit in the CLI, never a wrong number."""


import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import roofline as rl
from roofline.errors import RooflineError
from roofline.serving.serve import Placement, Request, evaluate_serving

# ------------------------------------------------------------------ CLI matrix
BAD = [
    # unknown ids, with suggestions
    (["show", "h100-sxn"], 1, "did you mean"),
    (["stage", "llama-3.1-8", "h100"], 1, "did you mean"),
    (["stage", "llama-3.1-8b", "h10O"], 1, "did you mean"),
    (["stage", "llama-3.1-8b", "h100", "--weights", "bf61"], 1, "did you mean"),
    (["spec", "--target", "gpt-oss-120b", "--draft", "gpt-oss-draft-1.6b", "--verify-on", "b20:8", "--alpha", "0.9"], 1,
     "did you mean"),
    (["compare", "llama-3.1-8b", "h100", "b2OO"], 1, "did you mean"),
    (["diagnose", "llama-3.1-8b", "h100", "--batch", "1", "--isl", "5", "--osl", "5", "--tokens-per-s", "9",
      "--weights", "fp9"], 1, "did you mean"),
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
      "nan"], 1, "positive finite"),
    # speculation
    (["spec", "--target", "gpt-oss-120b", "--draft", "gpt-oss-draft-1.6b", "--verify-on", "b200:8", "--alpha", "-0.1"],
     1, "alpha must be in [0, 1]"),
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
    with pytest.raises(rl.WorkloadError):
        rl.optimal_gamma(s)
