"""Tool calls in the chat's tree, on real SQLite: schema 7 (a ``tool`` role, each message's
tool part, each chat's tools) migrates an existing database keeping every row, branch and the
search index; tool turns go through branches, regenerate, export, search and repair; a chat's
tools are saved with it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from specchat.engine.decode.messages import Message, ToolCall
from specchat.engine.decode.sampling import SamplerSettings
from specchat.errors import StoreError
from specchat.session.controller import ChatSession
from specchat.session.conversation import Conversation
from specchat.store import ChatStore, chat_to_markdown
from specchat.store.chat_tools import NO_TOOLS, ChatTools
from specchat.store.repair import repair
from specchat.store.schema import MIGRATIONS, SCHEMA_VERSION, migrate, user_version
from specchat.store.tool_parts import CallRecord, ToolPart, prose

CALL = CallRecord("call_1", "git_log", '{"repo_path": "/tmp/shop", "max_count": 1}')
SAID = "Let me look.\n<tool_call>\n{\"name\": \"git_log\", \"arguments\": {}}\n</tool_call>"
RESULT = "Commit: 1a2b3c\nAuthor: Ada\n\n    rename total to subtotal\n"


def tool_chat(store: ChatStore, tools: ChatTools = NO_TOOLS) -> tuple[int, list[int]]:
    """user → assistant (a call) → tool (its result) → assistant (the answer)."""
    chat = store.create_chat("last commit", "demo", tools=tools)
    u = store.add_message(chat, "user", "what was my last commit?")
    a = store.add_message(chat, "assistant", SAID, tool=ToolPart(calls=(CALL,)))
    t = store.add_message(chat, "tool", RESULT, tool=ToolPart(call_id="call_1", name="git_log",
                                                                status="ok", seconds=0.25))
    f = store.add_message(chat, "assistant", "Your last commit renamed total to subtotal.")
    return chat, [u, a, t, f]


def test_a_schema_6_database_migrates_and_keeps_every_row_branch_and_index(
        tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    conn = sqlite3.connect(path, isolation_level=None)
    migrate(conn, MIGRATIONS[:6])
    conn.execute("INSERT INTO chats (id, title, pair, created, updated, preset, format_kind, "
                 "format_source) VALUES (3, 'old', 'demo', 1, 2, 'coder', 'json_object', NULL)")
    # A message, two alternative replies (the second shown), and a message after it.
    conn.execute("INSERT INTO messages (id, chat_id, seq, role, content, fates, stats, status, "
                 "created, parent_id, active) VALUES "
                 "(10, 3, 0, 'user', 'the quick brown fox', NULL, NULL, 'done', 1, NULL, 1), "
                 "(11, 3, 1, 'assistant', 'jumps over', 'a5', '{\"v\": 2}', 'done', 2, 10, 0), "
                 "(12, 3, 2, 'assistant', 'the lazy dog', NULL, NULL, 'cancelled', 3, 10, 1), "
                 "(13, 3, 3, 'user', 'and then?', NULL, NULL, 'done', 4, 12, 1)")
    cur = conn.execute("SELECT * FROM messages ORDER BY id")
    before, columns = cur.fetchall(), ", ".join(d[0] for d in cur.description)
    conn.close()

    store = ChatStore.open(path)
    assert user_version(store.conn) == SCHEMA_VERSION == 7
    after = [tuple(r) for r in store.conn.execute(f"SELECT {columns} FROM messages ORDER BY id")]
    assert after == before
    assert [m.id for m in store.thread(3)] == [10, 12, 13]  # the shown branch as it was
    assert all(m.tool is None for m in store.messages(3))
    chat = store.get_chat(3)
    assert (chat.preset, chat.reply_format.kind, chat.tools) == ("coder", "json_object",
                                                                 NO_TOOLS)
    hits, fts = store.search("lazy")
    assert fts and [h.message_id for h in hits] == [12]  # the index kept, its triggers made
    # The new role and column work on the migrated file, and are found by the search.
    t = store.add_message(3, "tool", "subtotal appears twice", parent_id=13,
                          tool=ToolPart(call_id="c", name="grep", status="ok"))
    hits, _ = store.search("subtotal")
    assert [(h.message_id, h.role) for h in hits] == [(t, "tool")]
    store.close()


def test_the_schema_keeps_roles_it_does_not_know_out(tmp_path: Path) -> None:
    store = ChatStore.open(tmp_path / "chats.sqlite3")
    chat = store.create_chat("x")
    with pytest.raises(StoreError, match="cannot save the message"):
        store.add_message(chat, "function", "no such role")
    store.close()


def test_tool_messages_round_trip_and_the_chats_tools_are_saved(tmp_path: Path) -> None:
    store = ChatStore.open(tmp_path / "chats.sqlite3")
    tools = ChatTools(("git",), ("git_log",), "required")
    chat, ids = tool_chat(store, tools)
    assert store.get_chat(chat).tools == tools
    rows = store.thread(chat)
    assert [m.role for m in rows] == ["user", "assistant", "tool", "assistant"]
    assert rows[1].tool == ToolPart(calls=(CALL,))
    assert rows[2].tool == ToolPart(call_id="call_1", name="git_log", status="ok", seconds=0.25)
    assert prose(rows[1].content, rows[1].tool) == "Let me look."
    left_out = ChatTools(("git", "t"), (), "auto", ("t/boom",))
    store.set_tools(chat, left_out)
    assert store.get_chat(chat).tools == left_out
    assert left_out.offers("t", "color") and not left_out.offers("t", "boom")
    assert not left_out.offers("notes", "color")  # a server not chosen
    store.set_tools(chat, ChatTools())
    assert store.get_chat(chat).tools == NO_TOOLS
    # An update that does not name the tool part keeps it.
    store.update_message(ids[1], SAID + " ", status="done")
    assert store.messages(chat)[1].tool == ToolPart(calls=(CALL,))
    # A damaged cell reads as no tool part, never an exception.
    store.conn.execute("UPDATE messages SET tool = '{broken' WHERE id = ?", (ids[2],))
    store.conn.execute("UPDATE chats SET tools = '[1, 2]' WHERE id = ?", (chat,))
    assert store.messages(chat)[2].tool is None and store.get_chat(chat).tools == NO_TOOLS
    store.close()


def test_the_conversation_sends_calls_and_results_back_to_the_model(tmp_path: Path) -> None:
    store = ChatStore.open(tmp_path / "chats.sqlite3")
    chat, _ = tool_chat(store)
    conv = Conversation.load(store, chat)
    assert [t.role for t in conv.turns] == ["user", "assistant", "tool", "assistant"]
    assert conv.turns[2].call() == CALL
    msgs = conv.engine_messages("sys")
    assert msgs == [
        Message("system", "sys"), Message("user", "what was my last commit?"),
        Message("assistant", "Let me look.", (ToolCall(CALL.id, CALL.name, CALL.arguments),)),
        Message("tool", RESULT, tool_call_id="call_1"),
        Message("assistant", "Your last commit renamed total to subtotal.")]
    # Deleting the reply that called leaves its result without a call: not sent.
    conv.apply(conv.deletion(conv.turns[1]))
    assert [m.role for m in conv.engine_messages("")] == ["user", "assistant"]
    store.close()


def test_regenerate_after_a_result_and_of_the_calling_reply(tmp_path: Path) -> None:
    store = ChatStore.open(tmp_path / "chats.sqlite3")
    chat, _ = tool_chat(store)
    store.release(chat)
    session = ChatSession(store, "demo")
    session.open_chat(chat)
    turns = session.conversation.turns
    settings = SamplerSettings(temperature=0.7)
    # The final answer again: the model reads the same call and result.
    session.regenerate(turns[3], "", settings)
    assert session.job is not None and session.job.messages[-1].role == "tool"
    assert session.reply is not None and session.reply.parent is turns[2]
    session.cancel()
    session.failed(session.job.id, RuntimeError("stopped in the test"))
    # The calling reply again: a new turn from the user's message; the old one is a branch.
    session.regenerate(turns[1], "", settings)
    assert session.job is not None and session.job.messages[-1].role == "user"
    assert session.conversation.position(session.reply) == (2, 2)
    session.close()
    store.close()


def test_export_shows_the_call_and_the_result_fenced(tmp_path: Path) -> None:
    store = ChatStore.open(tmp_path / "chats.sqlite3")
    chat, _ = tool_chat(store)
    md = chat_to_markdown(store.get_chat(chat), store.thread(chat))
    assert "## Assistant\n\nLet me look.\n\n**Tool call:** `git_log`\n\n```json\n{\n  " \
        "\"repo_path\": \"/tmp/shop\",\n  \"max_count\": 1\n}\n```" in md
    assert "## Tool result: git_log (ok)\n\n```text\nCommit: 1a2b3c" in md
    assert "<tool_call>" not in md  # the call is shown once, as JSON
    # A result that holds a fence cannot close the export's.
    store.add_message(chat, "tool", "```\nnot the end", tool=ToolPart(call_id="x", name="cat",
                                                                      status="error"))
    md = chat_to_markdown(store.get_chat(chat), store.thread(chat))
    assert "## Tool result: cat (error)\n\n````text\n```\nnot the end\n````" in md
    store.close()


def test_repair_keeps_tool_messages_and_the_chats_tools(tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    store = ChatStore.open(path)
    tools = ChatTools(("git",), ("git_log",))
    chat, _ = tool_chat(store, tools)
    store.close()
    report = repair(path)
    assert report.messages == 4 and report.unreadable == 0
    store = ChatStore.open(path)
    assert store.get_chat(chat).tools == tools
    rows = store.thread(chat)
    assert [m.role for m in rows] == ["user", "assistant", "tool", "assistant"]
    assert rows[1].tool == ToolPart(calls=(CALL,)) and rows[2].tool is not None
    hits, _ = store.search("subtotal")
    assert {h.role for h in hits} == {"tool", "assistant"}
    store.close()
