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
        raise NotFoundError(f"{name!r} is neither a device nor a model id "
                            "(`roofline devices`, `roofline models` list them)") from None
    if args.json:
        _print_json(console, render.model_dict(model))
    else:
        console.print(render.model_table(model))
    return 0


# ------------------------------------------------------------------ parser
def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="roofline", description="How fast, and at what energy, an LLM runs on given hardware, "
                                             "stage by stage, from first principles.")
    p.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    def add(name: str, func: Callable[[argparse.Namespace, Console], int], help: str) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help, description=help)
        sp.add_argument("--json", action="store_true", help="print JSON instead of a table")
        sp.set_defaults(func=func)
        return sp

    add("devices", cmd_devices, "list the shipped device specs")
    add("models", cmd_models, "list the shipped model presets with parameter counts")
    sp = add("show", cmd_show, "show one device or model (id, alias, or path to a .toml spec / config.json)")
    sp.add_argument("name")
    return p


def main(argv: Sequence[str] | None = None, *, console: Console | None = None,
         err_console: Console | None = None) -> int:
    """Entry point; returns the exit status (0 ok, 1 bad input, 2 usage error)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    out = console or Console(no_color=bool(os.environ.get("NO_COLOR")) or None, soft_wrap=False)
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
