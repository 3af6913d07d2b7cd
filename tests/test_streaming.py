"""JSON and CSV of rows held by column (roofline.ui.columns) say exactly what the row-by-row path says, and
``--json``/``--csv`` scale with the rows: no table is built, and the Python work does not grow with them."""

from __future__ import annotations

import io
import json
import math
import sys

import numpy as np
import pytest
from rich.console import Console

from roofline.serving.trust import with_bounds
from roofline.specs.intervals import Interval
from roofline.ui import render_spec
from roofline.ui.cli import main
from roofline.ui.columns import Columns, json_chunks
from roofline.ui.output import csv_text, jsonable


def _columns(n: int = 300, gaps: bool = True) -> Columns:
    rng = np.random.default_rng(1)
    speed = rng.random(n) * 100
    speed[::7] = np.nan
    speed[3] = np.inf
    cols = {"gamma": np.arange(n) % 9, "batch": np.repeat([1.0, 8.0, 64.0], n // 3 + 1)[:n],
            "tokens_per_s_per_user": speed, "fits": rng.random(n) > 0.2,
            "bound": np.array(["memory:hbm", 'say "hi"', "a,b", "esc\x1b[0m"] * (n // 4 + 1))[:n],
            "energy_per_token_j": np.where(rng.random(n) > 0.5, -0.0, rng.random(n)),
            "note": np.array([None, {"k": [1, 2]}, "x", 1.5] * (n // 4 + 1), dtype=object)[:n]}
    absent = {"bound": rng.random(n) > 0.9} if gaps else None
    return Columns(cols, absent)


@pytest.mark.parametrize("gaps", [False, True])
@pytest.mark.parametrize("level", [0, 2])
def test_json_of_columns_is_json_dumps_of_the_rows(gaps, level):
    rows = _columns(gaps=gaps)
    data = {"a": 1, "nested": {"rows": rows, "after": [1.5, None]}, "z": "end"}
    expected = json.dumps(jsonable({**data, "nested": {"rows": list(rows), "after": [1.5, None]}}), indent=2)
    got = "".join(json_chunks(jsonable(data), indent=2))
    assert got == expected
    assert "".join(rows.json_chunks(2, level)) == json.dumps(list(rows), indent=2).replace("\n", "\n" + "  " * level)


@pytest.mark.parametrize("gaps", [False, True])
def test_csv_of_columns_is_the_csv_of_the_rows(gaps):
    rows = _columns(gaps=gaps)
    assert csv_text(rows) == csv_text(list(rows))


def test_bounds_of_columns_are_the_bounds_of_each_row():
    """Interval ends a column at a time equal the row-by-row ends, left out where the figure is not finite."""
    ivs = {k: Interval(low_factor=0.8, high_factor=1.3, level=0.8, group="g", n=10, fitted=True)
           for k in ("decode", "ttft", "throughput", "energy")}
    rows = _columns()
    bounded = with_bounds(rows, ivs)
    assert isinstance(bounded, Columns)
    assert json.dumps(list(bounded)) == json.dumps(with_bounds(list(rows), ivs))
    assert csv_text(bounded) == csv_text(with_bounds(list(rows), ivs))


def _spec_argv(n: int, fmt: str) -> list[str]:
    return ["spec", "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b", "--verify-on", "h100-sxm", "--alpha",
            "0.8", "--gamma", f"1..{n}", "--batch", f"1..{n}", fmt]


def _python_calls(argv: list[str]) -> int:
    count = 0

    def profile(frame, event, arg):
        nonlocal count
        count += event == "call"
    sys.setprofile(profile)
    try:
        assert main(argv, console=Console(file=io.StringIO())) == 0
    finally:
        sys.setprofile(None)
    return count


@pytest.mark.parametrize("fmt", ["--json", "--csv"])
def test_spec_output_work_does_not_grow_with_the_rows(fmt, monkeypatch):
    """`roofline spec --batch 1..N --gamma 1..N --json` once called a per-row helper once per row and point (27
    million calls at N = 300) and built a table it did not print. Now 16x the rows cost under 3x the Python calls
    (what grows is the physics' per-batch work), and no table is built."""
    def no_table(*a, **k):
        raise AssertionError("a table was built for " + fmt)
    monkeypatch.setattr(render_spec, "spec_table", no_table)
    _python_calls(_spec_argv(5, fmt))   # specs loaded, caches warm
    small, large = _python_calls(_spec_argv(20, fmt)), _python_calls(_spec_argv(80, fmt))
    assert large < 3 * small, (small, large)


def test_spec_json_rows_are_the_scan():
    """The streamed rows carry the scan's figures: one row per batch and gamma, the best gamma marked once per
    batch, the baseline beside each."""
    out = io.StringIO()
    assert main(_spec_argv(6, "--json"), console=Console(file=out, width=200)) == 0
    d = json.loads(out.getvalue())
    assert len(d["rows"]) == 36
    for b in range(1, 7):
        rows = [r for r in d["rows"] if r["batch"] == b]
        fitting = [r for r in rows if r["fits"]]
        assert sum(r["best"] for r in rows) == (1 if fitting else 0)
        if fitting:
            best = max(fitting, key=lambda r: r["tokens_per_s_per_user"])
            assert best["best"] and math.isclose(best["baseline_tokens_per_s_per_user"],
                                                 d["baseline_by_batch"][b - 1]["tokens_per_s_per_user"])
