"""Which running specchat writes a chat: :class:`ChatOwnership`, the part of
:class:`~specchat.store.chats.ChatStore` that claims, renews and releases chats.

While the app shows a chat it owns it (a ``chat_owners`` row with its token and a heartbeat).
Another specchat opening the same chat sees the owner and opens it read-only, so two instances
never interleave one chat's turns: a write to a chat checks its owner first
(:meth:`ChatOwnership._check_owner`, a ``StoreError`` of kind ``owned``). An owner whose process
is gone (same host), or whose heartbeat is older than ``LEASE_S``, no longer counts.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from specchat.errors import StoreError
from specchat.store.database import ChatDatabase

LEASE_S = 120.0  # an owner not heard from for this long has gone (the app renews every 30 s)


@dataclass(frozen=True)
class Owner:
    """Another running specchat that writes a chat."""

    host: str
    pid: int

    def describe(self) -> str:
        here = self.host == socket.gethostname()
        return f"process {self.pid}" if here else f"process {self.pid} on {self.host}"


class ChatOwnership(ChatDatabase):
    def __init__(self, conn: sqlite3.Connection, path: Path,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__(conn, path, clock)
        self.token = secrets.token_hex(8)  # this store's identity as a chat's owner
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.owned: set[int] = set()

    def close(self) -> None:
        for chat_id in list(self.owned):
            with contextlib.suppress(StoreError):  # the next owner ignores a gone pid's row
                self.release(chat_id)
        super().close()

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


def process_alive(pid: int) -> bool:
    """Whether a process with this id runs on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True
