"""The ``roofline`` command's first moments: Ctrl-C while the package is still being imported.

``roofline/__init__.py`` imports most of the package before :func:`roofline.ui.cli.main` runs and turns an
interrupt into exit status 130 with one line. Until then Python would print a KeyboardInterrupt traceback. When
this process is the command (the ``roofline`` script or ``python -m roofline``, read from ``sys.orig_argv``),
:func:`guard` installs a SIGINT handler that says one line and exits 130; ``main`` hands SIGINT back to Python
(:func:`release`). A program that merely imports roofline is left alone.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

#: The exit status of a command ended by SIGINT (128 + 2), as a shell reports it.
INTERRUPTED = 130
#: The line an interrupted command leaves on stderr.
INTERRUPTED_LINE = "roofline: interrupted"


def is_the_command(argv: list[str] | None = None) -> bool:
    """Whether this interpreter was started as the ``roofline`` command: its console script (``roofline``,
    ``roofline.exe``, ``roofline-script.py``) or ``python -m roofline``."""
    argv = list(sys.orig_argv if argv is None else argv)
    if "-m" in argv[1:]:
        i = argv.index("-m", 1)
        return argv[i + 1:i + 2] == ["roofline"]
    script = next((a for a in argv[1:] if not a.startswith("-")), "")
    return os.path.basename(script).removesuffix(".exe").removesuffix("-script.py") == "roofline"


def _interrupted(signum: int, frame: Any) -> None:
    sys.stderr.write(INTERRUPTED_LINE + "\n")
    sys.stderr.flush()
    raise SystemExit(INTERRUPTED)   # unwinds the imports without a traceback


def guard() -> None:
    """Exit 130 with one line on SIGINT, where this process is the command and SIGINT has Python's handler."""
    try:
        if is_the_command() and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, _interrupted)
    except ValueError:   # not the main thread: signals are not ours to set
        pass


def release() -> None:
    """Python's own SIGINT handling again (KeyboardInterrupt), where :func:`guard` had taken it."""
    try:
        if signal.getsignal(signal.SIGINT) is _interrupted:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    except ValueError:
        pass
