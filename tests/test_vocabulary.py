"""One vocabulary for the CLI and the API, with aliases (docs/design.md, "One vocabulary"), and results as tidy
data: ``to_dict(flat=True)`` columns of equal length, ``to_frame()`` a DataFrame (issue 52, "Models and names")."""

import json

import attrs
import numpy as np
import pytest

import roofline as rl
from roofline.serving_api import enumerate_placements

# --- one vocabulary ---------------------------------------------------------------------------------------------


def test_request_takes_the_cli_names_and_count_strings():
    """Request(isl=, osl=) are aliases of input_tokens/output_tokens; "8k" and "8Ki" read as --isl reads them."""
    assert rl.Request(isl=8192, osl=1024) == rl.Request(input_tokens=8192, output_tokens=1024)
    assert rl.Request(input_tokens="8k", output_tokens="1Ki") == rl.Request(input_tokens=8000, output_tokens=1024)
    assert attrs.evolve(rl.Request(isl=1, osl=2), input_tokens="4k").input_tokens == 4000
    with pytest.raises(rl.WorkloadError, match="input_tokens or its alias isl, not both"):
        rl.Request(isl=1, input_tokens=2, osl=3)
    with pytest.raises(rl.WorkloadError, match="needs output_tokens"):
        rl.Request(isl=1)
    with pytest.raises(rl.WorkloadError, match="input_tokens"):
        rl.Request(isl="8q", osl=1)


def test_workload_counts_take_the_cli_strings():
    """context="8k" (refused before) is 8,000 as on the command line; a list of strings sweeps; a bad one names
    the argument."""
    a = rl.decode_step("llama-3.1-8b", "h100", batch="8", context="8k")
    b = rl.decode_step("llama-3.1-8b", "h100", batch=8, context=8000)
    assert float(a.time_s) == float(b.time_s)
    grid = rl.decode_step("llama-3.1-8b", "h100", batch=["1", "64"], context="8Ki")
    assert list(grid.batch) == [1, 64] and set(np.ravel(grid.context)) == {8192}
    with pytest.raises(rl.WorkloadError, match="context"):
        rl.decode_step("llama-3.1-8b", "h100", batch=1, context="8 kilo")


def test_target_takes_a_time_with_its_unit():
    request = rl.Request(isl=1000, osl=100)
    t = rl.Target(users=1, min_tokens_per_s_per_user=10, request=request, max_ttft_s="200 ms")
    assert t.max_ttft_s == pytest.approx(0.2)
    with pytest.raises(rl.WorkloadError, match="max_ttft_s"):
        rl.Target(users=1, min_tokens_per_s_per_user=10, request=request, max_ttft_s="200 GB")


def test_device_lists_split_on_commas_as_the_cli_does():
    """rl.size(m, "b200,h200-sxm") sizes two device kinds (it read one id "b200,h200-sxm" before)."""
    target = rl.Target(users=10, min_tokens_per_s_per_user=20, request=rl.Request(isl="1k", osl=100))
    joined = rl.size("llama-3.1-8b", "h100,b200", target)
    assert {o.device for o in joined} == {"h100-sxm", "b200"}
    assert joined == rl.size("llama-3.1-8b", ["h100", "b200"], target)
    with pytest.raises(rl.WorkloadError, match="empty entry"):
        rl.size("llama-3.1-8b", "h100,,b200", target)
    front = rl.sweep("llama-3.1-8b", "h100:1,h100:2", batch=[1, 8], context=1024)
    assert set(front.group) <= {"h100-sxm", "h100-sxm:2"} and front.points == 4
    kinds = {c.placement.decode.device.id for c in enumerate_placements("llama-3.1-8b", "h100,b200",
                                                                          rl.Request(isl=100, osl=10), batch=1)}
    assert kinds == {"h100-sxm", "b200"}


def test_cli_takes_the_api_names(run_cli, capsys):
    """--input-tokens/--output-tokens (aliases --isl/--osl), --acceptance (alias of --alpha) and --max-ttft-ms
    (alias --ttft-ms) answer the same."""
    base = ["size", "llama-3.1-70b", "--devices", "h100", "--users", "50", "--min-tokens-per-s-per-user", "20",
            "--draft", "llama-3.1-8b", "--json"]
    code, old, _ = run_cli(*base, "--isl", "2k", "--osl", "256", "--alpha", "0.8", "--ttft-ms", "2000")
    code2, new, _ = run_cli(*base, "--input-tokens", "2k", "--output-tokens", "256", "--acceptance", "0.8",
                            "--max-ttft-ms", "2000")
    assert code == code2 and json.loads(old) == json.loads(new)
    from roofline.ui.cli import build_parser
    with pytest.raises(SystemExit):
        build_parser().parse_args(["size", "--help"])
    flat = " ".join(capsys.readouterr().out.split())
    assert "--input-tokens N, --isl N" in flat and "--max-ttft-ms MS, --ttft-ms MS" in flat
    assert "--alpha ALPHA, --acceptance ALPHA" in flat


def test_bound_is_named_as_python_names_it(run_cli):
    """The stage table's column and bound say ``overhead`` (StageResult.bound's name), not ``fixed``."""
    from roofline.ui.render_common import short_bound
    assert short_bound("overhead") == "overhead" and short_bound("memory:hbm") == "mem:hbm"
    code, out, _ = run_cli("stage", "llama-3.1-8b", "h100", "--batch", "1")
    assert code == 0 and "fixed" not in out.split("Formats:")[0]
    assert "over" in out and "overhead" in out


# --- tidy data ----------------------------------------------------------------------------------------------------


def _records():
    grid = rl.decode_step("llama-3.1-8b", "h100", batch=np.array([1, 8])[:, None], context=[1024, 4096, 8192])
    spec = rl.speculative_round("llama-3.1-70b", verify_on="h100:4", acceptance=0.8, gamma=np.arange(1, 4)[:, None],
                                batch=[1, 8], draft="llama-3.1-8b")
    serving = rl.evaluate_serving("llama-3.1-8b", rl.Placement.build("a", decode="h100:1"),
                                  rl.Request(isl=1000, osl=100), batch=[1, 8, 64])
    load = rl.serve_at_rate("llama-3.1-8b", rl.Placement.build("a", decode="h100-sxm:1"),
                            rl.Workload(lengths=rl.Lengths.fixed(1000, 100)), [1.0, 2.0])
    return {"stage": (grid, 6, ("batch", "context")), "spec": (spec, 6, ("batch", "context", "gamma", "alpha")),
            "serving": (serving, 3, ("batch", "gamma", "alpha", "request.input_tokens", "request.output_tokens")),
            "load": (load, 2, ("rate_per_s",))}


def test_flat_dict_is_tidy_without_pandas():
    """to_dict(flat=True): one flat list per column, all of one length (the points), JSON-ready, the workload
    first; the nested to_dict keeps the record's shape."""
    for name, (r, points, workload) in _records().items():
        flat = r.to_dict(flat=True)
        assert {len(v) for v in flat.values()} == {points}, name
        assert list(flat)[:len(workload)] == list(workload), name
        json.dumps(flat)
    grid = _records()["stage"][0]
    flat, nested = grid.to_dict(flat=True), grid.to_dict()
    assert np.shape(nested["time_s"]) == (2, 3) and flat["time_s"] == [t for row in nested["time_s"] for t in row]
    assert flat["batch"] == [1, 1, 1, 8, 8, 8] and flat["context"] == [1024, 4096, 8192] * 2
    assert flat["formats.weights"] == ["bf16"] * 6 and flat["stage"] == ["decode"] * 6


def test_to_frame_is_a_dataframe_per_point():
    pd = pytest.importorskip("pandas")
    for name, (r, points, workload) in _records().items():
        frame = r.to_frame()
        assert isinstance(frame, pd.DataFrame) and len(frame) == points, name
        assert list(frame.columns[:len(workload)]) == list(workload), name
        assert pd.DataFrame(r.to_dict(flat=True)).shape == frame.shape
    one = rl.decode_step("llama-3.1-8b", "h100", batch=1, context=1024).to_frame()
    assert len(one) == 1 and one["time_s"].iloc[0] > 0
    target = rl.Target(users=10, min_tokens_per_s_per_user=20, request=rl.Request(isl="1k", osl=100))
    options = rl.size("llama-3.1-8b", "h100,b200", target)
    assert len(options[0].to_frame()) == 1 and "formats.weights" in options[0].to_frame()
    assert len(pd.DataFrame([o.to_dict() for o in options])) == len(options)
    front = rl.sweep("llama-3.1-8b", ["h100:1"], batch=[1, 8, 64], context=1024)
    assert len(front.to_frame()) == len(front)


def test_to_frame_without_pandas_says_how_to_get_it(monkeypatch):
    import builtins
    real = builtins.__import__

    def no_pandas(name, *args, **kw):
        if name == "pandas":
            raise ImportError("no pandas here")
        return real(name, *args, **kw)
    monkeypatch.setattr(builtins, "__import__", no_pandas)
    with pytest.raises(rl.RooflineError, match=r"roofline\[pandas\]"):
        rl.decode_step("llama-3.1-8b", "h100", batch=1, context=1024).to_frame()
