"""Reading the files users hand us (specs, configs, measurements, profiles) with one kind of error."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import SpecError


def read_text(path: str | os.PathLike[str], *, what: str, max_bytes: int) -> str:
    """The UTF-8 text of ``path``; a missing file, a directory, an oversized, binary or undecodable file
    raises :class:`SpecError` naming the path and what was expected."""
    p = Path(path)
    try:
        if p.is_dir():
            raise SpecError(f"{p}: is a directory, expected {what}")
        size = p.stat().st_size
        if size > max_bytes:
            raise SpecError(f"{p}: {size:,} bytes is too large for {what} (limit {max_bytes:,})")
        text = p.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise SpecError(f"{p}: no such file") from None
    except UnicodeDecodeError:
        raise SpecError(f"{p}: not a UTF-8 text file, expected {what}") from None
    except OSError as e:
        raise SpecError(f"{p}: cannot read: {e.strerror}") from None
    if "\x00" in text:
        raise SpecError(f"{p}: binary data, expected {what}")
    return text
