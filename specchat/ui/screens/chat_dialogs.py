"""The chat screen's dialogs for the chat's settings: Settings (Ctrl+S), the pair switcher
(F8), this chat's system prompt (F9), its reply format (F10) and its tools (chat_tools.py
opens that one through :meth:`ChatDialogs.apply`).

A helper the chat screen owns (not a base class): ``screen`` is that ChatScreen (Any: importing
chat.py here would make a cycle). Each dialog's answer is saved through the session or the
services; the screen redraws what it shows from them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from specchat.errors import SpecchatError
from specchat.store import ReplyFormat
from specchat.ui.chat_settings import ChatSettings
from specchat.ui.screens.presets import PresetPicker, PromptChoice
from specchat.ui.screens.race_pickers import PairPicker
from specchat.ui.screens.reply_format import ReplyFormatScreen
from specchat.ui.screens.settings import SettingsScreen
from specchat.ui.widgets.chat_input import ChatInput

T = TypeVar("T")  # a chat setting a dialog chose


class ChatDialogs:
    def __init__(self, screen: Any) -> None:
        self.screen = screen

    def _notify(self, text: str, **kw: Any) -> None:
        self.screen.notify(text, markup=False, **kw)

    def _focus_box(self) -> None:
        self.screen.query_one(ChatInput).focus()

    # --- Settings (Ctrl+S) ------------------------------------------------------------------

    def settings(self) -> None:
        s = self.screen
        dialog = SettingsScreen(s.settings, s.services.pair_gamma,
                                has_draft=s.runtime.draft is not None)
        s.app.push_screen(dialog, self._apply_settings)

    def _apply_settings(self, new: ChatSettings | None) -> None:
        s = self.screen
        if new is None or new == s.settings:
            return
        s.settings_changed(new)
        try:
            note = s.services.save_settings(new)
        except SpecchatError as e:
            self._notify(f"{e}; the new settings apply to this session only",
                         severity="error", timeout=10)
            return
        self._notify(note or "Settings saved.", timeout=4 if not note else 10)

    # --- the pair: a quick switcher (F8) ----------------------------------------------------

    def switch_pair(self) -> None:
        s = self.screen
        choices = s.services.pair_choices()
        if not choices or s.services.open_label is None:
            self._notify("No other pair or model to switch to here: F3 pairs models.")
            return
        current = s.pair_label

        def chosen(label: str | None) -> None:
            if label is None or label == current:
                self._focus_box()
                return
            s.app.switch_to(label, s.conversation.chat_id)

        s.app.push_screen(PairPicker(
            choices, current, title="Switch pair or model",
            hint="Enter loads it (this chat stays open) · greyed: not on disk (F3 or "
                 "`specchat models pull ID` fetches it) · Esc cancels"), chosen)

    # --- this chat's system prompt (F9, screens/presets.py) ---------------------------------

    def pick_preset(self) -> None:
        s = self.screen
        c = s.conversation
        own = c.system_prompt if c.preset is None else None

        def chosen(choice: PromptChoice | None) -> None:
            self._focus_box()
            if choice is None or choice == (c.preset, c.system_prompt):
                return
            preset, prompt = choice
            try:
                s.session.set_prompt(preset, prompt)
            except SpecchatError as e:
                self._notify(f"{e}; the prompt applies until this chat is closed",
                             severity="error", timeout=10)
            s.retitled()
            said = f"the {preset} preset" if preset else (
                "its own system prompt" if prompt else "the Settings' system prompt")
            self._notify(f"This chat now uses {said}.", timeout=4)

        s.app.push_screen(PresetPicker(s.services.config.all_presets(),
                                       s.settings.system_prompt, c.preset, own), chosen)

    # --- this chat's reply format (F10, screens/reply_format.py) ----------------------------

    def apply(self, value: T | None, current: T, save: Callable[[T], object], what: str) -> bool:
        """A chat dialog's answer (None: cancelled): back to the message box; a changed value
        saved with the chat (kept for this chat if the store fails, said once), the top bar
        redrawn. Whether it changed."""
        self._focus_box()
        if value is None or value == current:
            return False
        try:
            save(value)
        except SpecchatError as e:
            self._notify(f"{e}; the {what} apply until this chat is closed"
                         if what.endswith("s") else
                         f"{e}; the {what} applies until this chat is closed",
                         severity="error", timeout=10)
        self.screen.retitled()
        return True

    def reply_format(self) -> None:
        s = self.screen
        current = s.conversation.reply_format

        def chosen(fmt: ReplyFormat | None) -> None:
            if not self.apply(fmt, current, s.session.set_format, "format"):
                return
            assert fmt is not None
            said = {"text": "are free text", "json_object": "are JSON objects"}.get(
                fmt.kind, f"follow its {fmt.label}")
            later = " from the next reply on" if s.session.job is not None else ""
            self._notify(f"This chat's replies {said}{later}.", timeout=4)

        s.app.push_screen(ReplyFormatScreen(current), chosen)
