"""Search across chats on real SQLite: the FTS5 index, its triggers, the migration that
builds it for an existing database, the substring fallback, and a chat's pair and prompt."""

from __future__ import annotations

import argparse
import shutil
import sqlite3
from pathlib import Path

import pytest

import specchat.store.search as search_mod
from specchat.cli.main import main
from specchat.paths import AppPaths
from specchat.store import ChatStore
from specchat.store.schema import MIGRATIONS, SCHEMA_VERSION, migrate, user_version
from specchat.store.search import TRIGGERS, fts_query, index_ready, split_marks

FIXTURE = Path(__file__).parent / "fixtures" / "chats-v1.sqlite3"


def texts(store: ChatStore, query: str) -> list[str]:
    hits, _ = store.search(query)
    return [h.snippet for h in hits]


@pytest.fixture
def store(tmp_path: Path) -> ChatStore:
    s = ChatStore.open(tmp_path / "chats.sqlite3")
    yield s
    s.close()


def test_a_word_finds_its_message_in_any_chat_with_the_chat_title(store: ChatStore) -> None:
    a = store.create_chat("Cooking")
    b = store.create_chat("Trains", pair="qwen-coder")
    store.add_message(a, "user", "How long do I boil an egg?")
    store.add_message(b, "user", "When was the first steam locomotive built?")
    store.add_message(b, "assistant", "The first steam locomotive ran in 1804.")
    hits, fts = store.search("locomotive")
    assert fts
    assert {h.chat_title for h in hits} == {"Trains"}
    assert {h.role for h in hits} == {"user", "assistant"}
    assert all(h.pair == "qwen-coder" and h.chat_id == b for h in hits)
    first = hits[0]
    assert [first.snippet[s:e] for s, e in first.marks] == ["locomotive"]
    assert texts(store, "egg") == ["How long do I boil an egg?"]
    assert texts(store, "submarine") == []


def test_every_word_is_required_and_the_last_one_matches_as_a_prefix(store: ChatStore) -> None:
    c = store.create_chat("t")
    store.add_message(c, "user", "speculative decoding is exact")
    store.add_message(c, "user", "speculative fiction")
    assert texts(store, "speculative dec") == ["speculative decoding is exact"]
    assert len(texts(store, "spec")) == 2
    assert texts(store, "Décoding") == ["speculative decoding is exact"]  # diacritics folded


@pytest.mark.parametrize("query", ['"', 'AND', 'NOT x', 'a:b', '*', '(', 'NEAR(a b)', "'; DROP"])
def test_what_the_user_types_is_never_read_as_query_syntax(store: ChatStore, query: str) -> None:
    c = store.create_chat("t")
    store.add_message(c, "user", f"literal {query} here")
    hits, _ = store.search(query)  # no sqlite3 error for any of them
    assert all(h.chat_id == c for h in hits)


def test_fts_query_quotes_each_word() -> None:
    assert fts_query("  ") is None
    assert fts_query('say "hi" OR') == '"say" """hi""" "OR"*'


def test_the_index_follows_updates_and_deletes(store: ChatStore) -> None:
    c = store.create_chat("t")
    mid = store.add_message(c, "assistant", "draft text", status="interrupted")
    assert texts(store, "draft")
    store.update_message(mid, "final answer")  # a reply checkpointed, then finished
    assert texts(store, "draft") == []
    assert texts(store, "final") == ["final answer"]
    other = store.create_chat("u")
    store.add_message(other, "user", "final countdown")
    store.delete_chat(c)  # its messages go by the foreign key's cascade: the trigger still fires
    assert texts(store, "final") == ["final countdown"]
    n_index = store.conn.execute("SELECT count(*) FROM messages_fts").fetchone()[0]
    assert n_index == 1
    # FTS5's own check of the index against the messages table (raises when they differ).
    store.conn.execute("INSERT INTO messages_fts(messages_fts) VALUES ('integrity-check')")


def test_a_database_at_the_previous_schema_migrates_keeps_everything_and_is_searchable(
        tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    conn = sqlite3.connect(path, isolation_level=None)
    migrate(conn, MIGRATIONS[:3])
    conn.execute("INSERT INTO chats (id, title, pair, created, updated) "
                 "VALUES (4, 'old chat', 'demo', 1, 2)")
    conn.execute("INSERT INTO messages (chat_id, seq, role, content, status, created) VALUES "
                 "(4, 0, 'user', 'the quick brown fox', 'done', 1), "
                 "(4, 1, 'assistant', 'jumps over the lazy dog', 'interrupted', 2)")
    conn.execute("INSERT INTO chat_owners VALUES (4, 'tok', 'elsewhere', 1, 0)")
    cur = conn.execute("SELECT * FROM messages ORDER BY id")
    before, columns = cur.fetchall(), ", ".join(d[0] for d in cur.description)
    conn.close()

    store = ChatStore.open(path)
    assert user_version(store.conn) == SCHEMA_VERSION
    # Every column there was keeps its values (later migrations may add columns).
    after = [tuple(r) for r in store.conn.execute(f"SELECT {columns} FROM messages ORDER BY id")]
    assert after == before
    chat = store.get_chat(4)
    assert (chat.title, chat.pair, chat.preset, chat.system_prompt) == ("old chat", "demo",
                                                                         None, None)
    assert texts(store, "lazy") == ["jumps over the lazy dog"]  # backfilled
    assert store.conn.execute("SELECT count(*) FROM chat_owners").fetchone()[0] == 1
    store.close()


def test_the_schema_1_fixture_migrates_and_its_messages_are_found(tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    shutil.copy(FIXTURE, path)
    store = ChatStore.open(path)
    contents = [m.content for c in store.list_chats() for m in store.messages(c.id)]
    word = next(w for text in contents for w in text.split() if w.isalpha() and len(w) > 4)
    hits, fts = store.search(word)
    assert fts and hits
    assert all(word.lower() in store.conn.execute(
        "SELECT lower(content) FROM messages WHERE id = ?", (h.message_id,)).fetchone()[0]
        for h in hits)
    store.close()


def test_triggers_lost_to_a_table_copy_are_rebuilt_at_the_next_open(tmp_path: Path) -> None:
    """A later migration that copies ``messages`` (as schema 3 did) drops its triggers: the
    next open makes them again and indexes what was written meanwhile."""
    path = tmp_path / "chats.sqlite3"
    store = ChatStore.open(path)
    c = store.create_chat("t")
    store.add_message(c, "user", "before the copy")
    store.close()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript("""
        CREATE TABLE m2 AS SELECT * FROM messages; DROP TABLE messages;
        ALTER TABLE m2 RENAME TO messages;
        INSERT INTO messages (id, chat_id, seq, role, content, status, created)
            VALUES (99, 1, 5, 'user', 'written while unindexed', 'done', 3);
    """)
    assert not index_ready(conn)
    conn.close()
    store = ChatStore.open(path)
    assert index_ready(store.conn)
    assert texts(store, "unindexed") == ["written while unindexed"]
    assert texts(store, "copy") == ["before the copy"]
    store.close()


def test_without_fts5_the_search_falls_back_to_substrings_and_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "chats.sqlite3"
    store = ChatStore.open(path)
    c = store.create_chat("Cats")
    store.add_message(c, "user", "my cat likes 100% of the box_top")
    store.close()
    # This Python's SQLite has FTS5; a build without it is what the probe then answers.
    monkeypatch.setattr(search_mod, "fts5_available", lambda conn: False)
    store = ChatStore.open(path)
    names = {r[0] for r in store.conn.execute("SELECT name FROM sqlite_master "
                                              "WHERE type = 'trigger'")}
    assert not names & set(TRIGGERS)  # else every write would fail: "no such module: fts5"
    store.add_message(c, "assistant", "Cats sleep a lot.")
    hits, fts = store.search("CAT")
    assert not fts
    assert [h.snippet for h in hits] == ["Cats sleep a lot.", "my cat likes 100% of the box_top"]
    assert [hits[0].snippet[s:e] for s, e in hits[0].marks] == ["Cat"]
    assert [h.snippet for h in store.search("100%")[0]] == ["my cat likes 100% of the box_top"]
    assert store.search("1000%")[0] == []  # % and _ are literal, not wildcards
    assert store.search("box_t")[0] and not store.search("boxxt")[0]
    store.close()
    monkeypatch.undo()
    store = ChatStore.open(path)  # FTS5 back: the triggers return and the index is rebuilt
    hits, fts = store.search("sleep")
    assert fts and [h.snippet for h in hits] == ["Cats sleep a lot."]
    store.close()


def test_split_marks_puts_a_snippet_on_one_line() -> None:
    text, marks = split_marks("a\n\x02b\x03c\td\x02\x03")
    assert text == "a bc d"
    assert marks == ((2, 3),)


def test_a_chat_keeps_its_pair_and_its_prompt(store: ChatStore, tmp_path: Path) -> None:
    c = store.create_chat("t", pair="demo")
    store.set_pair(c, "qwen-coder")
    store.set_prompt(c, "coder", "You write Python.")
    chat = store.get_chat(c)
    assert (chat.pair, chat.preset, chat.system_prompt) == ("qwen-coder", "coder",
                                                            "You write Python.")
    store.set_prompt(c, None, None)
    assert store.list_chats()[0].preset is None


def test_a_read_only_database_at_an_older_schema_still_lists_and_searches(tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    conn = sqlite3.connect(path, isolation_level=None)
    migrate(conn, MIGRATIONS[:3])
    conn.execute("INSERT INTO chats VALUES (1, 'old', 'demo', 1, 2)")
    conn.execute("INSERT INTO messages (chat_id, seq, role, content, status, created) "
                 "VALUES (1, 0, 'user', 'needle in a haystack', 'done', 1)")
    conn.close()
    store = ChatStore.open(path, read_only=True)
    assert store.list_chats()[0].preset is None
    hits, fts = store.search("needle")
    assert not fts and [h.chat_title for h in hits] == ["old"]
    store.close()


# --- specchat chats --search, and the pair column ----------------------------------------------


def test_chats_search_on_the_command_line(home: AppPaths,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["chats", "--search", "fox"]) == 0
    assert "no saved chats yet" in capsys.readouterr().out
    assert not home.chats_db.exists()  # searching does not create a database
    store = ChatStore.open(home.chats_db)
    a = store.create_chat("Animals", pair="demo")
    store.add_message(a, "user", "What does the fox say?")
    store.add_message(a, "assistant", "Nobody knows\nwhat the fox says.")
    b = store.create_chat("Tea", pair="gone-pair")
    store.add_message(b, "user", "Green or black?")
    store.close()
    assert main(["chats", "--search", "fox"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["ID", "FROM", "CHAT", "TEXT"]
    rows = out[1:-1]
    assert len(rows) == 2 and all(r.split()[0] == str(a) and "Animals" in r for r in rows)
    assert {r.split()[1] for r in rows} == {"you", "assistant"}
    assert any("Nobody knows what the fox says." in r for r in rows)  # one line each
    assert out[-1].startswith("2 messages;")
    assert main(["chats", "--search", "fox", "--limit", "1"]) == 0
    assert "(more with --limit)" in capsys.readouterr().out
    assert main(["chats", "--search", "zebra"]) == 0
    assert "no message contains 'zebra'" in capsys.readouterr().out
    assert main(["chats", "--search", "  "]) == 1
    assert "needs a word" in capsys.readouterr().err
    assert main(["chats"]) == 0
    listing = capsys.readouterr().out
    tea = next(line for line in listing.splitlines() if line.endswith("Tea"))
    assert "gone-pair (not in the catalog)" in tea
    animals = next(line for line in listing.splitlines() if line.endswith("Animals"))
    assert "demo (not on disk)" in animals  # an empty SPECCHAT_HOME has no model files


def test_the_apps_services_list_pairs_and_models_and_open_any_label(
        home: AppPaths, tiny_target: Path, tiny_draft: Path) -> None:
    from specchat.cli.app import build_services
    from specchat.cli.common import make_env
    from specchat.models.catalog import ModelEntry, PathSource, load_catalog
    from specchat.models.pairing import save_pair

    args = argparse.Namespace(pair=None, model=None, ctx_size=None, threads=None, gpu_layers=None)
    services = build_services(make_env(), args)
    try:
        save_pair(home, load_catalog(home.user_catalog), "mine",
                  ModelEntry("t", "Tiny T", PathSource(tiny_target)),
                  ModelEntry("d", "Tiny D", PathSource(tiny_draft)), gamma=3)
        choices = services.pair_choices()  # read again: the wizard's new pair is there
        mine = next(c for c in choices if c.label == "mine")
        assert (mine.kind, mine.on_disk, mine.detail) == ("pair", True,
                                                         "Tiny T + Tiny D · γ 3 calibrated")
        demo = next(c for c in choices if c.label == "demo")
        assert not demo.on_disk and demo.status == "not on disk"
        on_disk = [c.on_disk for c in choices]
        assert on_disk == sorted(on_disk, reverse=True)  # what can be loaded comes first
        assert {c.label for c in choices if c.kind == "model"} >= {"t", "d"}
        t = services.choice_for("t")
        assert t is not None and (t.kind, t.on_disk) == ("model", True)
        gone = services.choice_for("gone")
        assert gone is not None and gone.status == "not in the catalog"
        adhoc = services.choice_for(f"{tiny_target} + {tiny_draft}")  # a --model/--draft chat
        assert adhoc is not None and (adhoc.kind, adhoc.on_disk) == ("pair", True)
        opener = services.switch_to("t")
        assert (opener.label, services.label) == ("t", "t")
        runtime = opener.open_runtime(lambda _p: None)
        try:
            assert runtime.selection.label == "t" and runtime.draft is None
        finally:
            runtime.close()
        assert services.config.default_pair is None  # switching is not choosing a default
    finally:
        services.store.close()


def test_a_repaired_database_keeps_each_chats_prompt_and_is_searchable(tmp_path: Path) -> None:
    from specchat.store.repair import repair

    path = tmp_path / "chats.sqlite3"
    store = ChatStore.open(path)
    c = store.create_chat("Kept", pair="demo", preset="coder", system_prompt="You write C.")
    store.add_message(c, "user", "pointer arithmetic please")
    store.release(c)
    store.close()
    report = repair(path)
    assert (report.chats, report.messages) == (1, 1)
    store = ChatStore.open(path)
    chat = store.get_chat(c)
    assert (chat.preset, chat.system_prompt, chat.pair) == ("coder", "You write C.", "demo")
    assert texts(store, "pointer") == ["pointer arithmetic please"]
    store.close()
