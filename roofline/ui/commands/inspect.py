"""Commands that list and show what ships: devices, models, formats, links, one device or model, formulas."""

from __future__ import annotations

import argparse
import os

from rich.console import Console

from ...errors import NotFoundError, did_you_mean
from ...specs.devices import device_index, list_devices, load_device
from ...specs.formats import get_format, list_formats
from ...specs.hf_config import HUB_PREFIX, list_models, load_model, names_shipped_model
from ...specs.links import LINKS
from ..options import MODEL_HELP, Adder, UsageError
from ..output import emit
from ..render_inspect import device_view, devices_view, formats_view, formula_view, model_view, models_view


def cmd_devices(args: argparse.Namespace, console: Console) -> int:
    emit(console, devices_view([load_device(d) for d in list_devices()]), args)
    return 0


def cmd_models(args: argparse.Namespace, console: Console) -> int:
    emit(console, models_view([load_model(m) for m in list_models()]), args)
    return 0


def cmd_formats(args: argparse.Namespace, console: Console) -> int:
    emit(console, formats_view([get_format(f) for f in list_formats()], list(LINKS.values())), args)
    return 0


def cmd_show(args: argparse.Namespace, console: Console) -> int:
    name = args.name
    if names_shipped_model(name):   # a preset (by id or repo id) wins over a folder or file of that name
        emit(console, model_view(load_model(name)), args)
        return 0
    if ":" in name and not os.path.exists(name) and not name.startswith(HUB_PREFIX):
        raise UsageError(f"{name!r} is a device group; show takes one device or model: roofline show "
                         f"{name.partition(':')[0]}")
    model_dir = os.path.isdir(name) and os.path.exists(os.path.join(name, "config.json"))   # a checkpoint folder
    repo_id = "/" in name and not os.path.exists(name) and not name.endswith(".toml")   # owner/name: no device
    if not name.endswith(".json") and not model_dir and not repo_id and not name.startswith(HUB_PREFIX):
        try:
            emit(console, device_view(load_device(name)), args)
            return 0
        except NotFoundError:
            if name.endswith(".toml"):
                raise
    try:
        model = load_model(name)
    except NotFoundError:
        if os.path.exists(name) or repo_id or name.startswith(HUB_PREFIX):
            raise
        hint = did_you_mean(name, [*device_index(), *list_models()])
        raise NotFoundError(f"{name!r} is neither a device nor a model id{hint} "
                            "(`roofline devices`, `roofline models` list them)") from None
    emit(console, model_view(model), args)
    return 0


def cmd_formula(args: argparse.Namespace, console: Console) -> int:
    from ... import symbolic
    if args.name not in symbolic.FORMULAS:   # a name outside the listed choices: the command line's mistake
        raise UsageError(f"formula: unknown name {args.name!r}{did_you_mean(args.name, symbolic.FORMULAS)}; "
                         f"known: {', '.join(symbolic.FORMULAS)}")
    expr = symbolic.formula(args.name)
    if args.latex and not (args.json or args.csv):
        console.file.write(symbolic.latex(expr) + "\n")
        return 0
    emit(console, formula_view(args.name, str(expr), symbolic.latex(expr), symbolic.legend(expr),
                               symbolic.describe(args.name)), args)
    return 0


def register(add: Adder) -> None:
    add("devices", cmd_devices, "list the shipped device specs with their execution family")
    add("models", cmd_models, "list the shipped model presets with parameter counts")
    add("formats", cmd_formats, "list the number formats (bits per element, compute class) and the named links")
    sp = add("show", cmd_show, "show one device (every field with its source) or model (id, alias, or path)")
    sp.add_argument("name", help="device id or alias, or path to a .toml spec; or " + MODEL_HELP)
    sp = add("formula", cmd_formula, "print a formula derived with sympy: expected-tokens, expected-tokens-limit, "
                                     "speedup, ridge-batch")
    sp.add_argument("name", help="expected-tokens, expected-tokens-limit, speedup or ridge-batch")
    sp.add_argument("--latex", action="store_true", help="print LaTeX")

