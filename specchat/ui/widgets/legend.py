"""The line under the transcript: the token-fate legend for the view shown (fate_style.legend),
or, while a message is selected, what its keys do (``hint``). The view and the rejected drafts'
toggle are bound to the chat screen's reactives of the same names."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from specchat.ui.fate_style import legend


class Legend(Static):
    DEFAULT_CSS = """
    Legend { height: auto; padding: 0 1; }
    """

    view = reactive("markdown", init=False)
    show_rejected = reactive(False, init=False)
    hint: reactive[Text | None] = reactive(None, init=False)  # in the legend's place

    def __init__(self, **kwargs: object) -> None:
        super().__init__(legend(False, "markdown"), **kwargs)  # type: ignore[arg-type]

    def _redraw(self) -> None:
        self.update(self.hint or legend(self.show_rejected, self.view))

    def watch_view(self) -> None:
        self._redraw()

    def watch_show_rejected(self) -> None:
        self._redraw()

    def watch_hint(self) -> None:
        self._redraw()
