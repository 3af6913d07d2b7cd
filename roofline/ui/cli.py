"""The ``roofline`` command: parses arguments, calls the library, renders. No physics here."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any, NoReturn

from rich.console import Console

from .. import startup
from ..errors import RooflineError
from ..startup import INTERRUPTED, INTERRUPTED_LINE
from ..version import __version__
from .options import SHARED_DEFAULTS, Command, UsageError, add_output, add_profile, check_outputs, shipped_inputs
from .output import silence_stdout, stdout_console
from .render_common import safe

EPILOG = """examples:
  roofline stage gpt-oss-120b h200-sxm --batch 1,64,256 --context 8192
  roofline spec --target gpt-oss-120b --draft gpt-oss-draft-1.6b --draft-on corsair:2 --verify-on b200:8 \\
      --alpha 0.926 --gamma 1..40
  roofline compare llama-3.1-8b h100-sxm:2 h200-sxm b200 'fast=h200-sxm.hbm.bandwidth=9.6TB/s'
  roofline size gpt-oss-120b --devices b200,h200-sxm --users 500 --min-tokens-per-s-per-user 50
  roofline size llama-3.1-70b --devices h100-sxm --rate 20 --p99-ttft-ms 1000 --p99-itl-ms 50
  roofline validate
a device group is ID, ID:N (N devices in tensor parallel) or ID:TPxPP; every command takes --json and --csv;
`roofline COMMAND --help` for its options"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def build_parser() -> argparse.ArgumentParser:
    from .commands import evidence, inspect, serving, size, spec, stage
    p = _Parser(prog="roofline", description="How fast, and at what energy, an LLM runs on given hardware, "
                                             "stage by stage, from first principles.",
                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG)
    p.add_argument("--version", action="version", version=f"roofline {__version__}")
    p.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    p.set_defaults(**SHARED_DEFAULTS)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    def add(name: str, func: Command, help: str, *, profile: bool = False, stack: bool | None = None
            ) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help, description=help)
        add_output(sp)
        if profile:   # --stack too, unless the command picks each row's stack itself (validate)
            add_profile(sp, stack=profile if stack is None else stack)
        sp.set_defaults(func=func)
        return sp

    for module in (inspect, stage, spec, serving, size, evidence):
        module.register(add)
    return p


class Terminated(BaseException):
    """SIGTERM, raised where the command is so that it unwinds (temporary files removed, worker processes
    stopped) and exits 143, as a shell reports a process SIGTERM ended."""


def _terminate(signum: int, frame: Any) -> None:
    raise Terminated


def main(argv: Sequence[str] | None = None, *, console: Console | None = None,
         err_console: Console | None = None) -> int:
    """Entry point; returns the exit status (0 ok, 1 bad input, 2 usage error, 3 a bug of ours, 130
    interrupted, 141 the reader of the output went away, 143 terminated).

    A usage error (2) is a command line the tool cannot take as written, whatever the models and devices: an
    unknown or missing option, a malformed count or list, or a value that is none of the names its option takes (a
    format of --weights/--kv/..., a --stack, an --emit engine), as argparse answers a bad choice. Bad input (1) is
    a well-formed line naming something that cannot be used: a model, device or file that does not exist or does
    not hold, a spec field a device lacks or a value that field cannot take (--set), a request the model or the
    devices cannot serve (and for ``size``, no option meeting the target).
    """
    if threading.current_thread() is not threading.main_thread():   # only the main thread receives signals
        return _main(argv, console=console, err_console=err_console)
    try:
        startup.release()   # from here SIGINT is a KeyboardInterrupt, which _main turns into one line and 130
        before = signal.signal(signal.SIGTERM, _terminate)
        try:
            return _main(argv, console=console, err_console=err_console)
        finally:
            signal.signal(signal.SIGTERM, before)
    except KeyboardInterrupt:   # between the handlers, outside _main
        return _interrupted(err_console)


def _interrupted(err_console: Console | None) -> int:
    err = err_console or Console(stderr=True, highlight=False, soft_wrap=True)
    err.print(INTERRUPTED_LINE, markup=False)
    return INTERRUPTED


def _main(argv: Sequence[str] | None, *, console: Console | None, err_console: Console | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv   # anywhere on the line, before or after the command
    argv = [a for a in argv if a != "--debug"]
    out = console or stdout_console()
    err = err_console or Console(stderr=True, highlight=False, soft_wrap=True)
    try:
        parser = build_parser()
        args, extra = parser.parse_known_args(argv)
        if extra:   # said against the command's own help, where its options are listed
            where = f"roofline {args.command}" if args.command else "roofline"
            raise UsageError(f"unrecognized arguments: {' '.join(extra)} (see `{where} --help`)")
        if not args.func:
            parser.print_help(out.file)
            return 2
        check_outputs(args, shipped_inputs(args))
        return int(args.func(args, out))
    except UsageError as e:
        if debug:
            raise
        err.print(safe(f"roofline: usage error: {e}"), markup=False, soft_wrap=True)
        return 2
    except RooflineError as e:
        if debug:
            raise
        err.print(safe(f"roofline: error: {e}"), markup=False, soft_wrap=True)
        return 1
    except KeyboardInterrupt:
        return _interrupted(err)
    except Terminated:   # SIGTERM: what `finally` blocks clean up (a profile's temporary file) is cleaned
        return 143
    except BrokenPipeError:   # the reader stopped reading: not an error of the input, no message
        if out.file is sys.stdout:
            silence_stdout()
        return 141   # 128 + SIGPIPE, what a shell reports for a writer the pipe closed on (git, yes)
    except Exception as e:  # a bug of ours: still one line, unless --debug
        if debug:
            raise
        err.print(safe(f"roofline: internal error: {type(e).__name__}: {e} (rerun with --debug for the traceback)"),
                  markup=False, soft_wrap=True)
        return 3


if __name__ == "__main__":
    sys.exit(main())
