"""The side list of past chats: open one with Enter, rename with F2, delete with Delete."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import Label, ListItem, ListView

from specchat.store import ChatSummary
from specchat.textsafe import safe_text


class ChatItem(ListItem):
    def __init__(self, chat: ChatSummary) -> None:
        super().__init__(Label(safe_text(chat.title), markup=False))
        self.chat = chat


class ChatList(ListView):
    DEFAULT_CSS = """
    ChatList { height: 1fr; background: $surface; }
    ChatList > ListItem { padding: 0 1; }
    /* a long title ends in … rather than mid-word */
    ChatList > ListItem Label { text-wrap: nowrap; text-overflow: ellipsis; width: 100%; }
    ChatList > ListItem.current Label { text-style: bold; }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("f2", "rename", "Rename"),
        Binding("delete", "delete", "Delete"),
    ]

    @dataclass
    class Open(Message):
        chat_id: int

    @dataclass
    class Rename(Message):
        chat_id: int
        title: str

    @dataclass
    class Delete(Message):
        chat_id: int
        title: str

    def show(self, chats: Sequence[ChatSummary], current: int | None) -> None:
        self.clear()
        items = [ChatItem(c) for c in chats]
        if items:
            self.extend(items)
        index = 0 if items else None  # the cursor starts on the newest chat
        for i, item in enumerate(items):
            if item.chat.id == current:
                index = i
                item.add_class("current")
        self.index = index

    def _highlighted_chat(self) -> ChatSummary | None:
        item = self.highlighted_child
        return item.chat if isinstance(item, ChatItem) else None

    def on_list_view_selected(self, event: ListView.Selected) -> None:
        event.stop()
        if isinstance(event.item, ChatItem):
            self.post_message(self.Open(event.item.chat.id))

    def action_rename(self) -> None:
        chat = self._highlighted_chat()
        if chat:
            self.post_message(self.Rename(chat.id, chat.title))

    def action_delete(self) -> None:
        chat = self._highlighted_chat()
        if chat:
            self.post_message(self.Delete(chat.id, chat.title))
