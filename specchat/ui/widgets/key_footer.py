"""The footer, readable in a narrow terminal: below ``NARROW`` columns it is compact and shows
only the essential keys (every key is still bound, listed by F1 and in the Ctrl+P palette), so
that none is cut in half at 80 columns."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from textual.app import ComposeResult
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

NARROW = 100  # columns below which the footer (and the chat screen) are laid out narrow


class KeyFooter(Footer):
    def __init__(self, essential: Iterable[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.essential = frozenset(essential)  # actions shown at every width

    def compose(self) -> ComposeResult:
        for widget in super().compose():
            if isinstance(widget, FooterKey) and (
                    widget.action in self.essential or widget.has_class("-command-palette")):
                widget.add_class("-essential")
            yield widget

    def set_narrow(self, narrow: bool) -> None:
        self.compact = narrow
        self.set_class(narrow, "-narrow")
