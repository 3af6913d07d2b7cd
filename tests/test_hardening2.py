"""Nothing lost, nothing wrong (issue 52): outputs never overwrite inputs, files are written whole with the
usual permissions, specs edited in a running process are read again, conflicting what-ifs are refused."""

import os
import re
import stat

import pytest

from roofline.errors import RooflineError

# ------------------------------------------------------------------ 1. outputs that are inputs


@pytest.mark.parametrize("argv", [
    ["validate", "--data", "{m}", "--plot", "{m}"],
    ["validate", "--data", "{m}", "--plot", "{link}"],
    ["calibrate", "--data", "{m}", "--out", "{m}"],
    ["calibrate", "--data", "{m}", "--out", "{link}"],
    ["stage", "llama-3.1-8b", "{spec}:2", "--plot", "{spec}"],
    ["validate", "--data", "{m}", "--profile", "{prof}", "--plot", "{prof}"],
])
def test_an_output_that_is_an_input_is_refused(run_cli, tmp_path, argv):
    m = tmp_path / "m.csv"
    m.write_text("measurements\n")
    (tmp_path / "m.png").symlink_to(m)
    spec, prof = tmp_path / "dev.toml", tmp_path / "p.toml"
    spec.write_text("x")
    prof.write_text("x")
    names = {"m": str(m), "link": str(tmp_path / "m.png"), "spec": str(spec), "prof": str(prof)}
    before = {p: p.read_bytes() for p in (m, spec, prof)}
    code, out, err = run_cli(*[a.format(**names) for a in argv])
    assert code == 1 and "is an input of this command" in err and "Traceback" not in err, err
    assert {p: p.read_bytes() for p in before} == before


def test_calibrate_cannot_overwrite_the_shipped_measurements(run_cli):
    from roofline.evidence.validate import shipped_data
    before = shipped_data().read_bytes()
    code, _, err = run_cli("calibrate", "--out", str(shipped_data()))
    assert code == 1 and "is an input" in err
    assert shipped_data().read_bytes() == before


def test_a_write_that_fails_part_way_leaves_the_old_file(tmp_path):
    from roofline.specs.files import write_atomic
    out = tmp_path / "plot.png"
    out.write_bytes(b"old plot")

    def half(tmp):
        with open(tmp, "wb") as f:
            f.write(b"trunc")
        raise OSError(28, "No space left on device")
    with pytest.raises(RooflineError, match="No space left"):
        write_atomic(out, half)
    assert out.read_bytes() == b"old plot"
    assert [p.name for p in tmp_path.iterdir()] == ["plot.png"]


def test_profiles_keep_the_umask_write_through_symlinks_and_refuse_fifos(tmp_path):
    from roofline.specs.files import TMP_MARK, write_text_atomic
    old = os.umask(0o022)
    try:
        write_text_atomic(tmp_path / "p.toml", "a = 1\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "p.toml").stat().st_mode) == 0o644   # not a private 0600 file
    (tmp_path / "p.toml").chmod(0o640)
    write_text_atomic(tmp_path / "p.toml", "a = 2\n")
    assert stat.S_IMODE((tmp_path / "p.toml").stat().st_mode) == 0o640   # a replaced file keeps its mode
    (tmp_path / "link.toml").symlink_to("p.toml")
    write_text_atomic(tmp_path / "link.toml", "a = 3\n")
    assert (tmp_path / "link.toml").is_symlink() and (tmp_path / "p.toml").read_text() == "a = 3\n"
    os.mkfifo(tmp_path / "fifo.toml")
    with pytest.raises(RooflineError, match="not a regular file"):
        write_text_atomic(tmp_path / "fifo.toml", "a = 4\n")
    assert stat.S_ISFIFO((tmp_path / "fifo.toml").stat().st_mode)
    with pytest.raises(RooflineError, match="not a regular file"):
        write_text_atomic("/dev/null", "a = 5\n")
    # a SIGKILLed writer's temporary file (its pid is gone) is removed by the next write
    stale = tmp_path / f".p.toml{TMP_MARK}{2**22 + 12345}"
    stale.write_text("half")
    write_text_atomic(tmp_path / "p.toml", "a = 6\n")
    assert not stale.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo.toml", "link.toml", "p.toml"]


def test_calibrate_out_refuses_a_fifo_before_fitting(run_cli, tmp_path):
    os.mkfifo(tmp_path / "p.toml")
    code, _, err = run_cli("calibrate", "--out", str(tmp_path / "p.toml"))
    assert code == 1 and "not a regular file" in err


# ------------------------------------------------------------------ 2. a spec file edited while the process runs


def test_an_edited_spec_file_is_read_again(tmp_path):
    import roofline as rl
    from roofline.specs.devices import load_device, specs_dir
    spec = tmp_path / "h100-sxm.toml"
    text = (specs_dir() / "h100-sxm.toml").read_text()
    spec.write_text(text)
    fast = rl.decode_step("llama-3.1-8b", str(spec), batch=1, context=1024).time_s
    assert load_device(str(spec)) is load_device(str(spec))   # unchanged: remembered
    spec.write_text(text.replace('value = "3.35 TB/s"', 'value = "0.5 TB/s"'))
    os.utime(spec, ns=(spec.stat().st_atime_ns, spec.stat().st_mtime_ns + 10**9))
    assert load_device(str(spec)).memory[0].bandwidth_bytes_per_s == 0.5e12
    slow = rl.decode_step("llama-3.1-8b", str(spec), batch=1, context=1024).time_s
    assert float(slow) > 5 * float(fast)


def test_a_symlink_loop_is_a_spec_error(tmp_path):
    from roofline.errors import SpecError
    from roofline.specs.devices import load_device
    (tmp_path / "a.toml").symlink_to(tmp_path / "b.toml")
    (tmp_path / "b.toml").symlink_to(tmp_path / "a.toml")
    with pytest.raises(SpecError, match="a.toml"):
        load_device(str(tmp_path / "a.toml"))


# ------------------------------------------------------------------ 3. one field set twice under two names


def test_conflicting_what_ifs_under_two_names_of_a_device_are_refused(run_cli):
    code, out, err = run_cli("stage", "llama-3.1-8b", "h100", "--set", "h100.hbm.bandwidth=6TB/s",
                             "--set", "h100-sxm.hbm.bandwidth=1TB/s")
    assert code == 1 and "different values" in err and "h100-sxm.hbm.bandwidth=1TB/s" in err, err
    code, out, err = run_cli("stage", "llama-3.1-8b", "h100", "--set", "h100.hbm.bandwidth=6TB/s",
                             "--set", "h100-sxm.hbm.bandwidth=6 TB/s")   # the same value twice: no conflict
    assert code == 0, err


# ------------------------------------------------------------------ 4. KV stays where engines keep it (GB200)


def _gb200_holding_everything_in_lpddr():
    import attrs

    from roofline.specs.devices import load_device
    dev = load_device("gb200")
    return attrs.evolve(dev, memory=[attrs.evolve(t, holds=("weights", "kv", "workspace")) for t in dev.memory])


def test_gb200_keeps_the_kv_cache_in_hbm_and_throughput_does_not_collapse_while_fitting():
    import numpy as np

    import roofline as rl
    batch = np.arange(8, 2049, 8)
    r = rl.decode_step("llama-3.1-70b", "gb200:4", batch=batch, context=8192, on_infeasible="nan")
    fits = np.asarray(r.fits)
    assert fits[0] and not fits[-1]
    tps = np.asarray(r.tokens_per_s)[fits]
    assert np.all(np.diff(tps) >= -1e-9 * tps[:-1])   # more sequences never lower the total rate while they fit
    assert "lpddr" not in r.memory_by_tier_s or not np.any(np.asarray(r.memory_by_tier_s["lpddr"])[fits] > 0)
    assert int(fits.sum()) * 8 <= int(rl.max_batch("llama-3.1-70b", "gb200:4", context=8192)) < (fits.sum() + 1) * 8
    assert set(np.asarray(r.bound)[fits]) <= {"memory:hbm", "compute"}


def test_bound_names_the_tier_that_binds():
    import numpy as np

    import roofline as rl
    from roofline.specs.groups import DeviceGroup
    dev = _gb200_holding_everything_in_lpddr()   # a device whose KV may spill into its slow tier
    group = DeviceGroup(device=dev, tp=4)
    r = rl.decode_step("llama-3.1-70b", group, batch=[64, 400], context=8192)
    lp, hbm = (np.asarray(r.memory_by_tier_s[t]) for t in ("lpddr", "hbm"))
    assert lp[1] > hbm[1] and list(r.bound) == ["memory:hbm", "memory:lpddr"]


# ------------------------------------------------------------------ 5. user strings are shown, never obeyed

GOOD_ROW = ("A1,https://x,gpt-fast,h100-sxm,1,1,,1,llama-3.1-8b,bf16,,bf16,1,static,5,200,none,0,,"
            "decode_tokens_per_s_per_user,150,A,")
EVIL = "[/bold][red]\x1b[31mEVIL"


def _evil_spec(tmp_path):
    from roofline.specs.devices import specs_dir
    spec = tmp_path / "h100-sxm.toml"
    text = (specs_dir() / "h100-sxm.toml").read_text()
    spec.write_text(text.replace('name = "NVIDIA H100 SXM', 'name = "[/bold][red]\\u001b[31mEVIL', 1))
    return spec


@pytest.mark.parametrize("fmt", [[], ["--csv"]])
def test_markup_and_escapes_in_user_strings_are_shown_as_written(run_cli, tmp_path, fmt):
    from conftest import write_rows
    spec = _evil_spec(tmp_path)
    data = write_rows(tmp_path / "m.csv", GOOD_ROW.replace("A1,", '"' + EVIL + '",'))
    for argv in (["show", str(spec)], ["stage", "llama-3.1-8b", str(spec)], ["compare", "llama-3.1-8b", str(spec)],
                 ["pareto", "--target", "llama-3.1-8b", "--placement", "[/bold]x: decode=h100"],
                 ["validate", "--data", str(data), "--rows", "all"]):
        code, out, err = run_cli(*argv, *fmt)
        assert code == 0, (argv, err)
        assert "\x1b" not in out + err, argv
    code, out, _ = run_cli("validate", "--data", str(data), "--rows", "all", *fmt)
    assert "[/bold][red]\\x1b[31mEVIL" in out.replace("\n", "")


def _quantized(tmp_path, bits):
    import json

    from roofline.specs.hf_config import presets_dir
    cfg = json.loads((presets_dir() / "llama-3.1-8b.json").read_text())
    d = tmp_path / f"q{len(bits)}"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({**cfg, "quantization_config": {"quant_method": "gptq", "bits": bits}}))
    return str(d)


def test_odd_files_and_numbers_are_one_line_errors(run_cli, tmp_path):
    from conftest import validation_header
    (tmp_path / "deep.toml").write_text("a = " + "[" * 1000 + "]" * 1000 + "\n")
    (tmp_path / "deep_profile.toml").write_text("[params]\nx = " + "[" * 1000 + "]" * 1000 + "\n")
    (tmp_path / "tp0.csv").write_text(validation_header() + GOOD_ROW.replace("h100-sxm,1,1,", "h100-sxm,1,0,") + "\n")
    (tmp_path / "loop.toml").symlink_to(tmp_path / "loop.toml")
    cases = [
        (["show", str(tmp_path / "deep.toml")], 1, "nested too deeply"),
        (["stage", "llama-3.1-8b", "h100", "--profile", str(tmp_path / "deep_profile.toml")], 1, "nested too deeply"),
        (["stage", _quantized(tmp_path, "²"), "h100"], 1, "not one roofline reads"),
        (["stage", _quantized(tmp_path, "--4"), "h100"], 1, "not one roofline reads"),
        (["validate", "--data", str(tmp_path / "tp0.csv")], 1, "column tp = '0'"),
        (["show", str(tmp_path / "loop.toml")], 1, "loop.toml"),
        (["stage", "llama-3.1-8b", str(tmp_path / "loop.toml")], 1, "loop.toml"),
        (["show", "x" * 300], 1, "neither a device nor a model"),
        (["stage", "x" * 300, "h100"], 1, "unknown model"),
        (["diagnose", "llama-3.1-8b", "h100", "--batch", "1", "--isl", "5", "--osl", "5", "--tpot-ms", "1e308"], 1,
         "not a measurement"),
        (["validate", "--jobs", "99999999999999999999"], 2, "--jobs"),
        (["calibrate", "--jobs", "0"], 2, "--jobs"),
    ]
    for argv, code, needle in cases:
        got, _, err = run_cli(*argv)
        assert got == code and needle in err, (argv, got, err)
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, (argv, err)


def test_a_csv_with_carriage_returns_only_is_read(tmp_path):
    from conftest import validation_header

    from roofline.evidence.validate import read_rows
    p = tmp_path / "cr.csv"
    p.write_bytes((validation_header() + GOOD_ROW + "\n").replace("\n", "\r").encode())
    assert [r.id for r in read_rows(p)] == ["A1"]


@pytest.mark.parametrize("argv,needle", [
    (["stage", "llama-3.1-8b", "h100", "--batch", "\u0663"], "--batch"),              # Arabic-Indic 3
    (["stage", "llama-3.1-8b", "h100", "--context", "\u0668k"], "--context"),
    (["stage", "llama-3.1-8b", "h100", "--set", "h100.hbm.bandwidth=\u0663TB/s"], "cannot read a number"),
    (["diagnose", "llama-3.1-8b", "h100", "--batch", "1", "--isl", "5", "--osl", "5", "--tpot-ms", "\u0669"], "--tpot-ms"),
    (["stage", "llama-3.1-8b", "b200:8X2"], "ID:TPxPP"),
    (["show", "h100\n"], "neither a device nor a model"),
    (["stage", "llama-3.1-8b", "h100\n"], "unknown device"),
    (["stage", "llama-3.1-8b\n", "h100"], "unknown model"),
    (["stage", "llama-3.1-8b", "h100", "--weights", ""], "empty format name"),
    (["stage", "llama-3.1-8b", "h100", "--kv", " "], "empty format name"),
    (["stage", "llama-3.1-8b", "h100", "--experts", "fp8"], "dense"),
    # --experts names the routed experts' format: on a dense model it means nothing, even equal to the weights'
    (["stage", "llama-3.1-8b", "h100", "--experts", "bf16"], "dense"),
    (["size", "llama-3.1-8b", "--devices", "h100", "--users", "1", "--min-tokens-per-s-per-user", "1",
      "--experts", "bf16", "--weights", "bf16"], "dense"),
    (["spec", "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b", "--verify-on", "h100", "--alpha", "0.8",
      "--experts", "bf16"], "dense"),
    (["pareto", "--target", "llama-3.1-8b", "--placement", "a: decode=h100", "--usd-per-kwh", "1e20"], "per kWh"),
    (["pareto", "--target", "llama-3.1-8b", "--placement", "a: decode=h100", "--usd-per-device-hour", "h100=1e9"],
     "device-hour"),
    (["pareto", "--target", "llama-3.1-8b", "--placement", " : decode=h100"], "needs a name"),
    (["pareto", "--target", "llama-3.1-8b", "--placement", "a: decode=h100", "--placement", "a : decode=h100:2"],
     "given more than once"),
])
def test_silent_accepts_are_refused(run_cli, argv, needle):
    code, out, err = run_cli(*argv)
    assert code in (1, 2) and needle in err, (argv, code, err)
    assert len(err.strip().splitlines()) == 1


def test_a_grid_larger_than_memory_is_refused_with_its_size(monkeypatch):
    import numpy as np

    import roofline as rl
    from roofline import workload
    from roofline.errors import WorkloadError
    monkeypatch.setattr(workload, "usable_memory_bytes", lambda: 1e9)
    with pytest.raises(WorkloadError, match=r"10,000,000 points needs about 12 GB"):
        rl.speculative_round("gpt-oss-120b", verify_on="b200:8", draft="gpt-oss-draft-1.6b", acceptance=0.9,
                             gamma=np.arange(1000)[None, :], batch=np.arange(1, 10_001)[:, None])


def test_public_functions_name_the_argument_they_cannot_take():
    from concurrent.futures import Executor

    import roofline as rl
    from roofline.errors import WorkloadError

    class Broken(Executor):
        def submit(self, fn, *args, **kwargs):
            raise RuntimeError("the pool is broken")

    def boom(done, total):
        raise ValueError("no terminal")

    sweep = dict(model="llama-3.1-8b", devices=["h100"], batch=[1, 8], context=[128])
    target = rl.Target(users=10, min_tokens_per_s_per_user=20, request=rl.Request(input_tokens=100, output_tokens=100))
    cases = [
        (lambda: rl.decode_step("llama-3.1-8b", "h100", batch=[[1, 2], [3]], context=128), "batch"),
        (lambda: rl.expected_tokens([[0.1, 0.2], [0.3]], 4), "alpha"),
        (lambda: rl.optimal_gamma_closed_form([[0.1], []], 0.1), "alpha"),
        (lambda: rl.get_format(["bf16"]), "format"),
        (lambda: rl.parse_quantity("3 TB/s", ["bytes_per_s"]), "kind"),
        (lambda: rl.override("h100", None, "3TB/s"), "path"),
        (lambda: rl.load_profile(None), "path"),
        (lambda: rl.family_profile(["gpu"]), "family"),
        (lambda: rl.resolve_profile("h100"), "device"),
        (lambda: rl.sweep(**sweep, executor=Broken()), "executor"),
        (lambda: rl.sweep(**sweep, progress=boom), "progress"),
        (lambda: rl.sweep(**sweep, objective=None), "objective"),
        (lambda: rl.sweep(**{**sweep, "devices": None}), "devices"),
        (lambda: rl.sweep(**sweep, power="x"), "power"),
        (lambda: rl.size("llama-3.1-8b", None, target), "devices"),
        (lambda: rl.size("llama-3.1-8b", ["h100"], target, prices={"h100": 2}), "prices"),
        (lambda: rl.size("llama-3.1-8b", ["h100"], target, confidence="high"), "confidence"),
        (lambda: rl.speculative_round("gpt-oss-120b", verify_on="b200:8", draft="gpt-oss-draft-1.6b", acceptance=0.9,
                                      gamma=4, power=None), "power"),
        (lambda: rl.Placement(name="", decode=rl.resolve_group("h100")), "name"),
    ]
    for call, name in cases:
        with pytest.raises(RooflineError, match=name):
            call()
    with pytest.raises(WorkloadError, match="progress"):
        rl.sweep(**sweep, progress=boom)


# ------------------------------------------------------------------ 6. signals: exit statuses, workers, temporaries


def _children(pid):
    out = []
    for d in os.listdir("/proc"):
        try:
            with open(f"/proc/{d}/stat") as f:
                if d.isdigit() and int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(d))
        except (OSError, ValueError):
            continue
    return out


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not os.path.isdir("/proc/self") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs Linux's /proc and two cores (one worker beside the command)")
@pytest.mark.parametrize("sig,code", [("SIGTERM", 143), ("SIGINT", 130), ("SIGKILL", -9)])
def test_a_signal_ends_validate_and_its_workers_without_a_traceback(sig, code):
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    p = subprocess.Popen([sys.executable, "-m", "roofline", "validate", "--jobs", "2"], cwd=root,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        start, kids = time.time(), []
        while not kids and time.time() - start < 60 and p.poll() is None:
            time.sleep(0.2)
            kids = _children(p.pid)
        assert kids, "no worker started"
        time.sleep(1.0)   # the worker at work
        p.send_signal(getattr(signal, sig))
        _, err = p.communicate(timeout=60)
    finally:
        p.kill()
    assert p.returncode == code and "Traceback" not in err, (p.returncode, err)
    deadline = time.time() + 10
    while any(map(_alive, kids)) and time.time() < deadline:
        time.sleep(0.2)
    assert not any(map(_alive, kids)), "a worker outlived the command"


def test_a_write_ended_by_sigterm_leaves_no_temporary_file(tmp_path):
    from roofline.specs.files import write_atomic
    from roofline.ui.cli import Terminated

    def killed(tmp):
        with open(tmp, "w") as f:
            f.write("half a profile")
        raise Terminated
    with pytest.raises(Terminated):
        write_atomic(tmp_path / "p.toml", killed)
    assert list(tmp_path.iterdir()) == []


def test_jobs_are_capped_at_the_rows_and_the_cores():
    from roofline.evidence.workers import cap_jobs, usable_cores
    assert cap_jobs(200, 5) == min(5, usable_cores()) and cap_jobs(3, 1) == 1
    assert cap_jobs(10**20, 10**9) == usable_cores()


# ------------------------------------------------------------------ 7. the terminal: names whole, calibrate's progress


def test_names_are_never_broken_at_80_columns():
    import io

    from rich.console import Console

    import roofline as rl
    from roofline.ui.cli import main

    def table(width, *argv):
        buf = io.StringIO()
        main(list(argv), console=Console(file=buf, width=width, color_system=None), err_console=Console(file=io.StringIO()))
        return buf.getvalue()
    for argv in (["validate", "--rows", "40"],
                 ["size", "qwen3-235b-a22b", "--devices", "b200,h200-sxm", "--users", "100",
                  "--min-tokens-per-s-per-user", "20"]):
        wide, narrow = table(250, *argv), table(80, *argv)
        whole = [rf"(?<![\w.-]){re.escape(m)}(?![\w.-])" for m in [*rl.list_models(), *rl.list_devices()]]
        names = [w for w in whole if re.search(w, wide)]
        assert names
        for w in names:
            assert re.search(w, narrow), (argv, w)


def test_calibrate_says_how_long_and_shows_progress_on_stderr(run_cli, monkeypatch, capsys):
    from roofline.ui.cli import build_parser
    from roofline.ui.commands import evidence
    with pytest.raises(SystemExit):
        build_parser().parse_args(["calibrate", "--help"])
    assert "12-25 minutes" in " ".join(capsys.readouterr().out.split())

    def fake(rows, *, progress, **kw):
        progress(3, 7, "fitting fold 3")
        raise RooflineError("stopped here")
    monkeypatch.setattr(evidence, "calibrate", fake)
    monkeypatch.setenv("FORCE_COLOR", "1")
    code, out, err = run_cli("calibrate", "--json")
    captured = capsys.readouterr()
    assert code == 1 and "stopped here" in err
    assert "fitting fold 3" in captured.err and "fitting" not in out


# ------------------------------------------------------------------ Ctrl-C at any point (issue 52's leftover)
def test_the_command_is_recognised_from_how_python_was_started():
    import sys

    from roofline.startup import is_the_command
    assert is_the_command(["python3", "-m", "roofline", "devices"])
    assert is_the_command(["/usr/bin/python3", "/venv/bin/roofline", "spec", "--json"])
    assert is_the_command(["python", "C:\\venv\\Scripts\\roofline.exe"]) or sys.platform != "win32"
    assert not is_the_command(["python3", "-m", "pytest", "tests"])
    assert not is_the_command(["python3", "my_roofline_study.py"])
    assert not is_the_command(["python3", "-c", "import roofline"])


def test_ctrl_c_while_the_command_imports_is_one_line_and_130():
    """SIGINT before `main` runs (roofline/__init__.py imports most of the package first) printed a
    KeyboardInterrupt traceback; the command's start now says one line and exits 130. Deterministic: the
    process takes the command's start (``sys.orig_argv``), installs the guard and interrupts itself."""
    import subprocess
    import sys
    code = ("import os, signal, sys, time; import roofline.startup as s; sys.orig_argv = [sys.executable, '-m', "
            "'roofline']; s.guard(); os.kill(os.getpid(), signal.SIGINT); time.sleep(30)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 130 and p.stderr == "roofline: interrupted\n", (p.returncode, p.stderr)


def test_a_program_importing_roofline_keeps_its_keyboard_interrupt():
    import signal

    import roofline  # noqa: F401
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_ctrl_c_inside_a_command_is_one_line_and_130(monkeypatch):
    import io

    from rich.console import Console

    from roofline.ui import cli
    from roofline.ui.commands import inspect

    def interrupted(args, console):
        raise KeyboardInterrupt
    monkeypatch.setattr(inspect, "cmd_devices", interrupted)
    err = io.StringIO()
    assert cli.main(["devices"], console=Console(file=io.StringIO()), err_console=Console(file=err)) == 130
    assert err.getvalue() == "roofline: interrupted\n"


def test_placements_figures_are_never_broken_in_a_narrow_terminal():
    """In 100 columns the placement's long name wraps, never its figures (they were split a character a line)."""
    import io

    from rich.console import Console

    from roofline.ui.cli import main

    def table(width):
        buf = io.StringIO()
        main(["placements", "--target", "gpt-oss-120b", "--devices", "b200,h100-sxm,corsair", "--draft",
              "gpt-oss-draft-1.6b", "--alpha", "0.926"], console=Console(file=buf, width=width, color_system=None),
             err_console=Console(file=io.StringIO()))
        return buf.getvalue()
    wide, narrow = table(250), table(100)
    row = next(line for line in wide.splitlines() if line.startswith("decode b200, prefill on the decode group, draft"))
    figures = re.findall(r"(?<![\w.,])[\d][\d,]*(?:\.\d+)?(?![\w.,])", row.split("group")[-1])
    assert len(figures) >= 6
    for f in figures:
        assert re.search(rf"(?<![\w.,]){re.escape(f)}(?![\w.,])", narrow), f
