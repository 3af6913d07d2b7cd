"""Reading and writing the files users hand us (specs, configs, measurements, profiles) with one kind of error.

Only regular files are read (a device node such as ``/dev/zero`` or a FIFO would
read forever or hang), only up to a size limit, and only as UTF-8 text. Files are
written atomically: to a temporary file beside the target, then renamed, so an
error (a full disk, an interrupt) never leaves a half-written file behind.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from ..errors import RooflineError, SpecError

#: Longer names are not paths anyone typed; the OS would refuse them with an obscure error.
MAX_NAME_CHARS = 4096


def read_text(path: str | os.PathLike[str], *, what: str, max_bytes: int) -> str:
    """The UTF-8 text of ``path``; a missing, non-regular, oversized, binary or undecodable file raises
    :class:`SpecError` naming the path and what was expected."""
    p = Path(path)
    if len(str(p)) > MAX_NAME_CHARS:
        raise SpecError(f"{str(p)[:60]}...: a path of {len(str(p)):,} characters is not a file name")
    try:
        info = p.stat()
        if stat.S_ISDIR(info.st_mode):
            raise SpecError(f"{p}: is a directory, expected {what}")
        if not stat.S_ISREG(info.st_mode):
            raise SpecError(f"{p}: is not a regular file (a device, FIFO or socket), expected {what}")
        if info.st_size > max_bytes:
            raise SpecError(f"{p}: {info.st_size:,} bytes is too large for {what} (limit {max_bytes:,})")
        with p.open("rb") as f:
            text = f.read(max_bytes + 1).decode("utf-8")
    except FileNotFoundError:
        raise SpecError(f"{p}: no such file") from None
    except UnicodeDecodeError:
        raise SpecError(f"{p}: not a UTF-8 text file, expected {what}") from None
    except OSError as e:
        raise SpecError(f"{p}: cannot read: {e.strerror or e}") from None
    if "\x00" in text:
        raise SpecError(f"{p}: binary data, expected {what}")
    return text


def check_writable(path: str | os.PathLike[str], *, refuse: tuple[str | os.PathLike[str], ...] = ()) -> Path:
    """Fail early (before a long computation) if ``path`` cannot be written or would overwrite an input."""
    p = Path(path)
    for other in refuse:
        try:
            if p.resolve() == Path(other).resolve():
                raise RooflineError(f"{p}: would overwrite the input file; write to another path")
        except OSError:
            continue
    parent = p.parent if str(p.parent) else Path(".")
    if p.is_dir():
        raise RooflineError(f"{p}: is a directory; give a file name")
    if not parent.is_dir():
        raise RooflineError(f"cannot write {p}: no such directory {parent}")
    if not os.access(parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise RooflineError(f"cannot write {p}: permission denied")
    return p


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename: all of it or nothing."""
    p = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent if str(p.parent) else ".")
    except OSError as e:
        raise RooflineError(f"cannot write {p}: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except OSError as e:
        raise RooflineError(f"cannot write {p}: {e.strerror or e}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
