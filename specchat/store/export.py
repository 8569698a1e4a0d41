"""A chat as Markdown: a title, where it ran, then each message under its speaker."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence

from specchat.store.chats import ChatSummary, StoredMessage

SPEAKERS = {"user": "You", "assistant": "Assistant", "system": "System"}


def chat_to_markdown(chat: ChatSummary, messages: Sequence[StoredMessage]) -> str:
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(chat.created))
    head = [f"# {chat.title}", "", f"*specchat chat {chat.id} · {when}"
            + (f" · {chat.pair}" if chat.pair else "") + "*", ""]
    body: list[str] = []
    for m in messages:
        label = SPEAKERS.get(m.role, m.role)
        note = _note(m)
        body += [f"## {label}" + (f" ({note})" if note else ""), "", m.content.rstrip(), ""]
    return "\n".join(head + body).rstrip() + "\n"


def _note(m: StoredMessage) -> str:
    parts = []
    if m.status != "done":
        parts.append(m.status)
    s = m.stats.generation if m.stats else None
    if m.role == "assistant" and s is not None and s.generated_tokens:
        parts.append(f"{s.generated_tokens} tokens")
        if s.decode_tps:
            parts.append(f"{s.decode_tps:.1f} tok/s")
        if s.alpha is not None:
            parts.append(f"α {s.alpha:.2f}")
    return ", ".join(parts)


def export_filename(chat: ChatSummary) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", chat.title.lower()).strip("-")[:40] or "chat"
    return f"specchat-{chat.id}-{slug}.md"
