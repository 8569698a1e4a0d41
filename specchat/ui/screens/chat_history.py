"""Past chats on the chat screen: the side list, opening, renaming, deleting, exporting."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.widgets import Static

from specchat.errors import SpecchatError
from specchat.store import chat_to_markdown, export_filename, unused_path, write_export
from specchat.ui.conversation import Conversation
from specchat.ui.screens.dialogs import ConfirmDialog, PromptDialog
from specchat.ui.widgets.chat_list import ChatList

if TYPE_CHECKING:
    from specchat.ui.screens.chat import ChatScreen

    _Base = ChatScreen
else:
    _Base = object


class ChatHistoryMixin(_Base):
    def refresh_chat_list(self) -> None:
        try:
            chats = self.services.store.list_chats()
        except SpecchatError as e:
            self.notify(str(e), title="Chat history", severity="error", markup=False)
            return
        self.query_one(ChatList).show(chats, self.conversation.chat_id)

    # Handlers by name, not @on: the decorator only registers on MessagePump classes.
    def on_chat_list_open(self, msg: ChatList.Open) -> None:
        if msg.chat_id != self.conversation.chat_id:
            self.when_idle(lambda: self.open_chat(msg.chat_id))

    def open_chat(self, chat_id: int) -> None:
        try:
            conversation = Conversation.load(self.services.store, chat_id)
        except SpecchatError as e:
            self.notify(str(e), title="Cannot open the chat", severity="error", markup=False)
            return
        self.show_conversation(conversation)

    # --- rename -----------------------------------------------------------------------------

    def on_chat_list_rename(self, msg: ChatList.Rename) -> None:
        self._ask_rename(msg.chat_id, msg.title)

    def action_rename_chat(self) -> None:
        if self.conversation.chat_id is None:
            self.notify("This chat is not saved yet: send a message first.", markup=False)
            return
        self._ask_rename(self.conversation.chat_id, self.conversation.title)

    def _ask_rename(self, chat_id: int, title: str) -> None:
        def done(new_title: str | None) -> None:
            if not new_title:
                return
            try:
                self.services.store.rename_chat(chat_id, new_title)
            except SpecchatError as e:
                self.notify(str(e), severity="error", markup=False)
                return
            if chat_id == self.conversation.chat_id:
                self.conversation.title = " ".join(new_title.split())
                self.query_one("#topbar", Static).update(self._topbar())
            self.refresh_chat_list()

        self.app.push_screen(PromptDialog("Rename the chat", title), done)

    # --- delete -----------------------------------------------------------------------------

    def on_chat_list_delete(self, msg: ChatList.Delete) -> None:
        self._ask_delete(msg.chat_id, msg.title)

    def action_delete_chat(self) -> None:
        if self.conversation.chat_id is not None:
            self._ask_delete(self.conversation.chat_id, self.conversation.title)

    def _ask_delete(self, chat_id: int, title: str) -> None:
        def done(yes: bool | None) -> None:
            if not yes:
                return
            if chat_id == self.conversation.chat_id:
                self.when_idle(lambda: self._delete(chat_id, current=True))
            else:
                self._delete(chat_id, current=False)

        self.app.push_screen(ConfirmDialog(f"Delete “{title}” and all its messages?"), done)

    def _delete(self, chat_id: int, current: bool) -> None:
        try:
            self.services.store.delete_chat(chat_id)
        except SpecchatError as e:
            self.notify(str(e), severity="error", markup=False)
            return
        if current:
            self.show_conversation(Conversation())
        else:
            self.refresh_chat_list()
        self.notify("Chat deleted.", timeout=3, markup=False)

    # --- export -----------------------------------------------------------------------------

    def action_export(self) -> None:
        chat_id = self.conversation.chat_id
        if chat_id is None:
            self.notify("Nothing to export yet: send a message first.", markup=False)
            return
        try:
            store = self.services.store
            chat = store.get_chat(chat_id)
            path = write_export(unused_path(self.services.export_dir / export_filename(chat)),
                                chat_to_markdown(chat, store.messages(chat_id)))  # never over a file
        except (SpecchatError, OSError) as e:
            self.notify(f"Export failed: {e}", severity="error", timeout=10, markup=False)
            return
        self.notify(f"Saved {path}", title="Exported to Markdown", timeout=8, markup=False)
