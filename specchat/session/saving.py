"""How a chat session saves: :class:`SavingSession`, the base of
:class:`~specchat.session.controller.ChatSession` that writes its turns to the store.

Saving never loses a turn: a write that fails (disk full, locked, read-only...) leaves the
turn in memory with ``saved`` false, says so once (a notice, and ``SaveState``), and is
retried in order on the next write (:meth:`SavingSession.flush`) and on ``tick()`` (the
screen's timer), which also renews this instance's ownership of the chat and takes a read-only
chat over once the other specchat has let go of it. Chats left with turns still unsaved (the
backlog) are written before the one shown. On quitting, ``rescue(folder)`` writes the chats
with turns still unsaved, whole, as Markdown.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path

from specchat.errors import StoreError
from specchat.session.conversation import Conversation, Turn
from specchat.session.views import Notice, SaveState, View
from specchat.store import ChatStore, chat_to_markdown
from specchat.store.ownership import Owner
from specchat.store.records import ChatSummary, StoredMessage

RENEW_S = 30.0  # how often tick() renews the chat's ownership (the store's LEASE_S is 120)


class SavingSession:
    # Set by ChatSession.__init__.
    store: ChatStore
    pair_label: str  # the pair a new chat is saved with (and a continued one moves to)
    clock: Callable[[], float]
    conversation: Conversation
    owner: Owner | None  # another specchat writing this chat: read-only here
    _problem: StoreError | None  # the last write failure, until one succeeds
    _backlog: list[Conversation]  # chats left with turns still unsaved
    _last_renew: float

    @property
    def unsaved(self) -> int:
        """Turns in memory only, in this chat and in chats left before they were saved."""
        return sum(1 for c in self._conversations() for t in c.nodes if self._pending(t))

    def unsaved_turns(self) -> list[Turn]:
        """This chat's turns that are in memory only (the screen marks them)."""
        return [t for t in self.conversation.nodes if self._pending(t)]

    def _conversations(self) -> list[Conversation]:
        return [*self._backlog, self.conversation]

    def _pending(self, turn: Turn) -> bool:
        if turn.saved:
            return False
        # A reply with no text yet has nothing to keep (a cancelled empty one is kept).
        return (bool(turn.text) or turn.role in ("user", "tool") or turn.status == "cancelled"
                or turn.tool is not None)

    def flush(self) -> list[View]:
        """Write what is not saved yet, in order; stop at the first failure (kept, retried)."""
        before = self._problem
        current = False
        try:
            for conv in list(self._backlog):
                self._write_all(conv)
                self._backlog.remove(conv)
                if conv.chat_id is not None and conv.chat_id != self.conversation.chat_id:
                    with contextlib.suppress(StoreError):
                        self.store.release(conv.chat_id)
            if self.owner is None:
                current = True
                self._write_all(self.conversation)
        except StoreError as e:
            self._problem = e
            views: list[View] = []
            if before is None or before.kind != e.kind:
                views.append(Notice(f"{e}. Kept on screen; saving again every few seconds.",
                                    "error", "Not saved"))
            if e.kind == "owned" and current and self.conversation.chat_id is not None:
                with contextlib.suppress(StoreError):  # another specchat took this chat over
                    self.owner = self.store.owner_of(self.conversation.chat_id)
            return [*views, self._save_state()]
        self._problem = None
        views = []
        if before is not None:
            views.append(Notice("Everything is saved again.", "information", "Saved"))
        return [*views, self._save_state()]

    def _write_all(self, c: Conversation) -> None:
        for turn in c.nodes:
            if self._pending(turn):
                self._write(c, turn)

    def _write(self, c: Conversation, turn: Turn) -> None:
        if c.chat_id is None:
            c.chat_id = self.store.create_chat(c.title, self.pair_label, preset=c.preset,
                                               system_prompt=c.system_prompt,
                                               reply_format=c.reply_format, tools=c.tools)
            c.pair = self.pair_label
        elif turn.role == "user" and c.pair != self.pair_label:
            # The chat goes on with another pair: the list says which one it is on now.
            self.store.set_pair(c.chat_id, self.pair_label)
            c.pair = self.pair_label
        parent = turn.parent
        while parent is not None and parent.message_id is None and not self._pending(parent):
            parent = parent.parent  # a turn never written (a failed empty reply): skip it
        if parent is not None and parent.message_id is None:
            self._write(c, parent)  # (nodes are in order: only a safety net)
        parent_id = parent.message_id if parent is not None else None
        fates = turn.trace.encode() if turn.role == "assistant" else None
        if turn.message_id is None:
            turn.message_id = self.store.add_message(c.chat_id, turn.role, turn.text,
                                                     fates=fates, stats=turn.stats,
                                                     status=turn.status, parent_id=parent_id,
                                                     active=turn.active, tool=turn.tool)
        else:
            self.store.update_message(turn.message_id, turn.text, fates=fates,
                                      stats=turn.stats, status=turn.status,
                                      parent_id=parent_id, active=turn.active, tool=turn.tool)
        turn.saved = True

    def _save_state(self) -> SaveState:
        return SaveState(self.unsaved)

    def tick(self) -> list[View]:
        """The screen's timer: renew this chat's ownership, retry what is unsaved, and take a
        read-only chat over once the other specchat has let go of it."""
        views: list[View] = []
        if self.owner is not None and self.conversation.chat_id is not None:
            with contextlib.suppress(StoreError):
                self.owner = self.store.claim(self.conversation.chat_id)
            if self.owner is None:
                views.append(Notice("The other specchat let go of this chat: you can write "
                                    "in it now.", title="Chat"))
        if self.clock() - self._last_renew >= RENEW_S:
            self._last_renew = self.clock()
            with contextlib.suppress(StoreError):  # the next write says what is wrong
                self.store.renew()
        return views + (self.flush() if self.unsaved or views else [])

    def rescue(self, folder: Path) -> Path | None:
        """On quitting with turns still unsaved: those chats, whole, as Markdown in ``folder``."""
        if not self.unsaved:
            return None
        now = time.time()
        parts = []
        for c in self._conversations():
            if not any(self._pending(t) for t in c.nodes):
                continue
            rows = [StoredMessage(0, c.chat_id or 0, i, t.role, t.text, None, t.stats,
                                  t.status, now, tool=t.tool) for i, t in enumerate(c.turns)]
            chat = ChatSummary(c.chat_id or 0, c.title, self.pair_label, now, now, len(rows))
            parts.append(chat_to_markdown(chat, rows))
        path = folder / time.strftime("unsaved-chat-%Y%m%d-%H%M%S.md")
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path.write_text("\n\n".join(parts), encoding="utf-8")
        except OSError:
            return None
        return path
