"""How fast roofline answers: design points per second against a numpy floor measured in the same run.

* a decode sweep of batch x context (10^6 points at full size);
* the Corsair scenario's placement x batch x gamma sweep (examples/gimlet_corsair.py);
* `roofline validate` on the shipped measurements;
* one evaluation of the calibration's residuals over its fitted rows (what `roofline calibrate` repeats a few
  hundred times per fit), in this process and shared among every core (``--jobs``; the same numbers);
* `roofline.sweep` of 8 device groups x batch x context reduced to its Pareto frontier in chunks, in this
  process and on a process pool of every core (the same answer; the speed-up says when a pool pays);
* a scalar `decode_step` named by ids, each call at a context no call before it used (nothing remembered), mean
  time per call; and the same with the model and group resolved once (records);
* `import roofline`, `roofline --help` and `roofline devices` wall time (fresh interpreters), and `import
  roofline` as a ratio to `import numpy, attrs` (fresh interpreters, byte-code caches written first as an
  installed package has them);
* `roofline size` for two device kinds (h100-sxm, b200), wall time of a fresh interpreter;
* `roofline spec --batch 1..300 --gamma 1..300 --json` (90,000 rows, written to /dev/null): wall time and peak
  memory of a fresh interpreter, against the library call that computes the same scan.

The floor is one numpy elementwise pass (``a + 1.0``, allocating its result) over an array of the same number of
points: the cost of touching every point once. Goals (issue: hardening): the decode sweep within 30x of the
floor; import under 150 ms without sympy, scipy or matplotlib; --help and devices under 0.5 s. Issue 51: the spec
scan's JSON under 3 s and 500 MB; a scalar decode step under 0.1 ms; `import roofline` within 1.8x of `import
numpy, attrs`; `roofline size` for two device kinds under 1 s.

Run: python examples/benchmark.py [--json] [--quick]
"""

import os
import subprocess
import sys
import time

import numpy as np
from rich.console import Console
from rich.table import Table

import roofline as rl
from roofline.evidence.workers import usable_cores
from roofline.evidence.workers import workers as workers_for
from roofline.ui.output import run_example


def best_of(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def floor_s(points: int, repeat: int) -> float:
    a = np.random.default_rng(0).random(points)
    return best_of(lambda: a + 1.0, repeat)


def wall(cmd: list[str], repeat: int) -> float:
    return best_of(lambda: subprocess.run(cmd, capture_output=True, check=True), repeat)


def sweep_rows(quick: bool, repeat: int) -> list[dict]:
    """The chunked Pareto sweep in one process and on a pool of every core (the pool is started once, outside
    the timing, as a long-lived cluster would be)."""
    from concurrent.futures import ProcessPoolExecutor
    groups = ["b200", "b200:2", "b200:4", "h200-sxm", "h200-sxm:2", "h100-sxm:4", "mi300x", "mi300x:2"]
    side = 128 if quick else 768
    batch, context = np.arange(1, side + 1), np.linspace(128, 131072, side).round()
    n = len(groups) * side * side

    def go(ex=None):
        return rl.sweep("llama-3.1-70b", groups, batch=batch, context=context, chunk=50_000, executor=ex)
    serial = go()
    rows = [{"workload": f"sweep {len(groups)} groups x {side} x {side}, one process", "points": n,
             "time_s": best_of(go, min(repeat, 3)), "floor_s": floor_s(n, repeat), "goal_ratio": None}]
    workers = usable_cores()
    with ProcessPoolExecutor(workers) as ex:
        go(ex)   # start the workers
        pooled = go(ex)
        t = best_of(lambda: go(ex), min(repeat, 3))
    assert np.array_equal(serial.batch, pooled.batch) and np.array_equal(serial.context, pooled.context)
    rows.append({"workload": f"the same sweep, process pool of {workers}", "points": n, "time_s": t,
                 "floor_s": floor_s(n, repeat), "goal_ratio": None})
    return rows


SPEC_ARGS = ["--target", "gpt-oss-120b", "--draft", "gpt-oss-draft-1.6b", "--draft-on", "corsair:2", "--verify-on",
             "b200:8", "--alpha", "0.926"]


def spec_json(quick: bool, repeat: int) -> dict:
    """`roofline spec` over batch x gamma with --json in a fresh interpreter (wall time, peak resident memory)
    against the library's scan in this process."""
    from roofline import optimal_gamma, speculative_round
    from roofline.specs.resolve import resolve_group
    side = 30 if quick else 300
    n = np.arange(1, side + 1)

    def library() -> None:
        r = speculative_round("gpt-oss-120b", verify_on=resolve_group("b200:8"), draft="gpt-oss-draft-1.6b",
                              draft_on=resolve_group("corsair:2"), acceptance=0.926, gamma=n[None, :],
                              batch=n[:, None], context=8192)
        optimal_gamma(r)
    library()
    argv = ["spec", *SPEC_ARGS, "--gamma", f"1..{side}", "--batch", f"1..{side}", "--json"]
    probe = ("import os, resource, sys, time; from rich.console import Console; from roofline.ui.cli import main; "
             "t = time.perf_counter(); main(sys.argv[1:], console=Console(file=open(os.devnull, 'w'))); "
             "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)")
    runs = [subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, check=True)
            .stdout.split() for _ in range(min(repeat, 3))]
    return {"rows": side * side, "json_s": min(float(r[0]) for r in runs),
            "peak_bytes": min(int(r[1]) for r in runs), "library_s": best_of(library, min(repeat, 3)),
            "goals": {"json_s": 3.0, "peak_bytes": 500e6}}


def scalar_decode(quick: bool, repeat: int) -> dict:
    """A scalar ``decode_step`` over contexts no earlier call used (the pass counts are remembered by value, so a
    context seen before would be answered from memory): mean time per call, named by ids as a user writes it and
    with the model and group resolved once."""
    from roofline.specs.resolve import resolve_group
    calls = 200 if quick else 2000
    model, group = rl.load_model("llama-3.1-8b"), resolve_group("h200-sxm")
    rl.decode_step("llama-3.1-8b", "h200-sxm", batch=1, context=1)   # warm the caches (spec loading)
    fresh = iter(range(1000, 10**9))

    def per_call(m, g) -> float:
        contexts = [next(fresh) for _ in range(calls)]
        t = time.perf_counter()
        for c in contexts:
            rl.decode_step(m, g, batch=1, context=c)
        return (time.perf_counter() - t) / calls
    return {"calls": calls, "ids_s": min(per_call("llama-3.1-8b", "h200-sxm") for _ in range(repeat)),
            "records_s": min(per_call(model, group) for _ in range(repeat)), "goals": {"ids_s": 1e-4}}


def import_ratio(repeat: int) -> dict:
    """`import roofline` against `import numpy, attrs`, each in fresh interpreters taken in turn (the best of
    ``repeat`` each; the byte-code caches written first, :func:`write_bytecode`)."""
    py = sys.executable

    def probe(code: str) -> float:
        timed = f"import time; t = time.perf_counter(); {code}; print(time.perf_counter() - t)"
        return float(subprocess.run([py, "-c", timed], capture_output=True, text=True, check=True).stdout)
    pairs = [(probe("import roofline"), probe("import numpy, attrs")) for _ in range(max(repeat, 5))]
    ours, base = min(p[0] for p in pairs), min(p[1] for p in pairs)
    return {"roofline_s": ours, "numpy_attrs_s": base, "ratio": ours / base, "goals": {"ratio": 1.8}}


def write_bytecode() -> None:
    """Compile the package's byte-code caches, as an installed package has them (a checkout run with
    PYTHONDONTWRITEBYTECODE has none): the fresh interpreters timed after it load compiled modules, as numpy's are."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.dirname(rl.__file__)], capture_output=True,
                   check=True)


SIZE_ARGS = ["size", "llama-3.1-70b", "--devices", "h100-sxm,b200", "--users", "100",
             "--min-tokens-per-s-per-user", "20"]


def calibration_rows(quick: bool) -> list[dict]:
    """One evaluation of the calibration's residuals (every fitted row predicted under one parameter vector) in
    this process and shared among a pool of every core, as ``roofline calibrate --jobs`` does."""
    from roofline.evidence import calibrate as cal
    from roofline.evidence.validate import read_rows, shipped_data
    base = cal._gpu_base()
    usable, _skipped = cal._usable(read_rows(shipped_data())[:: 60 if quick else 1], base)
    rows = [r for r in usable if cal.fitted_row(r)]
    layout = cal._stack_layout(rows, cal.SHRINK)
    x = layout.x0(base)
    cal._residuals(x, rows, base, layout)   # warm the per-process caches (specs, memory-bound batches)
    t = time.perf_counter()
    alone = cal._residuals(x, rows, base, layout)
    out = [{"workload": "calibration residuals, one process", "points": len(rows),
            "time_s": time.perf_counter() - t, "floor_s": floor_s(len(rows), 3), "goal_ratio": None}]
    workers = usable_cores()
    with workers_for(workers) as pool:
        cal._residuals(x, rows, base, layout, pool)   # start the workers and warm their caches
        t = time.perf_counter()
        shared = cal._residuals(x, rows, base, layout, pool)
        elapsed = time.perf_counter() - t
    assert alone.tolist() == shared.tolist()
    out.append({"workload": f"the same, shared among {workers} processes (calibrate --jobs {workers})",
                "points": len(rows), "time_s": elapsed, "floor_s": floor_s(len(rows), 3), "goal_ratio": None})
    return out


def size_at_rate_row(repeat: int) -> dict:
    """Served-load sizing in the library (issue: "size --rate answers in under a second"): the fewest B200s whose p99
    TTFT and ITL meet their limits at 20 requests/s, over the group shapes and both placements (the README's
    `size --rate` example on one device kind); points: the queue evaluations it made."""
    import roofline.serving.load as load
    target = rl.LoadTarget(rate_per_s=20, workload=rl.Workload(lengths=rl.Lengths.lognormal(1024, 1024, cv=0.8)),
                           limits={"ttft_p99_s": 1.0, "itl_p99_s": 0.05})
    rl.size_at_rate("llama-3.1-70b", "b200", target)   # warm: specs read, presets resolved
    calls, inner = [0], load.engine_load

    def counted(*a, **k):
        calls[0] += 1
        return inner(*a, **k)
    load.engine_load = counted
    try:
        t = best_of(lambda: rl.size_at_rate("llama-3.1-70b", "b200", target), min(repeat, 3))
    finally:
        load.engine_load = inner
    evaluations = calls[0] // min(repeat, 3)
    return {"workload": f"size at a rate, one device kind (goal < 1 s; {evaluations} queue evaluations)",
            "points": evaluations, "time_s": t, "floor_s": floor_s(evaluations, repeat), "goal_ratio": None}


def run(quick: bool) -> dict:
    repeat = 1 if quick else 7   # quick: the benchmark runs (its figures are read from a full run)
    side = 100 if quick else 1000
    B = np.arange(1, side + 1)[:, None]
    L = np.linspace(0, 131072, side).round()[None, :]
    rl.decode_step("llama-3.1-8b", "h200-sxm", batch=B, context=L)  # warm caches (spec loading)
    rows = []
    t = best_of(lambda: rl.decode_step("llama-3.1-8b", "h200-sxm", batch=B, context=L), repeat)
    rows.append({"workload": f"decode sweep {side}x{side} (batch x context)", "points": side * side, "time_s": t,
                 "floor_s": floor_s(side * side, repeat), "goal_ratio": 30})

    from roofline import Placement, Request, evaluate_serving
    acc = rl.Acceptance.alpha_by_gamma({5: 0.926, 40: 0.962})
    req = Request(input_tokens=8192, output_tokens=1024)
    batches = 2 ** np.arange(0, 9 if quick else 13)[:, None]
    gammas = np.arange(1, 13 if quick else 41)[None, :]
    g8 = "b200:8"
    placements = [Placement.build("no spec", prefill=g8, decode=g8),
                  Placement.build("gpu spec", prefill=g8, decode=g8, draft_model="gpt-oss-draft-1.6b"),
                  Placement.build("corsair", prefill=g8, decode=g8, draft="corsair:2", draft_model="gpt-oss-draft-1.6b")]

    def scenario() -> None:
        for p in placements:
            evaluate_serving("gpt-oss-120b", p, req, batch=batches, gamma=gammas if p.speculative else 0,
                             acceptance=acc if p.speculative else None)
    n = batches.size * (1 + 2 * gammas.size)
    rows.append({"workload": "Corsair scenario: placements x batch x gamma", "points": int(n),
                 "time_s": best_of(scenario, repeat), "floor_s": floor_s(int(n), repeat), "goal_ratio": None})

    import attrs

    from roofline.evidence.validate import read_rows, shipped_data, validate
    from roofline.specs.params import shipped_profile
    data = read_rows(shipped_data())[:: 40 if quick else 1]
    rows.append({"workload": "validate (shipped measurements" + (", every 40th row)" if quick else ")"), "points": len(data),
                 # a fresh copy of the profile each time: validate() would answer a repeat from memory
                 "time_s": best_of(lambda: validate(data, attrs.evolve(shipped_profile())), 1 if quick else 3),
                 "floor_s": floor_s(len(data), repeat),
                 "goal_ratio": None})
    rows += calibration_rows(quick)
    rows += sweep_rows(quick, repeat)
    rows.append(size_at_rate_row(repeat))
    for r in rows:
        r["points_per_s"] = r["points"] / r["time_s"]
        r["ratio_to_floor"] = r["time_s"] / r["floor_s"]
    py = sys.executable
    write_bytecode()
    probe = ("import sys, time; t = time.perf_counter(); import roofline; dt = time.perf_counter() - t; "
             "print(dt, [m for m in ('sympy', 'scipy', 'matplotlib') if m in sys.modules])")
    imports = [subprocess.run([py, "-c", probe], capture_output=True, text=True, check=True).stdout.split(maxsplit=1)
               for _ in range(repeat)]
    startup = {"import_s": min(float(i[0]) for i in imports), "import_pulls_heavy": imports[0][1].strip(),
               "help_s": wall([py, "-m", "roofline", "--help"], repeat),
               "devices_s": wall([py, "-m", "roofline", "devices"], repeat)}
    startup["size_s"] = wall([py, "-m", "roofline", *SIZE_ARGS], repeat)
    startup["goals"] = {"import_s": 0.150, "help_s": 0.5, "devices_s": 0.5, "size_s": 1.0}
    return {"rows": rows, "startup": startup, "import_ratio": import_ratio(repeat),
            "scalar_decode": scalar_decode(quick, repeat), "spec_json": spec_json(quick, repeat), "quick": quick}


def show(out: dict, console: Console) -> None:
    t = Table(title="throughput against a numpy floor measured in this run",
              caption="ratio = time / (one numpy elementwise pass over the same number of points)")
    for c in ("workload", "points", "time ms", "points/s", "floor ms", "ratio", "goal"):
        t.add_column(c, justify="left" if c == "workload" else "right")
    for r in out["rows"]:
        t.add_row(r["workload"], f"{r['points']:,}", f"{r['time_s'] * 1e3:.1f}", f"{r['points_per_s']:,.0f}",
                  f"{r['floor_s'] * 1e3:.2f}", f"{r['ratio_to_floor']:.0f}x",
                  f"<= {r['goal_ratio']}x" if r["goal_ratio"] else "")
    console.print(t)
    s = out["startup"]
    u = Table(title="start-up (fresh interpreter)")
    for c in ("what", "seconds", "goal"):
        u.add_column(c, justify="left" if c == "what" else "right")
    u.add_row("import roofline", f"{s['import_s']:.3f}", f"< {s['goals']['import_s']}")
    u.add_row("heavy modules imported", s["import_pulls_heavy"], "[]")
    u.add_row("roofline --help", f"{s['help_s']:.3f}", f"< {s['goals']['help_s']}")
    u.add_row("roofline devices", f"{s['devices_s']:.3f}", f"< {s['goals']['devices_s']}")
    u.add_row("roofline size, two device kinds", f"{s['size_s']:.3f}", f"< {s['goals']['size_s']:g}")
    r = out["import_ratio"]
    u.add_row(f"import roofline / import numpy, attrs ({r['roofline_s']:.3f} / {r['numpy_attrs_s']:.3f} s)",
              f"{r['ratio']:.2f}x", f"<= {r['goals']['ratio']}x")
    d = out["scalar_decode"]
    u.add_row(f"scalar decode_step, a new context each call (ms per call, mean of {d['calls']:,})",
              f"{d['ids_s'] * 1e3:.3f}", f"<= {d['goals']['ids_s'] * 1e3:g}")
    u.add_row("  the same on records resolved once", f"{d['records_s'] * 1e3:.3f}", "")
    j = out["spec_json"]
    u.add_row(f"roofline spec --json, {j['rows']:,} rows (the library's scan: {j['library_s']:.2f} s)",
              f"{j['json_s']:.2f}", f"< {j['goals']['json_s']:g}")
    u.add_row("  its peak memory (MB)", f"{j['peak_bytes'] / 1e6:.0f}", f"< {j['goals']['peak_bytes'] / 1e6:.0f}")
    console.print(u)


if __name__ == "__main__":
    run_example(__doc__, run, show, quick=True)
