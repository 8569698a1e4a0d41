"""The race screen's choosers: a prompt (built-in or typed), a pair and a drafter."""

from __future__ import annotations

from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

from specchat.race.prompts import RacePrompt


class PromptPicker(ModalScreen[RacePrompt | None]):
    """Pick a built-in prompt with the arrows and Enter, or type one in the box."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, prompts: list[RacePrompt]) -> None:
        super().__init__()
        self.prompts = prompts

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog-box race-picker"):
            yield Static("Race prompt", classes="dialog-title")
            yield OptionList(*[Option(p.title, id=str(i)) for i, p in enumerate(self.prompts)],
                             id="prompt-list")
            yield Input(placeholder="…or type your own prompt and press Enter", id="own-prompt")
            yield Static("Enter picks · Tab moves · Esc cancels", classes="dialog-hint")

    @on(OptionList.OptionSelected, "#prompt-list")
    def picked(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(self.prompts[int(event.option.id or 0)])

    @on(Input.Submitted, "#own-prompt")
    def typed(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if text:
            self.dismiss(RacePrompt("yours", "", text))

    def action_cancel(self) -> None:
        self.dismiss(None)


class PairPicker(ModalScreen[str | None]):
    """Pick a pair whose model files are on disk."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, pairs: list[str], current: str) -> None:
        super().__init__()
        self.pairs = pairs
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog-box race-picker"):
            yield Static("Race another pair", classes="dialog-title")
            yield OptionList(*[Option(p + ("  (current)" if p == self.current else ""), id=p)
                               for p in self.pairs], id="pair-list")
            yield Static("Pairs whose models are on disk · Enter picks · Esc cancels",
                         classes="dialog-hint")

    @on(OptionList.OptionSelected, "#pair-list")
    def picked(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def action_cancel(self) -> None:
        self.dismiss(None)


class DrafterPicker(ModalScreen[str | None]):
    """Pick what drafts on the speculative side: the drafters that can run on this pair, as
    the settings screen names them. Dismissed with the chosen choice's key."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, choices: list[tuple[str, str]], current: str) -> None:
        super().__init__()
        self.choices = choices  # (key, label)
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog-box race-picker"):
            yield Static("Race another drafter", classes="dialog-title")
            yield OptionList(*[Option(label + ("  (current)" if key == self.current else ""),
                                      id=key) for key, label in self.choices], id="drafter-list")
            yield Static("What drafts on the speculative side; the chat's settings do not "
                         "change · Enter picks · Esc cancels", classes="dialog-hint")

    def on_mount(self) -> None:
        keys = [k for k, _ in self.choices]
        if self.current in keys:
            self.query_one("#drafter-list", OptionList).highlighted = keys.index(self.current)

    @on(OptionList.OptionSelected, "#drafter-list")
    def picked(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def action_cancel(self) -> None:
        self.dismiss(None)
