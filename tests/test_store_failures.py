"""The chat store when SQLite fails: disk full, locked, damaged, read-only, two instances.

Real SQLite files throughout. Disk full comes from ``PRAGMA max_page_count`` (deterministic
SQLITE_FULL) and, where this process may mount one, a 1 MB tmpfs filled up for real.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from specchat.errors import StoreError
from specchat.store import ChatStore
from specchat.store.ownership import LEASE_S
from specchat.store.repair import open_for_app, repair
from specchat.store.schema import MIGRATIONS, SCHEMA_VERSION, migrate, user_version

REPO = Path(__file__).resolve().parent.parent


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _fill(store: ChatStore, chats: int = 3, per_chat: int = 40, size: int = 600) -> list[int]:
    ids = []
    for i in range(chats):
        chat = store.create_chat(f"chat {i}")
        for j in range(per_chat):
            store.add_message(chat, "user" if j % 2 == 0 else "assistant",
                              f"{i}-{j} " + "w" * size)
        ids.append(chat)
    return ids


# --- disk full ------------------------------------------------------------------------------


def test_disk_full_is_a_store_error_and_the_database_stays_whole(tmp_path: Path) -> None:
    store = ChatStore.open(tmp_path / "chats.sqlite3")
    chat = store.create_chat("full")
    store.add_message(chat, "user", "kept")
    pages = store.conn.execute("PRAGMA page_count").fetchone()[0]
    store.conn.execute(f"PRAGMA max_page_count = {pages}")
    with pytest.raises(StoreError) as err:
        store.add_message(chat, "assistant", "x" * 200_000)
    assert err.value.kind == "full"
    assert "disk is full" in str(err.value)
    assert [m.content for m in store.messages(chat)] == ["kept"]  # nothing half-written
    store.conn.execute("PRAGMA max_page_count = 1073741823")  # space again: the retry works
    store.add_message(chat, "assistant", "x" * 200_000)
    assert len(store.messages(chat)) == 2


@pytest.fixture
def tiny_tmpfs(tmp_path: Path):  # type: ignore[no-untyped-def]
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)],
                       capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_really_full_disk_gives_a_store_error_not_a_crash(tiny_tmpfs: Path) -> None:
    store = ChatStore.open(tiny_tmpfs / "chats.sqlite3")
    chat = store.create_chat("on a tiny disk")
    store.add_message(chat, "user", "before")
    st = os.statvfs(tiny_tmpfs)  # what is left after the ballast: less than the replies
    (tiny_tmpfs / "ballast").write_bytes(b"\0" * max(0, st.f_bavail * st.f_frsize - 40_000))
    with pytest.raises(StoreError) as err:
        for _ in range(20):
            store.add_message(chat, "assistant", "y" * 50_000)
    assert err.value.kind == "full"
    (tiny_tmpfs / "ballast").unlink()
    assert store.messages(chat)[0].content == "before"
    store.add_message(chat, "assistant", "after")
    assert store.messages(chat)[-1].content == "after"


# --- locked ---------------------------------------------------------------------------------


def test_a_write_lock_held_elsewhere_fails_fast_as_locked(tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    store = ChatStore.open(path, busy_timeout=0.05)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    with pytest.raises(StoreError) as err:
        store.create_chat("first message")
    assert err.value.kind == "locked" and "busy" in str(err.value)
    other.execute("ROLLBACK")
    assert store.create_chat("first message") > 0


# --- damaged --------------------------------------------------------------------------------


def _damage_a_messages_page(path: Path) -> None:
    """Overwrite one leaf page of the messages table (not its root) with garbage."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'messages'").fetchone()[0]
    conn.close()
    with open(path, "r+b") as f:
        f.seek((root - 1) * page_size)
        header = f.read(12)
        assert header[0] == 0x05, "the messages table should span several pages"
        child = int.from_bytes(header[8:12], "big")  # the right-most child, a leaf
        f.seek((child - 1) * page_size)
        f.write(b"\xde\xad" * (page_size // 2))


def test_a_damaged_page_is_a_store_error_and_repair_recovers_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    store = ChatStore.open(path)
    ids = _fill(store)
    store.close()
    _damage_a_messages_page(path)
    store = ChatStore.open(path)
    with pytest.raises(StoreError) as err:
        for chat in ids:
            store.messages(chat)
    assert err.value.kind == "corrupt" and "--repair" in str(err.value)
    assert store.check() is not None
    store.close()
    report = repair(path, clock=Clock())
    assert report.kept_as.exists() and report.kept_as.read_bytes()[:15] == b"SQLite format 3"
    assert report.chats == 3 and 60 <= report.messages < 120 and report.unreadable > 0
    fresh = ChatStore.open(path)
    assert fresh.check() is None
    assert sum(len(fresh.messages(c)) for c in ids) == report.messages
    assert [c.title for c in fresh.list_chats()] == ["chat 2", "chat 1", "chat 0"]
    assert "damaged file is kept as" in report.describe()


def test_the_app_starts_on_a_repaired_database_with_a_notice(tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    store = ChatStore.open(path)
    _fill(store)
    store.close()
    _damage_a_messages_page(path)
    store, notice = open_for_app(path)
    assert notice is not None and "damaged" in notice and "kept as" in notice
    assert store.check() is None and len(store.list_chats()) == 3
    store.close()


def test_a_file_that_is_no_database_is_kept_and_the_app_starts_fresh(tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    path.write_bytes(b"not sqlite at all " * 500)
    store, notice = open_for_app(path)
    assert notice is not None and "kept as" in notice
    assert store.list_chats() == []
    store.create_chat("new")
    kept = list(tmp_path.glob("chats.sqlite3.damaged-*"))
    assert kept and kept[0].read_bytes().startswith(b"not sqlite")


# --- read-only ------------------------------------------------------------------------------


def test_read_only_databases_read_and_refuse_writes_with_a_kind(tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    rw = ChatStore.open(path)
    chat = rw.create_chat("old")
    rw.add_message(chat, "user", "hi")
    rw.close()
    ro = ChatStore.open(path, read_only=True)
    assert [m.content for m in ro.messages(chat)] == ["hi"]
    with pytest.raises(StoreError) as err:
        ro.add_message(chat, "user", "more")
    assert err.value.kind == "readonly"
    ro.close()
    # SQLite's own refusal maps to the same kind.
    rw = ChatStore.open(path)
    rw.conn.execute("PRAGMA query_only = 1")
    with pytest.raises(StoreError) as err:
        rw.add_message(chat, "user", "more")
    assert err.value.kind == "readonly"


# --- two instances --------------------------------------------------------------------------


def test_a_chat_has_one_writer_and_a_gone_owner_lets_go(tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    clock = Clock()
    a, b = ChatStore.open(path, clock=clock), ChatStore.open(path, clock=clock)
    chat = a.create_chat("shared")  # creating owns it
    a.add_message(chat, "user", "from A")
    owner = b.claim(chat)
    assert owner is not None and owner.pid == os.getpid()
    with pytest.raises(StoreError) as err:
        b.add_message(chat, "user", "from B")
    assert err.value.kind == "owned" and "open in another specchat" in str(err.value)
    a.renew()
    clock.now += LEASE_S / 2
    assert b.claim(chat) is not None  # the heartbeat is recent
    clock.now += LEASE_S  # A stopped renewing (e.g. it hung)
    assert b.claim(chat) is None
    b.add_message(chat, "user", "from B")
    with pytest.raises(StoreError, match="open in another specchat"):
        a.add_message(chat, "assistant", "late A")
    b.close()  # closing releases
    assert a.claim(chat) is None
    assert [m.content for m in a.messages(chat)] == ["from A", "from B"]


def test_an_owner_whose_process_died_does_not_count(tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    code = ("import sys; from pathlib import Path; from specchat.store import ChatStore\n"
            "s = ChatStore.open(Path(sys.argv[1])); print(s.create_chat('theirs'))\n"
            "import os; os._exit(0)\n")  # no close(): the owner row stays behind
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                         text=True, check=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    chat = int(out.stdout)
    mine = ChatStore.open(path)
    assert mine.claim(chat) is None


# --- the schema step ------------------------------------------------------------------------


def test_a_version_1_database_converts_and_keeps_every_row(tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    conn = sqlite3.connect(path, isolation_level=None)
    migrate(conn, MIGRATIONS[:1])
    conn.execute("INSERT INTO chats (id, title, pair, created, updated) VALUES (7,'t','demo',1,2)")
    conn.execute("INSERT INTO messages (chat_id, seq, role, content, fates, stats, status, "
                 "created) VALUES (7,0,'user','hi',NULL,NULL,'done',1), "
                 "(7,1,'assistant','yo','{}','{\"generated_tokens\": 3, \"decoder\": \"plain\"}',"
                 "'cancelled',2)")
    conn.close()
    store = ChatStore.open(path)
    assert user_version(store.conn) == SCHEMA_VERSION
    msgs = store.messages(7)
    assert [(m.content, m.status) for m in msgs] == [("hi", "done"), ("yo", "cancelled")]
    assert msgs[0].stats is None and msgs[1].stats is not None
    assert (msgs[1].stats.decoder, msgs[1].stats.generation.generated_tokens) == ("plain", 3)
    mid = store.add_message(7, "assistant", "part", status="interrupted")
    store.update_message(mid, "partial reply", status="interrupted")
    assert store.messages(7)[-1].content == "partial reply"


def test_a_database_on_a_read_only_file_system_opens_read_only_with_a_notice(
        tiny_tmpfs: Path) -> None:
    path = tiny_tmpfs / "chats.sqlite3"
    store = ChatStore.open(path)
    chat = store.create_chat("kept")
    store.add_message(chat, "user", "hello")
    store.close()
    r = subprocess.run(["mount", "-o", "remount,ro", str(tiny_tmpfs)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot remount read-only: {r.stderr.decode().strip()}")
    store, notice = open_for_app(path)
    assert notice is not None and "opened read-only" in notice and "not saved" in notice
    assert [m.content for m in store.messages(chat)] == ["hello"]
    with pytest.raises(StoreError) as err:
        store.add_message(chat, "user", "more")
    assert err.value.kind == "readonly"
    store.close()


def test_repair_refuses_while_a_running_specchat_holds_a_chat(tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    code = ("import sys, time; from pathlib import Path; from specchat.store import ChatStore\n"
            "s = ChatStore.open(Path(sys.argv[1])); s.create_chat('open'); print('ready', "
            "flush=True); time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        with pytest.raises(StoreError, match="in use by a running specchat"):
            repair(path)
    finally:
        proc.kill()
        proc.wait(10)
    assert repair(path).chats == 1  # its owner is gone: now it may
