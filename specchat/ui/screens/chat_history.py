"""Past chats on the chat screen: the side list, opening, renaming, deleting, exporting.

The side pane (its title and the :class:`ChatList`), which answers what the list posts (open,
rename, delete). It knows the chat screen only through the callbacks it is given, so this
module does not import chat.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from specchat.errors import SpecchatError
from specchat.session.controller import ChatSession
from specchat.store import chat_to_markdown, export_filename, unused_path, write_export
from specchat.textsafe import safe_text
from specchat.ui.screens.dialogs import ConfirmDialog, PromptDialog
from specchat.ui.services import AppServices
from specchat.ui.widgets.chat_input import ChatInput
from specchat.ui.widgets.chat_list import ChatList


class ChatHistory(Vertical):
    DEFAULT_CSS = """
    ChatHistory { width: 28; max-width: 35%; height: 1fr; border-right: tall $panel;
                  background: $surface; }
    ChatHistory #sidebar-title { height: auto; padding: 0 1; text-style: bold; }
    """

    def __init__(self, session: ChatSession, services: AppServices,
                 when_idle: Callable[[Callable[[], None]], None],
                 opened: Callable[[list[Any]], None], retitled: Callable[[], None],
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.session = session
        self.services = services
        self.when_idle = when_idle  # run after the reply in flight stops
        self.opened = opened  # the session now shows another chat: redraw (with its views)
        self.retitled = retitled  # the current chat has a new title

    def compose(self) -> ComposeResult:
        yield Static("Chats\n[dim]F2 rename · Del delete[/dim]", id="sidebar-title")
        yield ChatList(id="chat-list")

    def on_chat_list_open(self, msg: ChatList.Open) -> None:
        self.open(msg.chat_id)

    def on_chat_list_rename(self, msg: ChatList.Rename) -> None:
        self.rename(msg.chat_id, msg.title)

    def on_chat_list_delete(self, msg: ChatList.Delete) -> None:
        self.delete(msg.chat_id, msg.title)

    def toggle(self) -> None:
        """Ctrl+L: shown or hidden. Focus moves now (Ctrl+L is a priority key, run before the
        next key is handed on): what is typed right after it then reaches the list, which
        passes it to the message box."""
        self.display = not self.display
        self.screen.set_focus(self.query_one(ChatList) if self.display
                              else self.screen.query_one(ChatInput))

    def _notify(self, text: str, **kw: Any) -> None:
        self.notify(text, markup=False, **kw)

    def show_chats(self) -> None:
        """The list of saved chats, the current one marked."""
        try:
            chats = self.session.summaries()
        except SpecchatError as e:
            self._notify(str(e), title="Chat history", severity="error")
            return
        self.query_one(ChatList).show(chats, self.session.conversation.chat_id)

    def open(self, chat_id: int) -> None:
        if chat_id != self.session.conversation.chat_id:
            self.when_idle(lambda: self.open_now(chat_id))

    def open_now(self, chat_id: int, offer: bool = True) -> None:
        """Show the chat; ``offer``: if it was with another pair, offer that one."""
        try:
            views = self.session.open_chat(chat_id)
        except SpecchatError as e:
            self._notify(str(e), title="Cannot open the chat", severity="error", timeout=10)
            return
        self.opened(views)
        if offer:
            self.offer_pair()

    def offer_pair(self) -> None:
        """The chat was last continued with another pair: offer to switch to it, or say why
        it goes on with the loaded one."""
        c, loaded = self.session.conversation, self.session.pair_label
        if not c.pair or c.pair == loaded or c.chat_id is None:
            return
        choice = self.services.choice_for(c.pair)
        if choice is None:
            return  # cannot tell what it stands for now
        pair, chat_id, now = c.pair, c.chat_id, safe_text(loaded)
        if not choice.on_disk:
            self._notify(f"This chat was with {safe_text(pair)}, which is {choice.status}: it "
                         f"goes on with {now}. F3 pairs models; F8 switches.",
                         title="Another pair", timeout=10)
            return

        def answer(yes: bool | None) -> None:
            if yes and self.session.conversation.chat_id == chat_id:
                self.app.switch_to(pair, chat_id)  # type: ignore[attr-defined]

        self.app.push_screen(ConfirmDialog(
            f"This chat was with {safe_text(pair)}; {now} is loaded now. Switch to "
            f"{safe_text(pair)} (it loads, then this chat opens on it)?", yes="Switch",
            no=f"Stay on {now}", variant="primary"), answer)

    # --- rename -----------------------------------------------------------------------------

    def rename_current(self) -> None:
        c = self.session.conversation
        if c.chat_id is None:
            self._notify("This chat is not saved yet: send a message first.")
            return
        self.rename(c.chat_id, c.title)

    def rename(self, chat_id: int, title: str) -> None:
        def done(new_title: str | None) -> None:
            if not new_title:
                return
            try:
                if chat_id == self.session.conversation.chat_id:
                    self.session.rename(new_title)
                else:
                    self.services.store.rename_chat(chat_id, new_title)
            except SpecchatError as e:
                self._notify(str(e), severity="error")
                return
            self.retitled()
            self.show_chats()

        self.app.push_screen(PromptDialog("Rename the chat", title), done)

    # --- delete -----------------------------------------------------------------------------

    def delete_current(self) -> None:
        c = self.session.conversation
        if c.chat_id is not None:
            self.delete(c.chat_id, c.title)

    def delete(self, chat_id: int, title: str) -> None:
        def done(yes: bool | None) -> None:
            if not yes:
                return
            if chat_id == self.session.conversation.chat_id:
                self.when_idle(lambda: self._delete(chat_id, current=True))
            else:
                self._delete(chat_id, current=False)

        self.app.push_screen(ConfirmDialog(f"Delete “{title}” and all its messages?"),
                                    done)

    def _delete(self, chat_id: int, current: bool) -> None:
        try:
            views = self.session.delete_chat(chat_id)
        except SpecchatError as e:
            self._notify(str(e), severity="error", timeout=10)
            return
        if current:
            self.opened(views)
        else:
            self.show_chats()
        self._notify("Chat deleted.", timeout=3)

    # --- export -----------------------------------------------------------------------------

    def export(self) -> None:
        chat_id = self.session.conversation.chat_id
        if chat_id is None:
            self._notify("Nothing to export yet: send a message first.")
            return
        try:
            store = self.services.store
            chat = store.get_chat(chat_id)
            path = write_export(unused_path(self.services.export_dir / export_filename(chat)),
                                chat_to_markdown(chat, store.thread(chat_id)))  # never over a file
        except (SpecchatError, OSError) as e:
            self._notify(f"Export failed: {e}", severity="error", timeout=10)
            return
        self._notify(f"Saved {path}", title="Exported to Markdown", timeout=8)
