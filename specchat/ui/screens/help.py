"""The help screen: every key (from the same table the bindings come from) and the colours."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from specchat.store.fates import BRANCH, REJECTED
from specchat.ui.fate_style import NAMES, STYLES
from specchat.ui.keys import APP_KEYS, CHAT_KEYS, INPUT_KEYS, LIST_KEYS, RACE_KEYS, display

COLOUR_HELP = {
    "a": "a draft token the target model agreed with (green)",
    "c": "the target's own token where it rejected the draft (vermillion, underlined)",
    "b": "the target's extra token after it accepted every draft (sky blue, bold italic)",
    "p": "plain decoding: the target alone, no draft model (normal text)",
    REJECTED: "a draft token the target threw away (purple, dim, struck out; Ctrl+R)",
    BRANCH: "another branch of a token tree, after ⎇: drafted, not taken (purple, dim, italic; "
            "Ctrl+R)",
}


def help_table() -> Table:
    """Keys by where they work, then the colours; the description column wraps."""
    table = Table(box=None, show_header=False, pad_edge=False, expand=True)
    table.add_column("key", style="bold", no_wrap=True, max_width=22)
    table.add_column("what", ratio=1)
    sections: list[tuple[str, list[tuple[str, str]]]] = [
        ("Chat", [(display(k.keys), k.help) for k in CHAT_KEYS]),
        ("Message box", [(k.replace(" / ", "\n"), w) for k, w in INPUT_KEYS]),
        ("Chat list", list(LIST_KEYS)),
        ("Race screen (F5): plain vs speculative, recorded in turn, replayed together",
         [(display(k.keys), k.help) for k in RACE_KEYS]),
        ("Anywhere", list(APP_KEYS)),
    ]
    for title, rows in sections:
        table.add_row(Text(title, style="bold underline"), "")
        for key, what in rows:
            table.add_row(key, what)
        table.add_row("", "")
    table.add_row(Text("Token colours", style="bold underline"), "")
    for kind in ("a", "c", "b", "p", REJECTED, BRANCH):
        table.add_row(Text(NAMES[kind], style=STYLES[kind]), COLOUR_HELP[kind])
    return table


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,f1,q", "close", "Close")]

    def __init__(self) -> None:
        super().__init__()
        self.table = help_table()

    def compose(self) -> ComposeResult:
        with Vertical(id="help-box"):
            yield Static("specchat — keys", id="help-title")
            with VerticalScroll():
                yield Static(self.table, id="help-body")
            yield Static("Esc closes", classes="dialog-hint")

    def action_close(self) -> None:
        self.dismiss(None)
