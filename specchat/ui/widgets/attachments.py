"""The files attached to the message being written, as chips over the message box: each one's
name, size and tokens (the target's tokenizer), and a press (Enter, a click) removes it. Hidden
while there are none."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.text import Text
from textual.containers import Horizontal
from textual.message import Message
from textual.widgets import Button

from specchat.session.attachments import AttachedFile
from specchat.textsafe import safe_text
from specchat.tools.files import size_text


def chip_label(f: AttachedFile) -> str:
    return f"{safe_text(f.name)} · {size_text(f.attachment.size)} · {f.tokens:,} tokens ✕"


class AttachmentBar(Horizontal):
    DEFAULT_CSS = """
    AttachmentBar { height: auto; margin: 0 1; display: none; }
    AttachmentBar > Button.chip { height: 1; min-width: 8; border: none; margin-right: 1;
                                  padding: 0 1; }
    """

    @dataclass
    class Removed(Message):
        index: int

    def show_files(self, files: Sequence[AttachedFile]) -> None:
        self.remove_children()  # chips carry their index in ``name``: no ids to clash
        self.mount_all([Button(Text(chip_label(f)), classes="chip", name=str(i), compact=True,
                               tooltip=Text(f"{safe_text(f.path)}: press to remove it"))
                        for i, f in enumerate(files)])
        self.display = bool(files)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.name is not None:
            self.post_message(self.Removed(int(event.button.name)))
