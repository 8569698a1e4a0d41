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
from specchat.store import ChatStore, chat_to_markdown, protected_files, write_export
from specchat.store.repair import repair
from specchat.textsafe import safe_text


def add_parsers(sub: Any) -> None:
    ls = sub.add_parser("chats", help="list saved chats (ids for `specchat export`)")
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
    store = _open(env)
    chats = store.list_chats() if store else []
    if not chats:
        sys.stdout.write("no saved chats yet: run `specchat` to start one\n")
        return 0
    sys.stdout.write(f"{'ID':>5}  {'UPDATED':16}  {'MSGS':>4}  {'PAIR':12}  TITLE\n")
    for c in chats:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(c.updated))
        sys.stdout.write(f"{c.id:>5}  {when:16}  {c.n_messages:>4}  {safe_text(c.pair[:12]):12}  "
                         f"{safe_text(c.title)}\n")
    if store is not None and (problem := store.check()) is not None:
        sys.stderr.write(f"specchat: warning: the chat database {store.path} is damaged "
                         f"({problem[:120]}): `specchat chats --repair` keeps a copy and "
                         "recovers what it can\n")
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
