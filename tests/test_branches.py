"""Branches in a chat: regenerated replies and edited messages kept as alternatives, flipping
between them, deleting a message; in memory (ChatSession on a real tiny model) and in SQLite
(the migration from the linear schema, and what a reopened chat shows)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
from ui_helpers import GREEDY, tiny_runtime

from specchat.engine.decode.chat import ChatEngine
from specchat.engine.decode.plain import PlainDecoder
from specchat.runtime.opening import Runtime
from specchat.session.controller import ChatSession
from specchat.session.conversation import Conversation, Turn
from specchat.session.views import Notice, Redraw, View
from specchat.session.worker import ReplyUpdate, run_reply
from specchat.store import ChatStore
from specchat.store.branches import thread
from specchat.store.schema import MIGRATIONS, SCHEMA_VERSION, migrate, user_version

SYSTEM = "Be brief."
SAMPLED = GREEDY.with_(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=5, max_tokens=8)


@pytest.fixture
def runtime(tiny_target: Path) -> Runtime:
    rt = tiny_runtime(tiny_target)
    yield rt  # type: ignore[misc]
    rt.close()


def finish(session: ChatSession, engine: ChatEngine) -> list[View]:
    """Run the session's job here (the worker's code, on this thread) and apply its updates."""
    job = session.job
    assert job is not None
    updates: list[ReplyUpdate] = []
    run_reply(job, engine, updates.append)
    views: list[View] = []
    for u in updates:
        views += session.apply(u)
    assert session.job is None
    return views


def shown(c: Conversation) -> list[tuple[str, str]]:
    return [(t.role, t.text) for t in c.turns]


def reopened(store: ChatStore, chat_id: int | None) -> Conversation:
    again = ChatStore.open(store.path)
    try:
        return Conversation.load(again, chat_id or 0)
    finally:
        again.close()


# --- the store --------------------------------------------------------------------------------


def test_a_database_from_before_branches_migrates_and_keeps_every_message(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    conn = sqlite3.connect(path, isolation_level=None)
    migrate(conn, MIGRATIONS[:3])  # the schema before this change
    assert user_version(conn) == 3
    now = time.time()
    conn.execute("INSERT INTO chats (id, title, pair, created, updated) VALUES (1,'a','p',?,?)",
                 (now, now))
    conn.execute("INSERT INTO chats (id, title, pair, created, updated) VALUES (2,'b','p',?,?)",
                 (now, now))
    texts = [("user", "q1"), ("assistant", "r1"), ("user", "q2"), ("assistant", "r2")]
    for seq, (role, text) in enumerate(texts):
        conn.execute("INSERT INTO messages (chat_id, seq, role, content, status, created) "
                     "VALUES (1,?,?,?,'done',?)", (seq * 10, role, text, now))  # gaps in seq
        conn.execute("INSERT INTO messages (chat_id, seq, role, content, status, created) "
                     "VALUES (2,?,?,?,'done',?)", (seq, role, text + "b", now))
    conn.close()
    store = ChatStore.open(path)
    assert user_version(store.conn) == SCHEMA_VERSION
    rows = store.messages(1)
    assert [(m.role, m.content) for m in rows] == texts
    assert [m.parent_id for m in rows] == [None, rows[0].id, rows[1].id, rows[2].id]
    assert all(m.active for m in rows) and thread(rows) == rows
    assert [m.content for m in store.thread(2)] == ["q1b", "r1b", "q2b", "r2b"]
    c = Conversation.load(store, 1)
    assert shown(c) == texts
    # A message added without a parent follows the shown branch, as before branches.
    new = store.add_message(1, "user", "q3")
    assert store.messages(1)[-1].parent_id == rows[-1].id and store.thread(1)[-1].id == new


def test_the_shown_branch_follows_the_active_alternative(tmp_path: Path) -> None:
    store = ChatStore.open(tmp_path / "c.sqlite3")
    chat = store.create_chat("t")
    q = store.add_message(chat, "user", "q", parent_id=None)
    r1 = store.add_message(chat, "assistant", "r1", parent_id=q)
    after = store.add_message(chat, "user", "after r1", parent_id=r1)
    r2 = store.add_message(chat, "assistant", "r2", parent_id=q)
    store.update_message(r1, "r1", active=False)
    assert [m.content for m in store.thread(chat)] == ["q", "r2"]
    # The chat list counts the shown branch: r1 and what followed it are a flip away.
    assert store.get_chat(chat).n_messages == 2
    assert [c.n_messages for c in store.list_chats()] == [2]
    store.update_message(r2, "r2", active=False)  # none marked (a damaged row): the newest
    assert [m.content for m in store.thread(chat)] == ["q", "r2"]
    store.update_message(r1, "r1", active=True)
    assert [m.content for m in store.thread(chat)] == ["q", "r1", "after r1"]
    assert store.get_chat(chat).n_messages == 3
    # Deleting relinks in the same transaction: the reply goes, what followed it stays.
    store.delete_messages(chat, [r1], relink=[(after, q, False), (r2, q, True)])
    assert [m.content for m in store.thread(chat)] == ["q", "r2"]
    assert {m.content: m.parent_id for m in store.messages(chat)} == {
        "q": None, "after r1": q, "r2": q}


# --- the session --------------------------------------------------------------------------------


def test_regenerate_keeps_the_old_reply_as_an_alternative(tmp_path: Path,
                                                          runtime: Runtime) -> None:
    store = ChatStore.open(tmp_path / "c.sqlite3")
    session = ChatSession(store, "tiny")
    engine = ChatEngine(PlainDecoder(runtime.target_ctx))
    session.send("hello", SYSTEM, SAMPLED)
    finish(session, engine)
    first = session.conversation.turns[-1]
    views = session.regenerate(None, SYSTEM, SAMPLED)
    job = session.job
    assert job is not None and job.messages[-1].content == "hello"  # the old reply is not in
    assert job.sampling.seed == 5 + 1  # a fixed seed is moved on, so it can differ
    assert not any(isinstance(v, Notice) for v in views)  # (said only at temperature 0)
    finish(session, engine)
    second = session.conversation.turns[-1]
    assert second is not first and second.text
    assert session.conversation.position(second) == (2, 2)
    assert [t.active for t in session.conversation.alternatives(first)] == [False, True]
    assert session.flip(second, -1)[0] == Redraw()
    assert session.conversation.turns[-1] is first
    assert session.flip(first, -1) == []  # already the first: nothing changes
    again = reopened(store, session.conversation.chat_id)  # the choice is saved
    assert shown(again) == [("user", "hello"), ("assistant", first.text)]
    assert again.position(again.turns[-1]) == (1, 2)
    session.regenerate(None, SYSTEM, SAMPLED)
    finish(session, engine)
    assert session.conversation.position(session.conversation.turns[-1]) == (3, 3)


def test_greedy_regenerate_says_it_will_come_out_the_same(tmp_path: Path,
                                                          runtime: Runtime) -> None:
    session = ChatSession(ChatStore.open(tmp_path / "c.sqlite3"), "tiny")
    engine = ChatEngine(PlainDecoder(runtime.target_ctx))
    session.send("hello", SYSTEM, GREEDY)
    finish(session, engine)
    views = session.regenerate(None, SYSTEM, GREEDY)
    assert any(isinstance(v, Notice) and "Temperature is 0" in v.text for v in views)
    finish(session, engine)
    a, b = session.conversation.alternatives(session.conversation.turns[-1])
    assert a.text == b.text


def test_edit_and_resend_makes_a_branch_the_user_can_flip_back_to(tmp_path: Path,
                                                                   runtime: Runtime) -> None:
    store = ChatStore.open(tmp_path / "c.sqlite3")
    session = ChatSession(store, "tiny")
    engine = ChatEngine(PlainDecoder(runtime.target_ctx))
    session.send("one", SYSTEM, GREEDY)
    finish(session, engine)
    session.send("two", SYSTEM, GREEDY)
    finish(session, engine)
    old = shown(session.conversation)
    first = session.conversation.turns[0]
    session.edit(first, "uno", SYSTEM, GREEDY)
    job = session.job
    assert job is not None and [m.content for m in job.messages] == [SYSTEM, "uno"]
    finish(session, engine)
    c = session.conversation
    assert c.turns[0].text == "uno" and len(c.turns) == 2
    assert c.position(c.turns[0]) == (2, 2)
    assert shown(reopened(store, c.chat_id))[0] == ("user", "uno")
    session.flip(c.turns[0], -1)
    assert shown(c) == old  # the old branch, whole
    assert shown(reopened(store, c.chat_id)) == old
    # Refusals are said, and change nothing.
    assert isinstance(session.edit(c.turns[1], "x", SYSTEM, GREEDY)[0], Notice)
    assert isinstance(session.edit(c.turns[0], "  ", SYSTEM, GREEDY)[0], Notice)
    assert session.job is None and shown(c) == old


def test_delete_a_message_with_its_reply_keeps_what_follows(tmp_path: Path,
                                                            runtime: Runtime) -> None:
    store = ChatStore.open(tmp_path / "c.sqlite3")
    session = ChatSession(store, "tiny")
    engine = ChatEngine(PlainDecoder(runtime.target_ctx))
    for text in ("one", "two", "three"):
        session.send(text, SYSTEM, GREEDY)
        finish(session, engine)
    c = session.conversation
    before = shown(c)
    plan = session.deletion(c.turns[2])  # "two"
    assert plan.question == "Delete this message and its reply? The messages after it stay."
    assert [t.text for t in plan.removed] == [before[2][1], before[3][1]]
    session.delete(plan)
    assert shown(c) == before[:2] + before[4:]
    assert shown(reopened(store, c.chat_id)) == before[:2] + before[4:]
    assert len(store.messages(c.chat_id or 0)) == 4
    plan = session.deletion(c.turns[-1])  # the last reply, alone
    assert plan.question == "Delete this reply?"
    session.delete(plan)
    assert shown(reopened(store, c.chat_id)) == before[:2] + before[4:5]


def test_delete_an_alternative_takes_its_branch_and_shows_the_next(tmp_path: Path,
                                                                   runtime: Runtime) -> None:
    store = ChatStore.open(tmp_path / "c.sqlite3")
    session = ChatSession(store, "tiny")
    engine = ChatEngine(PlainDecoder(runtime.target_ctx))
    session.send("one", SYSTEM, SAMPLED)
    finish(session, engine)
    session.send("two", SYSTEM, SAMPLED)
    finish(session, engine)
    c = session.conversation
    first_reply = c.turns[1]
    session.regenerate(first_reply, SYSTEM, SAMPLED)  # an earlier reply: a new branch there
    finish(session, engine)
    assert len(c.turns) == 2 and c.position(c.turns[1]) == (2, 2)
    session.flip(c.turns[1], -1)
    assert c.turns[1] is first_reply and len(c.turns) == 4
    plan = session.deletion(first_reply)
    assert plan.question == ("Delete this reply (alternative 1 of 2) and the 2 messages after "
                             "it on its branch? The other alternatives stay.")
    session.delete(plan)
    assert len(c.turns) == 2 and c.position(c.turns[1]) == (1, 1)
    again = reopened(store, c.chat_id)
    assert shown(again) == shown(c) and len(again.nodes) == 2


def test_a_read_only_chat_refuses_branch_changes(tmp_path: Path, runtime: Runtime) -> None:
    path = tmp_path / "c.sqlite3"
    a = ChatSession(ChatStore.open(path), "tiny")
    engine = ChatEngine(PlainDecoder(runtime.target_ctx))
    a.send("hello", SYSTEM, GREEDY)
    finish(a, engine)
    b = ChatSession(ChatStore.open(path), "tiny")
    b.open_chat(a.conversation.chat_id or 0)
    assert b.owner is not None
    turns = b.conversation.turns
    assert isinstance(b.regenerate(None, SYSTEM, GREEDY)[0], Notice)
    assert isinstance(b.delete(b.deletion(turns[0]))[0], Notice)
    assert b.job is None and len(b.conversation.nodes) == 2
    assert len(a.store.messages(a.conversation.chat_id or 0)) == 2


def test_turns_are_a_tuple_changed_only_through_the_conversation() -> None:
    c = Conversation()
    c.add(Turn.user("a"))
    assert isinstance(c.turns, tuple)  # `turns.append` fails loudly instead of doing nothing
    same = Turn.user("a")
    c.add(same)
    assert c.turns[1] is same and c.turns[0] is not same  # equal text, two turns


def test_a_repaired_database_keeps_its_branches(tmp_path: Path) -> None:
    from specchat.store.repair import repair

    path = tmp_path / "c.sqlite3"
    store = ChatStore.open(path)
    chat = store.create_chat("t")
    q = store.add_message(chat, "user", "q", parent_id=None)
    r1 = store.add_message(chat, "assistant", "r1", parent_id=q, active=False)
    store.add_message(chat, "user", "after r1", parent_id=r1)
    store.add_message(chat, "assistant", "r2", parent_id=q)
    before = [(m.content, m.parent_id, m.active) for m in store.messages(chat)]
    store.close()
    report = repair(path)
    assert report.messages == 4
    again = ChatStore.open(path)
    assert [(m.content, m.parent_id, m.active) for m in again.messages(chat)] == before
    assert [m.content for m in again.thread(chat)] == ["q", "r2"]


def test_a_regenerate_that_fails_before_any_text_shows_the_old_reply_again(
        tmp_path: Path, runtime: Runtime) -> None:
    store = ChatStore.open(tmp_path / "c.sqlite3")
    session = ChatSession(store, "tiny")
    engine = ChatEngine(PlainDecoder(runtime.target_ctx))
    session.send("hello", SYSTEM, SAMPLED)
    finish(session, engine)
    old = session.conversation.turns[-1]
    session.regenerate(None, SYSTEM, SAMPLED)
    assert session.conversation.turns[-1] is not old
    job = session.job
    assert job is not None
    views = session.failed(job.id, RuntimeError("the backend fell over"))
    assert Redraw() in views
    assert session.conversation.turns[-1] is old and len(session.conversation.nodes) == 2
    assert [m.active for m in store.messages(session.conversation.chat_id or 0)] == [True, True]
    assert [m.content for m in store.thread(session.conversation.chat_id or 0)] == [
        "hello", old.text]  # what `specchat export` writes: the shown branch
