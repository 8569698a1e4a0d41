"""Chats in SQLite (``<data>/chats.sqlite3``): one row per chat, one per message.

WAL mode with ``synchronous=NORMAL``: each message is its own committed transaction, so a
crash or a kill loses at most the reply still being generated, and readers (``specchat
export`` while the app runs) never block the writer. A connection belongs to the thread that
opened it; the app uses it from its UI thread only.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from specchat.errors import StoreError
from specchat.store.schema import migrate
from specchat.store.stats import ReplyStats

TITLE_CHARS = 48


@dataclass(frozen=True)
class ChatSummary:
    id: int
    title: str
    pair: str
    created: float
    updated: float
    n_messages: int


@dataclass(frozen=True)
class StoredMessage:
    id: int
    chat_id: int
    seq: int
    role: str
    content: str
    fates: str | None
    stats: ReplyStats | None
    status: str
    created: float


def title_from(text: str) -> str:
    """A chat's default title: the first line of its first message, shortened."""
    line = " ".join(text.strip().split())
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1].rstrip() + "…"


class ChatStore:
    def __init__(self, conn: sqlite3.Connection, path: Path,
                 clock: Callable[[], float] = time.time) -> None:
        self.conn = conn
        self.path = path
        self.clock = clock
        self.journal_mode = ""

    @classmethod
    def open(cls, path: Path, clock: Callable[[], float] = time.time) -> ChatStore:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(path, isolation_level=None, timeout=5.0)
            conn.row_factory = sqlite3.Row
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
        except (OSError, sqlite3.Error) as e:
            raise StoreError(f"cannot open the chat database {path}: {e}") from None
        try:
            migrate(conn, where=f"the chat database {path}")
        except sqlite3.DatabaseError as e:
            conn.close()
            raise StoreError(f"the chat database {path} is not readable: {e}") from None
        except StoreError:
            conn.close()
            raise
        store = cls(conn, path, clock)
        # Not "wal" on file systems without shared memory: still correct, readers just wait.
        store.journal_mode = str(mode).lower()
        return store

    def close(self) -> None:
        self.conn.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as e:
            raise StoreError(f"cannot write the chat database {self.path}: {e}") from None
        try:
            yield self.conn
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        else:
            self.conn.execute("COMMIT")

    # --- chats ----------------------------------------------------------------------------

    def create_chat(self, title: str, pair: str = "") -> int:
        now = self.clock()
        with self._write() as c:
            cur = c.execute("INSERT INTO chats (title, pair, created, updated) VALUES (?,?,?,?)",
                            (title or "New chat", pair, now, now))
        return int(cur.lastrowid or 0)

    def list_chats(self) -> list[ChatSummary]:
        rows = self.conn.execute(
            "SELECT c.*, (SELECT count(*) FROM messages m WHERE m.chat_id = c.id) AS n "
            "FROM chats c ORDER BY c.updated DESC, c.id DESC").fetchall()
        return [_summary(r) for r in rows]

    def get_chat(self, chat_id: int) -> ChatSummary:
        row = self.conn.execute(
            "SELECT c.*, (SELECT count(*) FROM messages m WHERE m.chat_id = c.id) AS n "
            "FROM chats c WHERE c.id = ?", (chat_id,)).fetchone()
        if row is None:
            raise StoreError(f"no chat with id {chat_id} (see `specchat chats`)")
        return _summary(row)

    def rename_chat(self, chat_id: int, title: str) -> None:
        title = " ".join(title.split())
        if not title:
            raise StoreError("a chat's title cannot be empty")
        with self._write() as c:
            cur = c.execute("UPDATE chats SET title = ? WHERE id = ?", (title, chat_id))
        if cur.rowcount == 0:
            raise StoreError(f"no chat with id {chat_id}")

    def delete_chat(self, chat_id: int) -> None:
        with self._write() as c:
            c.execute("DELETE FROM chats WHERE id = ?", (chat_id,))

    # --- messages -------------------------------------------------------------------------

    def add_message(self, chat_id: int, role: str, content: str, *, fates: str | None = None,
                    stats: ReplyStats | None = None, status: str = "done") -> int:
        now = self.clock()
        stats_json = stats.to_json() if stats else None
        with self._write() as c:
            seq = c.execute("SELECT coalesce(max(seq), -1) + 1 FROM messages WHERE chat_id = ?",
                            (chat_id,)).fetchone()[0]
            try:
                cur = c.execute(
                    "INSERT INTO messages (chat_id, seq, role, content, fates, stats, status, "
                    "created) VALUES (?,?,?,?,?,?,?,?)",
                    (chat_id, seq, role, content, fates, stats_json, status, now))
            except sqlite3.IntegrityError as e:
                raise StoreError(f"cannot save the message: {e}") from None
            c.execute("UPDATE chats SET updated = ? WHERE id = ?", (now, chat_id))
        return int(cur.lastrowid or 0)

    def messages(self, chat_id: int) -> list[StoredMessage]:
        rows = self.conn.execute("SELECT * FROM messages WHERE chat_id = ? ORDER BY seq",
                                 (chat_id,)).fetchall()
        return [_message(r) for r in rows]


def _summary(r: sqlite3.Row) -> ChatSummary:
    return ChatSummary(r["id"], r["title"], r["pair"], r["created"], r["updated"], r["n"])


def _message(r: sqlite3.Row) -> StoredMessage:
    return StoredMessage(r["id"], r["chat_id"], r["seq"], r["role"], r["content"], r["fates"],
                         ReplyStats.from_json(r["stats"]), r["status"], r["created"])
