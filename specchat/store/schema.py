"""The chat database's schema and its migrations, versioned with ``PRAGMA user_version``.

Each migration moves the database from version ``i`` to ``i + 1`` inside one transaction, so a
crash mid-upgrade leaves the old version intact. A migration is SQL, or a function of the
connection where rows must be rewritten in Python. A database from a newer specchat is refused
with a message rather than misread.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence

from specchat.errors import StoreError
from specchat.store.search import ensure_index
from specchat.store.stats import upgrade_v1

Migration = str | Callable[[sqlite3.Connection], None]


def _stats_v2(conn: sqlite3.Connection) -> None:
    """The stats JSON of schema 1 (flat, with ad-hoc ``extra`` keys) as stats version 2."""
    rows = conn.execute("SELECT id, stats FROM messages WHERE stats IS NOT NULL").fetchall()
    for row_id, text in rows:
        try:
            new = json.dumps(upgrade_v1(json.loads(text)), ensure_ascii=False)
        except (ValueError, TypeError):
            continue  # a damaged cell stays as it was: unread, but not thrown away
        conn.execute("UPDATE messages SET stats = ? WHERE id = ?", (new, row_id))


def _search_and_prompts(conn: sqlite3.Connection) -> None:
    """Search across chats (an FTS5 index over every message, backfilled here and kept in step
    by triggers: see store/search.py), and what each chat asks of the model: its system-prompt
    preset and the prompt itself (NULL: the app's current one). ``chats.pair`` (since schema 1)
    now follows the pair a chat was last continued with."""
    conn.execute("ALTER TABLE chats ADD COLUMN preset TEXT")
    conn.execute("ALTER TABLE chats ADD COLUMN system_prompt TEXT")
    ensure_index(conn)  # without FTS5 nothing is made: the search falls back to LIKE


def _tool_messages(conn: sqlite3.Connection) -> None:
    """7: tool calls in the chat's tree. ``messages.role`` also takes ``tool`` (a call's
    result, as the model read it), and ``messages.tool`` keeps an assistant message's calls or
    what a tool message answers (store/tool_parts.py). SQLite cannot widen a CHECK in place,
    hence the copy (every row and id kept; the search index's triggers go with the old table
    and are made again). ``chats.tools``: which servers' tools the chat offers and what the
    user always allows there (store/chat_tools.py); NULL, as every chat had: no tools."""
    conn.execute("""
        CREATE TABLE messages_v3 (
            id        INTEGER PRIMARY KEY,
            chat_id   INTEGER NOT NULL REFERENCES chats(id) ON DELETE CASCADE,
            seq       INTEGER NOT NULL,
            role      TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'system', 'tool')),
            content   TEXT NOT NULL,
            fates     TEXT,
            stats     TEXT,
            status    TEXT NOT NULL DEFAULT 'done'
                      CHECK (status IN ('done', 'cancelled', 'error', 'interrupted')),
            created   REAL NOT NULL,
            parent_id INTEGER,
            active    INTEGER NOT NULL DEFAULT 1,
            tool      TEXT,
            UNIQUE (chat_id, seq)
        )""")
    conn.execute("INSERT INTO messages_v3 (id, chat_id, seq, role, content, fates, stats, "
                 "status, created, parent_id, active) SELECT id, chat_id, seq, role, content, "
                 "fates, stats, status, created, parent_id, active FROM messages")
    conn.execute("DROP TABLE messages")
    conn.execute("ALTER TABLE messages_v3 RENAME TO messages")
    conn.execute("CREATE INDEX messages_by_parent ON messages(chat_id, parent_id)")
    conn.execute("ALTER TABLE chats ADD COLUMN tools TEXT")
    ensure_index(conn)


# Index i upgrades version i to version i + 1. Append, never edit.
MIGRATIONS: tuple[Migration, ...] = (
    """
    CREATE TABLE chats (
        id       INTEGER PRIMARY KEY,
        title    TEXT NOT NULL,
        pair     TEXT NOT NULL DEFAULT '',   -- what the chat was started on, for the list
        created  REAL NOT NULL,
        updated  REAL NOT NULL
    );
    CREATE TABLE messages (
        id       INTEGER PRIMARY KEY,
        chat_id  INTEGER NOT NULL REFERENCES chats(id) ON DELETE CASCADE,
        seq      INTEGER NOT NULL,           -- order within the chat
        role     TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'system')),
        content  TEXT NOT NULL,
        fates    TEXT,                       -- FateTrace.encode(); NULL for user messages
        stats    TEXT,                       -- JSON: GenerationStats and decoder settings
        status   TEXT NOT NULL DEFAULT 'done' CHECK (status IN ('done', 'cancelled', 'error')),
        created  REAL NOT NULL,
        UNIQUE (chat_id, seq)
    );
    CREATE INDEX chats_by_update ON chats(updated DESC);
    """,
    _stats_v2,
    # 3: a reply is written while it streams, as 'interrupted' until it ends (so a kill keeps
    # it, marked); SQLite cannot widen a CHECK in place, hence the copy. chat_owners says
    # which running specchat writes a chat, so two instances never interleave its turns.
    """
    CREATE TABLE messages_v2 (
        id       INTEGER PRIMARY KEY,
        chat_id  INTEGER NOT NULL REFERENCES chats(id) ON DELETE CASCADE,
        seq      INTEGER NOT NULL,
        role     TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'system')),
        content  TEXT NOT NULL,
        fates    TEXT,
        stats    TEXT,
        status   TEXT NOT NULL DEFAULT 'done'
                 CHECK (status IN ('done', 'cancelled', 'error', 'interrupted')),
        created  REAL NOT NULL,
        UNIQUE (chat_id, seq)
    );
    INSERT INTO messages_v2 (id, chat_id, seq, role, content, fates, stats, status, created)
        SELECT id, chat_id, seq, role, content, fates, stats, status, created FROM messages;
    DROP TABLE messages;
    ALTER TABLE messages_v2 RENAME TO messages;
    CREATE TABLE chat_owners (
        chat_id  INTEGER PRIMARY KEY REFERENCES chats(id) ON DELETE CASCADE,
        token    TEXT NOT NULL,              -- one per open ChatStore
        host     TEXT NOT NULL,
        pid      INTEGER NOT NULL,
        seen     REAL NOT NULL               -- last heartbeat (time.time())
    );
    """,
    # Branches: a message follows its parent (NULL: the chat's first); messages with the same
    # parent are alternatives (a regenerated reply, an edited message), ``active`` marks the
    # one shown. A plain column, no REFERENCES: the store relinks children itself before it
    # deletes a message. The old linear chats become one chain by seq, every message shown.
    """
    ALTER TABLE messages ADD COLUMN parent_id INTEGER;
    ALTER TABLE messages ADD COLUMN active INTEGER NOT NULL DEFAULT 1;
    UPDATE messages SET parent_id = (
        SELECT p.id FROM messages p WHERE p.chat_id = messages.chat_id AND p.seq < messages.seq
        ORDER BY p.seq DESC LIMIT 1);
    CREATE INDEX messages_by_parent ON messages(chat_id, parent_id);
    """,
    _search_and_prompts,
    # 6: what each chat's replies follow (store/reply_format.py): free text, any JSON object,
    # a JSON schema or a grammar; the schema's or grammar's text itself, not a file's path.
    # Every chat there was replies in free text, as it did.
    """
    ALTER TABLE chats ADD COLUMN format_kind TEXT NOT NULL DEFAULT 'text'
        CHECK (format_kind IN ('text', 'json_object', 'json_schema', 'grammar'));
    ALTER TABLE chats ADD COLUMN format_source TEXT;
    """,
    _tool_messages,
)

SCHEMA_VERSION = len(MIGRATIONS)


def user_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def migrate(conn: sqlite3.Connection, migrations: Sequence[Migration] = MIGRATIONS,
            where: str = "the chat database") -> int:
    """Bring the database up to ``len(migrations)``; return the version it had before."""
    before = user_version(conn)
    if before > len(migrations):
        raise StoreError(f"{where} is schema version {before}, newer than this specchat knows "
                         f"({len(migrations)}): upgrade specchat")
    for version in range(before, len(migrations)):
        try:
            conn.execute("BEGIN IMMEDIATE")
            step = migrations[version]
            if callable(step):
                step(conn)
            else:
                for statement in _statements(step):
                    conn.execute(statement)
            # PRAGMA takes no parameters; the value is our own integer.
            conn.execute(f"PRAGMA user_version = {version + 1}")
            conn.execute("COMMIT")
        except sqlite3.Error as e:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise StoreError(f"{where}: upgrade to schema version {version + 1} failed: {e}") \
                from None
    return before


def _statements(script: str) -> list[str]:
    # executescript() would COMMIT on its own; split so the whole step is one transaction.
    out, buf = [], ""
    for line in script.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            out.append(buf.strip())
            buf = ""
    if buf.strip():
        out.append(buf.strip())
    return [s for s in out if s.strip(" ;\n")]
