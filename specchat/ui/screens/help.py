"""The help screen (F1): first what the numbers and colours mean, then every key (from the same
table the bindings come from)."""

from __future__ import annotations

from typing import ClassVar

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static, TabbedContent, TabPane

from specchat.store.fates import BRANCH, REJECTED
from specchat.ui.fate_style import NAMES, STYLES
from specchat.ui.keys import APP_KEYS, CHAT_KEYS, INPUT_KEYS, LIST_KEYS, RACE_KEYS, display
from specchat.ui.screens.explain import explain

COLOUR_HELP = {
    "a": "a draft token the target model agreed with (green)",
    "c": "the target's own token where it rejected the draft (vermillion, underlined)",
    "b": "the target's extra token after it accepted every draft (sky blue, bold italic)",
    "p": "plain decoding: the target alone, no draft model (normal text)",
    REJECTED: "a draft token the target threw away (purple, dim, struck out; Ctrl+R)",
    BRANCH: "another branch of a token tree, after ⎇: drafted, not taken (purple, dim, italic; "
            "Ctrl+R)",
}


def _section(rows: list[tuple[str | Text, str]]) -> Table:
    table = Table(box=None, show_header=False, pad_edge=False, expand=True)
    table.add_column("key", style="bold", no_wrap=True, width=22)
    table.add_column("what", ratio=1)
    for key, what in rows:
        table.add_row(key, what)
    return table


def help_table() -> RenderableType:
    """Keys by where they work, then the colours. Each section's title is a line of its own
    (in the key column it was cut to that column's width)."""
    sections: list[tuple[str, list[tuple[str | Text, str]]]] = [
        ("Chat", [(display(k.keys), k.help) for k in CHAT_KEYS]),
        ("Message box", [(k.replace(" / ", "\n"), w) for k, w in INPUT_KEYS]),
        ("Chat list", list(LIST_KEYS)),
        ("Race screen (F5): plain vs speculative, recorded in turn, replayed together",
         [(display(k.keys), k.help) for k in RACE_KEYS]),
        ("Anywhere", list(APP_KEYS)),
        ("Token colours", [(Text(NAMES[k], style=STYLES[k]), COLOUR_HELP[k])
                           for k in ("a", "c", "b", "p", REJECTED, BRANCH)]),
    ]
    parts: list[RenderableType] = []
    for title, rows in sections:
        parts += [Text(title, style="bold underline"), _section(rows), Text("")]
    return Group(*parts[:-1])


class HelpScreen(ModalScreen[None]):
    """Two pages: "What am I looking at" (opens first) and "Keys"."""

    DEFAULT_CSS = """
    HelpScreen #help-pages, HelpScreen TabPane, HelpScreen VerticalScroll { height: 1fr; }
    HelpScreen TabPane { padding: 0; }
    HelpScreen #help-box { max-width: 100%; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,f1,q", "close", "Close"),
        Binding("left,right,tab", "flip", "Other page", show=False),
    ]

    def __init__(self, page: str = "help-explain") -> None:
        super().__init__()
        self.page = page
        self.table = help_table()

    def compose(self) -> ComposeResult:
        with Vertical(id="help-box"):
            yield Static("specchat — help", id="help-title")
            with TabbedContent(initial=self.page, id="help-pages"):
                with TabPane("What am I looking at", id="help-explain"), \
                        VerticalScroll(id="help-explain-scroll"):
                    yield Static(explain(), id="help-explain-body")
                with TabPane("Keys", id="help-keys"), VerticalScroll(id="help-keys-scroll"):
                    yield Static(self.table, id="help-body")
            yield Static("←/→ switch page · ↑/↓ scroll · Esc closes", classes="dialog-hint")

    def on_mount(self) -> None:
        self._focus_page()

    def _focus_page(self) -> None:
        page = self.query_one(TabbedContent).active
        self.query_one(f"#{page}-scroll", VerticalScroll).focus()  # ↑/↓ scroll at once

    def action_flip(self) -> None:
        tabs = self.query_one(TabbedContent)
        tabs.active = "help-keys" if tabs.active == "help-explain" else "help-explain"
        self._focus_page()

    def action_close(self) -> None:
        self.dismiss(None)
