"""Chats and their messages, saved and read: :class:`ChatStore`, one row per chat, one per
message. The connection and its transactions are :class:`~specchat.store.database.ChatDatabase`,
who may write a chat :class:`~specchat.store.ownership.ChatOwnership`, and the rows come back
as :mod:`~specchat.store.records`.

A reply is written while it streams (status ``interrupted`` until it ends), so a kill keeps
what was shown.

Branches: each message names the one it follows (``parent_id``); messages with the same parent
are alternatives (a regenerated reply, an edited message) and one of them is ``active``, the
one shown. :mod:`~specchat.store.branches` walks the shown branch; :meth:`ChatStore.messages`
returns them all.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from specchat.errors import StoreError
from specchat.store.branches import thread
from specchat.store.chat_tools import NO_TOOLS, ChatTools
from specchat.store.ownership import ChatOwnership
from specchat.store.records import (
    ChatSummary,
    StoredMessage,
    message_from_row,
    shown_counts,
    summary_from_row,
)
from specchat.store.reply_format import TEXT, ReplyFormat
from specchat.store.search import SearchHit, search
from specchat.store.stats import ReplyStats
from specchat.store.tool_parts import ToolPart


class _Keep:
    """An argument left out: the column keeps its value."""


KEEP = _Keep()
LAST = "last"  # add_message's default parent: the last message of the shown branch


class ChatStore(ChatOwnership):
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
            shown = shown_counts(c)
        return [summary_from_row(r, shown.get(r["id"])) for r in rows]

    def get_chat(self, chat_id: int) -> ChatSummary:
        with self._read("cannot open the chat") as c:
            row = c.execute(
                "SELECT c.*, (SELECT count(*) FROM messages m WHERE m.chat_id = c.id) AS n "
                "FROM chats c WHERE c.id = ?", (chat_id,)).fetchone()
            shown = shown_counts(c, chat_id)
        if row is None:
            raise StoreError(f"no chat with id {chat_id} (see `specchat chats`)", "missing")
        return summary_from_row(row, shown.get(chat_id))

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
                shown = thread([message_from_row(r) for r in c.execute(
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
        return [message_from_row(r) for r in rows]

    def thread(self, chat_id: int) -> list[StoredMessage]:
        """The chat's shown branch (what an export writes)."""
        return thread(self.messages(chat_id))
