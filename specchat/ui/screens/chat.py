"""The chat screen: transcript, message box, stats bar, past chats; replies in a worker thread.

One reply runs at a time, in the app's ``generate_reply`` thread worker, with its own cancel
event. Its events come back to this screen as ReplyChunk / StatsUpdate / ReplyFinished
messages; failures go to the app's error sink, which calls :meth:`ChatScreen.reply_failed`.
Each message is saved the moment it is complete, so a crash loses at most the reply in flight.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable

from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Footer, Static

from specchat.engine.chat import ChatEngine
from specchat.errors import SpecchatError
from specchat.runtime import Runtime
from specchat.store import FateTrace, ReplyStats
from specchat.textsafe import safe_text
from specchat.ui.chat_settings import ChatSettings
from specchat.ui.conversation import Conversation, Turn
from specchat.ui.fate_style import legend
from specchat.ui.generation import ReplyJob
from specchat.ui.keys import CHAT_KEYS, bindings
from specchat.ui.live import live_from_record
from specchat.ui.messages import ReplyChunk, ReplyFinished, StatsUpdate
from specchat.ui.screens.chat_history import ChatHistoryMixin
from specchat.ui.screens.dialogs import ErrorDialog
from specchat.ui.screens.help import HelpScreen
from specchat.ui.screens.race import RaceScreen
from specchat.ui.screens.settings import SettingsScreen
from specchat.ui.services import AppServices
from specchat.ui.widgets.chat_input import ChatInput
from specchat.ui.widgets.chat_list import ChatList
from specchat.ui.widgets.stats_bar import StatsBar
from specchat.ui.widgets.transcript import AssistantMessage, Transcript


def short_name(name: str) -> str:
    """``SmolLM2 135M Instruct F32 (derived)`` → ``SmolLM2 135M Instruct F32``"""
    return re.sub(r"\s*\([^)]*\)\s*$", "", name)


def pair_names(target: str, draft: str) -> str:
    """``SmolLM2 135M Instruct F32 ← Q3_K_S``: the draft without the words it shares."""
    t, d = short_name(target).split(), short_name(draft).split()
    n = 0
    while n < min(len(t), len(d)) - 1 and t[n] == d[n]:
        n += 1
    return f"{' '.join(t)} ← {' '.join(d[n:])}"


class ChatScreen(ChatHistoryMixin, Screen[None]):
    BINDINGS = bindings(CHAT_KEYS)

    def __init__(self, services: AppServices, runtime: Runtime, backend: str) -> None:
        super().__init__()
        self.services = services
        self.runtime = runtime
        self.backend = backend
        self.settings = services.settings()
        self.engine = ChatEngine(services.make_decoder(runtime, self.settings))
        self._engine_stale = False
        self.conversation = Conversation()
        self.view = "markdown"
        self.show_rejected = False
        self.job: ReplyJob | None = None
        self.job_widget: AssistantMessage | None = None
        self._jobs = 0
        self._after_reply: Callable[[], None] | None = None
        self.idle = threading.Event()  # set while no reply is being generated
        self.idle.set()
        self._ui_clock: tuple[float, float] | None = None  # (thread CPU, wall) at last chunk

    # --- layout -----------------------------------------------------------------------------

    @property
    def pair_label(self) -> str:
        return self.runtime.selection.label

    def models_label(self) -> str:
        sel = self.runtime.selection
        if sel.draft is not None and self.runtime.draft is not None:
            return f"{sel.label}: {pair_names(sel.target.name, sel.draft.name)}"
        return short_name(sel.target.name)

    @property
    def speculative(self) -> bool:
        return self.engine.decoder.name != "plain"

    def compose(self) -> ComposeResult:
        yield Static(self._topbar(), id="topbar")
        with Horizontal(id="main"):
            with Vertical(id="sidebar"):
                yield Static("Chats\n[dim]F2 rename · Del delete[/dim]",
                             id="sidebar-title")
                yield ChatList(id="chat-list")
            with Vertical(id="chat-pane"):
                yield Transcript(id="transcript")
                yield Static(legend(self.show_rejected, self.view), id="legend")
                yield ChatInput(id="input")
        yield StatsBar(self.backend, self.models_label(), self.engine.n_ctx,
                       speculative=self.speculative,
                       gamma_mode=self.settings.gamma_label, id="stats")
        yield Footer()

    def _topbar(self) -> Text:
        return Text(f"specchat · {safe_text(self.conversation.title)}")  # text, not markup

    def on_mount(self) -> None:
        self.refresh_chat_list()
        self.query_one(ChatInput).focus()
        if self.services.config_problem:
            self.notify(f"{self.services.config_problem}; using default settings",
                        title="Settings not loaded", severity="warning", timeout=10, markup=False)

    @property
    def transcript(self) -> Transcript:
        return self.query_one(Transcript)

    @property
    def stats_bar(self) -> StatsBar:
        return self.query_one(StatsBar)

    # --- sending and generating --------------------------------------------------------------

    @on(ChatInput.Submitted)
    def send(self, event: ChatInput.Submitted) -> None:
        if self.job is not None:
            self.notify("Still replying: press Esc to stop it first.", severity="warning")
            return
        self.query_one(ChatInput).clear()
        self.send_text(event.text)

    def send_text(self, text: str) -> None:
        if self._engine_stale:
            self.engine = ChatEngine(self.services.make_decoder(self.runtime, self.settings))
            self._engine_stale = False
            self.stats_bar.speculative = self.speculative
        new_chat = self.conversation.chat_id is None
        user = Turn.user(text)
        self.conversation.turns.append(user)
        self._save(lambda: self.conversation.save_user(self.services.store, user,
                                                       self.pair_label))
        messages = self.conversation.engine_messages(self.settings.system_prompt)
        reply = Turn("assistant", FateTrace())
        self.conversation.turns.append(reply)
        self.transcript.add_user(user)
        self.job_widget = self.transcript.add_reply(reply)
        self._jobs += 1
        self.job = ReplyJob(self._jobs, messages, self.settings.sampling)
        self.idle.clear()
        self._ui_clock = None
        self.query_one(ChatInput).cursor_blink = False  # a redraw twice a second, saved
        self.stats_bar.show(self.stats_bar.stats, busy=True, record=False)
        self.app.generate_reply(self.job, self.engine, self)  # type: ignore[attr-defined]
        if new_chat:
            self.query_one("#topbar", Static).update(self._topbar())
            self.refresh_chat_list()

    def on_reply_chunk(self, msg: ReplyChunk) -> None:
        if self.job is None or msg.job != self.job.id or self.job_widget is None:
            return
        # This thread's CPU time since the last chunk is what drawing costs: pace by it.
        cpu, wall = time.thread_time(), time.monotonic()
        if self._ui_clock is not None:
            self.job.pace.observe(cpu - self._ui_clock[0], wall - self._ui_clock[1])
        self._ui_clock = (cpu, wall)
        self.transcript.append(self.job_widget, msg.segments)
        for notice in msg.notices:
            self.notify(notice, severity="warning", timeout=8, markup=False)

    def on_stats_update(self, msg: StatsUpdate) -> None:
        if self.job is not None and msg.job == self.job.id:
            self.stats_bar.show(msg.stats, busy=True)

    def on_reply_finished(self, msg: ReplyFinished) -> None:
        if self.job is None or msg.job != self.job.id or self.job_widget is None:
            return
        s = msg.stats
        stats = ReplyStats(s, decoder=self.engine.decoder.name, gamma=msg.live.gamma,
                           gamma_mode=msg.live.mode or self.settings.gamma_mode,
                           ctx_size=self.engine.n_ctx, pair=self.pair_label)
        status = "cancelled" if s.stop_reason == "cancelled" else "done"
        self._end_reply(status, stats)
        self.stats_bar.show(msg.live, busy=False)

    def reply_failed(self, error: BaseException) -> None:
        """Called by the app's error sink when the reply worker raised."""
        if self.job is not None:
            self._end_reply("error", None)
        if isinstance(error, SpecchatError):
            self.app.push_screen(ErrorDialog("The reply could not be generated", str(error)))
        else:
            self.app.push_screen(ErrorDialog(
                "Something went wrong (a bug in specchat)",
                f"{type(error).__name__}: {error}\nThe chat so far is saved; you can go on."))

    def _end_reply(self, status: str, stats: ReplyStats | None) -> None:
        widget, self.job, self.job_widget = self.job_widget, None, None
        self.stats_bar.busy = False
        self.query_one(ChatInput).cursor_blink = True
        if widget is not None:
            self.transcript.finish(widget, status, stats)
            turn = widget.turn
            if turn.text or status == "cancelled":
                self._save(lambda: self.conversation.save_assistant(self.services.store, turn))
            else:
                self.conversation.turns.remove(turn)
                widget.remove()
        self.refresh_chat_list()
        if self._after_reply is not None:
            then, self._after_reply = self._after_reply, None
            then()

    def _save(self, write: Callable[[], None]) -> None:
        try:
            write()
        except SpecchatError as e:
            self.notify(f"Not saved: {e}", title="Chat history", severity="error", timeout=10,
                        markup=False)

    def when_idle(self, then: Callable[[], None]) -> None:
        """Run ``then`` now, or after stopping the reply in flight (Ctrl+N, opening a chat)."""
        if self.job is None:
            then()
            return
        self._after_reply = then
        self.action_stop()

    def cancel_for_exit(self) -> None:
        if self.job is not None:
            self.job.cancel.set()

    def save_partial_reply(self) -> None:
        """On quitting mid-reply (after the worker stopped): keep what was shown, as stopped."""
        widget = self.job_widget
        if self.job is not None and widget is not None and widget.turn.text:
            widget.turn.status = "cancelled"
            self._save(lambda: self.conversation.save_assistant(self.services.store, widget.turn))
        self.job = self.job_widget = None

    # --- actions ----------------------------------------------------------------------------

    def on_key(self, event: events.Key) -> None:
        # Esc and a key typed within Textual's ESCDELAY arrive as Alt+key (the message box
        # handles its own): still a stop, wherever the focus is.
        if event.key.startswith("alt+") and event.is_printable:
            self.action_stop()

    def action_stop(self) -> None:
        if self.job is not None and not self.job.cancel.is_set():
            self.job.cancel.set()
            self.notify("Stopping the reply…", timeout=2, markup=False)

    def action_new_chat(self) -> None:
        self.when_idle(lambda: self.show_conversation(Conversation()))

    def show_conversation(self, conversation: Conversation) -> None:
        self.conversation = conversation
        self.transcript.show_turns(conversation.turns)
        self.query_one("#topbar", Static).update(self._topbar())
        records = conversation.assistant_stats()
        bar = self.stats_bar
        bar.reset()
        gens = [r.generation for r in records]
        bar.set_history([g.alpha for g in gens if g.alpha is not None],
                        [g.decode_tps for g in gens if g.decode_tps])
        if records:
            bar.show(live_from_record(records[-1]), busy=False, record=False)
        self.refresh_chat_list()
        self.query_one(ChatInput).focus()

    def action_toggle_view(self) -> None:
        self.view = "tokens" if self.view == "markdown" else "markdown"
        self._apply_view()

    def action_toggle_rejected(self) -> None:
        self.show_rejected = not self.show_rejected
        if self.show_rejected and self.view == "markdown":
            self.view = "tokens"  # struck-out drafts only exist in the token view
        self._apply_view()

    def _apply_view(self) -> None:
        self.transcript.set_view(self.view, self.show_rejected)
        self.query_one("#legend", Static).update(legend(self.show_rejected, self.view))

    def action_toggle_chats(self) -> None:
        sidebar = self.query_one("#sidebar")
        sidebar.display = not sidebar.display
        if sidebar.display:
            self.query_one(ChatList).focus()
        else:
            self.query_one(ChatInput).focus()

    def action_pair_models(self) -> None:
        self.app.open_wizard()  # type: ignore[attr-defined]

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen())

    def action_race(self) -> None:
        """The race screen on this pair (a reply in flight is stopped first: same models)."""
        self.when_idle(lambda: self.app.push_screen(RaceScreen(self.services, self.runtime)))

    def action_settings(self) -> None:
        screen = SettingsScreen(self.settings, self.services.pair_gamma,
                                has_draft=self.runtime.draft is not None)
        self.app.push_screen(screen, self._apply_settings)

    def _apply_settings(self, new: ChatSettings | None) -> None:
        if new is None or new == self.settings:
            return
        self.settings = new
        self._engine_stale = True  # a reply in flight keeps the decoder it started with
        self.stats_bar.set_mode(new.gamma_label)
        try:
            note = self.services.save_settings(new)
        except SpecchatError as e:
            self.notify(f"{e}; the new settings apply to this session only",
                        severity="error", timeout=10, markup=False)
            return
        self.notify(note or "Settings saved.", timeout=4 if not note else 10, markup=False)
