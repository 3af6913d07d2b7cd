"""CLI subcommands for placements, Pareto frontiers and side-by-side comparisons (parse and render only)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from rich.console import Console

from . import render
from .cli import (UsageError, _acceptance, _nonneg_int, _pos_int, _print_json, apply_sets,
                  engine_params, parse_ints)
from .configs import load_model
from .errors import RooflineError
from .hardware import load_device
from .links import get_link


def _request(args: argparse.Namespace) -> Any:
    from .serving import Request
    return Request(input_tokens=args.isl, output_tokens=args.osl)


def _group(text: str, sets: list[str]) -> Any:
    from .engine import DeviceGroup, parse_group
    g = parse_group(text)
    return DeviceGroup(device=apply_sets(g.device, sets), tp=g.tp, ep=g.ep, pp=g.pp)


def parse_placement(text: str, *, draft_model: str | None, sets: list[str]) -> Any:
    """'NAME: prefill=b200:8, decode=b200:8, draft=corsair:2' (draft=target: on the decode group)."""
    from .serving import Placement
    name, sep, body = text.partition(":")
    if not sep or not body.strip() or "=" not in body:
        raise UsageError(f"--placement {text!r}: expected 'NAME: decode=ID:N[, prefill=ID:N][, draft=ID:N|target]'")
    keys: dict[str, str] = {}
    for item in body.split(","):
        k, eq, v = item.partition("=")
        if not eq:
            raise UsageError(f"--placement {text!r}: {item.strip()!r} is not KEY=VALUE")
        keys[k.strip().lower().replace("_", "-")] = v.strip()
    unknown = set(keys) - {"decode", "verify", "prefill", "draft", "draft-kind", "head-layers", "kv-link", "draft-link"}
    if unknown:
        raise UsageError(f"--placement {text!r}: unknown keys {sorted(unknown)}")
    decode = keys.get("decode") or keys.get("verify")
    if not decode:
        raise UsageError(f"--placement {text!r}: needs decode=ID:N (or verify=ID:N)")
    kind = keys.get("draft-kind") or ("model" if "draft" in keys else None)
    if kind == "model" and not draft_model:
        raise UsageError(f"--placement {text!r} has a draft: give the draft model with --draft")
    draft = keys.get("draft")
    return Placement(
        name=name.strip(), decode=_group(decode, sets), prefill=_group(keys["prefill"], sets) if "prefill" in keys else None,
        draft=_group(draft, sets) if draft and draft != "target" else None,
        draft_model=load_model(draft_model) if draft_model and kind == "model" else None, draft_kind=kind,
        head_layers=int(keys.get("head-layers", 1)),
        kv_link=get_link(keys.get("kv-link", "nvlink")),
        draft_link=get_link(keys.get("draft-link", "pcie5")))


def _formats(args: argparse.Namespace) -> dict[str, Any]:
    return {"weights": args.weights, "experts": args.experts, "kv": args.kv, "activations": args.activations}


def cmd_placements(args: argparse.Namespace, console: Console) -> int:
    from .placements import enumerate_placements
    from .serving import evaluate_serving
    devices = [apply_sets(load_device(d.strip()), args.set) for d in args.devices.split(",")]
    acc = _acceptance(args) if args.draft else None
    cands = enumerate_placements(args.target, devices, _request(args), batch=args.batch, draft_model=args.draft,
                                 mode=args.mode, target_formats=_formats(args), params=engine_params(args))
    rows, out = [], []
    for c in cands:
        point, reason = None, c.reason
        if c.placement is not None:
            try:
                r = evaluate_serving(args.target, c.placement, _request(args), batch=args.batch,
                                     gamma=args.gamma if c.placement.speculative else 0, acceptance=acc,
                                     mode=args.mode, target_formats=_formats(args), params=engine_params(args))
                point = render.serving_point(r, 0)
                reason = "" if point["fits"] else "does not fit at this batch"
                if r.energy_note:
                    reason = r.energy_note
            except RooflineError as e:  # a placement that cannot be evaluated is listed with why
                reason = str(e)
        rows.append((c.name, c.placement.describe() if c.placement else "", point, reason))
        out.append({"name": c.name, "description": c.placement.describe() if c.placement else None,
                    "feasible": bool(point and point["fits"]), "reason": reason or None, "metrics": point})
    if args.json:
        _print_json(console, {"target": args.target, "request": {"isl": args.isl, "osl": args.osl},
                              "batch": args.batch, "placements": out})
    else:
        console.print(render.serving_table(
            rows, f"placements of {args.target}, {args.isl} in / {args.osl} out, batch {args.batch}, {args.mode}",
            "Each stage on the smallest group that holds it (TP up to 8, then pipeline stages). "
            "Throughput, devices and power per replica (prefill groups counted by the share of time they are busy)."))
    return 0


def cmd_pareto(args: argparse.Namespace, console: Console) -> int:
    import numpy as np

    from .frontier import compare_frontiers, pareto_frontier
    from .serving import evaluate_serving
    if not args.placement:
        raise UsageError("give at least one --placement 'NAME: decode=ID:N, ...'")
    placements = [parse_placement(p, draft_model=args.draft, sets=args.set) for p in args.placement]
    acc = _acceptance(args) if any(p.speculative for p in placements) else None
    batches = np.array(parse_ints(args.batch, "--batch"))[:, None]
    gammas = np.array(parse_ints(args.gamma, "--gamma"))[None, :]
    configs, frontiers = [], []
    for p in placements:
        r = evaluate_serving(args.target, p, _request(args), batch=batches, gamma=gammas if p.speculative else 0,
                             acceptance=acc, mode=args.mode, target_formats=_formats(args),
                             params=engine_params(args))
        f = pareto_frontier(r.tokens_per_s_per_user, r.tokens_per_s_per_kw, r.fits)
        frontiers.append(f)
        pts = [render.serving_point(r, int(i)) for i in f.index]
        configs.append({"name": p.name, "description": p.describe(), "frontier": pts, "energy_note": r.energy_note or None})
    comparisons = []
    for p, f in zip(placements[1:], frontiers[1:]):
        c = compare_frontiers(frontiers[0], f) if len(f) and len(frontiers[0]) else None
        comparisons.append({"name": p.name, "against": placements[0].name,
                            "interactivity_optimised": c.interactivity_optimised if c else None,
                            "energy_optimised": c.energy_optimised if c else None,
                            "energy_optimised_tokens_per_s_per_kw": c.energy_optimised_throughput_per_kw if c else None,
                            "max_ratio": c.max_ratio if c else None})
    if args.plot:
        from .plot import plot_frontiers
        plot_frontiers(configs, args.plot, title=f"{args.target}, {args.isl} in / {args.osl} out")
    if args.json:
        _print_json(console, {"target": args.target, "request": {"isl": args.isl, "osl": args.osl},
                              "configurations": configs, "comparisons": comparisons})
        return 0
    for cfg in configs:
        console.print(render.frontier_table(cfg["name"], cfg["frontier"], cfg["description"]))
    if comparisons:
        console.print(render.comparison_table(comparisons, placements[0].name))
    return 0


def cmd_compare(args: argparse.Namespace, console: Console) -> int:
    import numpy as np

    from . import stages
    from .energy import stage_power_w
    from .frontier import elasticities
    model = load_model(args.model)
    variants: list[tuple[str, Any]] = []
    for d in args.devices:
        name, eq, expr = d.partition("=")
        if eq:  # NAME=ID.FIELD=VALUE[;ID.FIELD=VALUE]: a what-if variant of a device
            dev_id = expr.split(".", 1)[0]
            dev = apply_sets(load_device(dev_id), [*args.set, *expr.split(";")])
            variants.append((name, dev))
        else:
            variants.append((d, apply_sets(load_device(d), args.set)))
    batch = np.array(parse_ints(args.batch, "--batch"))
    fmt = dict(weights=args.weights, experts=args.experts, kv=args.kv, tp=args.tp, params=engine_params(args))
    rows = []
    for name, dev in variants:
        row: dict[str, Any] = {"name": name, "device": dev.id}
        try:
            dec = stages.decode_step(model, dev, batch=batch, context=args.context, on_infeasible="nan", **fmt)
            pre = stages.prefill(model, dev, prompt=args.prompt, on_infeasible="nan", **fmt)
            row.update(decode=render.stage_rows(dec), prefill=render.stage_rows(pre)[0],
                       max_batch=int(stages.max_batch(model, dev, context=args.context, **fmt)))
            try:
                pw = args.tp * stage_power_w(dev, dec)
                row["tokens_per_s_per_kw"] = (dec.tokens_per_s / (pw / 1000)).tolist()
            except RooflineError as e:
                row["tokens_per_s_per_kw"] = None
                row["power_note"] = str(e)
            if args.elasticity:
                row["elasticity"] = elasticities(
                    lambda d: float(stages.decode_step(model, d, batch=int(batch[0]), context=args.context,
                                                       on_infeasible="nan", **fmt).time_s), dev)
        except RooflineError as e:
            row["error"] = str(e)
        rows.append(row)
    if args.json:
        _print_json(console, {"model": model.id, "context": args.context, "prompt": args.prompt, "rows": rows})
        return 0
    console.print(render.compare_table(model.id, batch, rows, args.context, args.prompt))
    for row in rows:
        if row.get("elasticity"):
            console.print(render.elasticity_table(row["name"], row["elasticity"], int(batch[0]), args.context))
    return 0


def cmd_diagnose(args: argparse.Namespace, console: Console) -> int:
    from .diagnose import Measurement, diagnose, read_vllm_benchmark
    if args.vllm_json:
        m = read_vllm_benchmark(args.vllm_json)
    else:
        if args.batch is None or args.isl is None or args.osl is None:
            raise UsageError("give --batch, --isl and --osl with a measured rate, or --vllm-json FILE")
        m = Measurement.from_rates(batch=args.batch, input_tokens=args.isl, output_tokens=args.osl,
                                   tokens_per_s_per_user=args.tokens_per_s_per_user, tpot_s=(
                                       args.tpot_ms / 1e3 if args.tpot_ms is not None else None),
                                   tokens_per_s_total=args.tokens_per_s, utilisation=args.utilisation,
                                   serving="continuous" if args.continuous else "static")
    g = _group(args.device, args.set)
    d = diagnose(args.model, g, m, formats={"weights": args.weights, "experts": args.experts, "kv": args.kv,
                                            "activations": args.activations}, params=engine_params(args))
    data = {"model": d.model, "group": d.group, "batch": m.batch, "isl": m.input_tokens, "osl": m.output_tokens,
            "serving": m.serving, "measured_tpot_s": m.tpot_s, "measured_tokens_per_s_per_user": 1 / m.tpot_s,
            "predicted_tpot_s": d.predicted_tpot_s, "bytes_per_step_per_device": d.bytes_per_step,
            "flop_per_step_per_device": d.flop_per_step, "achieved_bytes_per_s": d.achieved_bytes_per_s,
            "achieved_flop_per_s": d.achieved_flop_per_s, "mbu": d.mbu, "mfu": d.mfu, "binding": d.binding,
            "advice": d.advice, "source": m.source}
    if args.json:
        _print_json(console, data)
    else:
        console.print(render.diagnosis_table(data))
    return 0


def add_serving_commands(add: Callable[..., argparse.ArgumentParser]) -> None:
    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--target", required=True, help="target model")
        sp.add_argument("--draft", default=None, help="draft model for speculative placements")
        sp.add_argument("--alpha", default=None)
        sp.add_argument("--acceptance-length", default=None, metavar="G:TAU,...")
        sp.add_argument("--alpha-by-gamma", default=None, metavar="G:ALPHA,...")
        sp.add_argument("--isl", type=_pos_int, default=8192, help="input tokens per request (default 8192)")
        sp.add_argument("--osl", type=_pos_int, default=1024, help="output tokens per request (default 1024)")
        sp.add_argument("--mode", choices=["continuous", "static"], default="continuous")
        sp.add_argument("--weights", default="bf16")
        sp.add_argument("--experts", default=None)
        sp.add_argument("--kv", default="bf16")
        sp.add_argument("--activations", default="bf16")
        sp.add_argument("--set", action="append", default=[], metavar="ID.FIELD=VALUE")

    sp = add("placements", cmd_placements, "every assignment of stages to candidate devices, with TTFT, E2E, tok/s/kW")
    common(sp)
    sp.add_argument("--devices", required=True, help="candidate device ids, comma-separated")
    sp.add_argument("--batch", type=_pos_int, default=16)
    sp.add_argument("--gamma", type=_nonneg_int, default=5, help="draft length for speculative placements")

    sp = add("pareto", cmd_pareto, "tokens/s per kW against tokens/s per user: frontiers and their comparison")
    common(sp)
    sp.add_argument("--placement", action="append", default=[],
                    metavar="'NAME: decode=ID:N, prefill=ID:N, draft=ID:N|target'",
                    help="a configuration (repeatable); the first is the baseline")
    sp.add_argument("--batch", default="1,2,4,8,16,32,64,128,256,512")
    sp.add_argument("--gamma", default="1..16")
    sp.add_argument("--plot", default=None, metavar="FILE.png", help="draw the frontiers (needs the plot extra)")

    sp = add("compare", cmd_compare, "devices or what-if variants side by side (decode, prefill, memory, tok/s/kW)")
    sp.add_argument("model")
    sp.add_argument("devices", nargs="+", metavar="DEVICE|NAME=ID.FIELD=VALUE[;...]")
    sp.add_argument("--batch", default="1,64")
    sp.add_argument("--context", type=_nonneg_int, default=8192)
    sp.add_argument("--prompt", type=_pos_int, default=8192)
    sp.add_argument("--tp", type=_pos_int, default=1)
    sp.add_argument("--weights", default="bf16")
    sp.add_argument("--experts", default=None)
    sp.add_argument("--kv", default="bf16")
    sp.add_argument("--elasticity", action="store_true", help="d ln(decode time) / d ln(spec field), first batch")
    sp.add_argument("--set", action="append", default=[], metavar="ID.FIELD=VALUE")

    sp = add("diagnose", cmd_diagnose, "from measured tokens/s (or a vLLM benchmark_serving JSON): achieved bandwidth "
                                       "and FLOP/s, MBU, MFU and the bottleneck")
    sp.add_argument("model")
    sp.add_argument("device", metavar="ID[:N]", help="the measured device group, e.g. h100-sxm:2")
    sp.add_argument("--vllm-json", default=None, metavar="FILE", help="a benchmark_serving --save-result file")
    sp.add_argument("--batch", type=float, default=None, help="concurrent sequences")
    sp.add_argument("--isl", type=float, default=None)
    sp.add_argument("--osl", type=float, default=None)
    sp.add_argument("--tokens-per-s-per-user", type=float, default=None)
    sp.add_argument("--tpot-ms", type=float, default=None)
    sp.add_argument("--tokens-per-s", type=float, default=None, help="total output tokens/s of the group")
    sp.add_argument("--utilisation", type=float, default=None, help="measured GPU utilisation, 0-1 (optional)")
    sp.add_argument("--continuous", action="store_true", help="continuous batching (prompts share the steps)")
    sp.add_argument("--weights", default="bf16")
    sp.add_argument("--experts", default=None)
    sp.add_argument("--kv", default="bf16")
    sp.add_argument("--activations", default="bf16")
    sp.add_argument("--set", action="append", default=[], metavar="ID.FIELD=VALUE")


def _profile(args: argparse.Namespace) -> Any:
    from .calibrate import load_profile, shipped_profile
    return load_profile(args.profile) if getattr(args, "profile", None) else shipped_profile()


def cmd_validate(args: argparse.Namespace, console: Console) -> int:
    from .validate import read_rows, shipped_data, validate
    path = args.data or str(shipped_data())
    v = validate(read_rows(path), _profile(args))
    if args.plot:
        from .plot import plot_validation
        o = v.summary["overall"]
        plot_validation(v.rows, args.plot, title=f"roofline against {o.get('n', 0)} published measurements "
                                                 f"(median |error| {o.get('median_abs_error', 0):.0%})")
    if args.json:
        _print_json(console, {"data": path, "rows": v.rows, "summary": v.summary, "skipped": v.skipped})
    else:
        console.print(render.validation_table(v, path))
    return 0


def cmd_calibrate(args: argparse.Namespace, console: Console) -> int:
    from .calibrate import calibrate, write_profile
    from .validate import read_rows, shipped_data
    path = args.data or str(shipped_data())
    fit = calibrate(read_rows(path), leave_one_out=args.loo)
    if args.out:
        write_profile(fit, args.out, data=path if args.data else "roofline/validation/measurements.csv")
    data = {"data": path, "rows": fit.rows, "skipped": fit.skipped, "median_abs_error": fit.median_abs_error,
            "loo_median_abs_error": fit.loo_median_abs_error, "loo_errors": fit.loo_errors,
            "default": render.params_dict(fit.profile.default),
            "families": {k: render.params_dict(v) for k, v in fit.profile.families.items()},
            "standard_errors": fit.standard_errors, "profile": args.out}
    if args.json:
        _print_json(console, data)
    else:
        console.print(render.calibration_table(data))
    return 0


def add_validation_commands(add: Callable[..., argparse.ArgumentParser]) -> None:
    sp = add("validate", cmd_validate, "predict published measurements (CSV) and report the errors")
    sp.add_argument("--data", default=None, metavar="FILE.csv", help="measurements (default: the shipped copy)")
    sp.add_argument("--plot", default=None, metavar="FILE.png", help="draw the errors (needs the plot extra)")
    sp = add("calibrate", cmd_calibrate, "fit the engine's global parameters to measurements (scipy least squares)")
    sp.add_argument("--data", default=None, metavar="FILE.csv", help="measurements (default: the shipped copy)")
    sp.add_argument("--out", default=None, metavar="FILE.toml", help="write a profile every command accepts")
    sp.add_argument("--loo", action="store_true", help="also compute the leave-one-out error (slow: one fit per row)")
