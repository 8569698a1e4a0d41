"""The settings screen: system prompt, sampling, max tokens, seed, γ and the drafter.

Dismisses with the new :class:`ChatSettings` (saved to the config file by the caller), or None
when cancelled. A bad value keeps the screen open with a one-line reason.
"""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid, Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select, Static, TextArea

from specchat.ui.chat_settings import DRAFTER_CHOICES, ChatSettings, parse_settings


class SettingsScreen(ModalScreen[ChatSettings | None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel"),
                Binding("ctrl+s", "save", "Save", priority=True)]

    def __init__(self, settings: ChatSettings, pair_gamma: int | None, has_draft: bool) -> None:
        super().__init__()
        self.settings = settings
        self.pair_gamma = pair_gamma
        self.has_draft = has_draft

    def compose(self) -> ComposeResult:
        s, sp = self.settings, self.settings.sampling
        pair_label = f"the pair's ({self.pair_gamma})" if self.pair_gamma else "the pair's"
        with Vertical(id="settings-box"):
            yield Static("Settings", id="settings-title")
            with VerticalScroll(id="settings-form"):
                yield Label("System prompt")
                yield TextArea(s.system_prompt, id="system-prompt", soft_wrap=True,
                               tab_behavior="focus", compact=True)
                with Grid(id="settings-grid"):
                    yield from _field("Temperature (0 = greedy)", "temperature",
                                      _num(sp.temperature))
                    yield from _field("Top-p (1 = off)", "top-p", _num(sp.top_p))
                    yield from _field("Top-k (0 = off)", "top-k", str(sp.top_k))
                    yield from _field("Min-p (0 = off)", "min-p", _num(sp.min_p))
                    yield from _field("Max tokens per reply", "max-tokens", str(sp.max_tokens))
                    yield from _field("Seed (blank = random)", "seed",
                                      "" if sp.seed is None else str(sp.seed))
                    yield Label("γ, draft tokens per step")
                    yield Select([(f"{pair_label} recommended", "pair"), ("fixed", "fixed"),
                                  ("auto (tuned as it goes)", "auto")], value=s.gamma_mode,
                                 allow_blank=False, id="gamma-mode", compact=True)
                    yield from _field("γ when fixed", "gamma", str(s.gamma))
                    yield Label("Drafter")
                    choices = [(label, value) for value, label in DRAFTER_CHOICES.items()]
                    if s.drafter not in DRAFTER_CHOICES:  # e.g. from --drafter tree,ngram
                        choices.append((s.drafter.replace(",", ", then "), s.drafter))
                    yield Select(choices, value=s.drafter, allow_blank=False, id="drafter",
                                 compact=True)
                if not self.has_draft:
                    yield Static("This model runs without a draft model: γ and the drafters "
                                 "that use one apply when you open a pair.",
                                 classes="dialog-hint")
            yield Static("", id="settings-error")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Save (Ctrl+S)", variant="primary", id="save")
                yield Button("Cancel (Esc)", id="cancel")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "save":
            self.action_save()
        else:
            self.action_cancel()

    def action_save(self) -> None:
        def text(widget_id: str) -> str:
            return self.query_one(f"#{widget_id}", Input).value

        try:
            new = parse_settings(
                self.query_one("#system-prompt", TextArea).text, text("temperature"),
                text("top-p"), text("top-k"), text("min-p"), text("max-tokens"), text("seed"),
                str(self.query_one("#gamma-mode", Select).value), text("gamma"),
                str(self.query_one("#drafter", Select).value), self.settings.sampling)
        except ValueError as e:
            self.query_one("#settings-error", Static).update(f"✗ {e}")
            return
        self.dismiss(new)

    def action_cancel(self) -> None:
        self.dismiss(None)


def _field(label: str, widget_id: str, value: str) -> ComposeResult:
    yield Label(label)
    yield Input(value, id=widget_id, compact=True)


def _num(v: float) -> str:
    return f"{v:g}"
