"""The message box: a TextArea where Enter sends and Shift+Enter (or Ctrl+J) starts a new line.

Most terminals send the same byte for Enter and Shift+Enter; Ctrl+J is a distinct byte
everywhere, and Textual's kitty-protocol support delivers Shift+Enter where the terminal can
tell them apart (xterm's modifyOtherKeys form arrives as ``shift+\r``). Alt+Enter is not
offered: Textual reads ESC CR as a plain Enter. For the same reason Alt+letter is read as Esc
then the letter (someone typing right after pressing Esc to stop a reply), and keys typed
faster than they are handled are inserted together (a paste the terminal types out).

Tab after ``@`` and the start of a path completes it (``session.attachments.complete_path``);
once it names one file, Tab takes the ``@path`` out of the text and asks the screen to attach
that file (:class:`ChatInput.AttachPath`). Tab elsewhere moves the focus, as it did.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Container
from dataclasses import dataclass

from textual import events
from textual.message import Message
from textual.widgets import TextArea

from specchat.session.attachments import complete_path
from specchat.textsafe import safe_text

NEWLINE_KEYS = frozenset({"shift+enter", "ctrl+j", "newline", "shift+\r"})
AT_PATH = re.compile(r"(?:^|\s)@(\S*)$")  # ``@`` and a path being typed, before the cursor


class ChatInput(TextArea):
    DEFAULT_CSS = """
    ChatInput { height: auto; min-height: 3; max-height: 10; margin: 0 1; }
    """

    @dataclass
    class Submitted(Message):
        text: str

    @dataclass
    class AttachPath(Message):
        """Tab completed ``@path`` to one file: attach it (the ``@path`` left the text)."""

        path: str

    def __init__(self, **kwargs: object) -> None:
        super().__init__(soft_wrap=True, show_line_numbers=False, tab_behavior="focus",
                         **kwargs)  # type: ignore[arg-type]
        self._typed: list[str] = []  # printable keys not inserted yet (see _on_key)

    def type_in(self, text: str) -> None:
        """Text typed (or pasted) while another pane had focus: focus moves here at once and
        the text goes in, so a key the chat list or transcript does not use is never lost."""
        self.screen.set_focus(self)  # now, not after a refresh: the next queued key lands here
        if not self._typed:
            self.call_later(self.flush_typed)
        self._typed.append(text)

    def take_typing(self, event: events.Key | events.Paste, bound: Container[str],
                    stop: Callable[[], None]) -> bool:
        """A character typed (or text pasted) while the chat list or the transcript has focus
        (after Ctrl+L, after a click in the transcript) comes here, and the focus with it:
        what the user types is never lost, and Enter then sends it rather than opening a chat.
        Keys the focused pane is ``bound`` to (arrows, Enter, F2, Delete, ...) keep their
        meaning; Esc and a key read as one (Alt+key) still ``stop`` the reply."""
        if self.read_only:
            return False
        if isinstance(event, events.Paste):
            text = event.text
        elif not event.is_printable or event.key in bound:
            return False
        else:
            text = event.character or ""
            if event.key.startswith("alt+"):  # Esc and then a key, read as one (see _on_key)
                stop()
        if not text:
            return False
        self.type_in(text)
        return True

    def flush_typed(self) -> None:
        """Insert the characters typed since the last insert, all at once."""
        if self._typed:
            text, self._typed = "".join(self._typed), []
            start, end = self.selection
            self._replace_via_keyboard(text, start, end)
            # The box may have grown with the text: keep the cursor in view once laid out.
            self.call_after_refresh(self.scroll_cursor_visible)

    async def _on_key(self, event: events.Key) -> None:
        if event.key.startswith("alt+") and event.is_printable:
            # Textual reads Esc and a key typed within ESCDELAY (100 ms) as Alt+key: the Esc
            # would be lost, and with it the stop of a reply. No Alt+letter is bound here, so
            # it is taken as what was typed: Esc, then the key.
            self.app.simulate_key("escape")
        if event.is_printable and event.character and event.key not in NEWLINE_KEYS \
                and event.key != "enter" and not self.read_only:
            # A paste the terminal types out (no bracketed paste) is one key per character:
            # inserted one by one, each insert re-wraps the whole line (100k characters took
            # minutes). Keys queued together are inserted together, after the queue empties.
            event.stop()
            event.prevent_default()
            if not self._typed:
                self.call_later(self.flush_typed)
            self._typed.append(event.character)
            return
        self.flush_typed()  # anything else acts on the text as typed so far
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            text = self.text.strip()
            if text:
                self.post_message(self.Submitted(text))
            return
        if event.key == "tab" and self._complete_at_path():
            event.stop()
            event.prevent_default()
            return
        if event.key in NEWLINE_KEYS:
            event.stop()
            event.prevent_default()
            start, end = self.selection
            self._replace_via_keyboard("\n", start, end)
            return
        await super()._on_key(event)

    def _complete_at_path(self) -> bool:
        """Tab after ``@partial``: complete it, or attach the one file it names. False (Tab
        moves the focus) when the cursor is not after an ``@`` word."""
        row, col = self.cursor_location
        m = AT_PATH.search(self.document.get_line(row)[:col])
        if m is None:
            return False
        partial = m.group(1)
        done = complete_path(partial, os.getcwd())
        start = (row, col - len(partial))
        if done.file:
            self._replace_via_keyboard("", (row, start[1] - 1), (row, col))  # the @ too
            self.post_message(self.AttachPath(done.text))
        elif done.text != partial:
            self._replace_via_keyboard(done.text, start, (row, col))
        elif done.choices:
            shown = ", ".join(safe_text(c) for c in done.choices[:12])
            more = f" and {len(done.choices) - 12} more" if len(done.choices) > 12 else ""
            self.notify(f"{shown}{more}", title=f"@{safe_text(partial)}", markup=False)
        else:
            self.notify(f"No file or folder matches {safe_text(partial) or 'here'}.",
                        title="@ path", severity="warning", markup=False)
        return True
