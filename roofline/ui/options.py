"""Option groups the commands share, and the parsing of their values (counts, lists, acceptance, what-ifs)."""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal, overload

import attrs
import numpy as np

from ..errors import RooflineError, WorkloadError
from ..physics.energy import DEFAULT_POWER
from ..physics.speculative import Acceptance
from ..serving.load import Workload
from ..serving.serve import DEFAULT_TOKEN_BUDGET
from ..serving.trust import intervals_for
from ..serving.whatif import WhatIf
from ..specs.devices import Device
from ..specs.formats import get_format
from ..specs.hf_config import ARCHITECTURES
from ..specs.intervals import DEFAULT_LEVEL
from ..specs.lengths import Lengths, shipped_lengths
from ..specs.params import (
    DEFAULT_STACK,
    EngineParams,
    Profile,
    default_params,
    load_profile,
    shipped_profile,
    stack_name,
)
from ..specs.prices import Prices, shipped_prices
from ..specs.resolve import resolve_device
from ..units import COUNT, COUNT_SUFFIX

#: How every command that takes a model names it, with the architectures a config.json may have.
MODEL_HELP = ("a preset id (`roofline models`), a preset's Hugging Face repo id (meta-llama/Llama-3.1-70B-Instruct), "
              "the path of a config.json or its folder (./NAME for a folder named like a preset), or hf:owner/name "
              "with the hub extra; config.json architectures (model_type): " + ", ".join(ARCHITECTURES))


class UsageError(RooflineError):
    """A command-line usage error (exit status 2)."""


#: The largest count a command accepts (tokens, batch, devices): beyond it nothing is a workload.
MAX_COUNT = 10**12


def count(text: str, *, minimum: int = 0) -> int:
    """A whole count with an optional suffix: ``128k`` = 128,000, ``1M`` = 1,000,000, ``8Ki`` = 8,192, ``8192``."""
    m = COUNT.match(str(text))
    if not m:
        if _below(text, minimum):   # a number, out of range: say so, not that it cannot be read
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {text}")
        raise argparse.ArgumentTypeError(f"expected a whole number such as 8192 or 128k, got {text!r}")
    value = float(m.group(1)) * COUNT_SUFFIX[m.group(2) or ""]
    if value != int(value) or not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}")
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {text}")
    if value > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"{text} is beyond any workload (at most {MAX_COUNT:.0e})")
    return int(value)


def refuse_repeats(names: Sequence[str], what: str) -> None:
    """A usage error naming the entries of ``names`` given more than once (``what``: the option, e.g. --devices):
    two entries under one name would print rows no one can tell apart."""
    twice = sorted({n for n in names if list(names).count(n) > 1})
    if twice:
        raise UsageError(f"{what}: {', '.join(twice)} given more than once")


def _below(text: str, minimum: int) -> bool:
    try:
        return float(text) < minimum
    except ValueError:
        return False


def positive(text: str) -> int:
    return count(text, minimum=1)


def mean_count(text: str) -> float:
    """A positive mean count (a measured run's mean tokens per request or concurrency), with an optional k/M
    suffix: ``1k``, ``512.4``."""
    m = COUNT.match(str(text))
    if not m:
        raise argparse.ArgumentTypeError(f"expected a positive number such as 512, 512.4 or 8k, got {text!r}")
    value = float(m.group(1)) * COUNT_SUFFIX[m.group(2) or ""]
    if not 0 < value <= MAX_COUNT:
        raise argparse.ArgumentTypeError(f"must be > 0 and at most {MAX_COUNT:.0e}, got {text}")
    return value


def nonnegative(text: str) -> int:
    return count(text, minimum=0)


def number(text: str, what: str, *, positive: bool = False) -> float:
    """A finite number given on the command line (``positive``: > 0); a usage error (exit 2) otherwise."""
    try:
        if not str(text).isascii():   # float() reads Arabic-Indic and other digits: a silent "3" from "٣"
            raise ValueError(text)
        v = float(text)
    except ValueError:
        raise UsageError(f"{what}: expected a number, got {text!r}") from None
    if not math.isfinite(v):
        raise UsageError(f"{what}: expected a finite number, got {text!r}")
    if positive and v <= 0:
        raise UsageError(f"{what}: must be > 0, got {text}")
    return v


def parse_ints(text: str, what: str, *, minimum: int = 1) -> list[int]:
    """``1,8,64``, ``1..8`` (inclusive) or a mix (``1,2,4..6``); counts may carry k/M suffixes."""
    out: list[int] = []
    for part in str(text).split(","):
        try:
            if ".." in part:
                lo, hi = (count(x, minimum=minimum) for x in part.split("..", 1))
                if hi - lo >= 100_000:
                    raise UsageError(f"{what}: {part.strip()!r} is {hi - lo + 1:,} values; a range gives at most "
                                     "100,000 (use a list such as 1,1000,1000000 for far-apart points)")
                if hi < lo:
                    raise ValueError
                out.extend(range(lo, hi + 1))
            else:
                out.append(count(part, minimum=minimum))
        except argparse.ArgumentTypeError as e:
            raise UsageError(f"{what}: {e} (a list such as 1,8,64 or 1..8)") from None
        except ValueError:
            raise UsageError(f"{what}: cannot read {text!r} (expected e.g. 1,8,64 or 1..8, each >= {minimum})") from None
    if not out or len(out) > 100_000:
        raise UsageError(f"{what}: {text!r} gives no values or too many")
    return out


# ------------------------------------------------------------- option groups
#: Every option some commands share, with the value it has in a command that does not take it: every command's
#: parsed arguments carry each of them (the top-level parser's defaults), so no code probes for an option.
SHARED_DEFAULTS: dict[str, Any] = {"func": None, "json": False, "csv": False, "profile": None, "level": DEFAULT_LEVEL,
                                   "stack": None, "set": [], "activations": None, "lm_head": None, "gamma": None}


def add_output(sp: argparse.ArgumentParser) -> None:
    group = sp.add_mutually_exclusive_group()
    group.add_argument("--json", action="store_true", help="print JSON instead of a table")
    group.add_argument("--csv", action="store_true", help="print CSV rows instead of a table")


def add_profile(sp: argparse.ArgumentParser, *, stack: bool = True) -> None:
    sp.add_argument("--profile", default=None, metavar="FILE.toml",
                    help="engine parameters from a `roofline calibrate` profile (default: the shipped fit)")
    sp.add_argument("--level", default=DEFAULT_LEVEL, type=float, metavar="P",
                    help="level of the prediction intervals every figure carries (default 0.8: 80%% of measurements "
                         "on publications the fit never saw fall inside)")
    if stack:
        sp.add_argument("--stack", default=None, metavar="NAME",
                        help="run the GPUs with this serving stack's fitted efficiencies, fixed costs and scheduling "
                             "(tensorrt-llm/trtllm/nim, vllm, sglang, gpt-fast; on AMD its ROCm build where one is "
                             "fitted; pooled: one set fitted to every stack's rows at once); default: vllm")


def add_what_if(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--set", action="append", default=[], metavar="ID.FIELD=VALUE",
                    help="what-if override of a spec field, e.g. h200-sxm.hbm.bandwidth=6TB/s (repeatable)")


def add_prices(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--usd-per-device-hour", default=None, metavar="ID=USD,...",
                    help="device prices per hour, replacing the shipped ones (b200=6.5,h200-sxm=4)")
    sp.add_argument("--usd-per-kwh", default=None, metavar="USD",
                    help="electricity price, added at the modelled power x PUE (for owned devices; default 0)")


def add_formats(sp: argparse.ArgumentParser, *, activations: bool = True) -> None:
    native = ("bf16, or where a device has no bf16 units its native format: fp16 on groq-lpu, fp8 on groq-3-lpu, "
              "mxint8 on corsair")
    sp.add_argument("--weights", default=None, help="non-expert weight format (default: the checkpoint's, as its "
                                                    "config's quantization_config says: fp8, int4-g128 for AWQ/GPTQ, "
                                                    f"...; else {native}; `roofline formats`)")
    sp.add_argument("--experts", default=None, help="expert weight format (default: the checkpoint's, else --weights)")
    sp.add_argument("--kv", default=None, help=f"KV-cache format (default: {native})")
    sp.add_argument("--lm-head", default=None, help="embedding and LM head format (default: as --weights; bf16 beside "
                                                    "a quantized checkpoint's weights, or as --stack's checkpoints keep "
                                                    "them: bf16 for tensorrt-llm, vllm, sglang)")
    if activations:
        sp.add_argument("--activations", default=None, help=f"activation format (default: {native})")


def add_acceptance(sp: argparse.ArgumentParser, several: bool = False) -> None:
    sp.add_argument("--alpha", "--acceptance", dest="alpha", default=None, metavar="ALPHA",
                    help="per-token acceptance probability in [0, 1] (the Python API's acceptance=ALPHA)" + (
        "; several (0.6,0.8,0.926) sweep it, each with its own best gamma" if several else ""))
    sp.add_argument("--acceptance-length", default=None, metavar="G:TAU,...",
                    help="measured mean acceptance length (bonus token included) per draft length, e.g. 2:2.58")
    sp.add_argument("--alpha-by-gamma", default=None, metavar="G:ALPHA,...",
                    help="per-token alpha at two or more draft lengths, fitted with a positional acceptance whose "
                    "gain per drafted token never rises (Acceptance.alpha_by_gamma), e.g. 5:0.926,40:0.962")


def refuse_speculation_without_draft(args: argparse.Namespace) -> None:
    """An acceptance or a draft length (--gamma, where the command has one) describes a draft: without --draft it
    would go unused, silently."""
    if not args.draft and any(x is not None for x in (args.alpha, args.acceptance_length, args.alpha_by_gamma)):
        raise UsageError("an acceptance (--alpha ...) needs a draft model (--draft)")
    if not args.draft and args.gamma is not None:
        raise UsageError("--gamma (a draft length) needs a draft model (--draft)")


def add_lengths(sp: argparse.ArgumentParser, isl: int, osl: int) -> None:
    """--input-tokens and --output-tokens (aliases --isl and --osl), the names of :class:`Request`'s fields."""
    sp.add_argument("--input-tokens", "--isl", dest="isl", type=positive, default=isl, metavar="N",
                    help=f"input (prompt) tokens per request (default {isl}; 8k = 8000, 8Ki = 8192)")
    sp.add_argument("--output-tokens", "--osl", dest="osl", type=positive, default=osl, metavar="N",
                    help=f"output tokens per request (default {osl})")


def add_request(sp: argparse.ArgumentParser) -> None:
    add_lengths(sp, 8192, 1024)
    sp.add_argument("--mode", choices=["continuous", "static", "waves"], default="continuous",
                    help="continuous batching (steady state), static batches, or waves: a fixed-length "
                         "--max-concurrency benchmark on a prefill-first scheduler (SGLang, ATOM), each wave's "
                         "prompts arriving together (default continuous)")
    sp.add_argument("--token-budget", type=positive, default=DEFAULT_TOKEN_BUDGET, metavar="TOKENS",
                    help="tokens one step may process, decode tokens and prompt chunks together (vLLM "
                         "--max-num-batched-tokens; SGLang's --chunked-prefill-size caps the prompt part; default "
                         f"{DEFAULT_TOKEN_BUDGET}); continuous and waves modes, placements whose prompts run on the "
                         "decode group")
    sp.add_argument("--poll-steps", type=positive, default=1, metavar="N",
                    help="decode steps between the scheduler's polls for new requests (SGLang "
                         "--scheduler-recv-interval; default 1); continuous mode, prompts on the decode group")


def idle_note(devices: Iterable[Any]) -> str:
    """A caption's remark where energy charges an idle power the spec does not publish (most devices: only
    the H100 SXM's is measured): the share of TDP :class:`~roofline.physics.energy.PowerModel` assumes, and for
    which devices. Devices without a TDP are left out: their energy is not computed at all."""
    missing = sorted({d.id for d in devices if d.idle_w is None and d.tdp_w is not None})
    if not missing:
        return ""
    return (f" Idle power not published for {', '.join(missing)}: {DEFAULT_POWER.idle_fraction_of_tdp:.0%} of TDP "
            "assumed (the H100 SXM's measured share).")


def context_note(model: Any, tokens: float) -> str:
    """A caption's warning when ``tokens`` of context exceed the model's trained maximum (its config's
    ``max_position_embeddings``): the counts still hold, the model may not."""
    top = getattr(model, "max_context_tokens", None)
    if top is None or tokens <= top:
        return ""
    return (f" Context {tokens:,.0f} is beyond {model.id}'s max_position_embeddings ({top:,}): the FLOP and bytes are "
            "counted as asked, but the model was not built for that length.")


def serving_knobs(args: argparse.Namespace) -> dict[str, Any]:
    """The scheduler options of :func:`add_request` as evaluate_serving's keywords (static batches have no
    scheduler to set: giving them there is a usage error, not a silent no-op)."""
    if args.mode == "static" and scheduler_note(args):
        raise UsageError("--token-budget and --poll-steps set the continuous-batching scheduler; --mode static "
                         "runs whole batches without one")
    if args.mode == "waves" and args.poll_steps != 1:
        raise UsageError("--poll-steps delays prompts that arrive between polls; --mode waves has a wave's prompts "
                         "arrive together when the last one ends (its prefill steps follow --token-budget)")
    return {"chunk": args.token_budget, "poll_steps": args.poll_steps}


def scheduler_note(args: argparse.Namespace) -> str:
    """The scheduler options that differ from their defaults, for a title (empty when none does)."""
    parts = [f"token budget {args.token_budget}" if args.token_budget != DEFAULT_TOKEN_BUDGET else "",
             f"polls every {args.poll_steps} steps" if args.poll_steps != 1 else ""]
    return "".join(f", {p}" for p in parts if p)


# ------------------------------------------------------------ option values
def formats(args: argparse.Namespace, model: Any) -> dict[str, Any]:
    """The format options as the library's format keys, each a format name or None (a name that is none of the
    formats is a usage error, as a stack's or a choice's is); ``model`` (a ModelSpec): the model they format,
    which must have routed experts for --experts to mean anything (a format name that is none is said first)."""
    out = {"weights": format_name(args.weights, "--weights"), "experts": format_name(args.experts, "--experts"),
           "kv": format_name(args.kv, "--kv")}
    if args.activations is not None:   # None (the default) is what leaving it out asks for
        out["activations"] = format_name(args.activations, "--activations")
    if args.lm_head is not None:
        out["head"] = format_name(args.lm_head, "--lm-head")
    if args.experts is not None and args.experts.strip().lower() != "auto" and not model.is_moe:
        raise WorkloadError(f"--experts {args.experts}: {model.id} is dense, it has no routed experts (--weights "
                            "sets the format of its weights)")
    return out


def format_name(value: str | None, flag: str) -> str | None:
    """``value`` of a format option, checked against the formats (``auto``: the default); None stays None."""
    if value is None or value.strip().lower() == "auto":
        return value
    if not value.strip():
        raise UsageError(f"{flag}: an empty format name; give one (`roofline formats` lists them)")
    try:
        get_format(value)
    except RooflineError as e:
        raise UsageError(f"{flag}: {e}") from None
    return value


def profile(args: argparse.Namespace) -> Profile:
    """The calibration profile a command runs with: --profile's, else the shipped fit."""
    return load_profile(args.profile) if args.profile else shipped_profile()


@attrs.frozen(kw_only=True)
class Engine:
    """What a command's devices run with, and what its output says of it: the engine parameters, the fitted set
    chosen (``stack_note``, :func:`roofline.evidence.calibrate.stack_record`; the line under the tables, JSON's
    ``stack``) and the prediction intervals of its figures (``trust``; JSON's ``intervals``, ``_low``/``_high``)."""

    params: EngineParams
    stack_note: dict[str, Any] | None = None
    trust: dict[str, Any] | None = None


def engine(args: argparse.Namespace, devices: Iterable[Device] = (), *, stack: str | None = None,
           stack_flag: str = "--stack") -> Engine:
    """The :class:`Engine` ``devices`` run with under --profile and --stack (``stack``: the stack to use in its
    place, which ``stack_flag`` gave: size --emit's engine), with the intervals at --level."""
    devices = list(devices)
    stack = stack if stack is not None else args.stack
    params, note = _engine_params(args, devices, stack, stack_flag)
    return Engine(params=params, stack_note=note, trust=trust(args, devices, stack))


def _engine_params(args: argparse.Namespace, devices: list[Device], named: str | None,
                   stack_flag: str) -> tuple[EngineParams, dict[str, Any]]:
    """The engine parameters a command runs ``devices`` with: the fitted set of stack ``named`` (else of the
    default stack, :data:`~roofline.specs.params.DEFAULT_STACK`) for their GPUs, and a note of what was chosen
    (:func:`roofline.evidence.calibrate.stack_record`); with no GPU among ``devices`` each device runs its
    family's execution profile and the note says so. Without a stack or --profile, GPUs of several platforms
    (NVIDIA and AMD) each run the default stack's build for their own platform."""
    from ..evidence.calibrate import stack_record  # lazily: the evidence layer is only needed to describe the set
    prof = profile(args)
    gpus = [d for d in devices if d.family == "gpu"]
    if named is None and not gpus:
        families = sorted({d.family for d in devices})
        return prof.for_stack(DEFAULT_STACK), {
            "name": "family profile", "build": " + ".join(families),
            "parameters": " + ".join(f"execution/{f}.toml" for f in families), "families": families}
    platforms = {(d.vendor, d.isa): d for d in gpus}
    try:
        default = named is None or stack_name(named) == DEFAULT_STACK
        if default and args.profile is None and len(platforms) > 1:
            order = sorted(platforms, key=lambda p: (p[0] != "NVIDIA", p))
            notes = [stack_record(prof.for_gpus(DEFAULT_STACK, [platforms[p]]), prof) for p in order]
            # each GPU resolves the default stack's build for its platform
            return default_params(), {**notes[0], "other_builds": notes[1:]}
        choice = prof.for_gpus(named if named is not None else DEFAULT_STACK, devices)
    except WorkloadError as e:
        raise UsageError(f"{stack_flag}: {e}") from None
    return choice.params, stack_record(choice, prof)


def trust(args: argparse.Namespace, devices: Iterable[Device], stack: str | None) -> dict[str, Any] | None:
    """The prediction intervals of the command's main device (its first GPU, else its first device) under the
    stack its GPUs run, at --level, and how to get another device's (sizing's options); None without devices."""
    devices = list(devices)
    if not devices:
        return None
    level = args.level
    if not 0 < level < 1:
        raise UsageError(f"--level: an interval's level is between 0 and 1 (exclusive), got {level}")
    main = next((d for d in devices if d.family == "gpu"), devices[0])
    known = {d.id: intervals_for(d, stack=stack, level=level) for d in devices}   # once per device, not per record
    return {"device": main.id, "level": level, "intervals": known[main.id], "by_device": known.get,
            "devices": sorted(known)}


def stack_option(text: str) -> str:
    """--stack's (or --emit's) engine as its canonical name; a name no stack answers to is a usage error."""
    try:
        return stack_name(text)
    except WorkloadError as e:
        raise UsageError(f"--stack: {e}") from None


def price_list(args: argparse.Namespace, devices: Iterable[Device] = ()) -> Prices:
    """The shipped prices with --usd-per-device-hour and --usd-per-kwh applied; a price for a device none of
    ``devices`` is (the command's devices) is refused, as a --set naming none of them is: it would be ignored."""
    given: dict[str, float] = {}
    devices = list(devices)
    by_id = {d.id.lower(): d.id for d in devices}   # a device of the command by its id, a spec file's too
    for item in (args.usd_per_device_hour or "").split(","):
        if not item.strip():
            continue
        dev, eq, usd = item.partition("=")
        if not eq:
            raise UsageError(f"--usd-per-device-hour: expected ID=USD pairs such as b200=6.5, got {item.strip()!r}")
        dev_id = by_id.get(dev.strip().lower()) or resolve_device(dev.strip()).id
        if dev_id in given:
            raise UsageError(f"--usd-per-device-hour: {dev_id} is given twice")
        given[dev_id] = number(usd, f"--usd-per-device-hour {dev_id}")
    in_play = sorted({d.id for d in devices})
    unused = [d for d in given if in_play and d not in in_play]
    if unused:
        raise UsageError(f"--usd-per-device-hour {unused[0]}: not a device of this command (devices in play: "
                         f"{', '.join(in_play)})")
    kwh = number(args.usd_per_kwh, "--usd-per-kwh") if args.usd_per_kwh is not None else None
    try:
        return shipped_prices().with_overrides(given, usd_per_kwh=kwh)
    except RooflineError as e:
        raise UsageError(str(e)) from None


def what_if(args: argparse.Namespace) -> WhatIf:
    try:
        return WhatIf.parse(args.set or [])
    except RooflineError as e:
        raise UsageError(str(e)) from None


@overload
def acceptance(args: argparse.Namespace, *, required: Literal[True] = True, several: bool = False) -> Acceptance: ...


@overload
def acceptance(args: argparse.Namespace, *, required: bool, several: bool = False) -> Acceptance | None: ...


def acceptance(args: argparse.Namespace, *, required: bool = True, several: bool = False) -> Acceptance | None:
    """The one acceptance model given by --alpha, --acceptance-length or --alpha-by-gamma; ``several``: --alpha
    may list alphas (0.6,0.8,0.926), an array of them along a leading axis of its own."""
    given = [x for x in (args.alpha, args.acceptance_length, args.alpha_by_gamma) if x is not None]
    if not given and not required:
        return None
    if len(given) != 1:
        raise UsageError("give exactly one of --alpha, --acceptance-length, --alpha-by-gamma")
    if args.alpha is not None:
        if not several and "," in args.alpha:
            raise UsageError(f"--alpha takes one number here, got {args.alpha!r} (`roofline spec` sweeps a list)")
        parts = args.alpha.split(",") if several else [args.alpha]
        alphas = [number(a, "--alpha") for a in parts]
        twice = sorted({a for a in alphas if alphas.count(a) > 1})
        if twice:
            raise UsageError(f"--alpha lists {', '.join(f'{a:g}' for a in twice)} more than once")
        if not all(0 <= a <= 1 for a in alphas):   # a usage error like any other malformed option value (exit 2)
            raise UsageError(f"--alpha must be in [0, 1] (a per-token acceptance probability), got {args.alpha}")
        return Acceptance.geometric(alphas[0] if len(alphas) == 1 else np.array(alphas))
    pairs: dict[int, float] = {}
    for item in (args.acceptance_length or args.alpha_by_gamma).split(","):
        g, sep, v = item.partition(":")
        gamma = number(g, "gamma") if sep else math.nan
        if not sep or gamma != int(gamma) or gamma < 0:
            raise UsageError(f"expected GAMMA:VALUE pairs with whole gammas, e.g. 5:0.926,40:0.962; got {item!r}")
        if int(gamma) in pairs:
            raise UsageError(f"gamma {int(gamma)} is given twice")
        pairs[int(gamma)] = number(v, "value")
    try:   # an impossible value is a malformed option value like any other (exit 2)
        return Acceptance.measured(pairs) if args.acceptance_length else Acceptance.alpha_by_gamma(pairs)
    except WorkloadError as e:
        raise UsageError(f"{'--acceptance-length' if args.acceptance_length else '--alpha-by-gamma'}: {e}") from None


Command = Callable[[argparse.Namespace, Any], int]
#: ``add(name, command, help, *, profile=False)`` registers a subcommand and returns its parser.
Adder = Callable[..., argparse.ArgumentParser]


#: The options that name a file a command writes.
OUTPUT_OPTIONS = ("plot", "out")
_PIECES = re.compile(r"[,=\s]+")
_GROUP_COUNT = re.compile(r":\s*\d+(?:\s*[xX]\s*\d+)?\s*$", re.ASCII)


def _named_paths(value: Any) -> Iterable[str]:
    """Every string in an option's value that may name a file: the whole, its comma, '=' and space separated
    pieces, and each piece without a group's ``:N`` or ``:TPxPP``."""
    values = value if isinstance(value, (list, tuple)) else [value]
    for v in values:
        if not isinstance(v, str) or not v:
            continue
        yield v
        for piece in _PIECES.split(v):
            if piece:
                yield piece
                yield _GROUP_COUNT.sub("", piece)


def check_outputs(args: argparse.Namespace, extra_inputs: Iterable[str] = ()) -> None:
    """Refuse, before anything is computed, an output file (``--plot``, ``--out``) that is also an input of the
    command: a path named by another argument (a spec, a config, ``--data``, ``--profile``...) or ``extra_inputs``
    (the shipped measurements a command reads without --data). It would be overwritten by the output."""
    from ..specs.files import same_file
    given = vars(args)
    outputs = [(k, given[k]) for k in OUTPUT_OPTIONS if isinstance(given.get(k), str)]
    if not outputs:
        return
    inputs = [p for k, v in vars(args).items() if k not in OUTPUT_OPTIONS and k != "func" for p in _named_paths(v)]
    for flag, path in outputs:
        if any(same_file(path, other) for other in (*inputs, *extra_inputs)):
            raise RooflineError(f"--{flag} {path}: is an input of this command (would overwrite it); write to "
                                "another path")


def shipped_inputs(args: argparse.Namespace) -> list[str]:
    """The files a command reads without being named: the shipped measurements, where ``--data`` is an option
    left out."""
    if "data" in vars(args) and not args.data:
        from ..evidence.validate import shipped_data
        return [str(shipped_data())]
    return []


def add_load_options(sp: argparse.ArgumentParser) -> None:
    """The workload of a request rate: --lengths, --burstiness, --prefix-hit (size --rate, placements --rate)."""
    sp.add_argument("--lengths", default=None, metavar="L",
                    help="with --rate: request lengths: fixed (--isl/--osl), lognormal[:CV] (means --isl/--osl), a "
                         "shipped histogram (mlperf-llama2-70b, mlperf-mixtral-8x7b, mlperf-llama3.1-405b, "
                         "mlperf-deepseek-r1) or a histogram CSV (input_tokens,output_tokens,weight)")
    sp.add_argument("--burstiness", default=None, metavar="CV2",
                    help="with --rate: squared CV of the gaps between arrivals (1 Poisson, above 1 burstier, below 1 steadier)")
    sp.add_argument("--prefix-hit", default=None, metavar="F",
                    help="with --rate: the share of each prompt found in a prefix cache (0-0.99)")


def load_workload(args: argparse.Namespace) -> Workload:
    """The --lengths/--burstiness/--prefix-hit workload."""
    return Workload(lengths=lengths_option(args.lengths or "fixed", args.isl, args.osl),
                    arrival_cv2=number(args.burstiness or "1", "--burstiness"),   # its range: the library's, said once
                    prefix_hit=number(args.prefix_hit or "0", "--prefix-hit"))


#: The options that describe a request rate's queues (given without --rate they would be silently ignored).
RATE_ONLY = (("lengths", "--lengths"), ("burstiness", "--burstiness"), ("prefix_hit", "--prefix-hit"))


def refuse_rate_options_without_rate(args: argparse.Namespace, extra: tuple[tuple[str, str], ...] = ()) -> None:
    """A usage error naming the first option of a request rate's workload given without --rate: the steady state it
    would otherwise answer ignores it, a wrong answer with no warning."""
    for attr, flag in (*RATE_ONLY, *extra):
        if getattr(args, attr, None) is not None:
            raise UsageError(f"{flag} applies to a request rate: give --rate (or drop {flag})")


def lengths_option(text: str, isl: int, osl: int) -> Lengths:
    """--lengths: ``fixed`` (--isl/--osl), ``lognormal[:CV]`` (means --isl/--osl), a shipped histogram's name
    (mlperf-llama2-70b) or a histogram CSV's path."""
    if text == "fixed":
        return Lengths.fixed(isl, osl)
    if text.startswith("lognormal"):
        cv = text.partition(":")[2]
        return Lengths.lognormal(isl, osl, cv=number(cv, "--lengths lognormal:CV", positive=True) if cv else 1.0)
    if text.endswith(".csv") or "/" in text:
        return Lengths.from_file(text)
    return shipped_lengths(text)
