"""What the chat database holds, as the rest of the app reads it: :class:`ChatSummary` (a chat,
listed) and :class:`StoredMessage` (one of its messages), built from SQLite rows here and
nowhere else, and :func:`title_from`, a new chat's default title.

A row from a database at an older schema (opened read-only, not migrated) reads too: a column
a later schema added gives the field's default.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from specchat.store.branches import Link, thread
from specchat.store.chat_tools import NO_TOOLS, ChatTools
from specchat.store.reply_format import TEXT, ReplyFormat
from specchat.store.stats import ReplyStats
from specchat.store.tool_parts import ToolPart

TITLE_CHARS = 48


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


def title_from(text: str) -> str:
    """A chat's default title: the first line of its first message, shortened."""
    line = " ".join(text.strip().split())
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1].rstrip() + "…"


def shown_counts(c: sqlite3.Connection, chat_id: int | None = None) -> dict[int, int]:
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


def summary_from_row(r: sqlite3.Row, shown: int | None = None) -> ChatSummary:
    keys = r.keys()  # a database opened read-only may be at an older schema
    n = r["n"] if shown is None else shown
    return ChatSummary(r["id"], r["title"], r["pair"], r["created"], r["updated"], n,
                       r["preset"] if "preset" in keys else None,
                       r["system_prompt"] if "system_prompt" in keys else None,
                       ReplyFormat.from_columns(
                           r["format_kind"] if "format_kind" in keys else None,
                           r["format_source"] if "format_source" in keys else None),
                       ChatTools.from_json(r["tools"] if "tools" in keys else None))


def message_from_row(r: sqlite3.Row) -> StoredMessage:
    return StoredMessage(r["id"], r["chat_id"], r["seq"], r["role"], r["content"], r["fates"],
                         ReplyStats.from_json(r["stats"]), r["status"], r["created"],
                         r["parent_id"], bool(r["active"]),
                         # (a sqlite3.Row's `in` looks at values: its keys, at an older schema)
                         ToolPart.from_json(r["tool"] if "tool" in r.keys() else None))  # noqa: SIM118
