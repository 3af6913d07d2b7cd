"""The command line: listings, JSON shape, one-line errors with the right exit status."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_hardware_specs import REQUIRED as DEVICES
from test_models import REQUIRED as MODELS

import roofline as rl


def test_devices_json_lists_every_required_id_with_sources(run_cli):
    code, out, _ = run_cli("devices", "--json")
    assert code == 0
    data = json.loads(out)
    ids = {d["id"] for d in data}
    assert set(DEVICES) <= ids
    for d in data:
        # a URL, or our own measurement: a file of this repository, its run and key (hardware_specs/README.md)
        assert d["sources"] and all(u.startswith(("http", "roofline/validation/")) for u in d["sources"].values())


def test_models_json_has_counts(run_cli):
    code, out, _ = run_cli("models", "--json")
    data = {m["id"]: m for m in json.loads(out)}
    assert set(MODELS) <= set(data)
    assert data["gpt-oss-120b"]["total_params"] == pytest.approx(116.83e9, rel=0.01)
    assert data["mixtral-8x7b"]["active_params"] == pytest.approx(12.9e9, rel=0.01)


def test_tables_render(run_cli):
    for args in (("devices",), ("models",), ("show", "h100"), ("show", "gpt-oss-120b")):
        code, out, err = run_cli(*args)
        assert code == 0 and not err
    assert "hbm.bandwidth" in run_cli("show", "h200-sxm")[1]
    assert "experts" in run_cli("show", "deepseek-r1")[1]


def test_show_accepts_paths(run_cli, tmp_path):
    from roofline.specs.devices import specs_dir
    code, out, _ = run_cli("show", str(specs_dir() / "corsair.toml"), "--json")
    assert code == 0 and json.loads(out)["id"] == "corsair"


@pytest.mark.parametrize("args,code,needle", [
    (("show", "h10"), 1, "neither a device nor a model"),
    (("frobnicate",), 2, "invalid choice"),
    (("devices", "--bogus"), 2, "unrecognized arguments"),
    (("show", "/no/such/file.toml"), 1, "no such file"),
    (("show", "h100-sxm:4"), 2, "is a device group; show takes one device or model: roofline show h100-sxm"),
    (("placements", "--target", "llama-3.1-70b", "--devices", "b200,h100-sxm:4"), 2,
     "--devices h100-sxm:4: placements sizes each stage's group itself"),
])
def test_errors_are_one_line(run_cli, args, code, needle):
    got, out, err = run_cli(*args)
    assert got == code
    assert needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_bad_spec_file_one_line_no_traceback(tmp_path):
    bad = tmp_path / "h100-sxm.toml"
    bad.write_text('schema = 1\nid = "h100-sxm"\n')
    p = subprocess.run([sys.executable, "-m", "roofline", "show", str(bad)], capture_output=True, text=True)
    assert p.returncode == 1
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert str(bad) in p.stderr


def test_reader_going_away_is_quiet():
    """`roofline models | head -1`: the pipe closes under the writer. No traceback and no message; the
    status is the shell's SIGPIPE one (141), not 1, which means bad input."""
    p = subprocess.Popen([sys.executable, "-m", "roofline", "models"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    p.stdout.close()   # before the child writes its first line
    err = p.stderr.read()
    assert p.wait(timeout=60) == 141, err
    assert err == ""


@pytest.mark.parametrize("form", ["--json", "--csv"])
def test_reader_going_away_part_way_through_json_or_csv_is_not_success(form):
    """`roofline stage ... --json | head -c 10`: a reader that leaves after the first bytes of megabytes of JSON
    or CSV. The rest cannot be written, so the status is SIGPIPE's 141, not 0 (one large write used to lose the
    tail quietly), and nothing is said on stderr."""
    batches = ",".join(map(str, range(1, 3001)))
    p = subprocess.Popen([sys.executable, "-m", "roofline", "stage", "llama-3.1-8b", "h100-sxm", "--batch", batches,
                          form], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert len(p.stdout.read(10)) == 10
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 141, err
    assert err == ""


def test_help_does_not_import_heavy_modules():
    code = ("import sys, roofline.ui.cli as c\n"
            "try:\n    c.main(['--help'])\nexcept SystemExit:\n    pass\n"
            "heavy = [m for m in ('sympy', 'scipy', 'matplotlib') if m in sys.modules]\n"
            "assert not heavy, heavy")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


def test_stage_command_matches_python_api(run_cli):
    import numpy as np

    import roofline as rl
    code, out, err = run_cli("stage", "gpt-oss-120b", "h200-sxm", "--batch", "1,64,256", "--context", "8192", "--json")
    assert code == 0, err
    data = json.loads(out)
    decode = next(s for s in data["stages"] if s["stage"] == "decode")
    api = rl.decode_step("gpt-oss-120b", "h200-sxm", batch=np.array([1, 64, 256]), context=8192)
    for row, t, fits, bound in zip(decode["rows"], api.time_s, api.fits, api.bound):
        assert row["fits"] == bool(fits) and row["bound"] == bound
        assert (row["time_s"] is None and not fits) or row["time_s"] == pytest.approx(float(t))
    assert decode["formats"]["experts"] == "mxfp4"
    assert data["device"] == "h200-sxm" and data["group"] == "h200-sxm"
    code, out, _ = run_cli("stage", "llama-3.1-70b", "h100-sxm:4", "--batch", "1", "--json")
    assert code == 0 and json.loads(out)["group"] == "h100-sxm:4"   # the group, not only its device
    code, out, _ = run_cli("stage", "gpt-oss-120b", "h200-sxm", "--batch", "1,64,256", "--context", "8192")
    assert code == 0 and "decode" in out and "prefill" in out
    from roofline.ui.render_common import short_bound
    for bound in {str(b) for b in api.bound}:   # the table shows each bound, abbreviated
        assert short_bound(bound) in out
    from roofline.specs.params import shipped_profile
    half = shipped_profile().default.compute_half_tokens   # small matmuls' shortfall, said with its size
    said = " ".join(out.split())
    assert ("times T / (T + " in said) == (half >= 0.5)     # a size that rounds to 0 tokens is not said
    if half >= 0.5:
        assert f"times T / (T + {half:.0f}) for a matmul over T tokens" in said
    code, out, _ = run_cli("stage", "gpt-oss-120b", "h200-sxm", "--batch", "1", "--set",
                           "h200-sxm.execution.compute_half_tokens=64")
    assert "times T / (T + 64) for a matmul over T tokens" in " ".join(out.split())
    assert "bound mem:, comm there: memory:, communication" in said   # table -> JSON names
    assert said.count("Spec: ") == 1 and said.index("Spec: ") > said.index("decode:")   # once, under the last stage


def test_stage_what_if_set(run_cli):
    def decode_time(*extra):
        code, out, err = run_cli("stage", "llama-3.1-8b", "h100", "--batch", "1", "--json", *extra)
        assert code == 0, err
        return json.loads(out)["stages"][1]["rows"][0]["time_s"]
    assert decode_time("--set", "h100.hbm.bandwidth=6.7TB/s") < decode_time()


@pytest.mark.parametrize("args,code,needle", [
    (("stage", "gpt-oss-120b", "h200-sxm", "--weights", "fp9"), 2, "unknown format 'fp9'"),   # as a bad --stack
    (("stage", "gpt-oss-120b", "h200-sxm", "--batch", "-4"), 2, "--batch: must be >= 1, got -4"),
    (("stage", "gpt-oss-120b", "h200-sxm", "--batch", "x"), 2, "--batch"),
    (("stage", "llama-3.1-70b", "h100-sxm", "--batch", "1"), 1, "does not fit on h100-sxm"),
    (("stage", "llama-3.1-8b", "h100-sxm", "--tp", "0"), 2, "must be >= 1"),
    (("stage", "llama-3.1-8b", "h100-sxm", "--set", "h100.hbm.bandwidth"), 2, "ID.FIELD=VALUE"),
    (("stage", "llama-3.1-8b", "h100-sxm", "--set", "h100.hbm.bandwidth=fast"), 1, "cannot read a number"),
    (("stage", "nope-7b", "h100-sxm"), 1, "unknown model"),
])
def test_stage_errors_one_line(run_cli, args, code, needle):
    got, out, err = run_cli(*args)
    assert got == code, err
    assert needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_stage_roofline_plot(run_cli, tmp_path, monkeypatch):
    """With the plot extra the chart is written; without it the command says so before computing anything
    (`validate --plot` would otherwise spend its whole run first)."""
    out = tmp_path / "roofline.png"
    code, _, err = run_cli("stage", "llama-3.1-8b", "h100", "--batch", "1,64", "--plot", str(out))
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert code == 1 and "pip install 'roofline[plot]'" in err
        from roofline.ui.commands import evidence
        monkeypatch.setattr(evidence, "validate", lambda *a, **k: pytest.fail("validated before the plot check"))
        code, _, err = run_cli("validate", "--plot", str(tmp_path / "v.png"))
        assert code == 1 and "--plot needs matplotlib: pip install 'roofline[plot]'" in err
    else:
        assert code == 0 and out.stat().st_size > 1000


def test_roofline_plot_marks_batches_that_do_not_fit(tmp_path, monkeypatch):
    """A batch that does not fit is drawn (a red x) and named in the legend, not silently dropped."""
    pytest.importorskip("matplotlib")
    from roofline.ui import plot
    labels = []
    real = plot._save

    def spy(fig, path):
        labels.extend(t.get_text() for ax in fig.axes for t in ax.get_legend().get_texts())
        real(fig, path)
    monkeypatch.setattr(plot, "_save", spy)
    r = rl.decode_step("gpt-oss-120b", "h200-sxm", batch=np.array([1, 64, 256]), context=8192, on_infeasible="nan")
    plot.plot_roofline(rl.load_device("h200-sxm"), [r], str(tmp_path / "r.png"))
    assert any("batch 256 does not fit" in t for t in labels)
    assert any(t.startswith("decode (batch 1, 64)") for t in labels)


def test_devices_table_tells_not_native_from_unpublished(run_cli):
    code, out, _ = run_cli("devices", "--csv")
    assert code == 0
    code, out, _ = run_cli("devices")
    rows = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert "unknown" not in rows["groq-lpu"] and "188 TF" in rows["groq-lpu"]     # bf16 is not native on the LPU
    assert "unknown" in rows["rubin"]                                            # native bf16, rate unpublished
    code, out, _ = run_cli("show", "corsair")
    assert "— (not native)" in out


def _narrow(*argv: str, width: int = 80) -> str:
    """The command's terminal output at ``width`` columns."""
    import io

    from rich.console import Console

    from roofline.ui.cli import main
    buf = io.StringIO()
    assert main(list(argv), console=Console(file=buf, width=width, color_system=None),
                err_console=Console(file=io.StringIO(), width=width, color_system=None)) == 0
    return buf.getvalue()


def test_narrow_terminals_never_cut_numbers_off(run_cli):
    """At 80 columns a wide stage table still shows every number whole (large rates in k/M, never cropped)."""
    args = ("stage", "gpt-oss-draft-1.6b", "corsair:1x2", "--batch", "1,8", "--weights", "mxint8", "--kv", "mxint8",
            "--activations", "mxint8")
    text = _narrow(*args)
    data = json.loads(run_cli(*args, "--json")[1])
    prefill = data["stages"][0]["rows"]
    assert "batch" in text and "compute" in text.split("decode:")[0]
    for row in prefill:
        tps = row["tokens_per_s"]
        shown = f"{tps / 1e6:.3g}M" if tps >= 1e6 else f"{tps / 1e3:.0f}k" if tps >= 1e5 else f"{tps:,.0f}"
        assert shown in text, shown


def test_spec_scan_over_batches_marks_each_batch(run_cli):
    """With several batches the table has a batch column, each batch's fastest gamma is marked, and the
    caption gives each batch's baseline and the what-if applied."""
    args = ("spec", "--target", "gpt-oss-120b", "--draft", "gpt-oss-draft-1.6b", "--draft-on", "corsair:2",
            "--verify-on", "b200:8", "--alpha", "0.926", "--gamma", "1..3", "--batch", "1,64",
            "--set", "corsair.execution.layer_overhead=5us")
    data = json.loads(run_cli(*args, "--json")[1])
    for b in (1, 64):
        mine = [r for r in data["rows"] if r["batch"] == b]
        fastest = max(mine, key=lambda r: r["tokens_per_s_per_user"])
        assert [r["gamma"] for r in mine if r["best"]] == [fastest["gamma"]]
    assert {r["gamma"] for r in data["rows"] if r["best"]} == {3, 1}   # small batch: long drafts; batch 64: short
    text = " ".join(_narrow(*args, width=120).split())
    assert "batch gamma" in text and "batch 1:" in text and "batch 64:" in text
    assert "What-if: corsair.execution.layer_overhead=5us" in text


def test_stage_shows_the_stages_that_fit(run_cli):
    """A prefill that fits at no batch while decode does (a 2k prompt on a Groq pipeline that does not stream it,
    every chip holding the whole prompt's activations) still shows decode, with the prefill's memory shortfall in
    the caption; an out-of-memory message adds up to what it needs."""
    code, out, err = run_cli("stage", "llama-3.1-70b", "groq-lpu:8x41", "--context", "2048", "--weights", "int8",
                             "--kv", "fp16", "--activations", "fp16",
                             "--set", "groq-lpu.execution.prefill_stream_tokens=0")
    assert code == 0, err
    said = " ".join(out.split())
    assert "decode:" in said and "does not fit on 328x groq-lpu (TP8, PP41) for prefill" in said
    code, _, err = run_cli("stage", "llama-3.1-8b", "h100-sxm", "--context", "1M")
    assert code == 1 and "activations and workspace" in err


def test_diagnose_takes_mean_counts(run_cli):
    """Measured runs report mean lengths: --isl takes 1k and 512.4 (not only whole numbers), never -1."""
    base = ("diagnose", "llama-3.1-8b", "h100-sxm", "--batch", "8", "--osl", "512", "--tokens-per-s-per-user", "90")
    for isl in ("1k", "1000", "512.4"):
        assert run_cli(*base, "--isl", isl, "--json")[0] == 0, isl
    a = json.loads(run_cli(*base, "--isl", "1k", "--json")[1])
    b = json.loads(run_cli(*base, "--isl", "1000", "--json")[1])
    assert a == b
    code, _, err = run_cli(*base, "--isl", "-1")
    assert code == 2 and "--isl" in err and len(err.strip().splitlines()) == 1


def test_collectives_leave_the_scale_up_domain_on_the_scale_out_network(run_cli):
    """TP16 of 8-GPU NVLink nodes all-reduces hierarchically: the cross-node part runs on the spec's scale-out
    link (slower network, more comm; a what-if on its bandwidth moves it) and the caption says so; a device whose
    spec has no scale-out link gets a caveat instead; TP8 stays inside the domain."""
    def comm(group, *extra):
        code, out, err = run_cli("stage", "llama-3.1-405b", group, "--batch", "64", "--context", "4096", "--json", *extra)
        assert code == 0, err
        return json.loads(out)["stages"][1]["rows"][0]["communication_s"]
    slow, fast = comm("h200-sxm:16"), comm("h200-sxm:16", "--set", "h200-sxm.scale_out.bandwidth=400GB/s")
    assert slow > fast > 0
    assert comm("h200-sxm:8") == comm("h200-sxm:8", "--set", "h200-sxm.scale_out.bandwidth=400GB/s")
    said = " ".join(run_cli("stage", "llama-3.1-405b", "h200-sxm:16", "--batch", "1")[1].split())
    assert "span scale-up domains of 8" in said and "scale-out network (50 GB/s per device)" in said
    caveat = " ".join(run_cli("stage", "llama-3.1-405b", "mi300x:16", "--batch", "1")[1].split())
    assert "has no scale-out link in its spec" in caveat
    assert "scale-up domain" not in run_cli("stage", "llama-3.1-405b", "h200-sxm:8", "--batch", "1")[1]


def test_a_torus_slice_beyond_max_tp_is_not_called_understated(run_cli):
    """On a TPU the ICI torus joins the whole slice (max_tp is only the profile's default tensor-parallel width):
    a 16-chip v6e slice's caption says its collectives cross the torus's hops (a 4 x 4 slice without wraparound:
    3 + 3 for a reduce-scatter), not that comm is understated for want of a scale-out link."""
    said = " ".join(run_cli("stage", "llama-3.1-70b", "tpu-v6e:16", "--batch", "8")[1].split())
    assert "understated" not in said and "2-axis torus joins the whole slice" in said
    assert "crosses 6 hops (an all-reduce, both: 12)" in said
    assert json.loads(run_cli("stage", "llama-3.1-70b", "tpu-v6e:16", "--batch", "8", "--json")[1])["notes"] == [
        said[said.index("16 devices, more than"):said.index("does not give).") + len("does not give).")]]
    # sixteen pipeline stages of one chip each: no tensor-parallel collective crosses the torus, nothing to say
    assert "torus" not in " ".join(run_cli("stage", "llama-3.1-70b", "tpu-v6e:1x16", "--batch", "8")[1].split())


def test_show_renders_every_shipped_device(run_cli):
    """`roofline show` renders every shipped spec as a table, JSON and CSV (a per-device execution override of a
    count, TPU v6e's m_tile or GB200's max_tp, once crashed the table with an internal error)."""
    for dev in rl.list_devices():
        for fmt in ((), ("--json",), ("--csv",)):
            code, out, err = run_cli("show", dev, *fmt)
            assert code == 0 and out and not err, (dev, fmt, err)


def test_contexts_beyond_the_models_maximum_are_flagged(run_cli):
    """A context past the config's max_position_embeddings still computes (the counts do not depend on it) but the
    caption and the JSON say the model was not built for it; inside the maximum nothing is said."""
    assert rl.load_model("llama-2-7b").max_context_tokens == 4096
    long = " ".join(run_cli("stage", "llama-2-7b", "h100-sxm", "--context", "8k", "--batch", "1")[1].split())
    assert "beyond llama-2-7b's max_position_embeddings (4,096)" in long
    assert "max_position_embeddings" not in run_cli("stage", "llama-2-7b", "h100-sxm", "--context", "4000")[1]
    spec = ("spec", "--target", "gpt-oss-120b", "--draft", "gpt-oss-draft-1.6b", "--verify-on", "b200:8", "--alpha",
            "0.9", "--gamma", "1..3", "--json")
    assert "131,072" in json.loads(run_cli(*spec, "--context", "1M")[1])["notes"]
    assert "max_position_embeddings" not in json.loads(run_cli(*spec)[1])["notes"]


def test_stack_option_runs_the_gpus_with_a_serving_stacks_fit(run_cli):
    from roofline.specs.params import shipped_profile

    def decode(*extra):
        code, out, err = run_cli("stage", "llama-3.1-70b", "h100-sxm:2", "--batch", "1,16", "--context", "2048", "--json",
                                 *extra)
        assert code == 0, err
        data = json.loads(out)
        return data, next(s for s in data["stages"] if s["stage"] == "decode")["rows"]
    default, default_rows = decode()
    assert default["stack"]["name"] == default["stack"]["parameters"] == "vllm"   # the default is a real stack
    pooled, rows = decode("--stack", "pooled")
    assert pooled["stack"]["name"] == "pooled" and pooled["stack"]["parameters"] == "default"
    api = rl.decode_step("llama-3.1-70b", "h100-sxm:2", batch=np.array([1, 16]), context=2048,
                         params=shipped_profile().default)
    assert [r["time_s"] for r in rows] == pytest.approx([float(t) for t in api.time_s])
    times = {}
    for stack, typed in (("tensorrt-llm", "TRT-LLM"), ("vllm", "vLLM"), ("sglang", "sglang")):
        data, rows = decode("--stack", typed)
        assert data["stack"]["name"] == data["stack"]["build"] == data["stack"]["parameters"] == stack
        # the same numbers as the Python API with that stack's parameters (efficiencies, fixed costs, scheduling)
        params = shipped_profile().for_stack(stack, "NVIDIA")
        api = rl.decode_step("llama-3.1-70b", "h100-sxm:2", batch=np.array([1, 16]), context=2048, params=params)
        assert [r["time_s"] for r in rows] == pytest.approx([float(t) for t in api.time_s])
        times[stack] = rows[0]["time_s"]
    assert len({round(t, 9) for t in times.values()}) == 3   # the stacks' fits differ
    assert default_rows[0]["time_s"] == pytest.approx(times["vllm"]) != pytest.approx(rows[0]["time_s"])
    # without --stack an AMD GPU runs the default stack's ROCm build, in the API as on the command line
    code, out, _ = run_cli("stage", "llama-3.1-70b", "mi300x", "--batch", "1", "--json")
    data = json.loads(out)
    rocm = shipped_profile().for_stack("vllm", "AMD", "gfx942")
    api = rl.decode_step("llama-3.1-70b", "mi300x", batch=1, context=1024, params=rocm).time_s
    assert data["stack"]["parameters"] == "vllm-rocm-gfx942"
    assert float(rl.decode_step("llama-3.1-70b", "mi300x", batch=1, context=1024).time_s) == pytest.approx(float(api))
    # an AMD GPU runs the stack's ROCm build for its ISA; without a fitted one, the nearest set, said to be NVIDIA's
    code, out, _ = run_cli("stage", "llama-3.1-70b", "mi300x", "--batch", "1", "--stack", "vllm", "--json")
    note = json.loads(out)["stack"]
    assert code == 0 and note["parameters"] == "vllm-rocm-gfx942" and not note["fitted_on_other_platform"]
    # the record names what the fit's [fit] table says this set leaves open, with the value used and its bound
    # (whichever of the gfx942 builds the shipped fit leaves something open in)
    from roofline.evidence.calibrate import bound_side
    stack = next(s for s in ("vllm", "sglang") if shipped_profile().not_identified(f"{s}-rocm-gfx942"))
    note = json.loads(run_cli("stage", "llama-3.1-70b", "mi300x", "--batch", "1", "--stack", stack, "--json")[1])["stack"]
    loose = shipped_profile().not_identified(f"{stack}-rocm-gfx942")
    params = shipped_profile().families[f"{stack}-rocm-gfx942"]
    assert loose and set(note["not_identified"]) == set(loose)
    for name in loose:
        value = getattr(params, name)
        assert note["not_identified"][name] == {"value": pytest.approx(value), "at_bound": bound_side(name, value)}
    code, out, _ = run_cli("stage", "llama-3.1-70b", "mi355x", "--batch", "1", "--stack", "vllm", "--json")
    note = json.loads(out)["stack"]
    assert code == 0 and (note["build"], note["parameters"], note["fitted_on_other_platform"]) == (
        "vllm-rocm-gfx950", "vllm", True)
    # parameters the calibration's rows do not pin down are named with their value, in the table view and in CSV
    code, out, _ = run_cli("stage", "llama-3.1-8b", "mi355x", "--batch", "1", "--stack", "sglang")
    said = " ".join(out.split())
    assert code == 0 and "sglang-rocm-gfx950 parameter set" in said
    gfx950 = shipped_profile().families["sglang-rocm-gfx950"]
    for name in shipped_profile().not_identified("sglang-rocm-gfx950"):
        value = getattr(gfx950, name)
        side = bound_side(name, value)
        assert f"{name} = {value:.3g}" + (f", at its {side} bound" if side else "") in said
    code, out, _ = run_cli("stage", "llama-3.1-8b", "mi300x", "--batch", "1", "--stack", "vllm", "--csv")
    assert code == 0 and out.splitlines()[0].endswith(",stack") and out.splitlines()[1].endswith(",vllm-rocm-gfx942")
    # every command that predicts takes it; bad uses are one-line usage errors
    assert run_cli("spec", "--target", "llama-3.1-70b", "--draft", "llama-3.1-8b", "--verify-on", "h100-sxm:2",
                   "--alpha", "0.8", "--gamma", "2", "--stack", "vllm")[0] == 0
    for args, needle in ((("stage", "llama-3.1-8b", "h100-sxm", "--stack", "animal"), "unknown serving stack"),
                         (("stage", "llama-3.1-8b", "h100-sxm", "--stack", ""), "unknown serving stack"),
                         (("stage", "llama-3.1-8b", "h100-sxm", "--stack", "vllm,sglang"), "unknown serving stack"),
                         (("stage", "llama-3.1-8b", "groq-lpu:64", "--stack", "vllm"), "no device here is a GPU"),
                         (("stage", "llama-3.1-8b", "mi300x", "--stack", "trtllm"), "NVIDIA GPUs only"),
                         (("placements", "--target", "llama-3.1-8b", "--devices", "h100-sxm,mi300x", "--stack",
                           "sglang"), "2 different builds"),
                         (("compare", "llama-3.1-8b", "mi300x", "mi355x", "--stack", "sglang"), "2 different builds"),
                         (("size", "llama-3.1-8b", "--devices", "h100-sxm", "--users", "8", "--min-tokens-per-s-per-user",
                           "20", "--emit", "trtllm", "--stack", "vllm"), "give the same engine"),
                         (("validate", "--stack", "vllm"), "unrecognized arguments")):
        code, _, err = run_cli(*args)
        assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, (args, err)


def test_captions_show_spec_files_relative_to_the_working_directory(run_cli, monkeypatch, tmp_path):
    """Inside a checkout a caption names ``hardware_specs/h100-sxm.toml``, not the machine's absolute path (a
    transcript in the README stays the same on every machine); outside it, the whole path; JSON keeps it whole."""
    dev = rl.load_device("h100-sxm")
    root = os.path.dirname(os.path.dirname(dev.path))
    monkeypatch.chdir(root)
    code, out, _ = run_cli("stage", "llama-3.1-8b", "h100-sxm")
    assert code == 0 and "Spec: " + os.path.join("hardware_specs", "h100-sxm.toml") in out
    code, out, _ = run_cli("show", "h100-sxm")
    assert code == 0 and "Spec file: " + os.path.join("hardware_specs", "h100-sxm.toml") in out
    monkeypatch.chdir(tmp_path)
    code, out, _ = run_cli("stage", "llama-3.1-8b", "h100-sxm")
    assert code == 0 and "Spec: " + dev.path in out
    code, out, _ = run_cli("show", "h100-sxm", "--json")
    assert json.loads(out)["path"] == dev.path


def test_stack_names_identified_parameters_stopped_at_a_physical_bound(run_cli, tmp_path):
    """A stack's fitted parameter at a bound of its physical range (the rows would push it further: the model
    misses something there) is named under the table and in the JSON, beside the unidentified ones."""
    from roofline.evidence.calibrate import BOUNDS
    path = tmp_path / "p.toml"
    hi = BOUNDS["compute_fraction"][1]
    path.write_text(f"[params]\ncompute_fraction = 0.6\n[stacks.vllm]\ncompute_fraction = {hi}\n"
                    "kernel_overhead_s = 3e-6\n")
    args = ("stage", "llama-3.1-8b", "h100-sxm", "--batch", "1", "--stack", "vllm", "--profile", str(path))
    code, out, _ = run_cli(*args, "--json")
    note = json.loads(out)["stack"]
    assert code == 0 and note["at_bound"]["compute_fraction"] == {"value": hi, "bound": "upper"}
    assert "kernel_overhead_s" not in note["at_bound"]
    code, out, _ = run_cli(*args)
    assert "At a bound of its physical range (its rows would go further): compute_fraction = 1 (upper)" in \
        " ".join(out.split())


def test_stack_says_the_engine_settings_it_fixes(run_cli):
    """--stack names what the stack sets besides its fitted parameters (STACK_SETTINGS): gpt-fast's ring
    all-reduce and tinygemm int4 kernel, TensorRT-LLM's KV reserved at admission and whole prompts; in the JSON
    record and under the table."""
    for stack, want, words in (("gpt-fast", {"collective": "ring", "weight_only_kernel": "tinygemm"},
                                "tinygemm for int4 (groups of 32-256) weights"),
                               ("trtllm", {"kv_admission": "reserve", "chunked_prefill": False}, "whole prompts")):
        args = ("stage", "llama-3.1-8b", "h100-sxm", "--batch", "1", "--stack", stack)
        code, out, _ = run_cli(*args, "--json")
        settings = json.loads(out)["stack"]["settings"]
        assert code == 0 and want.items() <= settings.items(), (stack, settings)
        code, out, _ = run_cli(*args)
        assert code == 0 and "The stack runs " in " ".join(out.split()) and words in " ".join(out.split())


def test_stack_on_an_unmeasured_build_says_whose_kernel_costs_it_borrows(run_cli, tmp_path):
    """A profile without SGLang's gfx942 build answers SGLang on MI300X with SGLang's own set and vLLM's gfx942
    kernel efficiencies and gap; the JSON record and the line under the table say so."""
    import re

    from roofline.specs.params import shipped_profile, shipped_profile_path
    text = shipped_profile_path().read_text()
    cut = re.sub(r'(?ms)^\[stacks\."sglang-rocm-gfx942"\]\n.*?(?=^\[)', "", text)   # a fit that never saw it
    cut = re.sub(r'(?m)^(builds = .*)"sglang-rocm-gfx942", ', r"\1", cut)
    assert "sglang-rocm-gfx942\"" not in cut and "stacks.\"sglang-rocm-gfx942" not in cut
    path = tmp_path / "no-gfx942-sglang.toml"
    path.write_text(cut)
    args = ("stage", "llama-3.1-8b", "mi300x", "--batch", "1", "--stack", "sglang", "--profile", str(path))
    code, out, _ = run_cli(*args, "--json")
    note = json.loads(out)["stack"]
    assert code == 0 and (note["build"], note["parameters"], note["platform_parameters_from"]) == (
        "sglang-rocm-gfx942", "sglang", ["vllm-rocm-gfx942"])
    # what the shipped fit leaves unidentified among the parameters borrowed from vLLM's gfx942 build is named as a
    # loose end (none, since the December 2026 AMD rows pinned its kernel gap)
    from roofline.specs.params import PLATFORM_OWN
    loose = [k for k in shipped_profile().not_identified("vllm-rocm-gfx942") if k in PLATFORM_OWN]
    assert set(loose) <= set(note["not_identified"])
    code, out, _ = run_cli(*args)
    assert code == 0 and "with the efficiencies and kernel gap of vllm-rocm-gfx942" in " ".join(out.split())


def test_stage_caption_states_the_overlap_the_profile_fits(run_cli):
    """The caption's formula says how much of the shorter of compute and memory hides under the longer: the sum
    at eta ~ 0 (the shipped GPU fit), the partial form between, the plain max at 1."""
    def formula(*extra):
        code, out, _ = run_cli("stage", "llama-3.1-8b", "h100-sxm", "--batch", "1", *extra)
        assert code == 0
        return " ".join(out.split())
    eta = rl.resolve_profile(rl.load_device("h100-sxm"), rl.DEFAULT_PARAMS).overlap_efficiency
    shipped = formula()
    assert ("R(c, m) = c + m" in shipped) == (eta < 0.005) and "1.00 min(c, m)" not in shipped
    assert "R(c, m) = max(c, m) + 0.50 min(c, m)" in formula("--set", "h100-sxm.execution.overlap_efficiency=0.5")
    full = formula("--set", "h100-sxm.execution.overlap_efficiency=1")
    assert "time = max(matmul compute, weight reads) + max(attention compute, KV reads)" in full and "R(c" not in full


def test_show_says_what_the_calibration_knows_of_each_fitted_field(run_cli):
    """`roofline show` prints each fitted GPU field as the default stack's (vLLM's) fitted value, says where its
    rows do not identify it or the fit stopped at a bound; bracketed provenance ("[stacks.vllm]") is printed, not
    eaten as markup. The fit records standard errors for the pooled set only, so none is printed beside vLLM's."""
    from roofline.specs.params import shipped_profile
    code, out, _ = run_cli("show", "h100-sxm")
    text = " ".join(out.split())
    assert code == 0 and "roofline/profiles/default.toml [stacks.vllm], the default stack" in text
    prof = shipped_profile()
    loose = prof.not_identified("vllm")
    assert loose and "fitted (not identified by its rows" in text and "fitted (+/-" not in text
    code, out, _ = run_cli("show", "h100-sxm", "--json")   # the JSON carries the same provenance
    where = json.loads(out)["execution_provenance"]
    assert code == 0 and where["memory_bandwidth_fraction"].startswith("fitted: roofline/profiles/default.toml")
    unidentified = {k for k, v in where.items() if v.startswith("fitted (not identified by its rows")}
    assert unidentified == {k.removesuffix("_s") for k in loose}
    assert where["link_bandwidth_fraction"].startswith("source: http")
    assert where["allreduce_bandwidth_fraction"].startswith("fitted")   # identified by the tensor-parallel sweeps
    assert where["compute_half_tokens"].startswith("estimate: ")   # fixed in the family file, not fitted
    code, out, _ = run_cli("show", "gaudi3", "--json")   # another family's fitted fields: its own fit, no GPU notes
    where = json.loads(out)["execution_provenance"]
    assert where["step_overhead"].startswith("fitted: roofline calibrate --family gaudi")


def test_spec_caption_explains_gamma_zero_on_separate_draft_devices(run_cli):
    """γ 0 on a placement with its own draft devices costs more J/token than the baseline (the idle draft
    devices are powered); the caption says why, and only when the draft has devices of its own."""
    base = ("spec", "--target", "gpt-oss-120b", "--draft", "gpt-oss-draft-1.6b", "--alpha", "0.9", "--gamma", "0..1")
    code, out, _ = run_cli(*base, "--draft-on", "corsair:2", "--verify-on", "b200:8", "--json")
    rows = json.loads(out)["rows"]
    zero = next(r for r in rows if r["gamma"] == 0)
    assert code == 0 and zero["energy_per_token_j"] > json.loads(out)["baseline_energy_per_token_j"]
    code, out, _ = run_cli(*base, "--draft-on", "corsair:2", "--verify-on", "b200:8")
    assert "γ 0 is plain decode with the draft's devices idle but powered" in " ".join(out.split())
    code, out, _ = run_cli(*base, "--draft-on", "b200:8", "--verify-on", "b200:8")
    assert code == 0 and "idle but powered" not in " ".join(out.split())


def test_spec_caption_says_when_no_gamma_beats_plain_decode(run_cli):
    """The star marks the best γ even when every γ is slower than the baseline (alpha 0: each round yields one
    token and pays the draft); the caption then says speculation does not pay, and not when some γ is faster."""
    base = ("spec", "--target", "gpt-oss-120b", "--draft", "gpt-oss-draft-1.6b", "--draft-on", "corsair:2",
            "--verify-on", "b200:8", "--gamma", "1,2")
    code, out, _ = run_cli(*base, "--alpha", "0")
    assert code == 0 and "No γ here is faster than plain decode" in " ".join(out.split())
    code, out, _ = run_cli(*base, "--alpha", "0", "--json")
    assert max(r["speedup"] for r in json.loads(out)["rows"]) < 1
    code, out, _ = run_cli(*base, "--alpha", "0.9")
    assert code == 0 and "No γ here" not in " ".join(out.split())


@pytest.mark.parametrize("flag,value", [("--users", "-5"), ("--min-tokens-per-s-per-user", "-10"),
                                        ("--ttft-ms", "0")])
def test_size_targets_out_of_range_are_usage_errors(run_cli, flag, value):
    """A target the command line gives out of range is a usage error (exit 2), whichever flag carries it."""
    args = {"--users": "5", "--min-tokens-per-s-per-user": "10", flag: value}
    code, _, err = run_cli("size", "llama-3.1-8b", "--devices", "b200", *[w for kv in args.items() for w in kv])
    assert code == 2 and len(err.strip().splitlines()) == 1 and flag in err


def test_devices_table_prints_capacities_in_the_decimal_gb_stage_uses(run_cli):
    """`devices` and `stage` speak one unit: H200's 143,771 MiB is 151 GB (as `stage` and the does-not-fit errors
    count) with its binary 140 GiB beside it, not a bare GiB figure next to decimal GB elsewhere."""
    code, out, _ = run_cli("devices")
    assert code == 0
    rows = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert "151 GB (140 GiB)" in rows["h200-sxm"] and "85.9 GB (80 GiB)" in rows["a100-sxm-80gb"]
    code, out, _ = run_cli("show", "h200-sxm")
    assert "151 GB (140 GiB)" in out


def test_token_counts_take_decimal_and_binary_suffixes(run_cli):
    """`8k` is 8,000 (decimal, as the README says) and `8Ki` the 8,192 that benchmarks call "8k"; a suffix that is
    neither is a usage error naming the value."""
    from roofline.ui.options import count
    assert (count("8k"), count("8Ki"), count("1M"), count("1Mi"), count("8192")) == (8000, 8192, 10**6, 2**20, 8192)
    squeeze = lambda out: " ".join(out.split())                                      # noqa: E731
    binary = squeeze(run_cli("stage", "llama-2-7b", "h100-sxm", "--context", "8Ki", "--batch", "1")[1])
    plain = squeeze(run_cli("stage", "llama-2-7b", "h100-sxm", "--context", "8192", "--batch", "1")[1])
    assert binary == plain
    code, _, err = run_cli("stage", "llama-2-7b", "h100-sxm", "--context", "8KB")
    assert code == 2 and "8KB" in err


def test_compare_prices_electricity_and_names_what_it_changed(run_cli):
    """`compare --usd-per-kwh P` adds the group's power at P to its cost, exactly P x 1e6 / 3600 / (tok/s per kW)
    per million tokens (the same power its tok/s/kW column divides by); the caption and JSON say which what-ifs
    apply to every group and what each named variant changed."""
    def cost(*extra):
        code, out, _ = run_cli("compare", "llama-3.1-8b", "h200-sxm", "--batch", "1", "--json", *extra)
        assert code == 0
        row = json.loads(out)["rows"][0]
        return row["usd_per_million_output_tokens"][0], row["tokens_per_s_per_kw"][0]
    free, kw = cost()
    paid, _ = cost("--usd-per-kwh", "10")
    assert paid - free == pytest.approx(10 * 1e6 / 3600 / kw, rel=1e-9)
    argv = ("compare", "llama-3.1-8b", "h200-sxm", "big=h200-sxm.hbm.capacity=300GB", "--batch", "1",
            "--set", "h200-sxm.hbm.bandwidth=9.6TB/s")
    code, out, _ = run_cli(*argv)
    text = " ".join(out.split())
    assert code == 0 and "What-if: h200-sxm.hbm.bandwidth=9.6TB/s" in text
    assert "big = h200-sxm with h200-sxm.hbm.capacity=300GB" in text
    rows = json.loads(run_cli(*argv, "--json")[1])["rows"]
    assert rows[1]["variant"] == ["h200-sxm.hbm.capacity=300GB"] and "variant" not in rows[0]


def test_compare_refuses_what_it_cannot_show(run_cli):
    """Nothing runnable is an error (one line, non-zero), not an empty table with status 0; the advice names the
    format the device runs; --tp leaves groups that carry their own :N alone; a name given twice is a usage error."""
    code, out, err = run_cli("compare", "llama-3.1-8b", "corsair", "corsair:4", "--activations", "bf16")
    assert code == 1 and out == "" and err.count("no native bf16") == 1 and "mxint8 for the weights, KV and activations" in err
    code, out, _ = run_cli("compare", "llama-3.1-8b", "corsair:4", "--weights", "mxint8", "--kv", "mxint8",
                           "--activations", "mxint8", "--batch", "1")
    assert code == 0 and "corsair:4" in out
    code, out, _ = run_cli("compare", "llama-3.1-70b", "h100-sxm", "h100-sxm:4", "--tp", "2", "--batch", "1")
    assert code == 0 and "h100-sxm:2" in out and "h100-sxm:4" in out
    code, _, err = run_cli("compare", "llama-3.1-8b", "b200", "b200")
    assert code == 2 and "b200 given more than once" in err


def test_placements_and_pareto_label_what_ifs_and_refuse_ambiguous_input(run_cli):
    """A what-if reaches the caption (placements) or a line under the tables (pareto), not only the JSON; a
    device or placement name given twice, and an acceptance without a draft, are usage errors."""
    code, out, _ = run_cli("placements", "--target", "llama-3.1-8b", "--devices", "h200-sxm", "--batch", "8",
                           "--set", "h200-sxm.hbm.bandwidth=9.6TB/s")
    assert code == 0 and "What-if: h200-sxm.hbm.bandwidth=9.6TB/s" in " ".join(out.split())
    code, _, err = run_cli("placements", "--target", "llama-3.1-8b", "--devices", "b200,b200")
    assert code == 2 and "b200 given more than once" in err
    code, _, err = run_cli("placements", "--target", "llama-3.1-8b", "--devices", "b200", "--alpha", "0.9")
    assert code == 2 and "--draft" in err
    code, out, _ = run_cli("pareto", "--target", "llama-3.1-8b", "--placement", "a: decode=h200-sxm",
                           "--batch", "1,8", "--set", "h200-sxm.hbm.bandwidth=9.6TB/s")
    assert code == 0 and "What-if (every configuration): h200-sxm.hbm.bandwidth=9.6TB/s" in " ".join(out.split())
    code, _, err = run_cli("pareto", "--target", "llama-3.1-8b", "--placement", "a: decode=h200-sxm",
                           "--placement", "a: decode=b200", "--batch", "1")
    assert code == 2 and "a given more than once" in err


def test_spec_says_nothing_fits_rather_than_speculation_does_not_pay(run_cli):
    """At a batch where no speculative row fits, the caption says so (and prints no tokens per round), instead
    of concluding from empty rows that speculation does not pay."""
    code, out, _ = run_cli("spec", "--target", "gpt-oss-120b", "--draft", "gpt-oss-draft-1.6b", "--verify-on",
                           "h100-sxm", "--alpha", "0.9", "--gamma", "1,4", "--batch", "1,512")
    text = " ".join(out.split())
    assert code == 0 and "Nothing speculative fits at batch 512" in text and "at batch 512)" not in text
    assert all(line.split()[4] == "—" for line in out.splitlines() if line.split()[:1] == ["512"])


def test_diagnose_compares_with_its_prediction_and_labels_what_ifs(run_cli, tmp_path):
    """The verdict says how far the model's own prediction is from the measurement; one device gets no advice
    about TP ranks or interconnects; a what-if peak is not called a datasheet's; flags the vLLM file already
    answers are refused rather than silently ignored."""
    shipped = Path(__file__).resolve().parent.parent / "examples" / "data" / "vllm_benchmark_sample.json"
    code, _, err = run_cli("diagnose", "llama-3.1-8b", "h100-sxm", "--vllm-json", str(shipped))
    assert code == 1 and "meta-llama/Llama-3.3-70B-Instruct (llama-3.3-70b), not llama-3.1-8b" in err   # another model
    from roofline.evidence.diagnose import diagnose, read_vllm_benchmark
    with pytest.raises(rl.WorkloadError, match="not llama-3.1-8b"):   # the library refuses it too
        diagnose("llama-3.1-8b", "h100-sxm", read_vllm_benchmark(shipped))
    data = json.loads(shipped.read_text())
    sample = str(tmp_path / "run.json")
    Path(sample).write_text(json.dumps({**data, "model_id": "meta-llama/Llama-3.1-8B-Instruct"}))
    code, out, _ = run_cli("diagnose", "llama-3.1-8b", "h100-sxm", "--vllm-json", sample, "--json")
    d = json.loads(out)
    assert code == 0 and f"{d['predicted_tpot_s'] * 1e3:.3g} ms per output token" in d["advice"]
    assert "TP ranks" not in d["advice"]
    code, out, _ = run_cli("diagnose", "llama-3.1-8b", "h100-sxm", "--vllm-json", sample,
                           "--set", "h100-sxm.hbm.bandwidth=6TB/s")
    assert code == 0 and "peak bandwidth (what-if)" in out and "(datasheet" not in out
    code, _, err = run_cli("diagnose", "llama-3.1-8b", "h100-sxm", "--vllm-json", sample, "--batch", "64")
    assert code == 2 and "drop --batch" in err


def test_models_names_the_attention_kind():
    """Llama-2-7B is multi-head (32 KV heads for 32 query heads), Llama-3.1-8B grouped-query (32/8)."""
    import io

    from rich.console import Console

    from roofline.ui.render_inspect import models_table
    buf = io.StringIO()
    Console(file=buf, width=200).print(models_table([rl.load_model("llama-2-7b"), rl.load_model("llama-3.1-8b")]))
    rows = {line.split()[0]: line for line in buf.getvalue().splitlines() if line.strip()}
    assert "MHA 32" in rows["llama-2-7b"] and "GQA 32/8" in rows["llama-3.1-8b"]


def test_spec_json_gives_every_batch_its_own_baseline(run_cli):
    """With several batches each row carries its batch's plain-decode speed and energy, and baseline_by_batch
    lists them (the top-level baseline is the first batch's); the caption prints each batch's J/token."""
    code, out, _ = run_cli("spec", "--target", "gpt-oss-120b", "--draft", "gpt-oss-draft-1.6b", "--verify-on",
                           "h100-sxm", "--alpha", "0.9", "--gamma", "1,4", "--batch", "1,8", "--json")
    d = json.loads(out)
    by = {b["batch"]: b for b in d["baseline_by_batch"]}
    assert code == 0 and set(by) == {1, 8} and by[1]["energy_per_token_j"] != by[8]["energy_per_token_j"]
    for row in d["rows"]:
        assert row["baseline_energy_per_token_j"] == by[row["batch"]]["energy_per_token_j"]
    assert d["baseline_energy_per_token_j"] == by[1]["energy_per_token_j"]
    text = " ".join(run_cli("spec", "--target", "gpt-oss-120b", "--draft", "gpt-oss-draft-1.6b", "--verify-on",
                            "h100-sxm", "--alpha", "0.9", "--gamma", "1,4", "--batch", "1,8")[1].split())
    assert f"batch 8: {by[8]['tokens_per_s_per_user']:.3g} tok/s/user, {by[8]['energy_per_token_j']:.3g} J/token" in text


def test_formula_explains_every_symbol_it_prints(run_cli):
    """Each formula comes with what its symbols stand for (pi is peak FLOP/s, not 3.14159), in text and JSON."""
    from roofline import symbolic
    for name in symbolic.FORMULAS:
        code, out, _ = run_cli("formula", name, "--json")
        d = json.loads(out)
        names = {x.name for x in symbolic.formula(name).free_symbols}
        assert code == 0 and set(d["symbols"]) == names and all(d["symbols"].values())
    code, out, _ = run_cli("formula", "ridge-batch")
    assert code == 0 and "pi: peak FLOP/s" in out and "beta: memory bandwidth" in out


def test_show_csv_carries_the_resolved_execution_profile(run_cli):
    """`show --csv` gives the execution profile the table shows (the calibration's values and where each comes
    from), not the device file's own (empty) overrides."""
    import csv
    import io
    code, out, _ = run_cli("show", "h100-sxm", "--csv")
    rows = {r["field"]: r for r in csv.DictReader(io.StringIO(out))}
    prof = json.loads(run_cli("show", "h100-sxm", "--json")[1])["execution"]
    assert code == 0 and float(rows["execution.memory_bandwidth_fraction"]["value"]) == prof["memory_bandwidth_fraction"]
    assert rows["execution.kernel_overhead"]["source"] and rows["execution.kernel_overhead"]["value"]


def test_stage_notes_reach_the_json_and_sit_above_the_spec_line(run_cli):
    """Why a stage fits nowhere and a context beyond the model are in --json's notes, and in the caption on their
    own lines before `Spec:` (not glued to the spec path)."""
    code, out, _ = run_cli("stage", "llama-3.1-8b", "h200-sxm", "--context", "200k", "--batch", "1", "--json")
    assert code == 0 and any("max_position_embeddings" in n for n in json.loads(out)["notes"])
    code, out, _ = run_cli("stage", "gpt-oss-120b", "h200-sxm", "--batch", "200", "--context", "8192")
    spec_line = [line for line in out.splitlines() if "Spec:" in line]
    assert code == 0 and len(spec_line) == 1 and spec_line[0].split("Spec:")[1].strip().endswith(".toml")
    assert "does not fit" in " ".join(out.split())


def test_size_emit_says_how_many_replicas_and_which_experts(run_cli):
    """Each emitted command says how many copies the sized deployment runs (JSON: replicas); the sizing names the
    expert format it used, and a command for experts other than the checkpoint's says to serve another one."""
    argv = ("size", "gpt-oss-120b", "--devices", "h100-sxm", "--users", "500", "--min-tokens-per-s-per-user", "50",
            "--emit", "vllm")
    code, out, _ = run_cli(*argv, "--json")
    d = json.loads(out)
    assert code == 0
    for opt, launch in zip([o for o in d["options"] if o["feasible"]], d["launch"]):
        assert launch["replicas"] == opt["replicas"] and opt["formats"]["experts"] == "mxfp4"
    text = run_cli(*argv)[1]
    assert f"run {d['launch'][0]['replicas']} replicas of this command" in text
    code, out, _ = run_cli("size", "gpt-oss-120b", "--devices", "h200-sxm", "--users", "64",
                           "--min-tokens-per-s-per-user", "30", "--experts", "bf16", "--emit", "vllm")
    assert code == 0 and "sized with bf16 experts: serve a checkpoint whose experts are bf16" in out


def test_validate_says_when_the_calibration_was_fitted_on_other_data(run_cli, tmp_path):
    """On your own file the caption and JSON say the shipped calibration was not fitted on it."""
    from roofline.evidence.validate import shipped_data
    lines = open(shipped_data()).read().splitlines()
    mine = tmp_path / "mine.csv"
    mine.write_text("\n".join(lines[:4]) + "\n")
    assert json.loads(run_cli("validate", "--data", str(mine), "--json")[1])["calibrated_on_this_data"] is False
    assert "not on the file validated here" in " ".join(run_cli("validate", "--data", str(mine))[1].split())
    from roofline.specs.params import shipped_profile
    from roofline.ui.commands.evidence import _fitted_on  # the shipped file (its whole validate run is 20 s)
    assert _fitted_on(shipped_profile(), str(shipped_data())) is True


def test_diagnose_calls_a_run_compute_bound_when_achievable_compute_fills_it():
    """Below half the datasheet FLOP/s a run can still be compute bound: when the modelled compute time at the
    achievable efficiency is most of the measured step, the verdict says compute, not "neither"; with little of
    either it stays overhead, and one device gets no interconnect advice."""
    from roofline.evidence.diagnose import _verdict
    assert _verdict(0.2, 0.43, None, split=True, compute_share=0.64)[0] == "compute (below datasheet peak)"
    binding, advice = _verdict(0.2, 0.1, None, split=False, compute_share=0.2)
    assert binding == "overhead or communication" and "interconnect" not in advice
    assert "interconnect" in _verdict(0.2, 0.1, None, split=True, compute_share=0.2)[1]


def test_debug_shows_the_error_itself_wherever_it_is_written(run_cli):
    """`--debug` before or after the command re-raises the error it is about (the traceback the user asked for),
    not an argparse complaint that the subcommand does not know --debug."""
    from roofline.errors import NotFoundError
    for argv in (("--debug", "stage", "llama-3.1-8b", "zzz"), ("stage", "llama-3.1-8b", "zzz", "--debug")):
        with pytest.raises(NotFoundError, match="unknown device 'zzz'"):
            run_cli(*argv)
    code, _, err = run_cli("stage", "llama-3.1-8b", "zzz")
    assert code == 1 and err.count("\n") == 1 and "unknown device 'zzz'" in err


def test_stage_says_when_its_decode_context_is_shorter_than_its_prompt(run_cli):
    """`stage --context 8k --prompt 16k` prefills 16,000 tokens and decodes at 8,000: two separate points, which
    the table says in a note (as text and in the JSON's notes) rather than letting them pass for one request."""
    code, out, _ = run_cli("stage", "llama-3.1-8b", "h100-sxm", "--context", "8k", "--prompt", "16k", "--json")
    assert code == 0 and any("shorter than the 16,000-token prompt" in n for n in json.loads(out)["notes"])
    code, out, _ = run_cli("stage", "llama-3.1-8b", "h100-sxm", "--context", "16k", "--prompt", "8k", "--json")
    assert code == 0 and not any("shorter than" in n for n in json.loads(out)["notes"])


def test_a_placement_takes_a_link_written_bandwidth_comma_latency(run_cli):
    """`kv-link=50GB/s,3us` inside --placement (the form the link error recommends) is one value, not a broken
    KEY=VALUE list, and it is the link the KV cache crosses: a slower one lengthens the TTFT."""
    def ttft(link: str) -> float:
        code, out, err = run_cli("pareto", "--target", "llama-3.1-8b", "--json",
                                 "--placement", f"a: decode=h100-sxm, prefill=b200, kv-link={link}")
        assert code == 0, err
        return json.loads(out)["configurations"][0]["frontier"][0]["ttft_s"]
    assert ttft("5GB/s,3us") > ttft("50GB/s,3us") > 0
    code, _, err = run_cli("pareto", "--target", "llama-3.1-8b", "--placement", "a: decode=h100-sxm, 3us")
    assert code == 2 and "'3us' is not KEY=VALUE" in err


def test_range_and_draft_length_limits_are_said_in_one_line(run_cli):
    """A range of more values than a command takes says the cap (not "cannot read" a valid range), and a draft
    length beyond the limit names the values beyond it on one line (not a numpy array wrapped over two)."""
    code, _, err = run_cli("stage", "llama-3.1-8b", "h100-sxm", "--batch", "1..1000000")
    assert code == 2 and "1,000,000 values; a range gives at most 100,000" in err and err.count("\n") == 1
    code, _, err = run_cli("spec", "--target", "gpt-oss-120b", "--draft", "gpt-oss-draft-1.6b", "--verify-on",
                           "b200:8", "--alpha", "0.9", "--gamma", "1..100000")
    assert code == 1 and err.count("\n") == 1
    assert "above 1024 is not a draft length, got [1025, 1026, 1027, ..., 99998, 99999, 100000]" in err


def test_diagnose_and_spec_name_the_flag_at_fault(run_cli):
    """A bad or contradictory measured rate, a utilisation outside [0, 1] and spec without its draft are usage
    errors (exit 2) naming the flags, not a library message about "measured rate" or "draft kind 'model'"."""
    run = ("diagnose", "llama-3.1-8b", "h100-sxm", "--batch", "8", "--isl", "1k", "--osl", "1k")
    for extra, said in ((("--tpot-ms", "0"), "--tpot-ms: must be > 0"),
                        (("--tokens-per-s-per-user", "-5"), "--tokens-per-s-per-user: must be > 0"),
                        (("--tpot-ms", "5", "--tokens-per-s-per-user", "120"), "not allowed with argument --tpot-ms"),
                        (("--tpot-ms", "5", "--utilisation", "2"), "--utilisation: a fraction in [0, 1]")):
        code, _, err = run_cli(*run, *extra)
        assert code == 2 and said in err, (extra, err)
    spec = ("spec", "--target", "gpt-oss-120b", "--verify-on", "b200:8", "--alpha", "0.9", "--gamma", "2")
    code, _, err = run_cli(*spec)
    assert code == 2 and "give the draft model with --draft" in err
    code, _, err = run_cli(*spec, "--draft", "gpt-oss-draft-1.6b", "--draft-kind", "eagle")
    assert code == 2 and "--draft gpt-oss-draft-1.6b is a draft model, for --draft-kind model" in err


def test_pareto_says_why_a_configuration_has_no_frontier(run_cli):
    """A placement with no feasible point beside one that has some: its empty frontier carries the reason (the
    model does not fit on its decode group, with the bytes, as `stage` says it), in the table and the JSON."""
    argv = ("pareto", "--target", "llama-3.1-405b", "--placement", "a: decode=b200:8", "--placement", "b: decode=h100-sxm")
    code, out, err = run_cli(*argv, "--json")
    assert code == 0, err
    a, b = json.loads(out)["configurations"]
    assert a["frontier"] and "why_empty" not in a
    assert not b["frontier"] and b["why_empty"].startswith("llama-3.1-405b does not fit on h100-sxm for decode: needs")
    assert "no point: llama-3.1-405b does not fit on h100-sxm" in " ".join(run_cli(*argv)[1].split())


def test_flags_that_would_be_ignored_are_refused(run_cli):
    """A price for a device the command does not run, an acceptance for placements that do not draft, and a draft
    link where the draft shares the verify devices would each change nothing: each is a usage error naming it."""
    code, _, err = run_cli("compare", "llama-3.1-8b", "h100-sxm", "--usd-per-device-hour", "b200=3")
    assert code == 2 and "--usd-per-device-hour b200: not a device of this command (devices in play: h100-sxm)" in err
    code, _, err = run_cli("pareto", "--target", "llama-3.1-8b", "--placement", "a: decode=h100-sxm", "--alpha", "0.9")
    assert code == 2 and "none of these placements drafts" in err
    spec = ("spec", "--target", "gpt-oss-120b", "--draft", "gpt-oss-draft-1.6b", "--verify-on", "b200:8",
            "--alpha", "0.9", "--gamma", "2")
    for same in ((), ("--draft-on", "b200:8")):
        code, _, err = run_cli(*spec, *same, "--link", "pcie5")
        assert code == 2 and "--link pcie5: the draft runs on the verify devices" in err
    code, out, err = run_cli(*spec, "--draft-on", "corsair:2", "--link", "nvlink", "--json")
    assert code == 0 and json.loads(out)["link"] == "nvlink"
    assert run_cli("compare", "llama-3.1-8b", "h100-sxm", "--usd-per-device-hour", "h100-sxm=3")[0] == 0


def test_size_caption_says_the_what_if_and_electricity_price_it_ran_with(run_cli):
    base = ("size", "llama-3.1-8b", "--devices", "h100-sxm", "--users", "10", "--min-tokens-per-s-per-user", "20")
    said = " ".join(run_cli(*base, "--set", "h100-sxm.hbm.bandwidth=9TB/s", "--usd-per-kwh", "0.1")[1].split())
    assert "Electricity $0.1/kWh." in said and "What-if: h100-sxm.hbm.bandwidth=9TB/s." in said
    plain = " ".join(run_cli(*base)[1].split())
    assert "What-if" not in plain and "Electricity" not in plain


def test_the_help_examples_run_and_show_what_they_are_for(run_cli):
    """Every example under `roofline --help` runs as written, and the compare example's what-if shows numbers (it
    once put a 70B BF16 model on one H200, so every row of the variant it demonstrates read "no fit"). The
    validate example predicts the shipped rows on the command's own worker processes, and every later in-process
    validation of them is answered from memory."""
    import shlex

    from roofline.ui.cli import EPILOG
    text = EPILOG.replace("\\\n", " ")
    examples = [shlex.split(line)[1:] for line in text.splitlines() if line.strip().startswith("roofline ")]
    assert len(examples) >= 5
    for argv in examples:
        code, out, err = run_cli(*argv)
        assert code == 0, (argv, err)
        assert argv[0] != "compare" or "no fit" not in out


def test_show_takes_a_checkpoint_folder_as_stage_does(run_cli, tmp_path):
    """A folder holding a config.json is a model to `stage`; `show` reads it as one too, not as a device spec."""
    import shutil
    shutil.copy(Path(__file__).resolve().parents[1] / "roofline" / "presets" / "llama-3.1-8b.json",
                tmp_path / "config.json")
    code, out, err = run_cli("show", str(tmp_path), "--json")
    assert code == 0, err
    assert json.loads(out)["num_layers"] == 32


def test_compare_elasticity_table_leaves_out_fields_that_move_nothing(run_cli):
    """The table lists the fields that move the decode time at the two decimals shown and says how many it left
    out; the JSON keeps every field."""
    code, out, err = run_cli("compare", "llama-3.1-8b", "h100-sxm", "--elasticity")
    assert code == 0, err
    data = json.loads(run_cli("compare", "llama-3.1-8b", "h100-sxm", "--elasticity", "--json")[1])
    el = data["rows"][0]["elasticity"]
    idle = [k for k, v in el.items() if round(v, 2) == 0]
    assert idle and "+0.00" not in out and "-0.00" not in out
    assert f"{len(idle)} fields with no effect here" in " ".join(out.split())
    assert all(k in out for k, v in el.items() if round(v, 2) != 0)


def test_unknown_options_point_at_the_commands_own_help(run_cli):
    code, _, err = run_cli("stage", "llama-3.1-8b", "h100-sxm", "--bogus")
    assert code == 2 and "unrecognized arguments: --bogus (see `roofline stage --help`)" in err


def test_commands_run_a_chip_without_bf16_in_its_native_format(run_cli):
    """`stage` on Corsair runs in mxint8 without being told (its caption says so); `placements` over an H100 and a
    Corsair evaluates the Corsair placements too, each group in its own devices' formats with the KV cache a
    prefill group hands over in one both compute, and says which placements ran in which formats; --json carries
    each placement's formats."""
    code, out, err = run_cli("stage", "llama-3.1-8b", "corsair:4", "--batch", "1")
    assert code == 0, err
    assert "Formats: mxint8 throughout." in " ".join(out.split())
    argv = ("placements", "--target", "llama-3.1-8b", "--devices", "corsair,h100-sxm", "--batch", "1")
    code, out, err = run_cli(*argv)
    text = " ".join(out.split())
    assert code == 0 and "Formats (fmt; unless given" in text and "cannot run" not in text
    rows = {p["name"]: p for p in json.loads(run_cli(*argv, "--json")[1])["placements"]}
    def formats(name):
        m = rows[name]["metrics"]
        return m["target_formats"], m["prefill_formats"]
    every = lambda f: {"weights": f, "experts": f, "kv": f, "activations": f, "head": f}  # noqa: E731
    assert formats("decode corsair, prefill on the decode group") == (every("mxint8"), None)
    assert formats("decode h100-sxm, prefill h100-sxm") == (every("bf16"), None)
    assert formats("decode h100-sxm, prefill corsair") == (every("bf16"), {**every("mxint8"), "kv": "bf16"})
    # each placement's row carries a key to the set of formats it ran, each set said once under the table
    (key,) = [line.split()[-8] for line in out.splitlines() if line.startswith("decode h100-sxm, prefill corsair ")]
    assert f"{key}: decode bf16 throughout; prefill mxint8 (KV bf16)" in text
    legend = [line.split(": ", 1) for line in out.splitlines() if re.match(r"  \d+: ", line)]
    assert [k.strip() for k, _ in legend] == [str(i) for i in range(1, len(legend) + 1)]
    assert len(legend) == len({text for _, text in legend}) >= 3
    assert all(p["metrics"]["draft_formats"] is None for p in rows.values())
    code, out, _ = run_cli("compare", "llama-3.1-8b", "h100-sxm", "corsair:4", "--batch", "1")
    text = " ".join(out.split())
    assert code == 0 and "The formats differ by group" in text and "mxint8 throughout: corsair:4" in text
    assert "Formats: bf16 throughout." in " ".join(run_cli("compare", "llama-3.1-8b", "h100-sxm", "b200")[1].split())
    data = json.loads(run_cli("compare", "llama-3.1-8b", "h100-sxm", "corsair:4", "--batch", "1", "--json")[1])
    assert [r["formats"] for r in data["rows"]] == [every("bf16"), every("mxint8")]


def test_compare_variant_on_a_group_and_small_cli_answers(run_cli):
    """NAME=ID:N.FIELD=VALUE puts a what-if variant on that group (the caption says which); diagnose without a
    measured rate is a usage error (2); formula says what the formula is; a pipelined stage says its columns are one
    microbatch's."""
    code, out, err = run_cli("compare", "llama-3.1-70b", "fast=h200-sxm:8.hbm.bandwidth=9.6TB/s", "h200-sxm:8",
                             "--batch", "1", "--json")
    assert code == 0, err
    rows = {r["name"]: r for r in json.loads(out)["rows"]}
    assert rows["fast"]["group"] == "h200-sxm:8" and "error" not in rows["fast"]
    assert rows["fast"]["decode"][0]["time_s"] < rows["h200-sxm:8"]["decode"][0]["time_s"]
    text = " ".join(run_cli("compare", "llama-3.1-70b", "fast=h200-sxm:8.hbm.bandwidth=9.6TB/s", "--batch", "1")[1].split())
    assert "fast = h200-sxm:8 with h200-sxm.hbm.bandwidth=9.6TB/s" in text
    code, _, err = run_cli("diagnose", "llama-3.1-8b", "h100-sxm", "--batch", "1", "--isl", "1k", "--osl", "1k")
    assert code == 2 and "give the measured rate" in err
    code, out, _ = run_cli("formula", "expected-tokens-limit")
    assert code == 0 and "lim_{alpha -> 1}" in out
    code, out, _ = run_cli("stage", "llama-3.1-70b", "h100-sxm:2x2", "--batch", "1,8")
    assert code == 0 and "one microbatch's" in " ".join(out.split())
    code, out, _ = run_cli("stage", "llama-3.1-8b", "gaudi3", "--batch", "1")   # why batch 1 can be compute-bound
    assert code == 0 and "tiles of 256 token rows" in " ".join(out.split())


def test_pareto_reports_each_configuration_it_cannot_evaluate(run_cli):
    """A placement whose formats cannot run is that configuration's empty frontier with the reason, not the
    command's failure; with every frontier empty the error is the configurations' own reason (bytes needed), and
    a baseline without points is said to be why the ratios are empty."""
    code, out, err = run_cli("pareto", "--target", "llama-3.1-8b", "--placement", "a: decode=corsair:4",
                             "--placement", "b: decode=h100-sxm", "--batch", "1", "--activations", "bf16")
    text = " ".join(out.split())
    assert code == 0, err
    assert "no point: corsair has no native bf16 units" in text and "The baseline a has no point" in text
    code, _, err = run_cli("pareto", "--target", "llama-3.1-405b", "--placement", "a: decode=h100-sxm")
    assert code == 1 and "llama-3.1-405b does not fit on h100-sxm for decode: needs" in err


def test_third_review_answers(run_cli):
    """size answers for a device without a published TDP (power unknown, not the option); pareto's caption names
    the draft's formats; a compare variant's part naming another device, and a --placement without its name, are
    usage errors that say so; a price given on the command line is labelled, not '()'; the formats help names the
    chips' defaults."""
    code, out, err = run_cli("size", "llama-3.1-70b", "--devices", "tpu-7x", "--users", "100",
                             "--min-tokens-per-s-per-user", "30", "--json")
    assert code == 0, err
    opts = json.loads(out)["options"]
    assert opts[0]["devices"] > 0 and opts[0]["tokens_per_s_per_kw"] is None
    code, out, err = run_cli("pareto", "--target", "gpt-oss-120b", "--draft", "gpt-oss-draft-1.6b", "--alpha", "0.9",
                             "--placement", "c: decode=b200:8, draft=corsair:2", "--batch", "1", "--gamma", "3")
    assert code == 0 and "draft mxint8 throughout" in " ".join(out.split()), err
    code, _, err = run_cli("compare", "llama-3.1-8b", "x=h200-sxm:2.hbm.bandwidth=9.6TB/s;sram.bandwidth=1TB/s")
    assert code == 2 and "compare variant 'x'" in err and "sram.bandwidth=1TB/s names another" in err
    code, _, err = run_cli("pareto", "--target", "llama-3.1-70b", "--placement", "prefill=h100-sxm:4, decode=h100-sxm:4")
    assert code == 2 and "needs a name first" in err
    code, out, _ = run_cli("size", "llama-3.1-8b", "--devices", "h100-sxm", "--users", "10",
                           "--min-tokens-per-s-per-user", "30", "--usd-per-device-hour", "h100-sxm=2")
    assert code == 0 and "h100-sxm $2/h (given)" in " ".join(out.split())


def test_fourth_review_answers(run_cli):
    """A compare what-if without its name, --gamma without a draft (placements, pareto), a link of no bandwidth or
    a negative latency, and a formula name outside the list each get one line naming the mistake, not a wrong
    fragment or silence; pareto says a prefill pool's TTFT has no queue; the help's spec example is one command
    without a gap, in the README's layout."""
    from roofline.ui.cli import EPILOG
    code, _, err = run_cli("compare", "llama-3.1-70b", "h200-sxm:2.hbm.bandwidth=9.6TB/s")
    assert code == 2 and "needs a name, NAME=ID[:N].FIELD=VALUE" in err and "--set" not in err
    code, _, err = run_cli("compare", "llama-3.1-70b", "bad=h100-sxm.hbm.bandwidth")   # a name, no value
    assert code == 2 and "variant 'bad' gives no value" in err and "fast=" not in err
    code, _, err = run_cli("placements", "--target", "gpt-oss-120b", "--devices", "b200", "--gamma", "3")
    assert code == 2 and "--gamma (a draft length) needs a draft model (--draft)" in err
    code, _, err = run_cli("pareto", "--target", "llama-3.1-8b", "--placement", "a: decode=h100-sxm", "--gamma", "3")
    assert code == 2 and "none of these placements drafts" in err
    spec = ("spec", "--target", "llama-3.1-70b", "--draft", "llama-3.1-8b", "--verify-on", "h100-sxm:4",
            "--draft-on", "h100-sxm", "--alpha", "0.8", "--link")
    for link, said in (("0GB/s,1us", "the bandwidth must be a finite rate > 0, got 0GB/s"),
                       ("10GB/s,-1us", "the latency must be a finite time >= 0, got -1us")):
        code, _, err = run_cli(*spec, link)
        assert code == 1 and said in err and "GroupLink" not in err
    code, _, err = run_cli("formula", "speedupp")
    assert code == 2 and "did you mean 'speedup'" in err
    # a prefill pool counted by its busy share has no queue: its TTFT is said to be a lower bound
    pooled = ("pareto", "--target", "llama-3.1-70b", "--batch", "1,8", "--placement")
    said = " ".join(run_cli(*pooled, "d: prefill=h100-sxm:4, decode=h100-sxm:4")[1].split())
    assert "d: the prefill group is counted by the share of time it is busy" in said and "lower bound" in said
    assert "prefill group is counted" not in " ".join(run_cli(*pooled, "a: decode=h100-sxm:4")[1].split())
    spec_example = next(line for line in EPILOG.replace("\\\n", " ").splitlines() if "roofline spec" in line)
    assert "b200:8 \\\n" in EPILOG   # continued with a backslash shown, as a shell takes it (no silent gap)
    assert "--draft-on corsair:2 --verify-on b200:8 --alpha 0.926" in " ".join(spec_example.split())


def test_energy_captions_say_when_idle_power_is_assumed(run_cli):
    """Many spec files publish no idle power; the energy a table shows then charges the assumed share of TDP,
    and its caption says so and for which devices (the H100 SXM's and B200's idle powers are published
    nvidia-smi readings, the H200's our own measurement)."""
    from roofline.physics.energy import DEFAULT_POWER
    share = f"{DEFAULT_POWER.idle_fraction_of_tdp:.0%} of TDP assumed"
    spec = ("spec", "--target", "llama-3.1-70b", "--draft", "llama-3.1-8b", "--alpha", "0.8", "--gamma", "1..2")
    said = " ".join(run_cli(*spec, "--verify-on", "gb200:4", "--draft-on", "h100-sxm")[1].split())
    assert f"Idle power not published for gb200: {share}" in said
    assert "Idle power" not in " ".join(run_cli(*spec, "--verify-on", "h100-sxm:4")[1].split())
    assert "Idle power" not in " ".join(run_cli(*spec, "--verify-on", "b200:4")[1].split())
    said = " ".join(run_cli("size", "llama-3.1-8b", "--devices", "gb200,h200-sxm,b200", "--users", "10",
                            "--min-tokens-per-s-per-user", "30")[1].split())
    assert f"Idle power not published for gb200: {share}" in said and "b200, h200" not in said
    said = " ".join(run_cli("placements", "--target", "llama-3.1-8b", "--devices", "mi325x")[1].split())
    assert "Idle power not published for mi325x" in said


def test_format_help_names_the_chips_defaults(capsys):
    from roofline.ui.cli import main
    with pytest.raises(SystemExit):
        main(["stage", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "fp8 on groq-3-lpu" in help_text and "mxint8 on corsair" in help_text


def test_show_prints_every_source_url_whole_at_80_columns():
    """A device's sources are note numbers in the table and whole URLs under it: at 80 columns a URL folded into
    the table's column broke mid-word and no longer opened."""
    import io

    from rich.console import Console

    from roofline.ui.cli import main
    buf = io.StringIO()
    code = main(["show", "h100-sxm"], console=Console(file=buf, width=80, color_system=None),
                err_console=Console(file=io.StringIO()))
    out = buf.getvalue()
    assert code == 0
    for url in set(rl.load_device("h100-sxm").sources.values()):
        assert any(line.endswith(url) and line.startswith("[") for line in out.splitlines()), url


def test_a_command_line_leaves_nothing_behind_for_the_next(run_cli):
    """A what-if, a stack or a placement given to one call must not reach the next call that does not give them:
    nothing a command line sets may stay behind in a cached device, profile or parser default."""
    plain = run_cli("stage", "llama-3.1-8b", "h100-sxm", "--json")
    code, _, err = run_cli("stage", "llama-3.1-8b", "h100-sxm", "--json", "--stack", "trtllm",
                           "--set", "h100-sxm.hbm.bandwidth=1TB/s", "--set", "h100-sxm.hbm.capacity=40GB")
    assert code == 0, err
    assert run_cli("stage", "llama-3.1-8b", "h100-sxm", "--json") == plain
    two = ["pareto", "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b", "--alpha", "0.8", "--json",
           "--placement", "a: prefill=h100-sxm, decode=h100-sxm, draft=h100-sxm"]
    first = run_cli(*two)
    assert first[0] == 0, first[2]
    run_cli(*two, "--placement", "b: prefill=b200, decode=b200, draft=b200")
    assert run_cli(*two) == first


def test_the_verify_table_counts_tokens_per_sequence_not_per_user(run_cli):
    """A verify pass processes gamma + 1 tokens per sequence whatever is accepted: its rate column is per sequence
    (a review read 715 tok/s per user off it, every drafted token counted)."""
    code, out, err = run_cli("stage", "llama-3.1-8b", "h100-sxm", "--batch", "1", "--context", "2048", "--gamma", "4")
    assert code == 0, err
    verify = out[out.index("verify:"):]
    decode = out[out.index("decode:"):out.index("verify:")]
    assert "/seq" in verify and "/user" not in verify and "/user" in decode


def test_compare_says_when_no_batch_fits_a_group(run_cli):
    """A group on which no batch asked for fits is said in one line, with the bytes it needs, as stage says it: a
    table of "no fit" cells that exited 0 was the answer (a review); beside a group that fits, its row carries the
    reason."""
    code, out, err = run_cli("compare", "llama-3.1-70b", "h100-sxm")
    assert code == 1 and out == "" and "does not fit on h100-sxm" in err and len(err.strip().splitlines()) == 1
    data = json.loads(run_cli("compare", "llama-3.1-70b", "h100-sxm", "h100-sxm:4", "--json")[1])
    rows = {r["name"]: r for r in data["rows"]}
    assert "usable" in rows["h100-sxm"]["error"] and "error" not in rows["h100-sxm:4"]
