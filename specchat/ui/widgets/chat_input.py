"""The message box: a TextArea where Enter sends and Shift+Enter (or Ctrl+J) starts a new line.

Most terminals send the same byte for Enter and Shift+Enter; Ctrl+J is a distinct byte
everywhere, and Textual's kitty-protocol support delivers Shift+Enter where the terminal can
tell them apart (xterm's modifyOtherKeys form arrives as ``shift+\r``). Alt+Enter is not
offered: Textual reads ESC CR as a plain Enter.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual import events
from textual.message import Message
from textual.widgets import TextArea

NEWLINE_KEYS = frozenset({"shift+enter", "ctrl+j", "newline", "shift+\r"})


class ChatInput(TextArea):
    @dataclass
    class Submitted(Message):
        text: str

    def __init__(self, **kwargs: object) -> None:
        super().__init__(soft_wrap=True, show_line_numbers=False, tab_behavior="focus",
                         **kwargs)  # type: ignore[arg-type]

    async def _on_key(self, event: events.Key) -> None:
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            text = self.text.strip()
            if text:
                self.post_message(self.Submitted(text))
            return
        if event.key in NEWLINE_KEYS:
            event.stop()
            event.prevent_default()
            start, end = self.selection
            self._replace_via_keyboard("\n", start, end)
            return
        await super()._on_key(event)
