"""The chat store on real SQLite files: migrations, WAL, crash safety, fates, export."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from specchat.engine.decode.events import GenerationStats, RejectedEvent, TokenEvent, TokenOrigin
from specchat.errors import StoreError
from specchat.store import (
    ChatStore,
    FateTrace,
    ReplyStats,
    chat_to_markdown,
    export_filename,
    title_from,
)
from specchat.store.schema import MIGRATIONS, SCHEMA_VERSION, migrate, user_version

A, C, B, P = TokenOrigin.ACCEPTED, TokenOrigin.CORRECTED, TokenOrigin.BONUS, TokenOrigin.PLAIN


def tok(pos: int, text: str, origin: TokenOrigin = A) -> TokenEvent:
    return TokenEvent(100 + pos, text, origin, pos, 0.0)


def rej(pos: int, text: str) -> RejectedEvent:
    return RejectedEvent(200 + pos, text, pos, 0.1, 0.6)


# --- schema and migrations ------------------------------------------------------------------


def test_new_database_is_at_the_current_version_in_wal_mode(tmp_path: Path) -> None:
    store = ChatStore.open(tmp_path / "data" / "chats.sqlite3")
    assert store.journal_mode == "wal"
    assert user_version(store.conn) == SCHEMA_VERSION
    store.close()
    again = ChatStore.open(tmp_path / "data" / "chats.sqlite3")  # no migration runs twice
    assert user_version(again.conn) == SCHEMA_VERSION


def test_a_later_migration_upgrades_an_existing_database_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    store = ChatStore.open(path)
    chat = store.create_chat("kept")
    store.add_message(chat, "user", "hello")
    store.close()
    conn = sqlite3.connect(path, isolation_level=None)
    newer = (*MIGRATIONS, "ALTER TABLE chats ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0;")
    assert migrate(conn, newer) == SCHEMA_VERSION
    assert user_version(conn) == SCHEMA_VERSION + 1
    assert conn.execute("SELECT title, pinned FROM chats").fetchall() == [("kept", 0)]


def test_a_failing_migration_leaves_the_old_version_intact(tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    ChatStore.open(path).close()
    conn = sqlite3.connect(path, isolation_level=None)
    broken = (*MIGRATIONS, "CREATE TABLE extra (x INTEGER);\nINSERT INTO nowhere VALUES (1);")
    with pytest.raises(StoreError, match=f"upgrade to schema version {SCHEMA_VERSION + 1} failed"):
        migrate(conn, broken)
    assert user_version(conn) == SCHEMA_VERSION
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "extra" not in tables  # the whole step rolled back


def test_a_database_from_a_newer_specchat_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 5}")
    conn.close()
    with pytest.raises(StoreError, match="newer than this specchat knows"):
        ChatStore.open(path)


def test_a_file_that_is_not_a_database_gives_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match=r"not readable|cannot open"):
        ChatStore.open(path)


# --- chats and messages -----------------------------------------------------------------------


def test_chats_messages_rename_delete(tmp_path: Path) -> None:
    clock = iter(range(100, 200))
    store = ChatStore.open(tmp_path / "c.db", clock=lambda: float(next(clock)))
    first = store.create_chat("first", pair="demo")
    second = store.create_chat("second")
    store.add_message(first, "user", "hi")
    store.add_message(first, "assistant", "hello", fates=FateTrace.plain("hello").encode(),
                      stats=ReplyStats(GenerationStats(generated_tokens=2, decode_s=0.1), "plain"),
                      status="cancelled")
    assert [c.title for c in store.list_chats()] == ["first", "second"]  # most recent first
    msgs = store.messages(first)
    assert [(m.seq, m.role, m.content, m.status) for m in msgs] == [
        (0, "user", "hi", "done"), (1, "assistant", "hello", "cancelled")]
    assert msgs[1].stats == ReplyStats(GenerationStats(generated_tokens=2, decode_s=0.1), "plain")
    store.rename_chat(second, "  renamed\n chat ")
    assert store.get_chat(second).title == "renamed chat"
    with pytest.raises(StoreError):
        store.rename_chat(second, "   ")
    store.delete_chat(first)
    assert [c.id for c in store.list_chats()] == [second]
    assert store.messages(first) == []  # cascaded
    with pytest.raises(StoreError, match="no chat with id"):
        store.get_chat(first)


def test_titles_are_one_short_line() -> None:
    assert title_from("  What is\n the capital   of France?  ") == "What is the capital of France?"
    long = title_from("word " * 40)
    assert len(long) <= 48 and long.endswith("…")


def test_wal_lets_a_reader_read_while_a_write_is_open(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    store = ChatStore.open(path)
    chat = store.create_chat("t")
    store.add_message(chat, "user", "committed")
    store.conn.execute("BEGIN IMMEDIATE")
    store.conn.execute("INSERT INTO chats (title, created, updated) VALUES ('open', 0, 0)")
    reader = sqlite3.connect(path, timeout=0.1)  # would raise "database is locked" without WAL
    assert reader.execute("SELECT content FROM messages").fetchall() == [("committed",)]
    assert reader.execute("SELECT count(*) FROM chats").fetchone()[0] == 1
    store.conn.execute("ROLLBACK")


WRITER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from specchat.engine.decode.events import GenerationStats
    from specchat.store import ChatStore, ReplyStats
    store = ChatStore.open(Path(sys.argv[1]))
    chat = store.create_chat("crash")
    big = int(sys.argv[2])
    i = 0
    while True:
        body = f"message {i} " + "x" * big + " end"
        store.add_message(chat, "assistant", body,
                          stats=ReplyStats(GenerationStats(generated_tokens=i)))
        if i == 3:
            print("ready", flush=True)
        i += 1
""")


@pytest.mark.parametrize("size", [100, 2_000_000])
def test_a_writer_killed_mid_write_leaves_a_readable_database(tmp_path: Path, size: int) -> None:
    path = tmp_path / "c.db"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(size)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.3)  # let it get well into later writes
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    store = ChatStore.open(path)
    assert store.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    (chat,) = store.list_chats()
    msgs = store.messages(chat.id)
    assert len(msgs) >= 4
    for i, m in enumerate(msgs):  # every saved message is whole; none is half-written
        assert m.seq == i and m.stats == ReplyStats(GenerationStats(generated_tokens=i))
        assert m.content == f"message {i} " + "x" * size + " end"


# --- fates -----------------------------------------------------------------------------------


def speculative_trace(rejected_first: bool) -> FateTrace:
    trace = FateTrace()
    trace.add_token(tok(0, "The", A))
    trace.add_token(tok(1, " cat", A))
    step = [rej(2, " dog"), rej(3, " ran")]
    if rejected_first:
        for r in step:
            assert trace.add_rejected(r) == []  # waits for the correction
        trace.add_token(tok(2, " sat", C))
    else:
        trace.add_token(tok(2, " sat", C))
        for r in step:
            assert trace.add_rejected(r)
    trace.add_token(tok(3, " on", A))
    trace.add_token(tok(4, " it", B))
    trace.add_rejected(rej(5, "\n"))  # an EOG replaced it: shown at the end
    trace.finish()
    return trace


@pytest.mark.parametrize("rejected_first", [True, False])
def test_rejected_drafts_follow_the_correction_that_replaced_them(rejected_first: bool) -> None:
    trace = speculative_trace(rejected_first)
    assert [(s.kind, s.text) for s in trace.segments] == [
        ("a", "The cat"), ("c", " sat"), ("x", " dog ran"), ("a", " on"), ("b", " it"),
        ("x", "⏎")]
    assert trace.text == "The cat sat on it"
    assert trace.counts()["x"] == len(" dog ran⏎")


def test_fates_round_trip_through_their_encoding() -> None:
    trace = speculative_trace(True)
    enc = trace.encode()
    assert len(enc) < 60
    back = FateTrace.decode(trace.text, enc)
    assert back.segments == trace.segments


@pytest.mark.parametrize("enc", [None, "", "{", '{"v":9,"runs":"p3"}', '{"v":1,"runs":"a99"}',
                                 '{"v":1,"runs":"q3"}', '{"v":1,"runs":"a2"}'])
def test_damaged_fates_fall_back_to_plain_text(enc: str | None) -> None:
    back = FateTrace.decode("abc", enc)
    assert [(s.kind, s.text) for s in back.segments] == [("p", "abc")]


# --- export -----------------------------------------------------------------------------------


def test_export_to_markdown(tmp_path: Path) -> None:
    store = ChatStore.open(tmp_path / "c.db")
    chat = store.create_chat("Colours & paint!", pair="demo")
    store.add_message(chat, "user", "Name a colour.")
    store.add_message(chat, "assistant", "Red.\n\n```\ncode\n```\n",
                      stats=ReplyStats(GenerationStats(generated_tokens=5, decode_s=0.08,
                                                       accepted=3, rejections=1)),
                      status="cancelled")
    md = chat_to_markdown(store.get_chat(chat), store.messages(chat))
    assert md.startswith("# Colours & paint!\n")
    assert "## You\n\nName a colour.\n" in md
    assert ("## Assistant (cancelled, 5 tokens, 50.0 tok/s decode, α 0.75)\n\n"
            "Red.\n\n```\ncode\n```\n") in md
    assert export_filename(store.get_chat(chat)) == f"specchat-{chat}-colours-paint.md"
