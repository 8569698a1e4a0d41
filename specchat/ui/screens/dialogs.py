"""Small modals with typed results: an error notice, a yes/no question, a one-line text prompt."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static


class ErrorDialog(ModalScreen[None]):
    """An error from the engine or the store, said in one or two lines."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,enter,q", "close", "Close")]

    def __init__(self, title: str, message: str) -> None:
        super().__init__(classes="dialog")
        self.title_text = title
        self.message = message

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog-box error"):
            yield Static(self.title_text, classes="dialog-title")
            yield Static(self.message, classes="dialog-body", markup=False)
            with Horizontal(classes="dialog-buttons"):
                yield Button("OK", variant="primary", id="ok")

    def on_button_pressed(self, _: Button.Pressed) -> None:
        self.dismiss(None)

    def action_close(self) -> None:
        self.dismiss(None)


class ConfirmDialog(ModalScreen[bool]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes"), Binding("n,escape", "answer(False)", "No")]

    def __init__(self, question: str, yes: str = "Delete", no: str = "Cancel",
                 variant: str = "error") -> None:
        super().__init__(classes="dialog")
        self.question = question
        self.yes = yes
        self.no = no
        self.variant = variant  # "error" for what cannot be undone, "primary" otherwise

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog-box"):
            yield Static(self.question, classes="dialog-body", markup=False)
            with Horizontal(classes="dialog-buttons"):
                yield Button(f"{self.yes} (y)", variant=self.variant,  # type: ignore[arg-type]
                             id="yes")
                yield Button(f"{self.no} (n)", id="no")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class PromptDialog(ModalScreen[str | None]):
    """Asks for one line of text (a chat's new title); None when cancelled."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, question: str, value: str) -> None:
        super().__init__(classes="dialog")
        self.question = question
        self.value = value

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog-box"):
            yield Static(self.question, classes="dialog-title", markup=False)
            yield Input(self.value, id="prompt-input")
            yield Static("Enter saves · Esc cancels", classes="dialog-hint")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        value = event.value.strip()
        self.dismiss(value or None)

    def action_cancel(self) -> None:
        self.dismiss(None)
