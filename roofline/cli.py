"""The ``roofline`` command: parses arguments, calls the library, renders. No physics here."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from rich.console import Console

from . import render
from .configs import list_models, load_model
from .errors import NotFoundError, RooflineError
from .hardware import list_devices, load_device


class UsageError(Exception):
    """A command-line usage error (exit status 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def _int_at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if v < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {v}")
        return v
    return parse


_pos_int = _int_at_least(1)
_nonneg_int = _int_at_least(0)


def _print_json(console: Console, data: Any) -> None:
    console.file.write(json.dumps(render.jsonable(data), indent=2) + "\n")


# ----------------------------------------------------------------- commands
def cmd_devices(args: argparse.Namespace, console: Console) -> int:
    devices = [load_device(d) for d in list_devices()]
    if args.json:
        _print_json(console, [render.device_dict(d) for d in devices])
    else:
        console.print(render.devices_table(devices))
    return 0


def cmd_models(args: argparse.Namespace, console: Console) -> int:
    models = [load_model(m) for m in list_models()]
    if args.json:
        _print_json(console, [render.model_dict(m) for m in models])
    else:
        console.print(render.models_table(models))
    return 0


def cmd_show(args: argparse.Namespace, console: Console) -> int:
    name = args.name
    is_path = os.path.exists(name)
    if (name.endswith(".toml") or not is_path) and not name.endswith(".json"):
        try:
            dev = load_device(name)
        except NotFoundError:
            if name.endswith(".toml"):
                raise
        else:
            if args.json:
                _print_json(console, render.device_dict(dev))
            else:
                console.print(render.device_table(dev))
            return 0
    try:
        model = load_model(name)
    except NotFoundError:
        from .errors import did_you_mean
        from .hardware import _index
        hint = did_you_mean(name, [*_index(), *list_models()])
        raise NotFoundError(f"{name!r} is neither a device nor a model id{hint} "
                            "(`roofline devices`, `roofline models` list them)") from None
    if args.json:
        _print_json(console, render.model_dict(model))
    else:
        console.print(render.model_table(model))
    return 0


def engine_params(args: argparse.Namespace) -> Any:
    """The engine parameters a command runs with: --profile's [params], else the shipped defaults."""
    from .params import DEFAULT_PARAMS
    if getattr(args, "profile", None):
        from .calibrate import load_profile
        return load_profile(args.profile).default
    return DEFAULT_PARAMS


def parse_ints(text: str, what: str) -> list[int]:
    """'1,8,64' or '1..8' (inclusive) or a mix: '1,2,4..6'."""
    out: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        try:
            if ".." in part:
                lo, hi = (int(x) for x in part.split("..", 1))
                if hi < lo:
                    raise ValueError
                out.extend(range(lo, hi + 1))
            else:
                out.append(int(part))
        except ValueError:
            raise UsageError(f"{what}: cannot read {text!r} (expected e.g. 1,8,64 or 1..8)") from None
    if not out or len(out) > 100_000:
        raise UsageError(f"{what}: {text!r} gives no values or too many")
    return out


def apply_sets(device: Any, sets: list[str]) -> Any:
    """Apply --set ID.FIELD=VALUE overrides that name this device (by id or alias)."""
    from .hardware import override
    for item in sets or []:
        key, sep, value = item.partition("=")
        dev_id, dot, path = key.strip().partition(".")
        if not sep or not dot or not path or not value.strip():
            raise UsageError(f"--set {item!r}: expected ID.FIELD=VALUE, e.g. corsair.sram.bandwidth=300TB/s")
        if dev_id.lower() in (device.id, *device.aliases):
            device = override(device, path, value.strip())
    return device


def _device_arg(name: str, sets: list[str]) -> Any:
    return apply_sets(load_device(name), sets)


def cmd_stage(args: argparse.Namespace, console: Console) -> int:
    import numpy as np

    from . import stages
    batch = np.array(parse_ints(args.batch, "--batch"))
    model = load_model(args.model)
    device = _device_arg(args.device, args.set)
    fmt = dict(weights=args.weights, experts=args.experts, kv=args.kv, activations=args.activations, tp=args.tp,
               ep=args.ep, params=engine_params(args))
    prompt = args.prompt if args.prompt is not None else args.context
    results = [stages.prefill(model, device, prompt=prompt, batch=batch, chunk=args.chunk, **fmt),
               stages.decode_step(model, device, batch=batch, context=args.context, **fmt)]
    if args.gamma is not None:
        results.append(stages.verify(model, device, batch=batch, context=args.context, gamma=args.gamma, **fmt))
    from .engine import require_feasible
    for r in results:
        if not np.any(r.fits):
            require_feasible(r)  # nothing fits: one clear error instead of a table of OOM rows
    if args.plot:
        from .plot import plot_roofline
        w = results[0].formats.weight.compute
        plot_roofline(device, results, args.plot, compute_class=w if w in device.peak_flop_per_s else "bf16",
                      title=f"{model.id} on {device.id}")
    if args.json:
        _print_json(console, {"model": model.id, "device": device.id, "stages": [render.stage_dict(r) for r in results]})
        return 0
    P = fmt["params"]
    f = results[0].formats
    caption = (f"weights {f.weights}, experts {f.experts or f.weights}, KV {f.kv}, activations {f.activations}. "
               f"time = max(compute, memory) + comm + fixed (upper: compute + memory + comm + fixed); fixed = "
               f"per-pass and per-layer costs + weight-only dequantisation; "
               f"{P.memory_bandwidth_fraction:.0%} of peak bandwidth, "
               f"{P.compute_fraction:.0%} of peak FLOP/s, {P.step_overhead_s * 1e6:.0f} us/pass + "
               f"{P.layer_overhead_s * 1e6:.0f} us/layer; ridge {results[0].ridge_flop_per_byte:.0f} FLOP/B (datasheet); "
               f"uniform expert routing; {P.usable_memory_fraction:.0%} of memory usable. Spec: {device.path}")
    for r in results:
        console.print(render.stage_table(r, caption))
    return 0


def _acceptance(args: argparse.Namespace) -> Any:
    from .speculative import Acceptance
    given = [x for x in (args.alpha, args.acceptance_length, args.alpha_by_gamma) if x is not None]
    if len(given) != 1:
        raise UsageError("give exactly one of --alpha, --acceptance-length, --alpha-by-gamma")
    if args.alpha is not None:
        return Acceptance.geometric(_float(args.alpha, "--alpha"))
    pairs = {}
    for item in (args.acceptance_length or args.alpha_by_gamma).split(","):
        g, sep, v = item.partition(":")
        if not sep:
            raise UsageError("expected GAMMA:VALUE pairs, e.g. 5:0.926,40:0.962")
        pairs[int(_float(g, "gamma"))] = _float(v, "value")
    return Acceptance.measured(pairs) if args.acceptance_length else Acceptance.alpha_by_gamma(pairs)


def _float(text: str, what: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise UsageError(f"{what}: expected a number, got {text!r}") from None


def cmd_spec(args: argparse.Namespace, console: Console) -> int:
    import numpy as np

    from .engine import parse_group
    from .specdecode import optimal_gamma, speculative_round
    gammas = np.array(parse_ints(args.gamma, "--gamma"))
    import attrs
    verify_on = parse_group(args.verify_on)
    verify_on = attrs.evolve(verify_on, device=apply_sets(verify_on.device, args.set), ep=args.ep)
    draft_on = None
    if args.draft_on:
        g = parse_group(args.draft_on)
        draft_on = attrs.evolve(g, device=apply_sets(g.device, args.set))
    r = speculative_round(args.target, verify_on=verify_on, draft=args.draft, draft_on=draft_on,
                          draft_kind=args.draft_kind, head_layers=args.head_layers, acceptance=_acceptance(args),
                          gamma=gammas, batch=args.batch, context=args.context, link=args.link, sampling=args.sampling,
                          target_formats={"weights": args.weights, "experts": args.experts, "kv": args.kv},
                          draft_formats={"weights": args.draft_weights, "kv": args.draft_kv,
                                         "activations": args.draft_activations},
                          params=engine_params(args))
    best = optimal_gamma(r)
    if args.json:
        _print_json(console, render.spec_dict(r, best))
    else:
        console.print(render.spec_table(r, best))
    return 0


def cmd_formula(args: argparse.Namespace, console: Console) -> int:
    import sympy

    from . import symbolic
    expr = symbolic.formula(args.name)
    if args.json:
        _print_json(console, {"name": args.name, "text": str(expr), "latex": sympy.latex(expr)})
    elif args.latex:
        console.file.write(sympy.latex(expr) + "\n")
    else:
        console.file.write(f"{args.name}: {expr}\n")
    return 0


# ------------------------------------------------------------------ parser
def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="roofline", description="How fast, and at what energy, an LLM runs on given hardware, "
                                             "stage by stage, from first principles.",
                formatter_class=argparse.RawDescriptionHelpFormatter,
                epilog="examples:\n"
                       "  roofline stage gpt-oss-120b h200-sxm --batch 1,64,256 --context 8192\n"
                       "  roofline spec --target gpt-oss-120b --draft gpt-oss-draft-1.6b --draft-on corsair:2 "
                       "--verify-on b200:8 --alpha 0.926 --gamma 1..40\n"
                       "  roofline compare llama-3.1-70b h200-sxm b200 'fast=h200-sxm.hbm.bandwidth=9.6TB/s'\n"
                       "  roofline validate\n"
                       "every command takes --json; `roofline COMMAND --help` for its options")
    p.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    def add(name: str, func: Callable[[argparse.Namespace, Console], int], help: str) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help, description=help)
        sp.add_argument("--json", action="store_true", help="print JSON instead of a table")
        sp.add_argument("--profile", default=None, metavar="FILE.toml",
                        help="engine parameters from a `roofline calibrate` profile (default: the shipped fit)")
        sp.set_defaults(func=func)
        return sp

    add("devices", cmd_devices, "list the shipped device specs")
    add("models", cmd_models, "list the shipped model presets with parameter counts")
    sp = add("show", cmd_show, "show one device or model (id, alias, or path to a .toml spec / config.json)")
    sp.add_argument("name")
    sp = add("stage", cmd_stage, "per-stage time, bounds, binding resource and memory of a model on a device")
    sp.add_argument("model", help="model preset id or path to a config.json")
    sp.add_argument("device", help="device id or path to a .toml spec")
    sp.add_argument("--batch", default="1", help="batch sizes: 1,8,64 or 1..8 (default 1)")
    sp.add_argument("--context", type=_nonneg_int, default=8192, help="tokens in the KV cache at decode (default 8192)")
    sp.add_argument("--prompt", type=_pos_int, default=None, help="prefill length (default: --context)")
    sp.add_argument("--chunk", type=_pos_int, default=None, help="chunked-prefill chunk size")
    sp.add_argument("--gamma", type=_nonneg_int, default=None, help="also show verify of gamma+1 tokens")
    sp.add_argument("--tp", type=_pos_int, default=1, help="tensor-parallel devices (default 1)")
    sp.add_argument("--ep", type=_pos_int, default=1, help="expert-parallel degree (divides --tp)")
    sp.add_argument("--weights", default="bf16", help="non-expert weight format (default bf16)")
    sp.add_argument("--experts", default=None, help="expert weight format (default: the checkpoint's, else --weights)")
    sp.add_argument("--kv", default="bf16", help="KV-cache format (default bf16)")
    sp.add_argument("--activations", default="bf16", help="activation format (default bf16)")
    sp.add_argument("--set", action="append", default=[], metavar="ID.FIELD=VALUE",
                    help="what-if override of a spec field, e.g. h200-sxm.hbm.bandwidth=6TB/s (repeatable)")
    sp.add_argument("--plot", default=None, metavar="FILE.png", help="draw the roofline chart (needs the plot extra)")
    _add_spec(add)
    from .cli_serving import add_serving_commands, add_validation_commands
    add_serving_commands(add)
    add_validation_commands(add)
    return p


def _add_spec(add: Callable[..., argparse.ArgumentParser]) -> None:
    sp = add("spec", cmd_spec, "speculative decoding: draft and verify on (possibly different) device groups, per gamma")
    sp.add_argument("--target", required=True, help="target model")
    sp.add_argument("--draft", default=None, help="draft model (for --draft-kind model)")
    sp.add_argument("--draft-kind", default="model", choices=["model", "mtp", "eagle"])
    sp.add_argument("--head-layers", type=_pos_int, default=1, help="layers of an MTP/EAGLE head (default 1)")
    sp.add_argument("--verify-on", required=True, metavar="ID[:N]", help="target group, e.g. b200:8")
    sp.add_argument("--draft-on", default=None, metavar="ID[:N]", help="draft group (default: the target's)")
    sp.add_argument("--alpha", default=None, help="per-token acceptance probability in [0, 1]")
    sp.add_argument("--acceptance-length", default=None, metavar="G:TAU,...", help="measured tau per gamma")
    sp.add_argument("--alpha-by-gamma", default=None, metavar="G:ALPHA,...", help="alpha per gamma, interpolated")
    sp.add_argument("--gamma", default="1..8", help="draft lengths: 1..40 or 1,2,5 (default 1..8)")
    sp.add_argument("--batch", type=_pos_int, default=1)
    sp.add_argument("--context", type=_nonneg_int, default=8192)
    sp.add_argument("--link", default="pcie5", help="draft<->target link: pcie5, nvlink, ethernet-400g, ... or BW,LAT")
    sp.add_argument("--sampling", default="greedy", choices=["greedy", "lossless"])
    sp.add_argument("--ep", type=_pos_int, default=1, help="expert-parallel degree of the target group")
    sp.add_argument("--weights", default="bf16")
    sp.add_argument("--experts", default=None)
    sp.add_argument("--kv", default="bf16")
    sp.add_argument("--draft-weights", default="auto", help="draft format (default: native to the draft device)")
    sp.add_argument("--draft-kv", default="auto")
    sp.add_argument("--draft-activations", default="auto")
    sp.add_argument("--set", action="append", default=[], metavar="ID.FIELD=VALUE")
    sp = add("formula", cmd_formula, "print a derived formula (sympy): " + ", ".join(
        ["expected-tokens", "expected-tokens-limit", "speedup", "ridge-batch"]))
    sp.add_argument("name")
    sp.add_argument("--latex", action="store_true")


def main(argv: Sequence[str] | None = None, *, console: Console | None = None,
         err_console: Console | None = None) -> int:
    """Entry point; returns the exit status (0 ok, 1 bad input, 2 usage error)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    width = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 120
    out = console or Console(no_color=bool(os.environ.get("NO_COLOR")) or None, width=width)
    err = err_console or Console(stderr=True, highlight=False, soft_wrap=True)
    try:
        args = build_parser().parse_args(argv)
        if not getattr(args, "func", None):
            build_parser().print_help(out.file)
            return 2
        return args.func(args, out)
    except UsageError as e:
        if debug:
            raise
        err.print(f"roofline: usage error: {e}", markup=False, soft_wrap=True)
        return 2
    except RooflineError as e:
        if debug:
            raise
        err.print(f"roofline: error: {e}", markup=False, soft_wrap=True)
        return 1
    except (KeyboardInterrupt, BrokenPipeError):
        return 130
    except Exception as e:  # a bug of ours: still one line, unless --debug
        if debug:
            raise
        err.print(f"roofline: internal error: {type(e).__name__}: {e} (rerun with --debug for the traceback)",
                  markup=False, soft_wrap=True)
        return 3


if __name__ == "__main__":
    sys.exit(main())
