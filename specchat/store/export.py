"""A chat as Markdown: a title, where it ran, then each message under its speaker."""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from specchat.errors import SpecchatError
from specchat.paths import AppPaths
from specchat.store.records import ChatSummary, StoredMessage
from specchat.store.tool_parts import pretty_arguments, prose

SPEAKERS = {"user": "You", "assistant": "Assistant", "system": "System", "tool": "Tool result"}


def chat_to_markdown(chat: ChatSummary, messages: Sequence[StoredMessage]) -> str:
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(chat.created))
    head = [f"# {chat.title}", "", f"*specchat chat {chat.id} · {when}"
            + (f" · {chat.pair}" if chat.pair else "") + "*", ""]
    body: list[str] = []
    for m in messages:
        label = SPEAKERS.get(m.role, m.role)
        note = _note(m)
        if m.role == "tool" and m.tool is not None and m.tool.name:
            label += f": {m.tool.name}"
        body += [f"## {label}" + (f" ({note})" if note else ""), "", *_text(m), ""]
    return "\n".join(head + body).rstrip() + "\n"


def _text(m: StoredMessage) -> list[str]:
    """A message's body: an assistant's words, then each tool call it made (the tool and its
    arguments as JSON); a tool result in a fence of its own (it is untrusted text, and often
    code); anything else as written."""
    part = m.tool
    if m.role == "tool":
        return [fenced(m.content, "text")]
    if part is None or not part.calls:
        return [m.content.rstrip()]
    said = prose(m.content, part)
    out = [said, ""] if said else []
    for call in part.calls:
        out += [f"**Tool call:** `{call.name}`", "", fenced(pretty_arguments(call.arguments), "json"),
                ""]
    return out[:-1]


def fenced(text: str, lang: str) -> str:
    """``text`` in a code fence longer than any run of backticks inside it."""
    runs = re.findall(r"`+", text)
    fence = "`" * max(3, 1 + max((len(r) for r in runs), default=0))
    return f"{fence}{lang}\n{text.rstrip()}\n{fence}"


def _note(m: StoredMessage) -> str:
    parts = []
    if m.status != "done":
        parts.append(m.status)
    if m.role == "tool" and m.tool is not None and m.tool.status:
        parts.append(m.tool.status)
    s = m.stats.generation if m.stats else None
    if m.role == "assistant" and s is not None and s.generated_tokens:
        parts.append(f"{s.generated_tokens} tokens")
        if s.decode_tps:
            parts.append(f"{s.decode_tps:.1f} tok/s decode")
        if s.alpha is not None:
            parts.append(f"α {s.alpha:.2f}")
    return ", ".join(parts)


def export_filename(chat: ChatSummary) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", chat.title.lower()).strip("-")[:40] or "chat"
    return f"specchat-{chat.id}-{slug}.md"


def protected_files(paths: AppPaths) -> tuple[Path, ...]:
    """What an export must never overwrite: the database (with its journal files), the
    settings and the user's catalog."""
    db = paths.chats_db
    return (db, *(db.with_name(db.name + s) for s in ("-wal", "-shm", "-journal")),
            paths.config_file, paths.user_catalog)


def unused_path(path: Path) -> Path:
    """``path``, or ``name-2.md``, ``name-3.md``… when it is taken (the app never overwrites)."""
    n = 1
    candidate = path
    while candidate.exists() or candidate.is_symlink():
        n += 1
        candidate = path.with_name(f"{path.stem}-{n}{path.suffix}")
    return candidate


def write_export(path: Path, text: str, *, force: bool = False,
                 protected: Iterable[Path] = ()) -> Path:
    """Write ``text`` to ``path`` whole or not at all: a temporary file in the same folder,
    then a rename. An existing file is replaced only with ``force``; a protected file (the
    database, the settings), never — also when reached through a link. Returns the path."""
    target = Path(os.path.abspath(path.expanduser()))
    real = target.resolve()
    for p in protected:
        if real == p.resolve() or _same_file(target, p):
            raise SpecchatError(f"will not write the export onto {p}: it is specchat's own "
                                "data; choose another file")
    if target.is_dir():
        raise SpecchatError(f"{target} is a folder: give a file name, e.g. "
                            f"{target / 'chat.md'}")
    exists = target.exists() or target.is_symlink()
    if exists and not force:
        raise SpecchatError(f"{target} already exists: use --force to replace it")
    folder = target.parent
    try:
        fd, tmp_name = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as e:
        raise SpecchatError(f"cannot write in {folder}: {e.strerror or e}") from None
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)  # mkstemp makes 0600; an export is an ordinary file
        if force:
            os.replace(tmp, target)
        else:
            # link() refuses an existing name: a file that appeared since the check survives.
            try:
                os.link(tmp, target)
            except FileExistsError:
                raise SpecchatError(f"{target} already exists: use --force to replace it"
                                    ) from None
            except OSError:  # a filesystem without hard links
                os.replace(tmp, target)
    except OSError as e:
        raise SpecchatError(f"cannot write {target}: {e.strerror or e}") from None
    finally:
        tmp.unlink(missing_ok=True)
    return target


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)  # a hard link to the database is the database
    except OSError:
        return False
