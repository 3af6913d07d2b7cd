"""``roofline size``: the fewest devices per device kind that serve N users at a per-user speed and TTFT."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from ...errors import RooflineError
from ...serving.admission import Admission
from ...serving.emit import ENGINES, launch_command
from ...serving.load_sizing import LoadTarget, pessimistic_limits, size_at_rate
from ...serving.serve import Request
from ...serving.sizing import Target, size
from ...specs.devices import Device
from ...specs.groups import DeviceGroup
from ...specs.hf_config import load_model
from ...specs.params import DEFAULT_STACK
from ...specs.resolve import resolve_device, resolve_group
from ..options import (
    MODEL_HELP,
    Adder,
    UsageError,
    acceptance,
    add_acceptance,
    add_formats,
    add_lengths,
    add_load_options,
    add_prices,
    add_what_if,
    engine,
    formats,
    idle_note,
    load_workload,
    number,
    positive,
    price_list,
    refuse_rate_options_without_rate,
    refuse_speculation_without_draft,
    stack_option,
    what_if,
)
from ..output import emit
from ..render_load import size_load_view
from ..render_size import size_view


def _launch(engine: str, model: Any, option: Any, request: Request, params: Any) -> dict[str, Any]:
    """One option's launch command, or why the engine cannot run it (other options still get theirs)."""
    item: dict[str, Any] = {"device": option.device, "placement": option.placement, "replicas": option.replicas,
                            "prefill_groups": option.prefill_groups}
    try:
        item["launch"] = launch_command(engine, model, option, request=request, params=params)
    except RooflineError as e:
        item["error"] = str(e)
    return item


#: Exit status when no option meets the target (the table or JSON still says why, option by option): a script
#: can branch on it, as on grep's 1 for no match; 2 stays for usage errors.
NOTHING_MEETS_TARGET = 1


def device_of(d: DeviceGroup | Device) -> Device:
    """The device of a --devices entry: a device kind, or a group's device."""
    return d.device if isinstance(d, DeviceGroup) else d


def cmd_size(args: argparse.Namespace, console: Console) -> int:
    wi = what_if(args)
    names = [d.strip() for d in args.devices.split(",") if d.strip()]
    if not names:
        raise UsageError("--devices: give at least one device id")
    if len(set(names)) != len(names):
        raise UsageError("--devices: a device is listed twice")
    wi.check_used([resolve_group(n).device for n in names])
    # ID: searched over its family's group shapes; ID:N or ID:TPxPP: that shape only
    devices = [wi.apply_group(resolve_group(n)) if ":" in n else wi.apply(resolve_device(n)) for n in names]
    refuse_speculation_without_draft(args)
    if args.emit and args.stack is not None and stack_option(args.stack) != stack_option(args.emit):
        raise UsageError(f"--emit {args.emit} prints {stack_option(args.emit)} launch commands while --stack "
                         f"{args.stack} predicts {stack_option(args.stack)}: give the same engine to both")
    # size with the engine whose commands are printed
    stack, stack_flag = (stack_option(args.emit), "--emit") if args.emit and args.stack is None else (args.stack, "--stack")
    if args.confidence is not None and not 0.5 <= args.confidence < 1:
        raise UsageError(f"--confidence: a one-sided confidence from 0.5 up to (not including) 1, got {args.confidence}")
    model = load_model(args.model)
    if args.rate is not None:
        return _size_at_rate(args, console, model, devices, wi)   # (--rate refuses --emit)
    refuse_rate_options_without_rate(args, (("p99_ttft_ms", "--p99-ttft-ms"), ("p99_itl_ms", "--p99-itl-ms"),
                                            ("p99_tpot_ms", "--p99-tpot-ms"), ("max_seqs", "--max-seqs"),
                                            ("poll_steps", "--poll-steps")))
    if args.min_tokens_per_s_per_user is None:
        raise UsageError("--users needs --min-tokens-per-s-per-user (or size for a request rate: --rate)")
    target = Target(users=args.users, min_tokens_per_s_per_user=number(args.min_tokens_per_s_per_user,
                                                                       "--min-tokens-per-s-per-user", positive=True),
                    max_ttft_s=number(args.ttft_ms, "--max-ttft-ms (--ttft-ms)", positive=True) / 1e3 if args.ttft_ms is not None
                    else float("inf"),
                    request=Request(input_tokens=args.isl, output_tokens=args.osl))
    draft = load_model(args.draft) if args.draft else None
    prices = price_list(args, [device_of(d) for d in devices])
    eng = engine(args, [device_of(d) for d in devices], stack=stack, stack_flag=stack_flag)
    params = eng.params
    options = size(model, devices, target, draft=draft, acceptance=acceptance(args) if draft else None,
                   formats=formats(args, model), params=params, prices=prices, confidence=args.confidence, stack=stack)
    commands = ([_launch(args.emit, model, o, target.request, params) for o in options if o.feasible]
                if args.emit else [])
    note = idle_note(device_of(d) for d in devices)
    if args.confidence is not None:
        note = (f" Sized at confidence {args.confidence:g}: each device kind's speed and TTFT targets tightened by the "
                "upper end of its prediction interval (errors on publications the fit never saw)." + note)
    emit(console, size_view(model.id, target, options, prices, commands, wi.describe(), note), args, eng)
    return 0 if any(o.feasible for o in options) else NOTHING_MEETS_TARGET


def _size_at_rate(args: argparse.Namespace, console: Console, model: Any, devices: list[Any], wi: Any) -> int:
    limits = {key: number(v, flag, positive=True) / 1e3 for key, flag, v in (
        ("ttft_p99_s", "--p99-ttft-ms", args.p99_ttft_ms), ("itl_p99_s", "--p99-itl-ms", args.p99_itl_ms),
        ("tpot_p99_s", "--p99-tpot-ms", args.p99_tpot_ms)) if v is not None}
    if not limits:
        raise UsageError("--rate needs at least one latency limit: --p99-ttft-ms, --p99-itl-ms or --p99-tpot-ms")
    if args.draft or args.emit:
        raise UsageError("--rate sizes without --draft or --emit (those size --users)")
    for flag, given in (("--min-tokens-per-s-per-user", args.min_tokens_per_s_per_user),
                        ("--max-ttft-ms", args.ttft_ms)):
        if given is not None:
            raise UsageError(f"{flag} applies to --users; with --rate give p99 limits (--p99-ttft-ms, --p99-itl-ms, "
                             "--p99-tpot-ms)")
    target = LoadTarget(rate_per_s=number(args.rate, "--rate", positive=True), workload=load_workload(args),
                        limits=limits)
    prices = price_list(args, [device_of(d) for d in devices])
    eng = engine(args, [device_of(d) for d in devices])
    params = eng.params
    stack = stack_option(args.stack) if args.stack is not None else DEFAULT_STACK
    poll = args.poll_steps or 1
    options = size_at_rate(model, devices, target, formats=formats(args, model), params=params, prices=prices,
                           max_slots=args.max_seqs, stack=stack, admission=Admission(poll_steps=poll),
                           confidence=args.confidence)
    sure = args.confidence is not None and args.confidence > 0.5
    note = ((f" Sized at confidence {args.confidence:g}: each device kind's p99 limits lowered by the upper end of "
             "its percentiles' interval at a request rate (MLPerf runs at their measured rates)." if sure else "")
            + (f" What-if: {', '.join(wi.describe())}." if wi.describe() else "") + idle_note(device_of(d) for d in devices)
            + (f" Prompts are let in every {poll} steps (--poll-steps): they wait for the next admission." if poll > 1
               else ""))
    sized = {"confidence": args.confidence, "sized_limits": {
        device_of(d).id: dict(pessimistic_limits(target, device_of(d), args.confidence, stack).limits)
        for d in devices}} if sure else None
    emit(console, size_load_view(model.id, target, options, note, poll_steps=poll, sized=sized), args, eng)
    return 0 if any(o.feasible for o in options) else NOTHING_MEETS_TARGET


def register(add: Adder) -> None:
    sp = add("size", cmd_size, "the fewest devices per device kind that serve N users at a speed and TTFT target",
             profile=True)
    sp.add_argument("model", help="target model: " + MODEL_HELP)
    sp.add_argument("--devices", required=True, help="candidate devices, comma-separated: an ID is searched over group shapes, "
                    "ID:N or ID:TPxPP sized on that shape (b200,h200-sxm:8,groq-lpu)")
    who = sp.add_mutually_exclusive_group(required=True)
    who.add_argument("--users", type=positive, help="concurrent users, all active (500, 10k): a steady state, no queue")
    who.add_argument("--rate", default=None, metavar="R",
                     help="requests per second arriving (Poisson unless --burstiness): size by p99 latency limits "
                          "through queues (docs/load.md)")
    sp.add_argument("--min-tokens-per-s-per-user", default=None, metavar="X",
                    help="with --users: the slowest acceptable decode speed each user sees (tokens/s)")
    for flag, what in (("ttft", "time to first token"), ("itl", "gap between tokens"),
                       ("tpot", "a request's mean gap between tokens")):
        sp.add_argument(f"--p99-{flag}-ms", default=None, metavar="MS", help=f"with --rate: the 99th percentile {what}")
    add_load_options(sp)
    sp.add_argument("--max-seqs", type=positive, default=None, metavar="N",
                    help="with --rate: the scheduler's cap on running requests (vLLM's --max-num-seqs; default: the "
                         "stack's own, vLLM's 1024 on GPUs of 70 GiB or more but A100, else 256; others: memory)")
    sp.add_argument("--poll-steps", type=positive, default=None, metavar="N",
                    help="with --rate: the scheduler lets waiting prompts in every N steps (vLLM's V0 "
                         "--num-scheduler-steps, SGLang's --scheduler-recv-interval); default 1: every step")
    sp.add_argument("--max-ttft-ms", "--ttft-ms", dest="ttft_ms", default=None, metavar="MS",
                    help="longest acceptable time to first token, ms (Target.max_ttft_s in the Python API)")
    sp.add_argument("--confidence", default=None, type=float, metavar="C",
                    help="size so the targets hold at the pessimistic end of the prediction interval: the upper C "
                         "quantile (0.5-0.99) of the errors on publications the fit never saw, per device kind "
                         "(with --rate: of the percentiles' errors at a request rate)")
    add_lengths(sp, 1024, 1024)
    sp.add_argument("--draft", default=None, help="draft model: also size speculative decoding on the decode devices")
    add_acceptance(sp)
    add_formats(sp)
    add_prices(sp)
    sp.add_argument("--emit", choices=ENGINES, default=None,
                    help="also print the engine's launch command line for each feasible option, sized with that "
                         "engine's fitted parameters (as --stack ENGINE)")
    add_what_if(sp)
