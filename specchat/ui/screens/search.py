"""Search every chat's messages (Ctrl+F on the chat screen): results as the user types, each
the chat's title over the text around the hit; Enter opens the chat at that message.

The search itself is the store's (store/search.py: FTS5, or a substring search where SQLite
lacks it); it runs on the UI thread, which owns the store's connection, a short pause after
the last key (a search over thousands of messages is milliseconds).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.timer import Timer
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

from specchat.errors import SpecchatError
from specchat.store.search import NO_FTS5, SearchHit
from specchat.textsafe import safe_text

SearchFn = Callable[[str], tuple[list[SearchHit], bool]]
PAUSE_S = 0.15  # after the last key, before searching
LIMIT = 50


def hit_text(hit: SearchHit) -> Text:
    """``Trains · qwen-coder`` over ``you: …the first steam locomotive…`` (the hit in bold)."""
    out = Text(safe_text(hit.chat_title), style="bold")
    if hit.pair:
        out.append(f"  · {safe_text(hit.pair)}", style="dim")
    out.append("\n")
    out.append("you: " if hit.role == "user" else f"{hit.role}: ", style="dim")
    at = 0
    for start, end in hit.marks:  # each piece made safe on its own: the marks stay in place
        out.append(safe_text(hit.snippet[at:start]))
        out.append(safe_text(hit.snippet[start:end]), style="bold reverse")
        at = end
    out.append(safe_text(hit.snippet[at:]))
    return out


class SearchScreen(ModalScreen[SearchHit | None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel"),
        Binding("down", "to_results", "Results", show=False),
    ]
    DEFAULT_CSS = """
    SearchScreen { align: center middle; }
    #search-box { width: 90%; max-width: 110; height: 80%; padding: 1 2;
                  border: round $accent; background: $surface; }
    #search-results { height: 1fr; margin-top: 1; }
    #search-status { color: $text-muted; height: auto; }
    """

    def __init__(self, search: SearchFn, query: str = "") -> None:
        super().__init__()
        self.search = search
        self.query_text = query
        self.hits: list[SearchHit] = []
        self._timer: Timer | None = None
        self.fallback_said = False

    def compose(self) -> ComposeResult:
        with Vertical(id="search-box"):
            yield Static("Search all chats", classes="dialog-title")
            yield Input(self.query_text, placeholder="words to find in any chat's messages",
                        id="search-input")
            yield Static("Type to search · ↓ to the results · Enter opens the chat at that "
                         "message · Esc closes", id="search-status")
            yield OptionList(id="search-results")

    def on_mount(self) -> None:
        self.query_one(Input).focus()
        if self.query_text.strip():
            self.run_search()

    @on(Input.Changed, "#search-input")
    def typed(self, event: Input.Changed) -> None:
        self.query_text = event.value
        if self._timer is not None:
            self._timer.stop()
        self._timer = self.set_timer(PAUSE_S, self.run_search)

    def run_search(self) -> None:
        self._timer = None
        status = self.query_one("#search-status", Static)
        results = self.query_one(OptionList)
        text = self.query_text
        if not text.split():
            self.hits = []
            results.clear_options()
            status.update("Type to search · Esc closes")
            return
        try:
            self.hits, fts = self.search(text)
        except SpecchatError as e:
            status.update(Text(str(e), style="bold red"))
            return
        results.clear_options()
        results.add_options([Option(hit_text(h), id=str(i)) for i, h in enumerate(self.hits)])
        n = len(self.hits)
        found = (f"{n}{'+' if n >= LIMIT else ''} message{'s' if n != 1 else ''}" if n
                 else "No message matches")
        line = f"{found} · ↓ to the results · Enter opens the chat at that message"
        if not fts:
            line += f"\n({NO_FTS5})"
        status.update(Text(line))
        if n:
            results.highlighted = 0

    @on(Input.Submitted, "#search-input")
    def submitted(self, _: Input.Submitted) -> None:
        if self._timer is not None:  # Enter before the pause ended: search what is typed now
            self._timer.stop()
            self.run_search()
        results = self.query_one(OptionList)
        if self.hits:
            self.dismiss(self.hits[results.highlighted or 0])

    @on(OptionList.OptionSelected, "#search-results")
    def picked(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(self.hits[int(event.option.id or 0)])

    def action_to_results(self) -> None:
        results = self.query_one(OptionList)
        if self.hits and not results.has_focus:
            results.focus()

    def action_cancel(self) -> None:
        self.dismiss(None)
