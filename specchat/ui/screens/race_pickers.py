"""The race screen's choosers: a prompt (built-in or typed), a pair and a drafter; the pair
chooser is also the chat screen's quick pair switcher (F8)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

from specchat.models.choices import Choice
from specchat.race.prompts import RacePrompt
from specchat.textsafe import safe_text


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
    """Pick a pair (the race screen: ids of pairs on disk) or a pair or model (the chat's
    switcher: catalog choices with their status; those not on disk are shown, greyed)."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, pairs: Sequence[str | Choice], current: str,
                 title: str = "Race another pair",
                 hint: str = "Pairs whose models are on disk · Enter picks · Esc cancels") -> None:
        super().__init__()
        self.pairs = list(pairs)
        self.current = current
        self.title_text = title
        self.hint = hint

    def _option(self, p: str | Choice) -> Option:
        if isinstance(p, str):
            return Option(p + ("  (current)" if p == self.current else ""), id=p)
        text = Text(safe_text(p.label), style="bold")
        status = "loaded" if p.label == self.current else p.status
        text.append(f"  {p.kind} · {status}", style="green" if p.on_disk else "dim")
        if p.detail:
            text.append(f"\n  {safe_text(p.detail)}", style="dim")
        return Option(text, id=p.label, disabled=not p.on_disk)

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog-box race-picker"):
            yield Static(self.title_text, classes="dialog-title")
            yield OptionList(*[self._option(p) for p in self.pairs], id="pair-list")
            yield Static(self.hint, classes="dialog-hint")

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
