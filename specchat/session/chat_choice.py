"""Which chat a session shows, and that chat's settings: :class:`ChatChoice`, a base of
:class:`~specchat.session.controller.ChatSession`.

``new_chat()`` starts an empty chat (saved once its first message is), ``open_chat(id)`` shows a
saved one and claims it, read-only when another specchat owns it; ``delete_chat``, ``rename``,
and the chat's system prompt, reply format and tools (``set_prompt``, ``set_format``,
``set_tools``: kept in memory even when saving them fails). A chat left with turns still unsaved
joins the backlog that :class:`~specchat.session.saving.SavingSession` writes.
"""

from __future__ import annotations

import contextlib

from specchat.errors import StoreError
from specchat.session.conversation import Conversation
from specchat.session.saving import SavingSession
from specchat.session.views import Notice, View
from specchat.store import ReplyFormat
from specchat.store.chat_tools import ChatTools
from specchat.store.records import ChatSummary


class ChatChoice(SavingSession):
    @property
    def read_only_reason(self) -> str | None:
        if self.owner is None:
            return None
        return (f"This chat is open in another specchat ({self.owner.describe()}): it is "
                "read-only here. Ctrl+N starts a new chat.")

    def new_chat(self) -> list[View]:
        """An empty chat (saved once its first message is)."""
        self._leave()
        self.conversation = Conversation()
        return [self._save_state()]

    def open_chat(self, chat_id: int) -> list[View]:
        """Show a saved chat; raises StoreError if it cannot be read (nothing changes then)."""
        conversation = Conversation.load(self.store, chat_id)
        self._leave()
        self.conversation = conversation
        try:
            self.owner = self.store.claim(chat_id)
        except StoreError:
            self.owner = None  # cannot tell now: each write checks the owner again anyway
        views: list[View] = [self._save_state()]
        if self.owner is not None:
            views.append(Notice(self.read_only_reason or "", "warning", "Read-only"))
        if any(t.status == "interrupted" for t in conversation.turns):
            views.append(Notice("A reply here was interrupted (specchat was closed while it "
                                "was being written); what was shown is kept.",
                                title="Interrupted reply"))
        return views

    def _leave(self) -> None:
        c = self.conversation
        if self.owner is None and any(self._pending(t) for t in c.nodes):
            self._backlog.append(c)  # still saved in order, by flush(), after this
        elif c.chat_id is not None and self.owner is None:
            with contextlib.suppress(StoreError):  # the row goes stale on its own
                self.store.release(c.chat_id)
        self.owner = None

    def delete_chat(self, chat_id: int) -> list[View]:
        """Delete a saved chat; the current one is replaced by an empty chat. Its unsaved turns
        go with it (the user asked for that)."""
        self.store.delete_chat(chat_id)
        self._backlog = [c for c in self._backlog if c.chat_id != chat_id]
        if chat_id != self.conversation.chat_id:
            return [self._save_state()]
        self.conversation, self.owner = Conversation(), None
        return [self._save_state()]

    def rename(self, title: str) -> None:
        chat_id = self.conversation.chat_id
        if chat_id is None:
            raise StoreError("this chat is not saved yet: send a message first")
        self.store.rename_chat(chat_id, title)
        self.conversation.title = " ".join(title.split())

    def set_prompt(self, preset: str | None, system_prompt: str | None) -> None:
        """This chat's system prompt from now on (None, None: the settings' one). Kept in
        memory even if saving it fails (StoreError); a chat not saved yet gets it when its
        first message is."""
        c = self.conversation
        c.preset, c.system_prompt = preset, system_prompt
        if c.chat_id is not None:
            self.store.set_prompt(c.chat_id, preset, system_prompt)

    def set_format(self, reply_format: ReplyFormat) -> None:
        """What this chat's replies follow from now on (the next reply on; one in flight keeps
        its own). Checked by the caller (``reply_format.compile_format``, in a worker); kept in
        memory even if saving it fails (StoreError); a chat not saved yet gets it when its
        first message is."""
        c = self.conversation
        c.reply_format = reply_format
        if c.chat_id is not None:
            self.store.set_format(c.chat_id, reply_format)

    def set_tools(self, tools: ChatTools) -> None:
        """Which servers' tools this chat offers from now on (the next reply on), and what it
        always allows. Kept in memory even if saving it fails (StoreError); a chat not saved
        yet gets it when its first message is."""
        c = self.conversation
        c.tools = tools
        if c.chat_id is not None:
            self.store.set_tools(c.chat_id, tools)

    def summaries(self) -> list[ChatSummary]:
        return self.store.list_chats()

    def close(self) -> None:
        self._leave()
