"""``roofline diagnose``, ``roofline validate`` and ``roofline calibrate``."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import attrs
from rich.console import Console

from ...errors import RooflineError
from ...evidence.calibrate import (
    FOLD_BY,
    SHRINK,
    calibrate,
    fit_layer_overhead,
    fit_power_floor,
    fit_record,
    save_profile,
    uncertainty,
)
from ...evidence.diagnose import Measurement, diagnose, read_vllm_benchmark
from ...evidence.family_fit import PROFILE_FIT_FAMILIES, fit_family
from ...evidence.repeats import repeat_summary, repeated_measurements
from ...evidence.validate import read_rows, shipped_data, validate
from ...evidence.workers import cap_jobs, default_jobs, usable_cores
from ...specs.files import check_writable
from ...specs.hf_config import load_model
from ...specs.params import Profile, shipped_profile_path
from ...specs.resolve import resolve_group
from ..options import (
    MODEL_HELP,
    Adder,
    UsageError,
    add_formats,
    add_what_if,
    engine,
    formats,
    mean_count,
    number,
    positive,
    profile,
    what_if,
)
from ..output import emit
from ..render_evidence import (
    VALIDATE_ROWS_SHOWN,
    calibration_view,
    diagnosis_view,
    family_fit_view,
    layer_fit_view,
    params_dict,
    power_fit_view,
    validation_view,
)

SHIPPED_DATA_NAME = "roofline/validation/measurements.csv"


def cmd_diagnose(args: argparse.Namespace, console: Console) -> int:
    if args.vllm_json:
        typed = [f"--{k.replace('_', '-')}" for k in ("batch", "isl", "osl", "tokens_per_s_per_user", "tpot_ms",
                                                      "tokens_per_s") if getattr(args, k) is not None]
        if typed:
            raise UsageError(f"--vllm-json reads the run's load and rates from its file; drop {', '.join(typed)}")
        m = read_vllm_benchmark(args.vllm_json)
        if args.utilisation is not None:   # not in the file: the one measurement the command line adds
            m = attrs.evolve(m, utilisation=args.utilisation)
    else:
        if args.batch is None or args.isl is None or args.osl is None:
            raise UsageError("give --batch, --isl and --osl with a measured rate, or --vllm-json FILE")
        if all(getattr(args, k) is None for k in ("tokens_per_s_per_user", "tpot_ms", "tokens_per_s")):
            raise UsageError("give the measured rate: one of --tokens-per-s-per-user, --tpot-ms or --tokens-per-s")
        m = Measurement.from_rates(batch=args.batch, input_tokens=args.isl, output_tokens=args.osl,
                                   tokens_per_s_per_user=args.tokens_per_s_per_user,
                                   tpot_s=args.tpot_ms / 1e3 if args.tpot_ms is not None else None,
                                   tokens_per_s_total=args.tokens_per_s, utilisation=args.utilisation,
                                   serving="continuous" if args.continuous else "static")
    wi = what_if(args)
    group = resolve_group(args.device)
    wi.check_used([group.device])
    fmt = formats(args, load_model(args.model))
    eng = engine(args, [group.device])
    d = diagnose(args.model, wi.apply_group(group), m, formats=fmt, params=eng.params)
    emit(console, diagnosis_view(d, wi.describe()), args, eng)
    return 0


def _fitted_on(prof: Profile, path: str) -> bool:
    """Whether ``prof`` was calibrated on the measurements file at ``path``: the shipped profile on the shipped
    data, a profile of your own on the file its ``[fit]`` names (as `roofline calibrate` wrote it)."""
    here = Path(path).resolve()
    if prof.path and Path(prof.path).resolve() == shipped_profile_path().resolve():
        return here == Path(shipped_data()).resolve()
    data = prof.fit.get("data")
    return bool(data) and here == Path(str(data)).resolve()


def cmd_validate(args: argparse.Namespace, console: Console) -> int:
    path = args.data or str(shipped_data())
    if args.plot:
        from ..plot import check_plot_path
        check_plot_path(args.plot)
    prof = profile(args)
    rows = read_rows(path)
    v = validate(rows, prof, jobs=cap_jobs(args.jobs, len(rows)) if args.jobs else default_jobs(len(rows)))
    if not v.rows:
        reasons = "; ".join(f"{s['id']}: {s['reason']}" for s in v.skipped[:3])
        raise RooflineError(f"{path}: no row could be predicted ({len(v.skipped)} skipped; {reasons})")
    if args.plot:
        from ..plot import plot_validation
        o = v.summary["overall"]
        plot_validation(v.rows, args.plot, title=f"roofline against {o.get('n', 0)} published measurements "
                                                 f"(median |error| {o.get('median_abs_error', 0):.0%})")
    emit(console, validation_view(v, path, prof.fit, _fitted_on(prof, path),
                                  repeat_summary(repeated_measurements(rows)), shown=args.rows), args)
    return 0


def cmd_calibrate_family(args: argparse.Namespace, console: Console) -> int:
    path = args.data or str(shipped_data())
    if args.family in PROFILE_FIT_FAMILIES:   # compiled-graph accelerators: five profile fields, held out by publication
        emit(console, family_fit_view(fit_family(read_rows(path), args.family), path), args)
        return 0
    fit = fit_layer_overhead(read_rows(path), args.family)
    emit(console, layer_fit_view(fit, path), args)
    return 0


def cmd_calibrate(args: argparse.Namespace, console: Console) -> int:
    _check_calibrate(args)
    if args.energy:
        path = args.data or str(shipped_data())
        rows = read_rows(path)
        fit = fit_power_floor(rows, profile(args), jobs=cap_jobs(args.jobs or usable_cores(), len(rows)))
        emit(console, power_fit_view(fit, path), args)
        return 0
    if args.family:
        return cmd_calibrate_family(args, console)
    path = args.data or str(shipped_data())
    if args.out:   # fail before the fit, not after it
        check_writable(args.out, refuse=(path,))
    fit = _fit_gpu(args, read_rows(path))
    if args.out:
        save_profile(fit, args.out, data=path if args.data else SHIPPED_DATA_NAME)
    emit(console, calibration_view(_calibration_dict(fit, path, args.out)), args)
    return 0


def _check_calibrate(args: argparse.Namespace) -> None:
    """Refuse options that do not go together: each of --energy, --family and the GPU calibration takes its own."""
    if args.by != FOLD_BY[0] and (args.energy or args.family or not args.folds):
        raise UsageError("--by groups the rows of --folds K (the GPU calibration's held-out fits); give --folds, "
                         "without --energy or --family")
    if args.energy and (args.family or args.out or args.loo or args.folds):
        raise UsageError("--energy prints the GPU busy-power floor for the family file; it takes only --data, "
                         "--profile and --jobs")
    if args.family == "gpu" and not args.energy:
        raise UsageError("the gpu family is calibrated without --family (roofline calibrate [--out ...])")
    if args.family and not args.energy and (args.out or args.loo or args.folds):
        raise UsageError("--family prints the fitted per-layer latencies for the family file; --out and --loo "
                         "apply to the GPU calibration")
    if args.energy or args.family:
        return
    if args.loo and args.folds:
        raise UsageError("give --loo or --folds, not both")
    if not (math.isfinite(args.shrink) and args.shrink >= 0):
        raise UsageError(f"--shrink must be a finite number >= 0, got {args.shrink}")


def _fit_gpu(args: argparse.Namespace, rows: list[Any]) -> Any:
    """The GPU calibration of ``rows``, its progress on stderr where that is a terminal (stdout may be --json to
    a pipe)."""
    from rich.console import Console as RichConsole
    from rich.progress import Progress
    err = RichConsole(stderr=True)
    with Progress(console=err, transient=True, disable=not err.is_terminal) as bar:
        task = bar.add_task("calibrating", total=None)

        def tick(done: int, total: int, what: str) -> None:
            bar.update(task, completed=done, total=total, description=what)

        return calibrate(rows, holdout="loo" if args.loo else args.folds, progress=tick,
                         jobs=cap_jobs(args.jobs, len(rows)) if args.jobs else default_jobs(len(rows)),
                         fold_by=args.by, shrink=args.shrink)


def _calibration_dict(fit: Any, path: str, out: str | None) -> dict[str, Any]:
    """The GPU calibration as --json prints it: errors (in-sample, held out, approximate leave-one-out), the
    fitted parameters per family and their uncertainty, and the record the profile keeps."""
    return {"data": path, "rows": fit.rows, "checked_rows": list(fit.checked_rows), "skipped": fit.skipped,
            "median_abs_error": fit.median_abs_error,
            "heldout": fit.holdout or None, "heldout_median_abs_error": fit.loo_median_abs_error,
            "heldout_errors": fit.loo_errors, "heldout_unseen_builds": sorted(fit.heldout_unseen_builds),
            "heldout_by_build": fit.heldout_split() if fit.loo_errors else None,
            "loo_approx_median_abs_error": fit.approx_loo_median_abs_error, "loo_approx_errors": fit.approx_loo_errors,
            "default": params_dict(fit.profile.default),
            "families": {k: params_dict(v) for k, v in fit.profile.families.items()},
            "standard_errors": fit.standard_errors, "uncertainty": uncertainty(fit), "profile": out,
            "record": fit_record(fit, data=path)}


def _rows_shown(text: str) -> int | None:
    if text.strip().lower() == "all":
        return None
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"a whole number >= 0 or 'all', not {text!r}")
    return n


def _utilisation(text: str) -> float:
    v = number(text, "--utilisation")
    if not 0 <= v <= 1:
        raise UsageError(f"--utilisation: a fraction in [0, 1], got {text}")
    return v


def register(add: Adder) -> None:
    sp = add("diagnose", cmd_diagnose, "from measured tokens/s (or a vLLM benchmark_serving JSON): achieved bandwidth "
                                       "and FLOP/s, MBU and MFU against datasheet peaks, and the bottleneck",
             profile=True)
    sp.add_argument("model", help="model: " + MODEL_HELP)
    sp.add_argument("device", metavar="GROUP", help="the measured device group, e.g. h100-sxm:2")
    sp.add_argument("--vllm-json", default=None, metavar="FILE", help="a benchmark_serving --save-result file")
    sp.add_argument("--batch", type=mean_count, default=None, help="concurrent sequences (a mean may be fractional)")
    sp.add_argument("--input-tokens", "--isl", dest="isl", type=mean_count, default=None, metavar="N",
                    help="input tokens per request (mean; 1k = 1,000)")
    sp.add_argument("--output-tokens", "--osl", dest="osl", type=mean_count, default=None, metavar="N",
                    help="output tokens per request (mean; 1k = 1,000)")
    rate = sp.add_mutually_exclusive_group()   # one measured rate: two would contradict each other or say nothing

    def measured(flag: str) -> Any:
        return lambda text: number(text, flag, positive=True)
    rate.add_argument("--tokens-per-s-per-user", type=measured("--tokens-per-s-per-user"), default=None,
                      help="measured output tokens/s per user")
    rate.add_argument("--tpot-ms", type=measured("--tpot-ms"), default=None, help="measured time per output token, ms")
    rate.add_argument("--tokens-per-s", type=measured("--tokens-per-s"), default=None,
                      help="measured total output tokens/s of the group")
    sp.add_argument("--utilisation", type=_utilisation, default=None, help="measured GPU utilisation, 0-1 (optional)")
    sp.add_argument("--continuous", action="store_true", help="continuous batching (prompts share the steps)")
    add_formats(sp)
    add_what_if(sp)

    sp = add("validate", cmd_validate, "predict published measurements (CSV) and report the errors", profile=True,
             stack=False)
    sp.add_argument("--data", default=None, metavar="FILE.csv", help="measurements (default: the shipped copy)")
    sp.add_argument("--plot", default=None, metavar="FILE.png", help="draw the errors (needs the plot extra)")
    sp.add_argument("--rows", type=_rows_shown, default=VALIDATE_ROWS_SHOWN, metavar="N|all",
                    help=f"rows the terminal lists: the N with the largest errors, or all in the file's order "
                         f"(default {VALIDATE_ROWS_SHOWN}; --json and --csv carry every row)")
    sp.add_argument("--jobs", type=positive, default=None, metavar="N",
                    help="share the rows among N processes (the same numbers; default: one per core, at most one "
                         "per 200 rows)")
    sp = add("calibrate", cmd_calibrate, "fit the engine's parameters to measurements (scipy least squares); "
                                         "on the shipped rows the GPU fit runs 12-25 minutes (--folds K adds K "
                                         "fits), with a progress bar on stderr when it is a terminal")
    sp.add_argument("--data", default=None, metavar="FILE.csv", help="measurements (default: the shipped copy)")
    sp.add_argument("--out", default=None, metavar="FILE.toml", help="write a profile every command accepts")
    sp.add_argument("--loo", action="store_true",
                    help="also compute the exact leave-one-out error: one fit per row, minutes each (days for the "
                         "shipped rows); every calibration estimates it by one Newton step per row in a second")
    sp.add_argument("--folds", type=int, default=None, metavar="K",
                    help="also compute the held-out error with K folds of whole publications (K fits)")
    sp.add_argument("--by", choices=FOLD_BY, default=FOLD_BY[0],
                    help="--folds of whole publications (default), of whole device kinds (hardware) or stack builds "
                         "(stack) the fit never saw, or of rows drawn at random (seed 0)")
    sp.add_argument("--jobs", type=positive, default=None, metavar="N",
                    help="share every fit's rows among N processes (the same numbers, ~N times faster on N cores; "
                         "default: one per core, at most one per 200 rows); with --energy, the floor grid")
    sp.add_argument("--shrink", type=float, default=SHRINK, metavar="W",
                    help="partial pooling: draw each stack family's own parameters toward their mean over the "
                         f"families with a prior of sd = bound range / W (0: none; default {SHRINK:g})")
    sp.add_argument("--energy", action="store_true",
                    help="fit the GPU busy-power floor to the measured power rows (J-per-token rows check it)")
    sp.add_argument("--family", default=None, metavar="FAMILY",
                    help="gaudi, trainium, tpu: fit the family's execution profile (bandwidth and compute shares, "
                         "step, layer and request costs) on its rows, held out by publication (minutes); "
                         "others (groq, cerebras, ...): fit the per-layer latency on the smallest models' rows "
                         "and show how it predicts the larger ones")
