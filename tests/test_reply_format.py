"""A chat's reply format (free text, any JSON object, a JSON schema, a grammar) in the store and
the session, on real SQLite files and a real tiny model: the migration from the schema before
it, the round trip, repair, and a reply that follows the chat's format (the app's dialog is in
test_ui_reply_format.py)."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from ui_helpers import GREEDY, tiny_runtime

from specchat.engine.decode.chat import ChatEngine
from specchat.engine.decode.grammar import GrammarError, compile_grammar
from specchat.engine.decode.messages import Message
from specchat.engine.decode.plain import PlainDecoder
from specchat.errors import SpecchatError, StoreError
from specchat.runtime.opening import Runtime
from specchat.session.controller import ChatSession
from specchat.session.reply_format import (
    MAX_FILE_BYTES,
    compile_format,
    read_format_file,
    reply_sampling,
)
from specchat.session.worker import ReplyChunk, ReplyDone, ReplyJob, ReplyUpdate, run_reply
from specchat.store import ChatStore, ReplyFormat
from specchat.store.repair import repair
from specchat.store.schema import MIGRATIONS, SCHEMA_VERSION, migrate, user_version

# Compact JSON (no free whitespace): a random tiny model would otherwise pad it until max_tokens.
SCHEMA = json.dumps({"type": "object", "properties": {"ok": {"type": "boolean"}},
                     "required": ["ok"], "additionalProperties": False,
                     "x-guidance": {"whitespace_flexible": False}})
GRAMMAR = 'root ::= ("yes" | "no") "."'
BEFORE_FORMATS = 5  # the schema version before chats had a reply format


# --- the store ------------------------------------------------------------------------------


def test_a_database_from_before_reply_formats_migrates_and_keeps_everything(
        tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    conn = sqlite3.connect(path, isolation_level=None)
    migrate(conn, MIGRATIONS[:BEFORE_FORMATS])  # the old specchat's database, as it wrote it
    conn.execute("INSERT INTO chats (id, title, pair, created, updated, preset, system_prompt) "
                 "VALUES (3, 'pirate chat', 'demo', 1, 2, 'pirate', 'Talk like a pirate.'), "
                 "(4, 'plain chat', 'tiny', 5, 6, NULL, NULL)")
    conn.execute("INSERT INTO messages (chat_id, seq, role, content, status, created, "
                 "parent_id, active) VALUES (3, 0, 'user', 'ahoy', 'done', 1, NULL, 1)")
    first = conn.execute("SELECT id FROM messages").fetchone()[0]
    conn.execute("INSERT INTO messages (chat_id, seq, role, content, fates, status, created, "
                 "parent_id, active) VALUES (3, 1, 'assistant', 'arr', NULL, 'cancelled', 2, "
                 "?, 1)", (first,))
    chats_cur = conn.execute("SELECT * FROM chats ORDER BY id")
    chats_before = chats_cur.fetchall()
    chat_columns = ", ".join(d[0] for d in chats_cur.description)
    messages_cur = conn.execute("SELECT * FROM messages ORDER BY id")
    messages_before = messages_cur.fetchall()
    message_columns = ", ".join(d[0] for d in messages_cur.description)
    conn.close()

    store = ChatStore.open(path)
    assert user_version(store.conn) == SCHEMA_VERSION > BEFORE_FORMATS
    assert [tuple(r) for r in store.conn.execute(
        f"SELECT {chat_columns} FROM chats ORDER BY id")] == chats_before
    assert [tuple(r) for r in store.conn.execute(
        f"SELECT {message_columns} FROM messages ORDER BY id")] == messages_before
    pirate = store.get_chat(3)
    assert (pirate.preset, pirate.system_prompt, pirate.n_messages) == (
        "pirate", "Talk like a pirate.", 2)
    assert pirate.reply_format == ReplyFormat() and not pirate.reply_format.constrained
    assert [c.reply_format.kind for c in store.list_chats()] == ["text", "text"]
    store.set_format(3, ReplyFormat("grammar", GRAMMAR))  # the migrated chat takes one
    store.close()
    again = ChatStore.open(path)
    assert again.get_chat(3).reply_format == ReplyFormat("grammar", GRAMMAR)
    assert again.get_chat(3).system_prompt == "Talk like a pirate."
    again.close()


def test_a_read_only_database_from_before_reply_formats_lists_its_chats_as_text(
        tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    conn = sqlite3.connect(path, isolation_level=None)
    migrate(conn, MIGRATIONS[:BEFORE_FORMATS])
    conn.execute("INSERT INTO chats (id, title, pair, created, updated) VALUES (1, 'old', '', 1, 2)")
    conn.close()
    store = ChatStore.open(path, read_only=True)
    assert store.get_chat(1).reply_format == ReplyFormat()
    assert user_version(store.conn) == BEFORE_FORMATS  # read-only: not migrated
    store.close()


def test_a_chats_reply_format_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    store = ChatStore.open(path)
    schema_chat = store.create_chat("schema", reply_format=ReplyFormat("json_schema", SCHEMA))
    plain_chat = store.create_chat("plain")
    assert store.get_chat(schema_chat).reply_format == ReplyFormat("json_schema", SCHEMA)
    assert store.get_chat(plain_chat).reply_format == ReplyFormat()
    store.set_format(plain_chat, ReplyFormat("json_object"))
    # Back to free text: the grammar's text stays, for switching back.
    store.set_format(schema_chat, ReplyFormat("text", SCHEMA))
    with pytest.raises(StoreError, match="no chat with id 99"):
        store.set_format(99, ReplyFormat("json_object"))
    store.close()
    store = ChatStore.open(path)
    by_title = {c.title: c.reply_format for c in store.list_chats()}
    assert by_title == {"schema": ReplyFormat("text", SCHEMA),
                        "plain": ReplyFormat("json_object")}
    with pytest.raises(sqlite3.IntegrityError):  # the column takes the four kinds only
        store.conn.execute("UPDATE chats SET format_kind = 'yaml'")
    store.close()


def test_a_chat_another_specchat_owns_keeps_its_format(tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    mine = ChatStore.open(path)
    chat = mine.create_chat("mine")
    other = ChatStore.open(path)
    with pytest.raises(StoreError, match="open in another specchat"):
        other.set_format(chat, ReplyFormat("json_object"))
    assert mine.get_chat(chat).reply_format == ReplyFormat()
    other.close()
    mine.close()


def test_unknown_columns_read_as_free_text() -> None:
    assert ReplyFormat.from_columns("yaml", 3) == ReplyFormat()
    assert ReplyFormat.from_columns(None, None) == ReplyFormat()
    assert ReplyFormat.from_columns("grammar", "x") == ReplyFormat("grammar", "x")


def test_a_repaired_database_keeps_each_chats_reply_format(tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    store = ChatStore.open(path)
    c = store.create_chat("Kept", reply_format=ReplyFormat("json_schema", SCHEMA))
    store.add_message(c, "user", "a record please")
    store.release(c)
    store.close()
    assert repair(path).chats == 1
    store = ChatStore.open(path)
    assert store.get_chat(c).reply_format == ReplyFormat("json_schema", SCHEMA)
    store.close()


# --- compiling, files -------------------------------------------------------------------------


def test_a_format_compiles_to_the_engines_grammar_and_text_to_none() -> None:
    assert compile_format(ReplyFormat()) is None
    assert compile_format(ReplyFormat("text", SCHEMA)) is None  # kept text, not used
    assert compile_format(ReplyFormat("json_schema", SCHEMA)) == compile_grammar("json_schema",
                                                                                  SCHEMA)
    assert compile_format(ReplyFormat("json_object", "ignored")) == compile_grammar("json_object")
    assert compile_format(ReplyFormat("grammar", GRAMMAR)) == compile_grammar("grammar", GRAMMAR)
    with pytest.raises(GrammarError, match="Invalid type: foo"):
        compile_format(ReplyFormat("json_schema", '{"type": "foo"}'))


def test_reply_sampling_sets_the_grammar_and_names_a_format_that_no_longer_compiles() -> None:
    assert reply_sampling(GREEDY, ReplyFormat("text", SCHEMA)) is GREEDY
    s = reply_sampling(GREEDY, ReplyFormat("json_schema", SCHEMA))
    assert s.grammar == compile_grammar("json_schema", SCHEMA)
    assert s.with_(grammar=None) == GREEDY  # nothing else changed
    with pytest.raises(GrammarError) as e:
        reply_sampling(GREEDY, ReplyFormat("grammar", "start: foo"))
    assert "this chat's reply format (grammar) does not compile" in str(e.value)
    assert "\n" not in str(e.value)


def test_a_format_file_is_read_or_refused_in_one_line(tmp_path: Path) -> None:
    good = tmp_path / "schema.json"
    good.write_text(SCHEMA, encoding="utf-8")
    assert read_format_file(f"  {good}  ") == SCHEMA
    latin = tmp_path / "latin.gbnf"
    latin.write_bytes("root ::= \"caf\xe9\"".encode("latin-1"))
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (MAX_FILE_BYTES + 1))
    for path, says in [("", "type the path"), (str(tmp_path / "nope.json"), "no such file"),
                       (str(tmp_path), "is a folder"), (str(latin), "not UTF-8"),
                       (str(big), "too large")]:
        with pytest.raises(SpecchatError, match=says) as e:
            read_format_file(path)
        assert "\n" not in str(e.value)


# --- the session ----------------------------------------------------------------------------


@pytest.fixture
def runtime(tiny_json_target: Path) -> Iterator[Runtime]:
    rt = tiny_runtime(tiny_json_target)
    yield rt
    rt.close()


def reply_of(job: ReplyJob, runtime: Runtime) -> tuple[str, ReplyDone]:
    updates: list[ReplyUpdate] = []
    run_reply(job, ChatEngine(PlainDecoder(runtime.target_ctx)), updates.append)
    done = updates[-1]
    assert isinstance(done, ReplyDone)
    text = "".join(s.text for u in updates if isinstance(u, ReplyChunk) for s in u.segments
                   if not s.rejected)
    return text, done


def test_a_format_set_before_the_first_message_is_saved_with_the_chat_and_followed(
        tmp_path: Path, runtime: Runtime) -> None:
    store = ChatStore.open(tmp_path / "chats.sqlite3")
    session = ChatSession(store, "tiny")
    fmt = ReplyFormat("json_schema", SCHEMA)
    session.set_format(fmt)  # not saved yet: the chat has no row
    assert store.list_chats() == []
    session.send("hello there", "", GREEDY.with_(max_tokens=40))
    job = session.job
    assert job is not None and job.reply_format == fmt
    chat_id = session.conversation.chat_id
    assert chat_id is not None and store.get_chat(chat_id).reply_format == fmt
    text, done = reply_of(job, runtime)
    assert done.stats.stop_reason == "eos" and isinstance(json.loads(text)["ok"], bool), text
    session.apply(done)
    # Free text again, from the next reply on; the chat keeps its schema's text.
    session.set_format(ReplyFormat("text", SCHEMA))
    assert store.get_chat(chat_id).reply_format == ReplyFormat("text", SCHEMA)
    session.send("more", "", GREEDY.with_(max_tokens=40))
    assert session.job is not None and not session.job.reply_format.constrained
    free = ReplyJob(9, [Message("user", "hello there")], GREEDY.with_(max_tokens=40))
    constrained = ReplyJob(9, [Message("user", "hello there")], GREEDY.with_(max_tokens=40),
                           reply_format=fmt)
    assert reply_of(free, runtime)[0] != reply_of(constrained, runtime)[0]
    store.close()


def test_a_reply_whose_format_does_not_compile_fails_before_a_token(runtime: Runtime) -> None:
    job = ReplyJob(1, [Message("user", "hi")], GREEDY,
                   reply_format=ReplyFormat("json_schema", "{"))
    updates: list[ReplyUpdate] = []
    with pytest.raises(GrammarError, match="this chat's reply format"):
        run_reply(job, ChatEngine(PlainDecoder(runtime.target_ctx)), updates.append)
    assert updates == []  # nothing generated, no ticker thread started
    assert not any(t.name == "reply-1-ticker" for t in threading.enumerate())
