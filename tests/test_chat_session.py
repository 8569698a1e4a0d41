"""The reply controller without Textual: real tiny models, real SQLite, a real worker thread.

Each test drives :class:`ChatSession` the way the chat screen does: ``send``, run the job's
``run_reply`` in a thread whose updates come back through a queue, ``apply`` them on this
thread (the store's), and read the view updates it returns.
"""

from __future__ import annotations

import os
import queue
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from ui_helpers import GREEDY, GatedDecoder, reference_reply, tiny_runtime

from specchat.engine.decode.chat import ChatEngine
from specchat.engine.decode.messages import Message
from specchat.engine.decode.plain import PlainDecoder
from specchat.errors import ModelFileError
from specchat.runtime.opening import Runtime
from specchat.session.controller import ChatSession
from specchat.session.views import Ended, Failed, Notice, SaveState, Streamed, View
from specchat.session.worker import ReplyChunk, ReplyDone, ReplyUpdate, run_reply
from specchat.store import ChatStore, ReplyStats
from specchat.store.fates import merge_segments

SYSTEM = "Be brief."
REPO = Path(__file__).resolve().parent.parent


class Ticks:
    """A clock that moves ``step`` seconds each time it is read (checkpoints every read)."""

    def __init__(self, step: float = 0.0) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


@pytest.fixture
def runtime(tiny_target: Path) -> Iterator[Runtime]:
    rt = tiny_runtime(tiny_target)
    yield rt
    rt.close()


def run_job(session: ChatSession, engine: ChatEngine,
            during: object = None) -> tuple[list[View], list[ReplyUpdate]]:
    """Run the session's job in a worker thread; apply its updates here until it ends."""
    job = session.job
    assert job is not None
    updates: queue.Queue[ReplyUpdate | BaseException | None] = queue.Queue()

    def work() -> None:
        try:
            run_reply(job, engine, updates.put)
        except Exception as e:
            updates.put(e)
        updates.put(None)

    thread = threading.Thread(target=work)
    thread.start()
    views: list[View] = []
    seen: list[ReplyUpdate] = []
    while (u := updates.get(timeout=60)) is not None:
        if isinstance(u, BaseException):
            views += session.failed(job.id, u)
        else:
            seen.append(u)
            views += session.apply(u)
        if callable(during):
            during(views)
    thread.join()
    return views, seen


def rows(store: ChatStore, chat_id: int | None = None) -> list[tuple[str, str, str]]:
    if chat_id is None:
        (chat,) = store.list_chats()
        chat_id = chat.id
    return [(m.role, m.content, m.status) for m in store.messages(chat_id)]


def test_a_reply_is_built_once_saved_with_its_fates_and_stats(tmp_path: Path,
                                                              runtime: Runtime) -> None:
    store = ChatStore.open(tmp_path / "chats.sqlite3")
    session = ChatSession(store, "tiny")
    engine = ChatEngine(PlainDecoder(runtime.target_ctx))
    views = session.send("hello there", SYSTEM, GREEDY, meta=ReplyStats(decoder="plain"))
    assert session.job is not None and session.busy
    reply = session.reply
    assert reply is not None
    more, updates = run_job(session, engine)
    views += more
    done = updates[-1]
    assert isinstance(done, ReplyDone)
    # The one trace: the session's, built from the segments the worker sent (ReplyDone
    # carries no second copy).
    sent = [seg for u in updates if isinstance(u, ReplyChunk) for seg in u.segments]
    assert reply.trace.segments == merge_segments(sent) and not hasattr(done, "trace")
    expected = reference_reply(runtime, [Message("system", SYSTEM), Message("user", "hello there")])
    assert reply.text == expected and reply.status == "done" and reply.saved
    streamed = "".join(s.text for v in views if isinstance(v, Streamed) for s in v.segments)
    assert streamed == expected
    assert isinstance(views[-2], Ended) and not views[-2].dropped
    assert views[-3] == SaveState(0)
    assert rows(store) == [("user", "hello there", "done"), ("assistant", expected, "done")]
    saved = store.messages(session.conversation.chat_id or 0)[1]
    assert saved.stats and saved.stats.decoder == "plain" and saved.fates
    assert session.job is None and session.conversation.title == "hello there"


def test_a_streaming_reply_is_checkpointed_as_interrupted(tmp_path: Path,
                                                          runtime: Runtime) -> None:
    store = ChatStore.open(tmp_path / "chats.sqlite3")
    session = ChatSession(store, "tiny", clock=Ticks(step=1.0), checkpoint_s=1.0)
    gated = GatedDecoder(PlainDecoder(runtime.target_ctx), after=6)
    engine = ChatEngine(gated)
    session.send("a b c", SYSTEM, GREEDY.with_(max_tokens=30))
    mid: list[list[tuple[str, str, str]]] = []

    def during(_views: list[View]) -> None:
        if gated.paused.is_set() and not mid and session.reply and session.reply.saved:
            mid.append(rows(store))
            gated.gate.set()

    run_job(session, engine, during)
    assert mid, "no checkpoint while the reply streamed"
    (user, partial) = mid[0]
    assert user[0] == "user" and partial[0] == "assistant" and partial[2] == "interrupted"
    assert partial[1] and session.conversation.turns[1].text.startswith(partial[1])
    assert rows(store)[1][2] == "done"  # the same row, finished


def test_a_cancelled_reply_keeps_its_text_as_stopped(tmp_path: Path, runtime: Runtime) -> None:
    store = ChatStore.open(tmp_path / "chats.sqlite3")
    session = ChatSession(store, "tiny")
    gated = GatedDecoder(PlainDecoder(runtime.target_ctx), after=4)

    def during(_views: list[View]) -> None:
        if gated.paused.is_set() and session.reply and session.reply.text:
            session.cancel()

    session.send("hello", SYSTEM, GREEDY.with_(max_tokens=40))
    run_job(session, ChatEngine(gated), during)
    (_user, reply) = rows(store)
    assert reply[2] == "cancelled" and reply[1]
    assert not session.cancel()  # nothing left to stop


def test_a_failing_worker_is_one_dialog_and_keeps_the_text(tmp_path: Path,
                                                           runtime: Runtime) -> None:
    class Breaks(PlainDecoder):
        def run(self, prompt, settings, cancel):  # type: ignore[no-untyped-def]
            for i, ev in enumerate(super().run(prompt, settings, cancel)):
                yield ev
                if i == 3:
                    raise ModelFileError("the model file went away")

    store = ChatStore.open(tmp_path / "chats.sqlite3")
    session = ChatSession(store, "tiny")
    session.send("hello", SYSTEM, GREEDY)
    views, _ = run_job(session, ChatEngine(Breaks(runtime.target_ctx)))
    failed = [v for v in views if isinstance(v, Failed)]
    assert failed == [Failed("The reply could not be generated", "the model file went away")]
    turn = session.conversation.turns[1]
    assert turn.status == "error" and turn.text and rows(store)[1][2] == "error"


def test_disk_full_keeps_the_reply_in_memory_and_the_retry_saves_it(tmp_path: Path,
                                                                    runtime: Runtime) -> None:
    store = ChatStore.open(tmp_path / "chats.sqlite3")
    session = ChatSession(store, "tiny")
    engine = ChatEngine(PlainDecoder(runtime.target_ctx))
    session.send("first", SYSTEM, GREEDY)
    run_job(session, engine)
    c = store.conn
    ballast = c.execute("INSERT INTO chats (title, created, updated) VALUES ('b', 0, 0)").lastrowid
    c.execute(f"PRAGMA max_page_count = {c.execute('PRAGMA page_count').fetchone()[0] + 4}")
    c.execute("CREATE TABLE ballast (x BLOB)")
    with pytest.raises(sqlite3.OperationalError, match="full"):
        while True:  # fill what is left: the disk is full from here on
            c.execute("INSERT INTO ballast VALUES (zeroblob(500))")
    with pytest.raises(sqlite3.OperationalError, match="full"):
        while True:  # and the last page of the messages table too
            c.execute("INSERT INTO messages (chat_id, seq, role, content, created) VALUES "
                      "(?, (SELECT max(seq) + 1 FROM messages), 'user', 'x', 0)", (ballast,))
    views = session.send("second", SYSTEM, GREEDY)
    views += run_job(session, engine)[0]
    notices = [v for v in views if isinstance(v, Notice) and v.title == "Not saved"]
    assert len(notices) == 1 and "disk is full" in notices[0].text  # said once, not per write
    assert views[-3] == SaveState(2) and session.unsaved == 2
    assert len(rows(store, session.conversation.chat_id)) == 2
    assert session.tick()[-1] == SaveState(2)  # still full: still kept
    c.execute("DROP TABLE ballast")
    c.execute("DELETE FROM chats WHERE id = ?", (ballast,))
    views = session.tick()
    assert Notice("Everything is saved again.", "information", "Saved") in views
    assert views[-1] == SaveState(0)
    saved = rows(store)
    assert [r[0] for r in saved] == ["user", "assistant", "user", "assistant"]
    assert saved[2][1] == "second" and saved[3][1] == session.conversation.turns[3].text


def test_a_lock_held_elsewhere_during_the_first_message_loses_nothing(
        tmp_path: Path, runtime: Runtime) -> None:
    path = tmp_path / "chats.sqlite3"
    store = ChatStore.open(path, busy_timeout=0.05)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another program holds the write lock
    session = ChatSession(store, "tiny")
    views = session.send("hello", SYSTEM, GREEDY)
    assert any(isinstance(v, Notice) and "busy" in v.text for v in views)
    assert session.job is not None  # the reply runs anyway
    views = run_job(session, ChatEngine(PlainDecoder(runtime.target_ctx)))[0]
    assert views[-3] == SaveState(2) and session.conversation.chat_id is None
    other.execute("ROLLBACK")
    assert session.tick()[-1] == SaveState(0)
    assert [r[:2] for r in rows(store)] == [("user", "hello"),
                                             ("assistant", session.conversation.turns[1].text)]


def test_a_chat_open_in_another_instance_opens_read_only(tmp_path: Path,
                                                         runtime: Runtime) -> None:
    path = tmp_path / "chats.sqlite3"
    a = ChatSession(ChatStore.open(path), "tiny")
    engine = ChatEngine(PlainDecoder(runtime.target_ctx))
    a.send("from A", SYSTEM, GREEDY)
    run_job(a, engine)
    chat = a.conversation.chat_id
    assert chat is not None
    b = ChatSession(ChatStore.open(path), "tiny")
    views = b.open_chat(chat)
    assert any(isinstance(v, Notice) and "open in another specchat" in v.text for v in views)
    assert b.read_only_reason and [t.role for t in b.conversation.turns] == ["user", "assistant"]
    refused = b.send("from B", SYSTEM, GREEDY)
    assert b.job is None and isinstance(refused[0], Notice) and len(b.conversation.turns) == 2
    a.send("A again", SYSTEM, GREEDY)
    run_job(a, engine)
    assert [r[1] for r in rows(a.store) if r[0] == "user"] == ["from A", "A again"]
    a.new_chat()  # A lets go of it: B may write now
    assert any(isinstance(v, Notice) and "let go" in v.text for v in b.tick())
    assert b.read_only_reason is None
    b.send("B now", SYSTEM, GREEDY)
    run_job(b, engine)
    assert [r[0] for r in rows(b.store)] == ["user", "assistant"] * 3


def test_quitting_with_unsaved_turns_writes_them_to_a_file(tmp_path: Path) -> None:
    store = ChatStore.open(tmp_path / "chats.sqlite3", read_only=False)
    store.read_only = True  # every write fails, as on a read-only database
    session = ChatSession(store, "tiny")
    session.send("keep me", SYSTEM, GREEDY)
    session.job = None  # (no worker in this test)
    path = session.rescue(tmp_path / "rescued")
    assert path is not None and "keep me" in path.read_text(encoding="utf-8")


KILLED = textwrap.dedent("""
    import sys, threading
    from pathlib import Path
    sys.path.insert(0, sys.argv[3])
    from ui_helpers import GREEDY, GatedDecoder, tiny_runtime
    from specchat.engine.decode.chat import ChatEngine
    from specchat.engine.decode.plain import PlainDecoder
    from specchat.session.controller import ChatSession
    from specchat.session.worker import run_reply
    from specchat.store import ChatStore, ReplyStats

    rt = tiny_runtime(Path(sys.argv[2]))
    session = ChatSession(ChatStore.open(Path(sys.argv[1])), "tiny", checkpoint_s=0.0)
    gated = GatedDecoder(PlainDecoder(rt.target_ctx), after=5)
    session.send("tell me", "", GREEDY.with_(max_tokens=40))
    got = []
    worker = threading.Thread(target=run_reply, args=(session.job, ChatEngine(gated), got.append))
    worker.start()
    gated.paused.wait(30)
    import time
    time.sleep(0.3)  # the ticker posts what was generated before the pause
    for u in list(got):
        session.apply(u)
    print(session.reply.text if session.reply.saved else "", flush=True)
    threading.Event().wait()  # killed here, mid-reply
""")


def test_kill_9_mid_reply_keeps_the_checkpoint_marked_interrupted(tmp_path: Path,
                                                                  tiny_target: Path) -> None:
    db = tmp_path / "chats.sqlite3"
    proc = subprocess.Popen([sys.executable, "-c", KILLED, str(db), str(tiny_target),
                             str(REPO / "tests")], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert proc.stdout is not None
        shown = proc.stdout.readline().strip("\n")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    assert shown, "the child saved no checkpoint"
    session = ChatSession(ChatStore.open(db), "tiny")
    (chat,) = session.store.list_chats()
    views = session.open_chat(chat.id)
    turns = session.conversation.turns
    assert [(t.role, t.status) for t in turns] == [("user", "done"), ("assistant", "interrupted")]
    assert turns[1].text == shown
    assert any(isinstance(v, Notice) and v.title == "Interrupted reply" for v in views)


def test_leaving_a_chat_whose_turns_are_unsaved_keeps_them_and_saves_them_later(
        tmp_path: Path, runtime: Runtime) -> None:
    path = tmp_path / "chats.sqlite3"
    store = ChatStore.open(path, busy_timeout=0.05)
    session = ChatSession(store, "tiny")
    engine = ChatEngine(PlainDecoder(runtime.target_ctx))
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    session.send("first chat", SYSTEM, GREEDY)
    run_job(session, engine)
    session.new_chat()  # Ctrl+N while nothing could be saved
    assert session.unsaved == 2
    session.send("second chat", SYSTEM, GREEDY)
    run_job(session, engine)
    assert session.unsaved == 4
    other.execute("ROLLBACK")
    assert session.tick()[-1] == SaveState(0)
    titles = sorted(c.title for c in store.list_chats())
    assert titles == ["first chat", "second chat"]
    assert all(len(store.messages(c.id)) == 2 for c in store.list_chats())


def test_deleting_the_current_chat_drops_it_whole(tmp_path: Path, runtime: Runtime) -> None:
    store = ChatStore.open(tmp_path / "chats.sqlite3")
    session = ChatSession(store, "tiny")
    session.send("to delete", SYSTEM, GREEDY)
    run_job(session, ChatEngine(PlainDecoder(runtime.target_ctx)))
    chat = session.conversation.chat_id
    assert chat is not None
    assert session.delete_chat(chat) == [SaveState(0)]
    assert session.conversation.chat_id is None and store.list_chats() == []
    assert session.tick() == []  # nothing left to retry


REPEATS = "the cat sat on the mat. the cat sat on the mat. the cat sat on the"


def _saved_stats(tmp_path: Path, engine: ChatEngine) -> ReplyStats:
    """One reply through the session, its meta as the chat screen makes it; its saved stats."""
    store = ChatStore.open(tmp_path / "chats.sqlite3")
    session = ChatSession(store, "tiny")
    session.send(REPEATS, SYSTEM, GREEDY.with_(max_tokens=60),
                 meta=ReplyStats(decoder=engine.decoder.name))
    run_job(session, engine)
    saved = store.messages(session.conversation.chat_id or 0)[1].stats
    assert saved is not None
    return saved


def test_a_reply_records_the_drafter_that_drafted_not_ngram(tmp_path: Path,
                                                            runtime: Runtime) -> None:
    """Without a draft model the decoder once called itself "ngram", whatever drafted: a
    Lookahead reply is saved as Lookahead's."""
    engine = ChatEngine(runtime.decoder(gamma=8, drafters=("lookahead",)))
    stats = _saved_stats(tmp_path, engine)
    assert stats.generation.detail.drafted_by_drafter.get("lookahead", 0) > 0  # it drafted
    assert (stats.decoder, stats.drafters) == ("speculative", ("lookahead",))


def test_a_pair_reply_records_both_drafters_in_the_decoders_order(
        tmp_path: Path, tiny_target: Path, tiny_draft: Path) -> None:
    rt = tiny_runtime(tiny_target, tiny_draft)
    try:
        stats = _saved_stats(tmp_path, ChatEngine(rt.decoder(gamma=4, drafters=("ngram", "model"))))
    finally:
        rt.close()
    drafted = stats.generation.detail.drafted_by_drafter
    assert drafted.get("ngram", 0) > 0 and drafted.get("model", 0) > 0  # both drafted
    assert (stats.decoder, stats.drafters) == ("speculative", ("ngram", "model"))
    assert list(drafted) == ["ngram", "model"]  # the figures read back in the same order
