"""This chat's system prompt (F9 on the chat screen): the settings' default, a named preset
(built-in, or from config.yaml's ``presets:``), or one typed for this chat alone. The chat
keeps what is picked (the store saves its preset's name and the prompt itself)."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

from specchat.textsafe import safe_text

# (preset name, system prompt): (None, None) the settings' default; (None, text) typed here.
PromptChoice = tuple[str | None, str | None]
DEFAULT_ID = "\x00default"  # an option id no preset name can be (names are YAML text)
FIRST_LINE = 70


def first_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= FIRST_LINE else line[: FIRST_LINE - 1] + "…"


class PresetPicker(ModalScreen[PromptChoice | None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]
    DEFAULT_CSS = """
    PresetPicker { align: center middle; }
    #preset-box { width: 90; max-width: 95%; height: auto; max-height: 90%; padding: 1 2;
                  border: round $accent; background: $surface; }
    #preset-list { height: auto; max-height: 16; }
    #own-system-prompt { margin-top: 1; }
    """

    def __init__(self, presets: dict[str, str], default_prompt: str, current: str | None,
                 own: str | None = None) -> None:
        super().__init__()
        self.presets = presets
        self.default_prompt = default_prompt
        self.current = current  # this chat's preset (None: the default or its own prompt)
        self.own = own  # this chat's own typed prompt, if it has one

    def _option(self, option_id: str, name: str, prompt: str, here: bool) -> Option:
        text = Text(name, style="bold")
        if here:
            text.append("  (this chat)", style="green")
        text.append(f"\n  {safe_text(first_line(prompt)) or '(no system prompt)'}", style="dim")
        return Option(text, id=option_id)

    def compose(self) -> ComposeResult:
        options = [self._option(DEFAULT_ID, "default · the Settings' system prompt",
                                self.default_prompt, self.current is None and self.own is None)]
        options += [self._option(name, safe_text(name), prompt, name == self.current)
                    for name, prompt in self.presets.items()]
        with Vertical(id="preset-box"):
            yield Static("System prompt for this chat", classes="dialog-title")
            yield OptionList(*options, id="preset-list")
            yield Input(self.own or "", placeholder="…or type a system prompt for this chat "
                        "alone and press Enter", id="own-system-prompt")
            yield Static("Enter picks · Tab moves · Esc cancels · your own presets: "
                         "'presets:' in config.yaml", classes="dialog-hint")

    def on_mount(self) -> None:
        options = self.query_one(OptionList)
        ids = [DEFAULT_ID, *self.presets]
        here = self.current if self.current in self.presets else DEFAULT_ID
        options.highlighted = ids.index(here)
        options.focus()

    @on(OptionList.OptionSelected, "#preset-list")
    def picked(self, event: OptionList.OptionSelected) -> None:
        name = event.option.id or DEFAULT_ID
        if name == DEFAULT_ID:
            self.dismiss((None, None))
        else:
            self.dismiss((name, self.presets[name]))

    @on(Input.Submitted, "#own-system-prompt")
    def typed(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        self.dismiss((None, text) if text else (None, None))

    def action_cancel(self) -> None:
        self.dismiss(None)
