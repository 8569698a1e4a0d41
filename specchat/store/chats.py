"""Chats in SQLite (``<data>/chats.sqlite3``): one row per chat, one per message.

WAL mode with ``synchronous=NORMAL``: each write is its own committed transaction, and readers
(``specchat export`` while the app runs) never block the writer. A reply is written while it
streams (status ``interrupted`` until it ends), so a kill keeps what was shown. A connection
belongs to the thread that opened it; the app uses it from its UI thread only.

Every SQLite failure leaves here as a :class:`StoreError` whose ``kind`` says what happened
(disk full, locked, damaged, read-only...), never as ``sqlite3.Error``: the app keeps what it
could not save and tries again. Writes wait at most ``busy_timeout`` for another writer, so a
lock held elsewhere costs a fraction of a second, not a frozen screen.

Ownership: while the app shows a chat it owns it (a ``chat_owners`` row with its token and a
heartbeat). Another specchat opening the same chat sees the owner and opens it read-only, so
two instances never interleave one chat's turns. An owner whose process is gone (same host),
or whose heartbeat is older than ``LEASE_S``, no longer counts.

Branches: each message names the one it follows (``parent_id``); messages with the same parent
are alternatives (a regenerated reply, an edited message) and one of them is ``active``, the
one shown. :mod:`~specchat.store.branches` walks the shown branch; :meth:`ChatStore.messages`
returns them all.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from specchat.errors import StoreError
from specchat.store.branches import Link, thread
from specchat.store.chat_tools import NO_TOOLS, ChatTools
from specchat.store.reply_format import TEXT, ReplyFormat
from specchat.store.schema import migrate
from specchat.store.search import SearchHit, ensure_index, index_needs_work, search
from specchat.store.sqlite_errors import describe_sqlite_error
from specchat.store.stats import ReplyStats
from specchat.store.tool_parts import ToolPart

TITLE_CHARS = 48
BUSY_TIMEOUT_S = 0.5  # another writer's transaction is milliseconds; a lock held longer fails
LEASE_S = 120.0  # an owner not heard from for this long has gone (the app renews every 30 s)


@dataclass(frozen=True)
class ChatSummary:
    id: int
    title: str
    pair: str
    created: float
    updated: float
    n_messages: int  # on the shown branch (alternatives a flip away are not counted)
    preset: str | None = None  # the system-prompt preset chosen for this chat, by name
    system_prompt: str | None = None  # the chat's own system prompt (None: the app's)
    reply_format: ReplyFormat = TEXT  # what its replies follow: free text, JSON, a grammar
    tools: ChatTools = NO_TOOLS  # the servers whose tools it offers, what is always allowed


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
    parent_id: int | None = None  # the message this one follows; None: the chat's first
    active: bool = True  # the one shown among its alternatives (same parent)
    tool: ToolPart | None = None  # an assistant message's calls; what a tool message answers


class _Keep:
    """An argument left out: the column keeps its value."""


KEEP = _Keep()
LAST = "last"  # add_message's default parent: the last message of the shown branch


def title_from(text: str) -> str:
    """A chat's default title: the first line of its first message, shortened."""
    line = " ".join(text.strip().split())
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1].rstrip() + "…"


@dataclass(frozen=True)
class Owner:
    """Another running specchat that writes a chat."""

    host: str
    pid: int

    def describe(self) -> str:
        here = self.host == socket.gethostname()
        return f"process {self.pid}" if here else f"process {self.pid} on {self.host}"


class ChatStore:
    def __init__(self, conn: sqlite3.Connection, path: Path,
                 clock: Callable[[], float] = time.time) -> None:
        self.conn = conn
        self.path = path
        self.clock = clock
        self.journal_mode = ""
        self.read_only = False
        self.token = secrets.token_hex(8)  # this store's identity as a chat's owner
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.owned: set[int] = set()

    @classmethod
    def open(cls, path: Path, clock: Callable[[], float] = time.time,
             busy_timeout: float = BUSY_TIMEOUT_S, read_only: bool = False) -> ChatStore:
        if read_only:
            try:
                return cls._open(path, clock, busy_timeout, "mode=ro")
            except StoreError:
                # On a read-only file system SQLite cannot make the WAL's -shm file: read the
                # file as it is (nothing else can be writing it there).
                return cls._open(path, clock, busy_timeout, "mode=ro&immutable=1")
        return cls._open(path, clock, busy_timeout, None)

    @classmethod
    def _open(cls, path: Path, clock: Callable[[], float], busy_timeout: float,
              uri_query: str | None) -> ChatStore:
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
        for chat_id in list(self.owned):
            with contextlib.suppress(StoreError):  # the next owner ignores a gone pid's row
                self.release(chat_id)
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

    # --- chats ----------------------------------------------------------------------------

    def create_chat(self, title: str, pair: str = "", *, preset: str | None = None,
                    system_prompt: str | None = None,
                    reply_format: ReplyFormat = TEXT, tools: ChatTools = NO_TOOLS) -> int:
        now = self.clock()
        with self._write("the chat was not saved") as c:
            cur = c.execute("INSERT INTO chats (title, pair, created, updated, preset, "
                            "system_prompt, format_kind, format_source, tools) "
                            "VALUES (?,?,?,?,?,?,?,?,?)",
                            (title or "New chat", pair, now, now, preset, system_prompt,
                             reply_format.kind, reply_format.source, tools.to_json()))
            chat_id = int(cur.lastrowid or 0)
            self._own(c, chat_id, now)
        self.owned.add(chat_id)
        return chat_id

    def list_chats(self) -> list[ChatSummary]:
        with self._read("cannot list the saved chats") as c:
            rows = c.execute(
                "SELECT c.*, (SELECT count(*) FROM messages m WHERE m.chat_id = c.id) AS n "
                "FROM chats c ORDER BY c.updated DESC, c.id DESC").fetchall()
            shown = _shown_counts(c)
        return [_summary(r, shown.get(r["id"])) for r in rows]

    def get_chat(self, chat_id: int) -> ChatSummary:
        with self._read("cannot open the chat") as c:
            row = c.execute(
                "SELECT c.*, (SELECT count(*) FROM messages m WHERE m.chat_id = c.id) AS n "
                "FROM chats c WHERE c.id = ?", (chat_id,)).fetchone()
            shown = _shown_counts(c, chat_id)
        if row is None:
            raise StoreError(f"no chat with id {chat_id} (see `specchat chats`)", "missing")
        return _summary(row, shown.get(chat_id))

    def rename_chat(self, chat_id: int, title: str) -> None:
        title = " ".join(title.split())
        if not title:
            raise StoreError("a chat's title cannot be empty")
        with self._write("the chat was not renamed") as c:
            cur = c.execute("UPDATE chats SET title = ? WHERE id = ?", (title, chat_id))
        if cur.rowcount == 0:
            raise StoreError(f"no chat with id {chat_id}", "missing")

    def set_pair(self, chat_id: int, pair: str) -> None:
        """The pair (or model) the chat now continues with."""
        with self._write("the chat's pair was not saved") as c:
            self._check_owner(c, chat_id)
            c.execute("UPDATE chats SET pair = ? WHERE id = ?", (pair, chat_id))

    def set_prompt(self, chat_id: int, preset: str | None, system_prompt: str | None) -> None:
        """The chat's system-prompt preset (by name) and the prompt it asks for."""
        with self._write("the chat's system prompt was not saved") as c:
            self._check_owner(c, chat_id)
            c.execute("UPDATE chats SET preset = ?, system_prompt = ? WHERE id = ?",
                      (preset, system_prompt, chat_id))

    def set_format(self, chat_id: int, reply_format: ReplyFormat) -> None:
        """What the chat's replies follow from now on (the schema's or grammar's text too)."""
        with self._write("the chat's reply format was not saved") as c:
            self._check_owner(c, chat_id)
            cur = c.execute("UPDATE chats SET format_kind = ?, format_source = ? WHERE id = ?",
                            (reply_format.kind, reply_format.source, chat_id))
        if cur.rowcount == 0:
            raise StoreError(f"no chat with id {chat_id}", "missing")

    def set_tools(self, chat_id: int, tools: ChatTools) -> None:
        """Which servers' tools the chat offers from now on, and what it always allows."""
        with self._write("the chat's tools were not saved") as c:
            self._check_owner(c, chat_id)
            cur = c.execute("UPDATE chats SET tools = ? WHERE id = ?",
                            (tools.to_json(), chat_id))
        if cur.rowcount == 0:
            raise StoreError(f"no chat with id {chat_id}", "missing")

    def search(self, text: str, limit: int = 50) -> tuple[list[SearchHit], bool]:
        """Messages of every chat matching all the words of ``text``, best first, and whether
        the full-text index answered (False: a substring search did; see store/search.py)."""
        with self._read("cannot search the chats") as c:
            return search(c, text, limit)

    def delete_chat(self, chat_id: int) -> None:
        with self._write("the chat was not deleted") as c:
            self._check_owner(c, chat_id)
            c.execute("DELETE FROM chats WHERE id = ?", (chat_id,))
        self.owned.discard(chat_id)

    # --- owning a chat --------------------------------------------------------------------

    def claim(self, chat_id: int) -> Owner | None:
        """Own ``chat_id`` for writing; return the other specchat that owns it, if one does."""
        now = self.clock()
        with self._write("the chat could not be opened for writing") as c:
            other = self._live_owner(c, chat_id)
            if other is None:
                self._own(c, chat_id, now)
        if other is None:
            self.owned.add(chat_id)
        return other

    def release(self, chat_id: int) -> None:
        self.owned.discard(chat_id)
        if self.read_only:
            return
        with self._write("the chat was not released") as c:
            c.execute("DELETE FROM chat_owners WHERE chat_id = ? AND token = ?",
                      (chat_id, self.token))

    def renew(self) -> None:
        """The heartbeat that keeps this store's chats its own (the app calls it on a timer)."""
        if not self.owned or self.read_only:
            return
        with self._write("the chat's owner mark was not renewed") as c:
            c.execute("UPDATE chat_owners SET seen = ? WHERE token = ?",
                      (self.clock(), self.token))

    def owner_of(self, chat_id: int) -> Owner | None:
        """The other running specchat that owns ``chat_id``, if any (no write)."""
        with self._read() as c:
            return self._live_owner(c, chat_id)

    def _own(self, c: sqlite3.Connection, chat_id: int, now: float) -> None:
        c.execute("INSERT OR REPLACE INTO chat_owners (chat_id, token, host, pid, seen) "
                  "VALUES (?,?,?,?,?)", (chat_id, self.token, self.host, self.pid, now))

    def _live_owner(self, c: sqlite3.Connection, chat_id: int) -> Owner | None:
        row = c.execute("SELECT token, host, pid, seen FROM chat_owners WHERE chat_id = ?",
                        (chat_id,)).fetchone()
        if row is None or row["token"] == self.token:
            return None
        if self.clock() - float(row["seen"]) > LEASE_S:
            return None
        if row["host"] == self.host and not process_alive(int(row["pid"])):
            return None
        return Owner(str(row["host"]), int(row["pid"]))

    def _check_owner(self, c: sqlite3.Connection, chat_id: int) -> None:
        other = self._live_owner(c, chat_id)
        if other is not None:
            raise StoreError(f"this chat is open in another specchat ({other.describe()})",
                             "owned")

    # --- messages -------------------------------------------------------------------------

    def add_message(self, chat_id: int, role: str, content: str, *, fates: str | None = None,
                    stats: ReplyStats | None = None, status: str = "done",
                    parent_id: int | str | None = LAST, active: bool = True,
                    tool: ToolPart | None = None) -> int:
        """A new message after ``parent_id`` (default: the shown branch's last message; None:
        a first message). ``active``: it is the one shown among its alternatives (their own
        flags are the caller's to change, with :meth:`update_message`). ``tool``: an
        assistant message's calls, or the call a ``tool`` message answers."""
        now = self.clock()
        stats_json = stats.to_json() if stats else None
        with self._write() as c:
            self._check_owner(c, chat_id)
            seq = c.execute("SELECT coalesce(max(seq), -1) + 1 FROM messages WHERE chat_id = ?",
                            (chat_id,)).fetchone()[0]
            if parent_id == LAST:
                shown = thread([_message(r) for r in c.execute(
                    "SELECT * FROM messages WHERE chat_id = ?", (chat_id,)).fetchall()])
                parent_id = shown[-1].id if shown else None
            try:
                cur = c.execute(
                    "INSERT INTO messages (chat_id, seq, role, content, fates, stats, status, "
                    "created, parent_id, active, tool) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                    (chat_id, seq, role, content, fates, stats_json, status, now, parent_id,
                     int(active), tool.to_json() if tool else None))
            except sqlite3.IntegrityError as e:
                raise StoreError(f"cannot save the message: {e}") from None
            c.execute("UPDATE chats SET updated = ? WHERE id = ?", (now, chat_id))
            if chat_id in self.owned:
                c.execute("UPDATE chat_owners SET seen = ? WHERE chat_id = ? AND token = ?",
                          (now, chat_id, self.token))
        return int(cur.lastrowid or 0)

    def update_message(self, message_id: int, content: str, *, fates: str | None = None,
                       stats: ReplyStats | None = None, status: str = "done",
                       parent_id: int | _Keep | None = KEEP, active: bool | None = None,
                       tool: ToolPart | _Keep | None = KEEP) -> None:
        """Rewrite a message saved earlier (a reply checkpointed while it streamed; another
        alternative shown: ``active``)."""
        now = self.clock()
        with self._write() as c:
            row = c.execute("SELECT chat_id, parent_id, active, tool FROM messages "
                            "WHERE id = ?", (message_id,)).fetchone()
            if row is None:
                raise StoreError(f"no message with id {message_id}", "missing")
            self._check_owner(c, int(row["chat_id"]))
            parent = row["parent_id"] if isinstance(parent_id, _Keep) else parent_id
            shown = int(row["active"]) if active is None else int(active)
            part = row["tool"] if isinstance(tool, _Keep) else tool.to_json() if tool else None
            c.execute("UPDATE messages SET content = ?, fates = ?, stats = ?, status = ?, "
                      "parent_id = ?, active = ?, tool = ? WHERE id = ?",
                      (content, fates, stats.to_json() if stats else None, status, parent, shown,
                       part, message_id))
            c.execute("UPDATE chats SET updated = ? WHERE id = ?", (now, row["chat_id"]))

    def delete_messages(self, chat_id: int, ids: Sequence[int],
                        relink: Sequence[tuple[int, int | None, bool]] = ()) -> None:
        """Delete messages and, in the same transaction, give others a new parent and shown
        flag (``relink``: (id, parent_id, active)), so no message is left following a
        deleted one."""
        now = self.clock()
        with self._write("the message was not deleted") as c:
            self._check_owner(c, chat_id)
            for message_id, parent_id, active in relink:
                c.execute("UPDATE messages SET parent_id = ?, active = ? "
                          "WHERE id = ? AND chat_id = ?",
                          (parent_id, int(active), message_id, chat_id))
            for message_id in ids:
                c.execute("DELETE FROM messages WHERE id = ? AND chat_id = ?",
                          (message_id, chat_id))
            c.execute("UPDATE chats SET updated = ? WHERE id = ?", (now, chat_id))

    def messages(self, chat_id: int) -> list[StoredMessage]:
        with self._read("cannot read the chat's messages") as c:
            rows = c.execute("SELECT * FROM messages WHERE chat_id = ? ORDER BY seq",
                             (chat_id,)).fetchall()
        return [_message(r) for r in rows]

    def thread(self, chat_id: int) -> list[StoredMessage]:
        """The chat's shown branch (what an export writes)."""
        return thread(self.messages(chat_id))


def process_alive(pid: int) -> bool:
    """Whether a process with this id runs on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


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


def _shown_counts(c: sqlite3.Connection, chat_id: int | None = None) -> dict[int, int]:
    """Messages on each chat's shown branch (:func:`thread`), from the link columns alone;
    empty at a schema older than branches (every message is then shown)."""
    links: dict[int, list[Link]] = {}
    try:
        cols = {r[1] for r in c.execute("PRAGMA table_info(messages)")}
        if not {"parent_id", "active"} <= cols:
            return {}
        where, args = ("WHERE chat_id = ?", (chat_id,)) if chat_id is not None else ("", ())
        for r in c.execute(f"SELECT id, chat_id, seq, parent_id, active FROM messages {where}",
                           args):
            links.setdefault(r[1], []).append(Link(r[0], r[2], r[3], bool(r[4])))
    except sqlite3.DatabaseError:
        # Damaged message pages: the list still reads (its counts come from an index), so
        # the user can open what is left and repair; the plain counts stand.
        return {}
    return {chat: len(thread(ms)) for chat, ms in links.items()}


def _summary(r: sqlite3.Row, shown: int | None = None) -> ChatSummary:
    keys = r.keys()  # a database opened read-only may be at an older schema
    n = r["n"] if shown is None else shown
    return ChatSummary(r["id"], r["title"], r["pair"], r["created"], r["updated"], n,
                       r["preset"] if "preset" in keys else None,
                       r["system_prompt"] if "system_prompt" in keys else None,
                       ReplyFormat.from_columns(
                           r["format_kind"] if "format_kind" in keys else None,
                           r["format_source"] if "format_source" in keys else None),
                       ChatTools.from_json(r["tools"] if "tools" in keys else None))


def _message(r: sqlite3.Row) -> StoredMessage:
    return StoredMessage(r["id"], r["chat_id"], r["seq"], r["role"], r["content"], r["fates"],
                         ReplyStats.from_json(r["stats"]), r["status"], r["created"],
                         r["parent_id"], bool(r["active"]),
                         # (a sqlite3.Row's `in` looks at values: its keys, at an older schema)
                         ToolPart.from_json(r["tool"] if "tool" in r.keys() else None))  # noqa: SIM118
