"""Past chats on the chat screen: the side list, opening, renaming, deleting, exporting.

A helper the chat screen owns (not a base class): it knows the screen only as a Textual
screen plus the two callbacks it is given, so this module does not import chat.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from textual.screen import Screen

from specchat.errors import SpecchatError
from specchat.session.controller import ChatSession
from specchat.store import chat_to_markdown, export_filename, unused_path, write_export
from specchat.textsafe import safe_text
from specchat.ui.screens.dialogs import ConfirmDialog, PromptDialog
from specchat.ui.services import AppServices
from specchat.ui.widgets.chat_list import ChatList


class ChatHistory:
    def __init__(self, screen: Screen[Any], session: ChatSession, services: AppServices,
                 when_idle: Callable[[Callable[[], None]], None],
                 opened: Callable[[list[Any]], None], retitled: Callable[[], None]) -> None:
        self.screen = screen
        self.session = session
        self.services = services
        self.when_idle = when_idle  # run after the reply in flight stops
        self.opened = opened  # the session now shows another chat: redraw (with its views)
        self.retitled = retitled  # the current chat has a new title

    def _notify(self, text: str, **kw: Any) -> None:
        self.screen.notify(text, markup=False, **kw)

    def refresh(self) -> None:
        try:
            chats = self.session.summaries()
        except SpecchatError as e:
            self._notify(str(e), title="Chat history", severity="error")
            return
        self.screen.query_one(ChatList).show(chats, self.session.conversation.chat_id)

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
                self.screen.app.switch_to(pair, chat_id)  # type: ignore[attr-defined]

        self.screen.app.push_screen(ConfirmDialog(
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
            self.refresh()

        self.screen.app.push_screen(PromptDialog("Rename the chat", title), done)

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

        self.screen.app.push_screen(ConfirmDialog(f"Delete “{title}” and all its messages?"),
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
            self.refresh()
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
