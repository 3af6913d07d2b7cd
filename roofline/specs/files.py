"""Reading and writing the files users hand us (specs, configs, measurements, profiles) with one kind of error.

Only regular files are read (a device node such as ``/dev/zero`` or a FIFO would
read forever or hang), only up to a size limit, and only as UTF-8 text. Files are
written atomically: to a temporary file beside the target, then renamed, so an
error (a full disk, an interrupt) never leaves a half-written file behind.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


def loads_toml(text: str) -> dict[str, Any]:
    """``tomllib.loads``, with a document nested too deeply for the parser (``a = [[[[...]]]]``, a thousand deep)
    raised as the TOMLDecodeError every caller already names its file in, not a RecursionError."""
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise tomllib.TOMLDecodeError("nested too deeply") from None


def check_writable(path: str | os.PathLike[str], *, refuse: tuple[str | os.PathLike[str], ...] = ()) -> Path:
    """Fail early (before a long computation) if ``path`` cannot be written or is one of the inputs ``refuse``
    names (the same file by any name: a symlink, a hard link, another spelling)."""
    p = Path(path)
    if not str(path).strip():
        raise RooflineError("an output path is empty; give a file name")
    if len(str(p)) > MAX_NAME_CHARS or any(len(part.encode()) > 255 for part in p.parts):
        raise RooflineError(f"{str(p)[:60]}...: not a file name (too long)")
    for other in refuse:
        if same_file(p, other):
            raise RooflineError(f"{p}: is an input of this command (would overwrite it); write to another path")
    real, info = _target(p)
    parent = real.parent if str(real.parent) else Path(".")
    if not parent.is_dir():
        raise RooflineError(f"cannot write {p}: no such directory {parent}")
    if not os.access(parent, os.W_OK) or (info is not None and not os.access(real, os.W_OK)):
        raise RooflineError(f"cannot write {p}: permission denied")
    return p


#: What every temporary file this module writes carries in its name, before the writer's process id: the next
#: write beside it removes one whose process is gone (a SIGKILL leaves it behind; nothing else can).
TMP_MARK = ".roofline-tmp-"


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether ``a`` and ``b`` both exist and are one file (symlinks and hard links followed); never raises."""
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def _target(p: Path) -> tuple[Path, os.stat_result | None]:
    """The file a write to ``p`` replaces: the one a symlink points at (the link stays a link), its status (None
    when it does not exist yet); a FIFO, device or socket is refused, never replaced by a regular file."""
    real = Path(os.path.realpath(p)) if p.is_symlink() else p
    try:
        info: os.stat_result | None = real.stat()
    except FileNotFoundError:
        info = None
    except OSError as e:
        raise RooflineError(f"cannot write {p}: {e.strerror or e}") from None
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise RooflineError(f"{p}: is a directory; give a file name")
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise RooflineError(f"{p}: is not a regular file (a FIFO, device or socket); refusing to replace it")
    return real, info


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):   # someone else's process, or not a pid: leave its file alone
        return True
    return True


def remove_stale_temporaries(target: Path) -> None:
    """Delete the temporary files an earlier write of ``target`` left behind when its process was killed."""
    for old in target.parent.glob(f".{target.name}{TMP_MARK}*"):
        pid = old.name.rpartition(TMP_MARK)[2]
        if pid.isascii() and pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            with contextlib.suppress(OSError):
                old.unlink()


def write_atomic(path: str | os.PathLike[str], write: Callable[[str], None]) -> None:
    """``write(temporary_path)`` then a rename onto ``path``: all of it or nothing (a full disk or an interrupt
    leaves the old file as it was). The new file takes the old one's permissions, or the umask's for a new file
    (not the 0600 of a private temporary file); a symlink is written through; a FIFO or device is refused. The
    temporary file is named ``.NAME.roofline-tmp-PID`` beside the target, removed on any error or exception
    (SIGTERM included: the CLI turns it into one), and by the next write if a SIGKILL left it."""
    p = Path(path)
    real, info = _target(p)
    parent = real.parent if str(real.parent) else Path(".")
    remove_stale_temporaries(real)
    tmp = parent / f".{real.name}{TMP_MARK}{os.getpid()}"
    try:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))   # the umask applies
        if info is not None:
            os.chmod(tmp, stat.S_IMODE(info.st_mode))
        write(str(tmp))
        os.replace(tmp, real)
    except OSError as e:
        raise RooflineError(f"cannot write {p}: {e.strerror or e}") from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename (:func:`write_atomic`)."""
    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
    write_atomic(path, write)
