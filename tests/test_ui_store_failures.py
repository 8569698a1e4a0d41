"""The app and the CLI when the chat database fails: a notice or one line, never a traceback,
and nothing the user wrote or saw is lost. Real app (Pilot), tiny real model, real SQLite."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from test_store_failures import _damage_a_messages_page, _fill
from test_ui_app import SIZE, finished, ready, send
from textual.widgets import Static
from ui_helpers import app_test, make_services, tiny_runtime

from specchat.cli.main import main
from specchat.paths import AppPaths
from specchat.store import ChatStore
from specchat.ui.app import SpecchatApp
from specchat.ui.screens.chat import ChatScreen
from specchat.ui.widgets.chat_input import ChatInput


def notices(app: SpecchatApp) -> list[str]:
    return [str(n.message) for n in app._notifications]


def topbar(chat: ChatScreen) -> str:
    return str(chat.query_one("#topbar", Static).render())


def fill_the_disk(store: ChatStore, chat_id: int | None) -> int:
    """SQLITE_FULL from now on (a ballast table and chat take what is left; see drop_ballast)."""
    c = store.conn
    ballast = int(c.execute("INSERT INTO chats (title, created, updated) VALUES ('b', 0, 0)")
                  .lastrowid or 0)
    c.execute(f"PRAGMA max_page_count = {c.execute('PRAGMA page_count').fetchone()[0] + 2}")
    c.execute("CREATE TABLE ballast (x BLOB)")
    for sql, args in (("INSERT INTO ballast VALUES (zeroblob(500))", ()),
                      ("INSERT INTO messages (chat_id, seq, role, content, created) VALUES "
                       "(?, (SELECT coalesce(max(seq), 0) + 1 FROM messages), 'user', 'x', 0)",
                       (ballast,))):
        with pytest.raises(sqlite3.OperationalError, match="full"):
            while True:
                c.execute(sql, args)
    return ballast


def drop_ballast(store: ChatStore, ballast: int) -> None:
    store.conn.execute("DROP TABLE ballast")
    store.conn.execute("DELETE FROM chats WHERE id = ?", (ballast,))


@app_test
async def test_a_full_disk_mid_chat_is_a_notice_and_the_retry_saves_everything(
        tmp_path: Path, tiny_target: Path) -> None:
    services = make_services(tmp_path, tiny_runtime(tiny_target))
    app = SpecchatApp(services)
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        await send(pilot, "first")
        await finished(pilot)
        ballast = fill_the_disk(services.store, chat.conversation.chat_id)
        reply = await send(pilot, "second")
        await finished(pilot)
        assert reply.turn.text and not reply.turn.saved  # shown, kept in memory
        assert any("disk is full" in n for n in notices(app))
        assert "2 messages not saved yet" in topbar(chat)
        marked = [w for w in chat.query(".message") if w.has_class("-unsaved")]
        assert len(marked) == 2 and reply in marked
        drop_ballast(services.store, ballast)
        chat._tick()  # the timer's retry
        await pilot.pause()
        assert "not saved" not in topbar(chat) and not chat.query(".-unsaved")
        assert any("saved again" in n for n in notices(app))
        msgs = services.store.messages(chat.conversation.chat_id or 0)
        assert [m.content for m in msgs][2:] == ["second", reply.turn.text]


@app_test
async def test_a_lock_held_during_a_new_chats_first_message_loses_nothing(
        tmp_path: Path, tiny_target: Path) -> None:
    services = make_services(tmp_path, tiny_runtime(tiny_target))
    other = sqlite3.connect(services.store.path, isolation_level=None)
    app = SpecchatApp(services)
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        other.execute("BEGIN IMMEDIATE")  # another program holds the write lock
        reply = await send(pilot, "hello")
        await finished(pilot)
        assert reply.turn.text and reply.turn.status == "done"
        assert any("busy" in n for n in notices(app)) and "not saved yet" in topbar(chat)
        other.execute("ROLLBACK")
        chat._tick()
        await pilot.pause()
        (saved,) = services.store.list_chats()
        assert [m.content for m in services.store.messages(saved.id)] == ["hello",
                                                                          reply.turn.text]


@app_test
async def test_opening_a_damaged_chat_is_a_notice(tmp_path: Path, tiny_target: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    store = ChatStore.open(path)
    ids = _fill(store)
    store.close()
    _damage_a_messages_page(path)
    services = make_services(tmp_path, tiny_runtime(tiny_target))
    app = SpecchatApp(services)
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        for chat_id in ids:
            chat.open_chat(chat_id)
        await pilot.pause()
        assert any("--repair" in n for n in notices(app))
        reply = await send(pilot, "still works")  # a new chat on the same file
        await finished(pilot)
        assert reply.turn.status == "done"


@app_test
async def test_a_chat_open_in_another_specchat_is_read_only_and_keeps_the_typed_text(
        tmp_path: Path, tiny_target: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    elsewhere = ChatStore.open(path)  # another running specchat, which owns the chat
    chat_id = elsewhere.create_chat("theirs")
    elsewhere.add_message(chat_id, "user", "their question")
    services = make_services(tmp_path, tiny_runtime(tiny_target))
    app = SpecchatApp(services)
    async with app.run_test(size=SIZE) as pilot:
        chat = await ready(pilot)
        chat.open_chat(chat_id)
        await pilot.pause()
        assert "read-only" in topbar(chat)
        await pilot.click(ChatInput)
        await pilot.press(*"mine")
        await pilot.press("enter")
        await pilot.pause()
        assert chat.job is None and chat.query_one(ChatInput).text == "mine"
        assert any("open in another specchat" in n for n in notices(app))
    assert [m.content for m in elsewhere.messages(chat_id)] == ["their question"]


def test_the_cli_says_one_line_for_a_damaged_database_and_repairs_it(
        home: AppPaths, capsys: pytest.CaptureFixture[str]) -> None:
    home.ensure()
    store = ChatStore.open(home.chats_db)
    ids = _fill(store)
    store.close()
    _damage_a_messages_page(home.chats_db)
    assert main(["chats"]) == 0  # the list reads (from an index), with a warning
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "damaged" in err and "--repair" in err
    assert main(["export", str(ids[-1])]) == 1
    assert "damaged" in capsys.readouterr().err
    assert main(["chats", "--repair"]) == 0
    out = capsys.readouterr().out
    assert "recovered 3 chats" in out and "kept as" in out
    assert main(["chats"]) == 0
    assert "chat 0" in capsys.readouterr().out


@app_test
async def test_what_happened_to_the_database_at_start_is_said_in_the_app(
        tmp_path: Path, tiny_target: Path) -> None:
    services = make_services(tmp_path, tiny_runtime(tiny_target),
                             store_problem="The chat history was damaged: recovered 3 chats")
    app = SpecchatApp(services)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.pause()
        assert any("recovered 3 chats" in n for n in notices(app))


@app_test
async def test_quitting_while_messages_are_unsaved_writes_them_to_a_file(
        tmp_path: Path, tiny_target: Path) -> None:
    services = make_services(tmp_path, tiny_runtime(tiny_target))
    other = sqlite3.connect(services.store.path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # held until after the app has quit
    app = SpecchatApp(services)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        reply = await send(pilot, "remember this")
        await finished(pilot)
        shown = reply.turn.text
        await pilot.press("ctrl+q")
    assert app.rescued is not None and app.rescued.parent == tmp_path
    text = app.rescued.read_text(encoding="utf-8")
    assert "remember this" in text and shown in text
    other.execute("ROLLBACK")
