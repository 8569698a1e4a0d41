"""``specchat chats`` (list saved chats; ``--repair`` a damaged database) and ``specchat export
CHAT_ID`` (a chat as Markdown)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from specchat.cli.common import Env
from specchat.errors import SpecchatError
from specchat.models.choices import choice_for
from specchat.store import ChatStore, chat_to_markdown, protected_files, write_export
from specchat.store.repair import repair
from specchat.store.search import NO_FTS5
from specchat.textsafe import safe_text

SEARCH_LIMIT = 20
PAIR_COLUMN = 28  # wider pair labels are cut (the full label: `specchat export ID`)


def add_parsers(sub: Any) -> None:
    ls = sub.add_parser("chats", help="list saved chats (ids for `specchat export`), or "
                        "search them")
    ls.add_argument("--search", metavar="TEXT",
                    help="the messages of every chat that contain all the words of TEXT (the "
                         "last one also as the start of a word), best match first")
    ls.add_argument("--limit", type=int, default=SEARCH_LIMIT, metavar="N",
                    help=f"at most N search results (default {SEARCH_LIMIT})")
    ls.add_argument("--repair", action="store_true",
                    help="recover a damaged chat database: keep a copy of it, move every "
                         "readable chat and message into a fresh one")
    ls.set_defaults(func=cmd_chats)
    ex = sub.add_parser("export", help="write a saved chat as Markdown")
    ex.add_argument("chat_id", type=int, metavar="CHAT_ID", help="from `specchat chats`")
    ex.add_argument("-o", "--output", type=Path, metavar="FILE",
                    help="write to FILE instead of standard output (never over an existing "
                    "file without --force)")
    ex.add_argument("--force", action="store_true", help="replace FILE if it exists")
    ex.set_defaults(func=cmd_export)


def _open(env: Env) -> ChatStore | None:
    if not env.paths.chats_db.exists():
        return None  # reading must not create a database
    return ChatStore.open(env.paths.chats_db)


def cmd_chats(env: Env, args: argparse.Namespace) -> int:
    if getattr(args, "repair", False):
        report = repair(env.paths.chats_db)
        sys.stdout.write(f"{report.describe()}\n")
        return 0
    if getattr(args, "search", None) is not None:
        return _search(env, args.search, args.limit)
    store = _open(env)
    chats = store.list_chats() if store else []
    if not chats:
        sys.stdout.write("no saved chats yet: run `specchat` to start one\n")
        return 0
    pairs = {c.pair: _pair_cell(env, c.pair) for c in chats}
    width = max(4, *(len(p) for p in pairs.values()))
    sys.stdout.write(f"{'ID':>5}  {'UPDATED':16}  {'MSGS':>4}  {'PAIR':{width}}  TITLE\n")
    for c in chats:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(c.updated))
        sys.stdout.write(f"{c.id:>5}  {when:16}  {c.n_messages:>4}  {pairs[c.pair]:{width}}  "
                         f"{safe_text(c.title)}\n")
    if store is not None and (problem := store.check()) is not None:
        sys.stderr.write(f"specchat: warning: the chat database {store.path} is damaged "
                         f"({problem[:120]}): `specchat chats --repair` keeps a copy and "
                         "recovers what it can\n")
    return 0


def _pair_cell(env: Env, pair: str) -> str:
    """The chat's pair, marked when it cannot be opened as it is: ``qwen-coder (not on disk)``."""
    if not pair:
        return "-"
    shown = safe_text(pair)
    if len(shown) > PAIR_COLUMN:
        shown = shown[: PAIR_COLUMN - 1] + "…"
    try:
        choice = choice_for(env.catalog, env.resolver, pair)
    except SpecchatError:  # a broken catalog: the listing still works, unmarked
        return shown
    return shown if choice.on_disk else f"{shown} ({choice.status})"


def _search(env: Env, text: str, limit: int) -> int:
    if not text.split():
        raise SpecchatError("--search needs a word to look for")
    if limit < 1:
        raise SpecchatError("--limit must be 1 or more")
    store = _open(env)
    if store is None:
        sys.stdout.write("no saved chats yet: run `specchat` to start one\n")
        return 0
    hits, fts = store.search(text, limit)
    if not fts:
        sys.stderr.write(f"specchat: note: {NO_FTS5}\n")
    if not hits:
        sys.stdout.write(f"no message contains {safe_text(text)!r}\n")
        return 0
    sys.stdout.write(f"{'ID':>5}  {'FROM':9}  {'CHAT':24}  TEXT\n")
    for h in hits:
        title = safe_text(h.chat_title)
        title = title if len(title) <= 24 else title[:23] + "…"
        who = "you" if h.role == "user" else h.role
        sys.stdout.write(f"{h.chat_id:>5}  {who:9}  {title:24}  {safe_text(h.snippet)}\n")
    more = " (more with --limit)" if len(hits) == limit else ""
    sys.stdout.write(f"{len(hits)} message{'s' if len(hits) != 1 else ''}{more}; "
                     "`specchat export ID` shows a whole chat\n")
    return 0


def cmd_export(env: Env, args: argparse.Namespace) -> int:
    store = _open(env)
    if store is None:
        raise SpecchatError(f"no chat with id {args.chat_id}: no chats saved yet")
    chat = store.get_chat(args.chat_id)
    text = chat_to_markdown(chat, store.thread(chat.id))
    if args.output is None:
        sys.stdout.write(safe_text(text))  # a file keeps the exact text; a terminal must not obey it
        return 0
    written = write_export(args.output, text, force=args.force,
                           protected=protected_files(env.paths))
    sys.stderr.write(f"wrote {written}\n")
    return 0
