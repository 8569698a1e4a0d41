"""Search across chats from the chat screen (Ctrl+F, :mod:`.search`), and showing the message
found: in this chat at once, in another once that chat is open and laid out.

A helper the chat screen owns (not a base class), like :mod:`.chat_history`.
"""

from __future__ import annotations

from typing import Any

from textual.screen import Screen
from textual.widget import Widget

from specchat.session.controller import ChatSession
from specchat.store.search import SearchHit
from specchat.ui.screens.chat_history import ChatHistory
from specchat.ui.screens.search import LIMIT, SearchScreen
from specchat.ui.services import AppServices
from specchat.ui.widgets.chat_input import ChatInput
from specchat.ui.widgets.transcript import Transcript

REVEAL_TRIES, REVEAL_EVERY_S = 10, 0.1  # keeping a search result in view while laid out


class ChatSearch:
    def __init__(self, screen: Screen[Any], session: ChatSession, services: AppServices,
                 history: ChatHistory) -> None:
        self.screen = screen
        self.session = session
        self.services = services
        self.history = history
        self.text = ""  # the last search, offered again by the next Ctrl+F
        self._pending: int | None = None  # a message to show once its chat is open

    def open(self) -> None:
        def chosen(hit: SearchHit | None) -> None:
            if hit is None:
                self.screen.query_one(ChatInput).focus()
                return
            if hit.chat_id == self.session.conversation.chat_id:
                self.reveal(hit.message_id)
                return
            self._pending = hit.message_id
            self.history.open(hit.chat_id)

        def search(text: str) -> tuple[list[SearchHit], bool]:
            self.text = text
            return self.services.store.search(text, LIMIT)

        self.screen.app.push_screen(SearchScreen(search, self.text), chosen)

    def opened(self) -> None:
        """A chat was opened and drawn: show the message found in it, if that is why."""
        if self._pending is not None:
            message_id, self._pending = self._pending, None
            self.screen.call_after_refresh(self.reveal, message_id)

    def reveal(self, message_id: int) -> None:
        """Scroll the transcript to a saved message and mark it (a search result)."""
        transcript = self.screen.query_one(Transcript)
        for w in transcript.children:
            turn = getattr(w, "turn", None)
            if turn is not None and turn.message_id == message_id:
                for old in transcript.query(".-found"):
                    old.remove_class("-found")
                w.add_class("-found")
                self._scroll_to(w, REVEAL_TRIES)
                return
        self.screen.notify("That message is no longer in this chat's current view.", timeout=4,
                           markup=False)

    def _scroll_to(self, widget: Widget, tries: int) -> None:
        """Scroll to ``widget`` until it stays in view: the chat's messages are laid out over
        a few frames (Markdown sizes itself late) and opening a chat scrolls to its end."""
        if widget.parent is None:
            return  # another chat was opened meanwhile
        transcript = self.screen.query_one(Transcript)
        region, view = widget.region, transcript.region
        if not (region.height and view.y <= region.y < view.bottom):
            transcript.scroll_to_widget(widget, animate=False, top=True)
        if tries > 1:
            self.screen.set_timer(REVEAL_EVERY_S, lambda: self._scroll_to(widget, tries - 1))
