"""A chat as data: its turns, their token fates and stats, and how they map to the engine's
messages and to the store's rows. Only :class:`~specchat.session.controller.ChatSession`
changes a turn; widgets read them. No Textual here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from specchat.engine.chat_template import Message
from specchat.store import ChatStore, FateTrace, ReplyStats, StoredMessage


@dataclass
class Turn:
    role: str  # "user" | "assistant"
    trace: FateTrace
    stats: ReplyStats | None = None
    status: str = "done"  # done | cancelled | error | interrupted (still streaming, or killed)
    message_id: int | None = None  # its row, once written
    saved: bool = False  # the row holds what the turn holds now

    @property
    def text(self) -> str:
        return self.trace.text

    @classmethod
    def user(cls, text: str) -> Turn:
        return cls("user", FateTrace.plain(text))

    @classmethod
    def from_stored(cls, m: StoredMessage) -> Turn:
        trace = FateTrace.decode(m.content, m.fates) if m.role == "assistant" else \
            FateTrace.plain(m.content)
        return cls(m.role, trace, m.stats, m.status, m.id, saved=True)


@dataclass
class Conversation:
    chat_id: int | None = None  # None until the first message is saved
    title: str = "New chat"
    turns: list[Turn] = field(default_factory=list)
    pair: str = ""  # the pair (or model) the chat was last continued with, as saved
    preset: str | None = None  # the system-prompt preset chosen for this chat, by name
    system_prompt: str | None = None  # this chat's own system prompt (None: the settings')

    @classmethod
    def load(cls, store: ChatStore, chat_id: int) -> Conversation:
        chat = store.get_chat(chat_id)
        turns = [Turn.from_stored(m) for m in store.messages(chat_id) if m.role != "system"]
        return cls(chat.id, chat.title, turns, chat.pair, chat.preset, chat.system_prompt)

    def engine_messages(self, system_prompt: str) -> list[Message]:
        """The conversation as the model sees it. A stopped reply stays in (the user saw it);
        a reply that failed with no text is left out."""
        msgs = [Message("system", system_prompt)] if system_prompt.strip() else []
        for t in self.turns:
            if t.role == "assistant" and not t.text.strip():
                continue
            msgs.append(Message(t.role, t.text))
        return msgs

    def assistant_stats(self) -> Sequence[ReplyStats]:
        return [t.stats for t in self.turns if t.role == "assistant" and t.stats]
