"""A tool call in the transcript: the tool, its arguments as indented JSON, the question put to
the user (Allow once / Always allow this tool in this chat / Deny), and the result.

The result shows as one line (how the call ended, its size, its time) and expands to its text
on Enter or a click, and back. Everything on the card came from the model or a tool: it is
shown as text (never markup), through ``safe_text``. The card asks nothing itself: a button
posts :class:`ToolCard.Answered` and the chat screen hands the answer to the session.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import Button, Static
from textual.widgets.button import ButtonVariant

from specchat.session.conversation import Turn
from specchat.store.tool_parts import CallRecord, pretty_arguments
from specchat.textsafe import safe_text

SHOWN_LINES = 400  # of an expanded result; the model read it all (an export has it all)
ANSWERS: tuple[tuple[str, str, ButtonVariant], ...] = (
    ("once", "Allow once", "primary"), ("always", "Always allow this tool in this chat", "default"),
    ("deny", "Deny", "error"))
STATUS_WORDS = {"ok": "✓ ran", "error": "✗ failed", "refused": "⊘ denied: not run",
                "cancelled": "⊘ cancelled"}


def result_line(turn: Turn) -> Text:
    """``✓ ran · 11 characters, 1 line · 0.0 s`` (a failure: its first line)."""
    part = turn.tool
    status = part.status if part is not None else "error"
    text = turn.text
    out = Text(STATUS_WORDS.get(status, status), "bold" if status == "ok" else "bold red")
    if status == "ok":
        lines = text.count("\n") + 1 if text else 0
        out.append(f" · {len(text):,} characters, {lines} line{'s' if lines != 1 else ''}")
    else:
        first = text.strip().splitlines()[0] if text.strip() else ""
        out.append(f" · {safe_text(first)[:200]}")
    if part is not None and part.seconds:
        out.append(f" · {part.seconds:.1f} s")
    return out


class ToolCard(Vertical, can_focus=True):
    """One call: ``call`` as the model wrote it; ``result`` (a ``tool`` turn) once it ran."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "toggle", "Show result", show=False)]
    DEFAULT_CSS = """
    ToolCard { height: auto; padding: 0 1; border-left: thick $accent; }
    ToolCard:focus { border-left: thick $warning; }
    ToolCard .tool-head { height: auto; }
    ToolCard .tool-args { height: auto; color: $text-muted; }
    ToolCard .tool-state { height: auto; }
    ToolCard .tool-answers { height: auto; margin-top: 1; }
    ToolCard .tool-answers Button { margin-right: 1; }
    ToolCard .tool-result { height: auto; color: $text-muted; }
    """

    @dataclass
    class Answered(Message):
        """The user answered the call (``decision``: once, always, deny)."""

        card: ToolCard
        call_id: str
        name: str
        decision: str

    def __init__(self, call: CallRecord, result: Turn | None = None, server: str = "",
                 ended: bool = False) -> None:
        super().__init__(classes="message tool")
        self.call = call
        self.ended = ended  # a saved call with no result: the turn stopped before it ran
        self.turn: Turn | None = result  # the result's turn (the transcript selects by it)
        self.server = server
        self.asking = False
        self.expanded = False
        self._head = Static(self._head_text(), classes="tool-head")
        self._args = Static(Text(safe_text(pretty_arguments(call.arguments))),
                            classes="tool-args")
        self._state = Static(self._state_text(), classes="tool-state")
        self._answers = Horizontal(*(Button(label, id=f"tool-{key}", variant=variant, compact=True)
                                     for key, label, variant in ANSWERS),
                                   classes="tool-answers")
        self._result = Static("", classes="tool-result")

    def compose(self) -> ComposeResult:
        yield self._head
        yield self._args
        yield self._state
        yield self._answers
        yield self._result

    def on_mount(self) -> None:
        self._answers.display = self.asking
        self._result.display = False

    def _head_text(self) -> Text:
        out = Text("Tool call  ", "bold")
        out.append(safe_text(self.call.name), "bold")
        if self.server:
            out.append(f"  (server {safe_text(self.server)})", "dim")
        return out

    def _state_text(self) -> Text:
        if self.turn is not None:
            out = result_line(self.turn)
            if self.turn.text:
                out.append("  ▾ hide (Enter)" if self.expanded else "  ▸ show (Enter or click)",
                           "dim")
            return out
        if self.asking:
            return Text("Run this tool? Nothing runs until you answer (Esc stops the reply).",
                        "bold yellow")
        if self.ended:
            return Text("not run: the turn ended before it", "dim")
        return Text("checking the call…", "dim")

    # --- what the session says --------------------------------------------------------------

    def ask(self, server: str, always: bool) -> None:
        """The call waits for the user's answer, or (``always``) runs now."""
        self.server = server
        self._head.update(self._head_text())
        if always:
            self._state.update(Text("running… (always allowed in this chat; Esc cancels)",
                                    "dim"))
            return
        self.asking = True
        self._answers.display = True
        self._state.update(self._state_text())

    def focus_question(self, tries: int = 20) -> None:
        """Focus "Allow once" while the question is open (Enter then allows once). A card
        asked the moment it is mounted may not have its buttons yet: it tries again after
        the next refreshes (a bounded few, so a card never mounted does not loop)."""
        if not self.asking:
            return
        buttons = list(self.query("#tool-once").results(Button))
        if buttons:
            buttons[0].focus()
        elif tries > 0:
            self.call_after_refresh(self.focus_question, tries - 1)

    def answered(self, decision: str) -> None:
        self.asking = False
        self._answers.display = False
        said = {"once": "allowed once: running… (Esc cancels)",
                "always": "always allowed in this chat: running… (Esc cancels)",
                "deny": "denied: not run"}[decision]
        self._state.update(Text(said, "dim"))

    def stopped(self) -> None:
        """The reply ended with this call never answered (it stopped first)."""
        self.ended, self.asking = True, False
        self._answers.display = False
        self._state.update(self._state_text())

    def set_result(self, turn: Turn) -> None:
        self.turn = turn
        self.asking = False
        self._answers.display = False
        self._state.update(self._state_text())
        if self.expanded:
            self._result.update(self._result_text())

    # --- the user ---------------------------------------------------------------------------

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        decision = (event.button.id or "").removeprefix("tool-")
        if not self.asking or decision not in ("once", "always", "deny"):
            return
        self.answered(decision)
        self.post_message(self.Answered(self, self.call.id, self.call.name, decision))

    def on_click(self, event: events.Click) -> None:
        if isinstance(event.widget, Button):
            return
        self.action_toggle()

    def action_toggle(self) -> None:
        """Show the result's text, or hide it again."""
        if self.turn is None or not self.turn.text:
            return
        self.expanded = not self.expanded
        if self.expanded:
            self._result.update(self._result_text())
        self._result.display = self.expanded
        self._state.update(self._state_text())

    def _result_text(self) -> Text:
        text = self.turn.text if self.turn is not None else ""
        lines = text.splitlines()
        if len(lines) > SHOWN_LINES:
            more = len(lines) - SHOWN_LINES
            text = "\n".join(lines[:SHOWN_LINES]) + (
                f"\n… {more:,} more lines (the model read them all; Ctrl+O exports the chat)")
        return Text(safe_text(text))


class TranscriptNoteLine(Static):
    """A line the turn left in the transcript (a server that did not start, the round cap)."""

    DEFAULT_CSS = """
    TranscriptNoteLine { height: auto; margin: 0 0 1 2; color: $warning; }
    """

    def __init__(self, text: str) -> None:
        super().__init__(Text("⚠ " + safe_text(text)), classes="tool-note")
