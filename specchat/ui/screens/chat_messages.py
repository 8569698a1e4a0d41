"""One message on the chat screen: the message cursor and what can be done to a message
(copy it or a code block, regenerate, edit and resend, flip alternatives, delete).

A helper the chat screen owns (as chat_history.py): the session does the work on the chat;
this module picks the message, asks what needs asking (a menu, the edit box, which code
block, a confirmation) and says what happened. The focus stays in the message box: the
cursor is moved with Ctrl+Up / Ctrl+Down from there, and the modals give the focus back
when they close.

Without a selection an action takes the obvious message: the last reply (copy, regenerate,
alternatives), the last message of yours (edit), the last message (delete).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.text import Text
from textual.screen import Screen

from specchat.engine.decode.sampling import SamplerSettings
from specchat.session.clipboard import clipboard_text, code_blocks
from specchat.session.controller import ChatSession
from specchat.session.conversation import Turn
from specchat.session.views import View
from specchat.store import ReplyStats
from specchat.ui.screens.dialogs import ConfirmDialog
from specchat.ui.screens.message_dialogs import CodePicker, EditDialog, MessageMenu, preview
from specchat.ui.widgets.legend import Legend
from specchat.ui.widgets.transcript import Transcript

Start = Callable[[str, SamplerSettings, ReplyStats], list[View]]

HINT = "Message selected: F4 actions · Alt+←/→ alternatives · Esc leaves"  # fits at 80×24


class MessageActions:
    def __init__(self, screen: Screen[Any], session: ChatSession,
                 start_reply: Callable[[Start, bool], bool]) -> None:
        self.screen = screen
        self.session = session
        self.start_reply = start_reply  # the screen starts (and draws) a reply the session made
        self.selected: Turn | None = None

    # --- the cursor -------------------------------------------------------------------------

    @property
    def transcript(self) -> Transcript:
        return self.screen.query_one(Transcript)

    def _notify(self, text: str, **kw: Any) -> None:
        self.screen.notify(text, markup=False, **kw)

    def _show(self) -> None:
        self.transcript.select(self.selected)
        hint = Text(HINT, style="bold") if self.selected is not None else None
        self.screen.query_one(Legend).hint = hint  # in the legend's place

    def clear(self) -> None:
        if self.selected is not None:
            self.selected = None
            self._show()

    def shown(self) -> None:
        """The transcript was drawn again: keep the selection if its message is still shown."""
        if self.selected is not None and self.selected not in self.session.conversation.turns:
            self.selected = None
        self._show()

    def move(self, step: int) -> None:
        """Ctrl+Up / Ctrl+Down: the message above / below; below the last one: no selection."""
        turns = self.session.conversation.turns
        if not turns:
            self._notify("No messages yet.")
            return
        if self.selected is None or self.selected not in turns:
            i = len(turns) - 1 if step < 0 else None
        else:
            j = turns.index(self.selected) + step
            i = None if j >= len(turns) else max(0, j)
        self.selected = turns[i] if i is not None else None
        self._show()

    def clicked(self, turn: Turn, step: int) -> None:
        if step:
            self.selected = turn
            self.flip(step)
            return
        self.selected = None if self.selected is turn else turn  # a second click lets go
        self._show()

    def _target(self, kind: str = "") -> Turn | None:
        """The selected message, or the last one of ``kind`` ("user", "assistant", "")."""
        if self.selected is not None and self.selected in self.session.conversation.turns:
            return self.selected
        for t in reversed(self.session.conversation.turns):
            if not kind or t.role == kind:
                return t
        return None

    # --- the menu ---------------------------------------------------------------------------

    def menu(self) -> None:
        turn = self._target("assistant") or self._target()
        if turn is None:
            self._notify("No messages yet.")
            return
        actions = ["copy", "delete"]
        if code_blocks(turn.text):
            actions.append("copy_code")
        actions.append("regenerate")
        if turn.role == "user":
            actions.append("edit")
        if self.session.conversation.position(turn)[1] > 1:
            actions += ["previous", "next"]
        which, of = self.session.conversation.position(turn)
        who = {"user": "You", "tool": "Tool result"}.get(turn.role, "Assistant")
        alt = f" ({which}/{of})" if of > 1 else ""
        heading = f"{who}{alt}: “{preview(turn.text)}”"

        def done(action: str | None) -> None:
            if action is None:
                return
            self.selected = turn
            {"copy": self.copy, "copy_code": self.copy_code, "regenerate": self.regenerate,
             "edit": self.edit, "delete": self.delete, "previous": lambda: self.flip(-1),
             "next": lambda: self.flip(1)}[action]()

        self.screen.app.push_screen(MessageMenu(heading, actions), done)

    # --- the actions ------------------------------------------------------------------------

    def copy(self) -> None:
        turn = self._target("assistant") or self._target()
        if turn is None:
            self._notify("Nothing to copy yet.")
            return
        self._to_clipboard(turn.text, {"assistant": "the reply", "tool": "the tool's result"}
                           .get(turn.role, "your message"))

    def copy_code(self) -> None:
        turn = self._target("assistant") or self._target()
        blocks = code_blocks(turn.text) if turn is not None else []
        if not blocks:
            self._notify("This message has no code block (``` fenced) to copy.")
            return
        if len(blocks) == 1:
            self._to_clipboard(blocks[0].code, "the code block")
            return

        def picked(i: int | None) -> None:
            if i is not None:
                self._to_clipboard(blocks[i].code, f"code block {i + 1} of {len(blocks)}")

        self.screen.app.push_screen(CodePicker(blocks), picked)

    def _to_clipboard(self, text: str, what: str) -> None:
        payload = clipboard_text(text)
        self.screen.app.copy_to_clipboard(payload)
        n = payload.count("\n") + 1
        self._notify(f"Copied {what} ({n} line{'s' if n != 1 else ''}, {len(payload)} "
                     "characters) to the clipboard, through the terminal (OSC 52).",
                     title="Copied", timeout=4)

    def regenerate(self) -> None:
        turn = self._target()
        if turn is not None and turn.role == "user":
            # A message of yours: regenerate the reply shown after it (or reply to it).
            turns = self.session.conversation.turns
            i = turns.index(turn)
            turn = turns[i + 1] if i + 1 < len(turns) else turn
        reply = turn
        self.start_reply(lambda system, sampling, meta: self.session.regenerate(
            reply, system, sampling, meta), True)

    def edit(self) -> None:
        turn = self._target("user")
        if turn is not None and turn.role == "assistant":
            turn = turn.parent  # a reply selected: edit the message it answers
        if turn is None or turn.role != "user":
            self._notify("No message of yours to edit yet.")
            return
        if self.session.busy:
            self._notify("Still replying: press Esc to stop it first.", severity="warning")
            return
        message = turn

        def done(text: str | None) -> None:
            if text is None or text == message.text:
                return
            self.start_reply(lambda system, sampling, meta: self.session.edit(
                message, text, system, sampling, meta), True)

        self.screen.app.push_screen(EditDialog(message.text), done)

    def flip(self, step: int) -> None:
        turns = self.session.conversation.turns
        # No selection: the nearest message from the end that has alternatives.
        turn = self.selected if self.selected in turns else next(
            (t for t in reversed(turns) if self.session.conversation.position(t)[1] > 1),
            self._target("assistant"))
        if turn is None:
            self._notify("No messages yet.")
            return
        alts = self.session.conversation.alternatives(turn)
        views = self.session.flip(turn, step)
        now = next((t for t in alts if t.active), turn)
        self.selected = now if self.selected is not None else None
        self.screen.render_views(views)  # type: ignore[attr-defined]

    def delete(self) -> None:
        turn = self._target()
        if turn is None:
            self._notify("No messages to delete.")
            return
        if self.session.busy:
            self._notify("Still replying: press Esc to stop it first.", severity="warning")
            return
        plan = self.session.deletion(turn)

        def done(yes: bool | None) -> None:
            if yes:
                self.selected = None
                self.screen.render_views(self.session.delete(plan))  # type: ignore[attr-defined]

        self.screen.app.push_screen(ConfirmDialog(f"{plan.question}\n\n“{preview(turn.text)}”"),
                                    done)
