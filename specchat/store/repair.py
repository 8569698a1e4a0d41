"""A damaged chat database: keep a copy, recover what is readable, start a fresh one.

SQLite's ``.recover`` lives in its command-line shell; from Python the closest is to read
every row that still reads. A damaged table is read row by row (``WHERE rowid = ?``), so one
bad page costs the rows on it, not the table. The damaged file (with its ``-wal``) is copied
aside first and never written again; reading happens on a second, throwaway copy because
closing a WAL database checkpoints into it.
"""

from __future__ import annotations

import os
import shutil
import socket
import sqlite3
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specchat.errors import StoreError
from specchat.store.chat_tools import ChatTools
from specchat.store.chats import ChatStore
from specchat.store.ownership import process_alive
from specchat.store.reply_format import ReplyFormat
from specchat.store.tool_parts import ToolPart

MAX_GAP = 2000  # consecutive absent rowids after which a row-by-row scan stops
SIDE_FILES = ("-wal", "-shm")
STATUSES = ("done", "cancelled", "error", "interrupted")


@dataclass(frozen=True)
class RepairReport:
    kept_as: Path  # the damaged file, as it was
    chats: int
    messages: int
    unreadable: int  # rows (or table scans) that could not be read

    def describe(self) -> str:
        lost = f"; {self.unreadable} unreadable rows lost" if self.unreadable else ""
        return (f"recovered {self.chats} chats and {self.messages} messages into a fresh "
                f"database{lost}; the damaged file is kept as {self.kept_as}")


def repair(path: Path, clock: Callable[[], float] = time.time) -> RepairReport:
    """Replace the database at ``path`` by a fresh one holding every row that still reads."""
    if not path.exists():
        raise StoreError(f"no chat database at {path}: nothing to repair", "missing")
    running = _running_owners(path)
    if running:
        raise StoreError(f"the chat database is in use by a running specchat ({running}): "
                         "quit it first, then repair", "locked")
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(clock()))
    kept = path.with_name(f"{path.name}.damaged-{stamp}")
    try:
        _copy_with_sides(path, kept)
        with tempfile.TemporaryDirectory(prefix="specchat-repair-") as tmp:
            work = Path(tmp) / "damaged.sqlite3"
            _copy_with_sides(path, work)
            chats, messages, unreadable = _salvage(work)
            fresh_path = path.with_name(path.name + ".repairing")
            _remove_with_sides(fresh_path)
            fresh = ChatStore.open(fresh_path)
            try:
                n_chats, n_msgs = _write_fresh(fresh, chats, messages, clock())
            finally:
                fresh.close()
            _remove_with_sides(path)
            fresh_path.replace(path)
            _remove_with_sides(fresh_path)
    except OSError as e:
        raise StoreError(f"cannot repair {path}: {e.strerror or e}") from None
    return RepairReport(kept, n_chats, n_msgs, unreadable)


def _running_owners(path: Path) -> str:
    """Processes on this host that hold a chat open (best effort: the table may be damaged).

    Replacing the file under a running app would send its next writes to the old, unlinked
    file: they would be lost.
    """
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            rows = conn.execute("SELECT DISTINCT host, pid FROM chat_owners").fetchall()
        finally:
            conn.close()
    except sqlite3.Error:
        return ""
    here = socket.gethostname()
    pids = sorted({int(pid) for host, pid in rows if host == here and int(pid) != os.getpid()
                   and process_alive(int(pid))})
    return ", ".join(f"process {p}" for p in pids)


def _copy_with_sides(src: Path, dst: Path) -> None:
    shutil.copy2(src, dst)
    for side in SIDE_FILES:
        s = src.with_name(src.name + side)
        if s.exists():
            shutil.copy2(s, dst.with_name(dst.name + side))


def _remove_with_sides(path: Path) -> None:
    for p in (path, *(path.with_name(path.name + side) for side in SIDE_FILES)):
        p.unlink(missing_ok=True)


def _salvage(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
    try:
        conn = sqlite3.connect(path, isolation_level=None)
    except sqlite3.Error:
        return [], [], 1
    conn.row_factory = sqlite3.Row
    try:
        chats, bad_c = _rows(conn, "chats")
        messages, bad_m = _rows(conn, "messages")
    finally:
        conn.close()
    return chats, messages, bad_c + bad_m


def _rows(conn: sqlite3.Connection, table: str) -> tuple[list[dict[str, Any]], int]:
    try:
        return [dict(r) for r in conn.execute(f"SELECT * FROM {table} ORDER BY rowid")], 0
    except sqlite3.DatabaseError:
        pass
    rows: list[dict[str, Any]] = []
    bad = unconfirmed = misses = rowid = 0
    try:
        conn.execute(f"SELECT 1 FROM {table} WHERE rowid = 1").fetchone()
    except sqlite3.DatabaseError:
        # Not even one lookup works (the table's root page, or the schema, is damaged).
        return rows, 1
    # Past the last row, lookups that land on a damaged last page fail rather than come back
    # empty: both count towards the gap that ends the scan.
    while misses < MAX_GAP:
        rowid += 1
        try:
            row = conn.execute(f"SELECT * FROM {table} WHERE rowid = ?", (rowid,)).fetchone()
        except sqlite3.DatabaseError:
            unconfirmed += 1
            misses += 1
            continue
        if row is None:
            misses += 1
        else:
            rows.append(dict(row))
            bad, unconfirmed, misses = bad + unconfirmed, 0, 0
    return rows, bad + min(unconfirmed, 1)  # a damaged tail: how many rows it held is unknown


def _write_fresh(store: ChatStore, chats: list[dict[str, Any]],
                 messages: list[dict[str, Any]], now: float) -> tuple[int, int]:
    c = store.conn
    c.execute("BEGIN IMMEDIATE")
    known: set[int] = set()
    for ch in chats:
        try:
            prompt = ch.get("system_prompt")
            fmt = ReplyFormat.from_columns(ch.get("format_kind"), ch.get("format_source"))
            tools = ChatTools.from_json(ch.get("tools"))
            c.execute("INSERT INTO chats (id, title, pair, created, updated, preset, "
                      "system_prompt, format_kind, format_source, tools) "
                      "VALUES (?,?,?,?,?,?,?,?,?,?)",
                      (int(ch["id"]), str(ch.get("title") or "Recovered chat"),
                       str(ch.get("pair") or ""), float(ch.get("created") or now),
                       float(ch.get("updated") or now),
                       ch.get("preset") if isinstance(ch.get("preset"), str) else None,
                       prompt if isinstance(prompt, str) else None, fmt.kind, fmt.source,
                       tools.to_json()))
            known.add(int(ch["id"]))
        except (sqlite3.Error, KeyError, TypeError, ValueError):
            continue
    n = 0
    last: dict[int, int] = {}  # chat → its last message written: the parent of an old row
    for m in sorted(messages, key=lambda m: (m.get("chat_id") or 0, m.get("seq") or 0)):
        try:
            chat_id = int(m["chat_id"])
            if chat_id not in known:  # its chat's row was on a bad page: keep the messages
                c.execute("INSERT INTO chats (id, title, pair, created, updated) "
                          "VALUES (?,?,?,?,?)", (chat_id, f"Recovered chat {chat_id}", "",
                                                 now, now))
                known.add(chat_id)
            status = m.get("status") if m.get("status") in STATUSES else "done"
            # Rows from before branches have no parent: they follow the one before them.
            parent = m["parent_id"] if "parent_id" in m else last.get(chat_id)
            active = int(m.get("active", 1) not in (0, "0"))
            # A tool part that no longer reads is dropped (the message's text stays).
            part = ToolPart.from_json(m.get("tool"))
            c.execute("INSERT INTO messages (id, chat_id, seq, role, content, fates, stats, "
                      "status, created, parent_id, active, tool) "
                      "VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                      (int(m["id"]), chat_id, int(m["seq"]), str(m["role"]),
                       str(m["content"]), m.get("fates"), m.get("stats"), status,
                       float(m.get("created") or now),
                       int(parent) if isinstance(parent, int) else None, active,
                       part.to_json() if part else None))
            last[chat_id] = int(m["id"])
            n += 1
        except (sqlite3.Error, KeyError, TypeError, ValueError):
            continue
    c.execute("COMMIT")
    return len(known), n


def open_for_app(path: Path) -> tuple[ChatStore, str | None]:
    """The app's store, whatever state the file is in, and what to tell the user about it.

    Damaged (SQLite's quick check or the open says so): kept aside, repaired, a notice.
    Read-only or unwritable: opened read-only (new messages stay in memory, unsaved).
    Not openable at all: an empty in-memory store that refuses writes, so the app still runs
    and says that nothing is being saved.
    """
    try:
        store = ChatStore.open(path)
    except StoreError as e:
        if e.kind == "corrupt":
            return _repaired(path)
        try:
            store = ChatStore.open(path, read_only=True)
        except StoreError:
            store = ChatStore.open(Path(":memory:"))
            store.read_only = True
            return store, f"{e}; this session's chats are kept in memory only, not saved"
        return store, (f"the chat database cannot be written ({e}); opened read-only: new "
                       "messages are kept in memory, not saved")
    problem = store.check()
    if problem is not None:
        store.close()
        return _repaired(path)
    return store, None


def _repaired(path: Path) -> tuple[ChatStore, str]:
    try:
        report = repair(path)
    except StoreError as e:
        store = ChatStore.open(Path(":memory:"))
        store.read_only = True
        return store, (f"the chat history {path} is damaged and could not be repaired ({e}); "
                       "this session's chats are kept in memory only")
    return ChatStore.open(path), f"The chat history was damaged: {report.describe()}."
