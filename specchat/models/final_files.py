"""The files specchat itself puts in ``<data>/models/`` (fetched from PyPI, derived), at their
final paths.

Such a file is only ever the result of an atomic rename of a complete, checked file, made under
its lock (:mod:`specchat.locks`). A short, empty or non-GGUF file found there anyway (left by an
older specchat, a crash of the disk, a copy cut short) is not the model: it is moved aside to
``<name>.broken`` with a one-line notice and made again, instead of being reported as a corrupt
model on every start.
"""

from __future__ import annotations

import os
from pathlib import Path

from specchat.errors import ModelFileError
from specchat.formats.gguf_checks import validate
from specchat.formats.gguf_file import MAGIC, DamagedFile
from specchat.models.progress import ProgressFn, format_bytes, notice


def broken_path(dest: Path) -> Path:
    return dest.with_name(dest.name + ".broken")


def problem(dest: Path, size: int | None = None) -> str | None:
    """Why the file at ``dest`` is not a complete model file (None: it is one, or is absent).

    ``size``: the catalog's, when it pins one. A complete file of another kind of damage (an
    unsupported GGUF version) is not a problem here: making it again would not change it.
    """
    try:
        have = dest.stat().st_size
    except FileNotFoundError:
        return None
    if size is not None and have != size:
        return f"{format_bytes(have)} ({have:,} bytes) where the file is {size:,} bytes"
    try:
        with dest.open("rb") as f:
            if f.read(4) != MAGIC:
                return "empty" if have == 0 else "not a GGUF file"
        validate(dest, vocabulary=False)
    except DamagedFile as e:
        return str(e).split(": ", 1)[-1].split(" — ")[0]  # "truncated GGUF file (41 MB of 98 MB)"
    except ModelFileError as e:
        if have < 24:
            return "empty" if have == 0 else f"only {have} bytes"
        if "not a GGUF file" in str(e):
            return "not a GGUF file"
        return None  # complete, and broken in a way a new copy would share: the load says so
    except OSError as e:
        raise ModelFileError(f"cannot read {dest}: {e.strerror or e}") from None
    return None


def settle(dest: Path, size: int | None, report: ProgressFn) -> bool:
    """True when ``dest`` holds a complete file; else moves any incomplete one aside (with a
    notice through ``report``) and returns False: it is to be made. Call it under the lock."""
    why = problem(dest, size)
    if why is None:
        return dest.is_file()
    aside = broken_path(dest)
    os.replace(dest, aside)  # a rename: the bytes are kept for a look, nothing is deleted
    notice(report, f"{dest.name} was not a complete file ({why}): moved aside to {aside.name}; "
                   "making it again")
    return False
