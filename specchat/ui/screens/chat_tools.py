"""The chat screen's tool calls: this chat's tools (the dialog), and each call of a reply drawn
as a card in the transcript (:mod:`~specchat.ui.widgets.tool_card`).

The turn itself runs in the reply worker (``session.tool_reply``, through ``run_reply``); the
session turns its updates into views, and this helper draws the tool ones: a call's card, the
question on it, its result, the turn's next reply, a line for the transcript. A button on a
card answers the call through :meth:`ChatSession.answer`. The screen's Esc stops the reply: a
question still open ends as a cancelled call, a running call's request is cancelled.
"""

from __future__ import annotations

from typing import Any

from specchat.session.tool_reply import NO_TOOL_FORMAT
from specchat.session.views import (
    CallAsked,
    CallShown,
    Ended,
    NewRound,
    ResultShown,
    TranscriptNote,
)
from specchat.store.chat_tools import ChatTools
from specchat.store.tool_parts import CallRecord
from specchat.ui.screens.tools_dialog import ToolsScreen
from specchat.ui.widgets.chat_input import ChatInput
from specchat.ui.widgets.tool_card import ToolCard, TranscriptNoteLine


class ChatToolCalls:
    def __init__(self, screen: Any) -> None:
        # The ChatScreen (Any: importing chat.py here would make a cycle).
        self.screen = screen
        self.cards: dict[str, ToolCard] = {}  # this reply's calls without a result yet

    # --- the reply's tool views -------------------------------------------------------------

    def view(self, v: object) -> bool:
        """Draw ``v`` if it is a tool view; whether it was."""
        s = self.screen
        if isinstance(v, CallShown):
            widget = s.transcript.reply
            if widget is not None and widget.turn is v.turn and widget.streaming:
                s.transcript.finish(widget, "done", None)  # its text is whole: no "generating…"
            card = ToolCard(v.call)
            self.cards[v.call.id] = card
            s.transcript.add(card)
        elif isinstance(v, CallAsked):
            card = self.cards.get(v.call_id)
            if card is not None:
                card.ask(v.server, v.always)
                box = s.query_one(ChatInput)
                if not v.always and (s.focused is None or (s.focused is box and not box.text)):
                    # Enter allows once, Tab reaches the others; typing goes to the box.
                    s.call_after_refresh(card.focus_question)
        elif isinstance(v, ResultShown):
            part = v.turn.tool
            card = self.cards.pop(part.call_id or "", None) if part is not None else None
            if card is None:
                call = v.turn.call() or CallRecord(part.call_id or "" if part else "",
                                                   part.name if part else "?", "{}")
                s.transcript.add(ToolCard(call, result=v.turn))
            else:
                card.set_result(v.turn)
        elif isinstance(v, NewRound):
            s.transcript.end_reply(v.ended.status, v.ended.stats)
            s.transcript.add_reply(v.turn)
        elif isinstance(v, TranscriptNote):
            s.transcript.add(TranscriptNoteLine(v.text))
        else:
            if isinstance(v, Ended):  # (the screen draws it too): calls never answered
                for card in self.cards.values():
                    card.stopped()
                self.cards.clear()
            return False
        return True

    def answered(self, event: ToolCard.Answered) -> None:
        """A button on a card: the answer goes to the reply's worker."""
        s = self.screen
        s.render_views(s.session.answer(event.call_id, event.name, event.decision))
        if event.decision == "always":
            s.retitled()
        focused = s.focused
        if focused is None or focused is event.card or event.card in focused.ancestors:
            s.query_one(ChatInput).focus()  # the question is gone: back to the message box

    # --- this chat's tools (tools_dialog.py) ------------------------------------------------

    def open(self) -> None:
        s = self.screen
        current: ChatTools = s.conversation.tools

        def chosen(tools: ChatTools | None) -> None:
            if not s.dialogs.apply(tools, current, s.session.set_tools, "tools"):
                return
            assert tools is not None
            if tools.on and not s.engine.template.takes_tools:
                s.notify(NO_TOOL_FORMAT[0].upper() + NO_TOOL_FORMAT[1:] + ".",
                         title="Tools", severity="warning", timeout=15, markup=False)
                return
            said = (f"This chat offers the tools of {', '.join(tools.servers)}: each call asks "
                    "you first." if tools.on else "This chat offers no tools.")
            s.notify(said, title="Tools", timeout=5, markup=False)

        s.app.push_screen(ToolsScreen(current, s.services.config.mcp_servers,
                                      s.engine.template.takes_tools, s.services.tool_hub()),
                          chosen)
