"""The file picker for attaching a file to a message (F2): a path to type, or a file to pick in
a tree of the folder specchat was started in. It returns the path; reading the file, and
refusing it, is the chat screen's worker's (:mod:`specchat.session.attachments`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DirectoryTree, Input, Static


def shown_path(path: Path, root: Path) -> str:
    """A picked file's path as the model will read it: relative to ``root`` when inside it."""
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


class AttachScreen(ModalScreen[str | None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, root: Path) -> None:
        super().__init__(classes="dialog")
        self.root = root

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog-box", id="attach-box"):
            yield Static("Attach a file to the message", classes="dialog-title")
            yield Input(placeholder="a file's path (Enter attaches it), or pick one below",
                        id="attach-path")
            yield DirectoryTree(self.root, id="attach-tree")
            yield Static("Enter attaches · ↓ to the folder · Esc cancels", classes="dim")

    def on_mount(self) -> None:
        self.query_one("#attach-path", Input).focus()

    @on(Input.Submitted, "#attach-path")
    def typed(self, event: Input.Submitted) -> None:
        path = event.value.strip()
        if path:
            self.dismiss(path)

    def on_key(self, event: object) -> None:
        key = getattr(event, "key", "")
        field = self.query_one("#attach-path", Input)
        if key == "down" and field.has_focus:
            self.query_one(DirectoryTree).focus()

    @on(DirectoryTree.FileSelected)
    def picked(self, event: DirectoryTree.FileSelected) -> None:
        self.dismiss(shown_path(Path(event.path), self.root))

    def action_cancel(self) -> None:
        self.dismiss(None)


def start_folder() -> Path:
    """Where the picker opens: the folder specchat was started in."""
    return Path(os.getcwd())
