"""The chat database's connection (``<data>/chats.sqlite3``): opening it, and the read and
write transactions every query runs in. :class:`ChatDatabase` is the base of
:class:`~specchat.store.chats.ChatStore`.

WAL mode with ``synchronous=NORMAL``: each write is its own committed transaction, and readers
(``specchat export`` while the app runs) never block the writer. A connection belongs to the
thread that opened it; the app uses it from its UI thread only. Opening a database for writing
migrates it (store/schema.py) and mends its search index (store/search.py).

Every SQLite failure leaves here as a :class:`StoreError` whose ``kind`` says what happened
(disk full, locked, damaged, read-only...), never as ``sqlite3.Error``: the app keeps what it
could not save and tries again. Writes wait at most ``busy_timeout`` for another writer, so a
lock held elsewhere costs a fraction of a second, not a frozen screen.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from specchat.errors import StoreError
from specchat.store.schema import migrate
from specchat.store.search import ensure_index, index_needs_work
from specchat.store.sqlite_errors import describe_sqlite_error

BUSY_TIMEOUT_S = 0.5  # another writer's transaction is milliseconds; a lock held longer fails

D = TypeVar("D", bound="ChatDatabase")


class ChatDatabase:
    def __init__(self, conn: sqlite3.Connection, path: Path,
                 clock: Callable[[], float] = time.time) -> None:
        self.conn = conn
        self.path = path
        self.clock = clock
        self.journal_mode = ""
        self.read_only = False

    @classmethod
    def open(cls: type[D], path: Path, clock: Callable[[], float] = time.time,
             busy_timeout: float = BUSY_TIMEOUT_S, read_only: bool = False) -> D:
        if read_only:
            try:
                return cls._open(path, clock, busy_timeout, "mode=ro")
            except StoreError:
                # On a read-only file system SQLite cannot make the WAL's -shm file: read the
                # file as it is (nothing else can be writing it there).
                return cls._open(path, clock, busy_timeout, "mode=ro&immutable=1")
        return cls._open(path, clock, busy_timeout, None)

    @classmethod
    def _open(cls: type[D], path: Path, clock: Callable[[], float], busy_timeout: float,
              uri_query: str | None) -> D:
        read_only = uri_query is not None
        try:
            if uri_query is not None:
                conn = sqlite3.connect(f"{path.resolve().as_uri()}?{uri_query}", uri=True,
                                       isolation_level=None, timeout=busy_timeout)
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                conn = sqlite3.connect(path, isolation_level=None, timeout=busy_timeout)
        except (OSError, sqlite3.Error) as e:
            raise StoreError(f"cannot open the chat database {path}: {e}") from None
        conn.row_factory = sqlite3.Row
        try:
            mode = "" if read_only else conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            if read_only:
                conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            else:
                migrate(conn, where=f"the chat database {path}")
                _mend_index(conn)
        except sqlite3.Error as e:
            conn.close()
            raise describe_sqlite_error(e, path, "cannot open the chat history") from None
        except StoreError:
            conn.close()
            raise
        store = cls(conn, path, clock)
        store.read_only = read_only
        # Not "wal" on file systems without shared memory: still correct, readers just wait.
        store.journal_mode = str(mode).lower()
        return store

    def close(self) -> None:
        self.conn.close()

    def check(self) -> str | None:
        """SQLite's own quick integrity check: None when fine, else what it found."""
        try:
            rows = self.conn.execute("PRAGMA quick_check").fetchall()
        except sqlite3.Error as e:
            return str(e)
        found = [str(r[0]) for r in rows]
        return None if found == ["ok"] else "; ".join(found[:3])

    @contextmanager
    def _read(self, doing: str = "cannot read the chat history") -> Iterator[sqlite3.Connection]:
        try:
            yield self.conn
        except sqlite3.Error as e:
            raise describe_sqlite_error(e, self.path, doing) from None

    @contextmanager
    def _write(self, doing: str = "not saved") -> Iterator[sqlite3.Connection]:
        if self.read_only:
            raise StoreError(f"{doing}: the chat database {self.path} is open read-only",
                             "readonly")
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as e:
            raise describe_sqlite_error(e, self.path, doing) from None
        try:
            yield self.conn
            self.conn.execute("COMMIT")  # a full disk often shows only here
        except BaseException as e:
            if self.conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):  # SQLite may have rolled back itself
                    self.conn.execute("ROLLBACK")
            if isinstance(e, sqlite3.Error):
                raise describe_sqlite_error(e, self.path, doing) from None
            raise


def _mend_index(conn: sqlite3.Connection) -> None:
    """The search index made whole at open (see store/search.py); the write lock only when it
    needs work, and a lock held elsewhere leaves it for the next open (searches still work)."""
    if not index_needs_work(conn):
        return
    try:
        conn.execute("BEGIN IMMEDIATE")
        ensure_index(conn)
        conn.execute("COMMIT")
    except sqlite3.OperationalError:
        if conn.in_transaction:
            conn.execute("ROLLBACK")

