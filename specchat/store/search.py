"""Search across every chat's messages: SQLite FTS5 when this Python's SQLite has it, else a
plain substring search (slower, unranked; said to the user once).

The index is an external-content FTS5 table over ``messages.content``, kept in step by three
triggers (insert, delete, update of the text), so every write path — the app, the repair, a
later migration's copy — keeps it true without knowing it exists. :func:`ensure_index` (run
by the schema migration and on every writable open) builds it where it is missing, rebuilds it
where its triggers were lost (a migration that copies ``messages`` drops them), and removes
the triggers where FTS5 is gone (they would make every write fail with "no such module").
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

FTS_TABLE = "messages_fts"
TRIGGERS = {
    "messages_fts_insert": f"""
        CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
            INSERT INTO {FTS_TABLE} (rowid, content) VALUES (new.id, new.content);
        END""",
    "messages_fts_delete": f"""
        CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
            INSERT INTO {FTS_TABLE} ({FTS_TABLE}, rowid, content)
                VALUES ('delete', old.id, old.content);
        END""",
    "messages_fts_update": f"""
        CREATE TRIGGER messages_fts_update AFTER UPDATE OF content ON messages BEGIN
            INSERT INTO {FTS_TABLE} ({FTS_TABLE}, rowid, content)
                VALUES ('delete', old.id, old.content);
            INSERT INTO {FTS_TABLE} (rowid, content) VALUES (new.id, new.content);
        END""",
}
NO_FTS5 = ("this Python's SQLite has no full-text search (FTS5): searching by plain "
           "substring instead (slower, not ranked)")
# Marks around a hit inside a snippet: control characters a message's text never holds after
# safe_text, so they cannot be confused with it.
_OPEN, _CLOSE = "\x02", "\x03"
SNIPPET_TOKENS = 14  # words of context FTS5 keeps around the hits
LIKE_CONTEXT = 40  # characters either side of the first hit in the fallback's snippet


@dataclass(frozen=True)
class SearchHit:
    chat_id: int
    chat_title: str
    pair: str
    message_id: int
    seq: int
    role: str
    snippet: str  # the text around the hits, on one line
    marks: tuple[tuple[int, int], ...]  # (start, end) of each hit inside ``snippet``
    created: float


def fts5_available(conn: sqlite3.Connection) -> bool:
    """Whether this connection's SQLite can make FTS5 tables (asked, not read from the compile
    options: FTS5 may also come as a loaded extension)."""
    try:
        conn.execute("CREATE VIRTUAL TABLE temp.specchat_fts5_probe USING fts5(x)")
    except sqlite3.OperationalError:
        return False
    conn.execute("DROP TABLE temp.specchat_fts5_probe")
    return True


def _names(conn: sqlite3.Connection, kind: str) -> set[str]:
    return {str(r[0]) for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = ?", (kind,))}


def index_ready(conn: sqlite3.Connection) -> bool:
    """The FTS table and all its triggers are there (else searches use the fallback)."""
    return FTS_TABLE in _names(conn, "table") and set(TRIGGERS) <= _names(conn, "trigger")


def index_needs_work(conn: sqlite3.Connection) -> bool:
    """Whether :func:`ensure_index` would change anything (read only: an open need not take
    the write lock when all is well)."""
    if fts5_available(conn):
        return not index_ready(conn)
    return bool(_names(conn, "trigger") & set(TRIGGERS))


def ensure_index(conn: sqlite3.Connection) -> bool:
    """Make the index whole (see the module's doc); whether FTS5 search is on. The caller
    holds the write transaction (a migration step, or the open's)."""
    triggers = _names(conn, "trigger") & set(TRIGGERS)
    if not fts5_available(conn):
        for name in triggers:  # else every write would fail: "no such module: fts5"
            conn.execute(f"DROP TRIGGER {name}")
        return False
    has_table = FTS_TABLE in _names(conn, "table")
    if has_table and triggers == set(TRIGGERS):
        return True
    for name in triggers:
        conn.execute(f"DROP TRIGGER {name}")
    if not has_table:
        conn.execute(f"CREATE VIRTUAL TABLE {FTS_TABLE} USING fts5(content, content='messages', "
                     "content_rowid='id', tokenize='unicode61 remove_diacritics 2')")
    for sql in TRIGGERS.values():
        conn.execute(sql)
    # Messages written while the triggers were missing: index them all again (external
    # content makes this a re-read of messages, nothing is lost).
    conn.execute(f"INSERT INTO {FTS_TABLE} ({FTS_TABLE}) VALUES ('rebuild')")
    return True


def fts_query(text: str) -> str | None:
    """The user's words as an FTS5 query: each one a quoted string (so no word is read as
    syntax: AND, NOT, quotes, colons), all of them required, the last one also as a prefix
    (results while typing). None when there is no word."""
    words = text.split()
    if not words:
        return None
    quoted = ['"' + w.replace('"', '""') + '"' for w in words]
    quoted[-1] += "*"
    return " ".join(quoted)


def split_marks(snippet: str) -> tuple[str, tuple[tuple[int, int], ...]]:
    """A snippet with hit marks → its text on one line, and where the hits are."""
    out: list[str] = []
    marks: list[tuple[int, int]] = []
    start: int | None = None
    n = 0
    for ch in snippet:
        if ch == _OPEN:
            start = n
        elif ch == _CLOSE:
            if start is not None and n > start:
                marks.append((start, n))
            start = None
        else:
            if ch in "\r\n\t":
                ch = " "
            out.append(ch)
            n += 1
    return "".join(out), tuple(marks)


def search(conn: sqlite3.Connection, text: str, limit: int = 50) -> tuple[list[SearchHit], bool]:
    """Messages matching every word of ``text``, best first; and whether FTS5 answered (False:
    the substring fallback did, see :data:`NO_FTS5`)."""
    query = fts_query(text)
    if query is None:
        return [], True
    if index_ready(conn):
        rows = conn.execute(
            f"SELECT m.id, m.chat_id, m.seq, m.role, m.created, c.title, c.pair, "
            f"snippet({FTS_TABLE}, 0, ?, ?, '…', ?) AS snip "
            f"FROM {FTS_TABLE} JOIN messages m ON m.id = {FTS_TABLE}.rowid "
            f"JOIN chats c ON c.id = m.chat_id WHERE {FTS_TABLE} MATCH ? "
            f"ORDER BY rank, m.id DESC LIMIT ?",
            (_OPEN, _CLOSE, SNIPPET_TOKENS, query, limit)).fetchall()
        return [_hit(r, *split_marks(str(r[7]))) for r in rows], True
    return _like_search(conn, text.split(), limit), False


def _like_search(conn: sqlite3.Connection, words: list[str], limit: int) -> list[SearchHit]:
    def escaped(w: str) -> str:
        return "%" + w.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"

    where = " AND ".join(["m.content LIKE ? ESCAPE '\\'"] * len(words))
    rows = conn.execute(
        "SELECT m.id, m.chat_id, m.seq, m.role, m.created, c.title, c.pair, m.content "
        f"FROM messages m JOIN chats c ON c.id = m.chat_id WHERE {where} "
        "ORDER BY m.created DESC, m.id DESC LIMIT ?",
        (*[escaped(w) for w in words], limit)).fetchall()
    return [_hit(r, *like_snippet(str(r[7]), words)) for r in rows]


def like_snippet(content: str, words: list[str]) -> tuple[str, tuple[tuple[int, int], ...]]:
    """The fallback's snippet: the text around the first hit, each word's hits marked (LIKE
    matches ASCII letters in any case, so the marks do too)."""
    flat = " ".join(content.split())
    low = flat.lower()
    first = min((i for w in words if (i := low.find(w.lower())) >= 0), default=0)
    start = max(0, first - LIKE_CONTEXT)
    end = min(len(flat), first + LIKE_CONTEXT * 2)
    head, tail = ("…" if start > 0 else ""), ("…" if end < len(flat) else "")
    text = head + flat[start:end] + tail
    low_text = text.lower()
    marks = []
    for w in words:
        lw = w.lower()
        i = low_text.find(lw)
        while i >= 0 and lw:
            marks.append((i, i + len(lw)))
            i = low_text.find(lw, i + len(lw))
    return text, tuple(sorted(marks))


def _hit(r: Any, snippet: str, marks: tuple[tuple[int, int], ...]) -> SearchHit:
    return SearchHit(chat_id=int(r[1]), chat_title=str(r[5]), pair=str(r[6] or ""),
                     message_id=int(r[0]), seq=int(r[2]), role=str(r[3]),
                     snippet=snippet, marks=marks, created=float(r[4]))
