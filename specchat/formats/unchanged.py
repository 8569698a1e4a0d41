"""Remember what a file's leading bytes gave, for as long as those bytes are the same.

A repeat costs a hash of the bytes that were read, not the parse: a file rewritten in place,
however quickly, is read again, which a check of modification times could miss.
"""

from __future__ import annotations

import hashlib
import mmap
from collections.abc import Sequence
from pathlib import Path
from typing import Generic, TypeVar

T = TypeVar("T")

# Per file: its size, how many leading bytes were read, their digest.
Marks = tuple[tuple[int, int, bytes], ...]


def _digest(path: Path, size: int, length: int) -> bytes | None:
    try:
        with path.open("rb") as fh:
            if fh.seek(0, 2) != size:
                return None
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                return hashlib.blake2b(memoryview(buf)[:length]).digest()
    except (OSError, ValueError):
        return None


class WhileUnchanged(Generic[T]):
    """Values by key, each valid while its files' sizes and leading bytes are unchanged.

    Keys are model paths, so the table stays as small as the models a process opens.
    """

    def __init__(self) -> None:
        self._entries: dict[str, tuple[Marks, T]] = {}

    def get(self, key: str, files: Sequence[Path]) -> T | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        marks, value = entry
        if len(marks) != len(files) or any(
                _digest(f, size, length) != digest
                for f, (size, length, digest) in zip(files, marks, strict=True)):
            return None
        return value

    def put(self, key: str, files: Sequence[Path], read: Sequence[tuple[int, int]],
            value: T) -> None:
        """``read``: per file, its size and how many leading bytes the value came from."""
        marks = []
        for f, (size, length) in zip(files, read, strict=True):
            digest = _digest(f, size, length)
            if digest is None:
                return
            marks.append((size, length, digest))
        self._entries[key] = (tuple(marks), value)
