"""The modals of the message actions: the actions menu (F4), the edit box of edit-and-resend,
and the picker of a message's code blocks. Each returns a typed result; the chat screen acts
on it (chat_messages.py)."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from specchat.session.clipboard import CodeBlock
from specchat.textsafe import safe_text
from specchat.ui.widgets.chat_input import ChatInput

# (key, action, label): the menu's rows; the key works while the menu is open.
MENU: tuple[tuple[str, str, str], ...] = (
    ("c", "copy", "Copy the message"),
    ("b", "copy_code", "Copy a code block"),
    ("r", "regenerate", "Regenerate the reply (the old one stays, ‹ › flips)"),
    ("e", "edit", "Edit and resend (what followed stays on its branch)"),
    ("left", "previous", "Previous alternative"),
    ("right", "next", "Next alternative"),
    ("d", "delete", "Delete…"),
)
KEY_NAMES = {"left": "←", "right": "→"}


def preview(text: str, width: int = 56) -> str:
    line = " ".join(text.split())
    return safe_text(line if len(line) <= width else line[: width - 1] + "…")


class MessageMenu(ModalScreen[str | None]):
    """What to do with one message: returns an action name of :data:`MENU`, or None."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "pick(None)", "Close")]

    def __init__(self, heading: str, actions: list[str]) -> None:
        super().__init__(classes="dialog")
        self.heading = heading
        self.actions = [row for row in MENU if row[1] in actions]

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog-box"):
            yield Static(self.heading, classes="dialog-title", markup=False)
            options = []
            for key, action, label in self.actions:
                row = Text(f"{KEY_NAMES.get(key, key):>2}  ", style="bold")
                row.append(label)
                options.append(Option(row, id=action))
            yield OptionList(*options, id="message-menu")
            yield Static("A key or Enter picks · Esc closes", classes="dialog-hint")

    def on_mount(self) -> None:
        self.query_one(OptionList).focus()

    def on_key(self, event: events.Key) -> None:
        for key, action, _label in self.actions:
            if event.key == key:
                event.stop()
                self.dismiss(action)
                return

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def action_pick(self, action: str | None) -> None:
        self.dismiss(action)


class EditDialog(ModalScreen[str | None]):
    """The message's text to change; Enter resends it (the new text), Esc cancels (None)."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel",
                                                     priority=True)]

    def __init__(self, text: str) -> None:
        super().__init__(classes="dialog")
        self.text = text

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog-box"):
            yield Static("Edit and resend", classes="dialog-title")
            box = ChatInput(id="edit-input")
            box.load_text(self.text)
            yield box
            yield Static("Enter resends (the old message and what followed it stay: ‹ › "
                         "flips back) · Ctrl+J new line · Esc cancels", classes="dialog-hint")

    def on_mount(self) -> None:
        box = self.query_one(ChatInput)
        box.focus()
        box.move_cursor(box.document.end)

    def on_chat_input_submitted(self, event: ChatInput.Submitted) -> None:
        event.stop()
        self.dismiss(event.text)

    def action_cancel(self) -> None:
        self.dismiss(None)


class CodePicker(ModalScreen[int | None]):
    """Which of a message's code blocks to copy: its index, or None."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Close")]

    def __init__(self, blocks: list[CodeBlock]) -> None:
        super().__init__(classes="dialog")
        self.blocks = blocks

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog-box"):
            yield Static(f"Copy which code block? ({len(self.blocks)} in this message)",
                         classes="dialog-title")
            yield OptionList(*[Option(f"{i + 1}. {safe_text(b.label())}", id=str(i))
                               for i, b in enumerate(self.blocks)], id="code-picker")
            yield Static("1–9 or Enter picks · Esc closes", classes="dialog-hint")

    def on_mount(self) -> None:
        self.query_one(OptionList).focus()

    def on_key(self, event: events.Key) -> None:
        if event.key.isdigit() and 1 <= int(event.key) <= min(9, len(self.blocks)):
            event.stop()
            self.dismiss(int(event.key) - 1)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(int(event.option.id or 0))

    def action_cancel(self) -> None:
        self.dismiss(None)
