"""SQLite's failures as :class:`~specchat.errors.StoreError`: one line for the user, and the kind
(disk full, locked, damaged, read-only) the app acts on."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from specchat.errors import StoreError

# SQLite's primary result codes (sqlite3 names them only from Python 3.11 on).
SQLITE_READONLY, SQLITE_BUSY, SQLITE_LOCKED, SQLITE_CORRUPT, SQLITE_FULL, SQLITE_NOTADB = (
    8, 5, 6, 11, 13, 26)


def describe_sqlite_error(e: sqlite3.Error, path: Path | str, doing: str) -> StoreError:
    """One line for the user, and the kind the app acts on."""
    code = getattr(e, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    text = str(e)
    if primary == SQLITE_FULL or "database or disk is full" in text:
        return StoreError(f"{doing}: the disk is full ({path})", "full")
    if primary in (SQLITE_BUSY, SQLITE_LOCKED) or "locked" in text:
        return StoreError(f"{doing}: the chat database is busy (another program is writing "
                          f"to {path})", "locked")
    if primary in (SQLITE_CORRUPT, SQLITE_NOTADB) or "malformed" in text \
            or "not a database" in text:
        return StoreError(f"{doing}: the chat database {path} is damaged ({text}); "
                          "`specchat chats --repair` keeps a copy and recovers what it can",
                          "corrupt")
    if primary == SQLITE_READONLY or "readonly" in text:
        return StoreError(f"{doing}: the chat database {path} is read-only", "readonly")
    return StoreError(f"{doing}: {text} ({path})")
