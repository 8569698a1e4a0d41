"""The chat screen's reply: started through the session (send, regenerate, edit), drawn from
the views the session returns, ended; stopped and saved when the app quits.

A helper the chat screen owns (not a base class): ``screen`` is that ChatScreen (Any: importing
chat.py here would make a cycle). The reply itself runs in the screen's ``generate`` thread
worker, with its own cancel event; its updates come back as :class:`ReplyProgress` messages
that the screen hands to the session and then here (:meth:`ChatReplies.draw`). What could not
be saved stays on screen, marked in the top bar, and the screen's timer retries it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specchat.engine.decode.chat import ChatEngine
from specchat.engine.decode.sampling import SamplerSettings
from specchat.session.views import Ended, Failed, Figures, Notice, Redraw, SaveState, Streamed
from specchat.store import ReplyStats
from specchat.ui.screens.dialogs import ErrorDialog
from specchat.ui.widgets.chat_input import ChatInput

Start = Callable[[str, SamplerSettings, ReplyStats], list[Any]]  # (system, sampling, meta)


class ChatReplies:
    def __init__(self, screen: Any) -> None:
        self.screen = screen
        self.rpc_down: str | None = None  # an RPC server of the target stopped answering
        self.after_reply: Callable[[], None] | None = None  # run once the reply has ended
        self.unsaved = 0  # messages the store has not taken yet (the top bar says so)
        self.rescued: Path | None = None  # where unsaved turns went on quitting, if anywhere
        self._ui_clock: tuple[float, float] | None = None  # (thread CPU, wall) at last chunk
        self._saved_on_exit = False

    # --- drawing what the session says ------------------------------------------------------

    def draw(self, views: list[Any]) -> None:
        s = self.screen
        for v in views:
            if s.tool_calls.view(v):  # a tool call's card, its result, the next round
                continue
            if isinstance(v, Streamed):
                self._streamed(v)
            elif isinstance(v, Figures):
                s.stats_bar.show(v.stats, busy=v.busy)
            elif isinstance(v, Ended):
                self._ended(v)
            elif isinstance(v, Notice):
                severity = v.severity if v.severity in ("warning", "error") else "information"
                s.notify(v.text, title=v.title, severity=severity,
                         timeout=10 if severity != "information" else 5, markup=False)
            elif isinstance(v, Failed):
                s.app.push_screen(ErrorDialog(v.title, v.text))
            elif isinstance(v, Redraw):
                s.transcript.show_turns(s.conversation.turns)
                if s.session.job is None:
                    s.stats_bar.show_replies(s.conversation.assistant_stats())  # this branch's
                    s.files.chat_changed()
                s.messages.shown()
            elif isinstance(v, SaveState):
                self.unsaved = v.unsaved
                s.transcript.mark_unsaved(s.session.unsaved_turns())
                s.retitled()  # (read-only may have changed too)

    def _streamed(self, v: Streamed) -> None:
        job, transcript = self.screen.session.job, self.screen.transcript
        if job is None or transcript.reply is None:
            return
        # This thread's CPU time since the last chunk is what drawing costs: pace by it.
        cpu, wall = time.thread_time(), time.monotonic()
        if self._ui_clock is not None:
            job.pace.observe(cpu - self._ui_clock[0], wall - self._ui_clock[1])
        self._ui_clock = (cpu, wall)
        transcript.append(transcript.reply, v.segments)

    def _ended(self, v: Ended) -> None:
        s = self.screen
        s.stats_bar.busy = False
        s.query_one(ChatInput).cursor_blink = True
        s.transcript.end_reply(v.turn.status, v.turn.stats, dropped=v.dropped)
        s.history.show_chats()
        s.files.chat_changed()  # files attached while it ran: the chat has grown
        if self.after_reply is not None:
            then, self.after_reply = self.after_reply, None
            then()
        s.calibration.reply_ended()

    # --- starting a reply -------------------------------------------------------------------

    def send_text(self, text: str, title: str | None = None) -> bool:
        """Send ``text`` and start the reply; False (the text stays in the box) if refused.
        ``title``: as :meth:`ChatSession.send` takes it."""
        s = self.screen
        new_chat = s.conversation.chat_id is None and not s.conversation.turns
        if not self.start(lambda system, sampling, meta: s.session.send(
                text, system, sampling, meta, title=title)):
            return False
        if new_chat:
            s.retitled()
            s.history.show_chats()
        return True

    def start(self, start: Start, redraw: bool = False) -> bool:
        """Start a reply through the session (``start(system prompt, sampling, meta)``: send,
        regenerate, edit); ``redraw``: the shown branch changed above the reply. False when
        the session refused (its notice is shown)."""
        s = self.screen
        if self.rpc_down is not None:
            s.notify(self.rpc_down, title="RPC server", severity="error", timeout=30,
                     markup=False)
            return False
        if s.engine_stale and s.session.job is None:  # new settings since the last reply
            s.engine = ChatEngine(s.services.make_decoder(s.runtime, s.settings))
            s.engine_stale = False
            s.stats_bar.speculative = s.engine.decoder.name != "plain"
        engine: ChatEngine = s.engine
        meta = ReplyStats(decoder=engine.decoder.name, gamma_mode=s.settings.gamma_mode,
                          ctx_size=engine.n_ctx, pair=s.pair_label)
        views = start(s.system_prompt, s.settings.sampling, meta)
        job, reply, transcript = s.session.job, s.session.reply, s.transcript
        if job is None or reply is None or transcript.reply is not None:
            self.draw(views)
            return False
        s.messages.clear()
        if redraw:
            transcript.show_turns(s.conversation.turns[:-1])
        else:
            transcript.add_user(s.conversation.turns[-2])
        transcript.add_reply(reply)
        s.idle.clear()
        self._ui_clock = None
        s.query_one(ChatInput).cursor_blink = False  # a redraw twice a second, saved
        s.stats_bar.busy = True
        s.calibration.pause()  # the reply goes first: its worker waits for the pause
        s.generate(job, engine)
        self.draw(views)
        return True

    def when_idle(self, then: Callable[[], None]) -> None:
        """Run ``then`` now, or after stopping the reply in flight (Ctrl+N, opening a chat)."""
        if self.screen.session.job is None:
            then()
            return
        self.after_reply = then
        self.screen.action_stop()

    # --- an RPC server gone, quitting -------------------------------------------------------

    def rpc_dropped(self, text: str, failed: Callable[[int], list[Any]]) -> None:
        """The reply ends as failed (``failed(job id)``), its text kept and saved; no other
        reply can start."""
        self.rpc_down = text
        job = self.screen.session.job
        if job is not None:
            self.draw(failed(job.id))
        else:
            self.screen.notify(text, title="RPC server", severity="error", timeout=30,
                               markup=False)

    def stop_engine_work(self, timeout: float) -> None:
        """Before the models are freed: the reply and the calibration stopped, their threads
        done."""
        s = self.screen
        s.session.cancel()
        s.calibration.pause()
        s.idle.wait(timeout)
        s.calibration.close(timeout)

    def save_partial_reply(self) -> None:
        """On quitting (after the worker stopped): keep what was shown, as stopped; whatever
        still cannot be saved goes to a Markdown file (``rescued``)."""
        if self._saved_on_exit:
            return
        self._saved_on_exit = True
        s = self.screen
        s.session.stop_for_exit()
        paths = s.services.paths
        folder = paths.chats_db.parent if paths is not None else s.services.export_dir
        self.rescued = s.session.rescue(folder)
        s.session.close()
