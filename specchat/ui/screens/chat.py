"""The chat screen: transcript, message box, stats bar, past chats; replies in a worker thread.

The chat and its reply belong to a :class:`ChatSession` (Textual-free): this screen hands it
what the user does and what the reply worker posts, and draws the view updates it returns.
One reply runs at a time, in this screen's ``generate`` thread worker, with its own cancel
event; its updates come back as :class:`ReplyProgress` messages, a failure as
:class:`WorkerFailed`. What could not be saved stays on screen, marked in the top bar, and a
timer retries it.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from rich.text import Text
from textual import events, on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Static

from specchat.engine.decode.chat import ChatEngine
from specchat.engine.decode.chat_template import Message
from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.llama import rpc
from specchat.engine.llama.rpc import RpcError
from specchat.errors import SpecchatError
from specchat.runtime import Runtime
from specchat.session.attachments import AttachedFile
from specchat.session.auto_calibration import AutoCalibration
from specchat.session.controller import ChatSession
from specchat.session.conversation import Conversation
from specchat.session.live import live_from_record
from specchat.session.views import Ended, Failed, Figures, Notice, Redraw, SaveState, Streamed
from specchat.session.worker import ReplyJob, run_reply
from specchat.store import ReplyFormat, ReplyStats
from specchat.textsafe import safe_text
from specchat.ui.chat_settings import ChatSettings
from specchat.ui.fate_style import legend
from specchat.ui.keys import CHAT_KEYS, NARROW_FOOTER, bindings
from specchat.ui.messages import (
    AttachmentRead,
    AttachmentsMeasured,
    CalibrationEnded,
    CalibrationProgress,
    MessagePrepared,
    ReplyProgress,
    RpcDropped,
    WorkerFailed,
)
from specchat.ui.screens.chat_attachments import MessageFiles, measure_all, prepare_one, read_one
from specchat.ui.screens.chat_calibration import BackgroundCalibration
from specchat.ui.screens.chat_history import ChatHistory
from specchat.ui.screens.chat_messages import MessageActions
from specchat.ui.screens.chat_search import ChatSearch
from specchat.ui.screens.chat_tools import ChatToolCalls, topbar_part
from specchat.ui.screens.dialogs import ErrorDialog
from specchat.ui.screens.help import HelpScreen
from specchat.ui.screens.presets import PresetPicker, PromptChoice
from specchat.ui.screens.race import RaceScreen
from specchat.ui.screens.race_pickers import PairPicker
from specchat.ui.screens.reply_format import ReplyFormatScreen
from specchat.ui.screens.settings import SettingsScreen
from specchat.ui.services import AppServices
from specchat.ui.widgets.attachments import AttachmentBar
from specchat.ui.widgets.chat_input import ChatInput
from specchat.ui.widgets.chat_list import ChatList
from specchat.ui.widgets.key_footer import NARROW, KeyFooter
from specchat.ui.widgets.stats_bar import StatsBar
from specchat.ui.widgets.tool_card import ToolCard
from specchat.ui.widgets.transcript import AssistantMessage, Transcript
from specchat.ui.widgets.transfers import TransferList

TICK_S = 5.0  # how often unsaved turns are retried (and the chat's ownership renewed)
CALIBRATION_WAIT_S = 30.0  # a reply waits this long at most for the calibration to stop


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


T = TypeVar("T")  # a chat setting a dialog chose

class ChatScreen(Screen[None]):
    BINDINGS = bindings(CHAT_KEYS)

    def __init__(self, services: AppServices, runtime: Runtime, backend: str,
                 reopen: int | None = None) -> None:
        super().__init__()
        self.reopen = reopen  # a saved chat to show first (after switching pairs for it)
        self.services = services
        self.runtime = runtime
        self._rpc_down: str | None = None  # an RPC server of the target stopped answering
        self._rpc_unlisten: Callable[[], None] | None = None
        self.backend = backend
        self.settings = services.settings()
        self.engine = ChatEngine(services.make_decoder(runtime, self.settings))
        self._engine_stale = False
        self.session = ChatSession(services.store, runtime.selection.label,
                                   hub=services.tool_hub,
                                   max_tool_rounds=services.config.max_tool_rounds)
        self.history = ChatHistory(self, self.session, services, self.when_idle,
                                   self._opened, self._retitled)
        self.messages = MessageActions(self, self.session, self.start_reply)
        self.search = ChatSearch(self, self.session, services, self.history)
        self.files = MessageFiles(self)  # the files attached to the message being written
        self.tool_calls = ChatToolCalls(self)  # this chat's tools, a reply's calls as cards
        self.calibration = BackgroundCalibration(self, services, runtime, self.session)
        self.view = "markdown"
        self.show_rejected = False
        self.job_widget: AssistantMessage | None = None
        self._after_reply: Callable[[], None] | None = None
        self.idle = threading.Event()  # set while no reply is being generated
        self.idle.set()
        self.filled = False  # the chat list shown and the input focused (see _fill)
        self._ui_clock: tuple[float, float] | None = None  # (thread CPU, wall) at last chunk
        self.unsaved = 0
        self.rescued: Path | None = None  # where unsaved turns went on quitting, if anywhere
        self._saved_on_exit = False
        self._shown_topbar = ""

    # --- layout -----------------------------------------------------------------------------

    @property
    def conversation(self) -> Conversation:
        return self.session.conversation

    @property
    def job(self) -> ReplyJob | None:
        return self.session.job

    @property
    def pair_label(self) -> str:
        return self.runtime.selection.label

    def models_label(self) -> str:
        sel = self.runtime.selection
        if sel.draft is not None and self.runtime.draft is not None:
            return f"{sel.label}: {pair_names(sel.target.name, sel.draft.name)}"
        return short_name(sel.target.name)

    @property
    def system_prompt(self) -> str:
        """This chat's own (F9), else the settings' one."""
        own = self.conversation.system_prompt
        return own if own is not None else self.settings.system_prompt

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
                transcript = Transcript(id="transcript")
                transcript.position = lambda turn: self.conversation.position(turn)  # ‹ 2/3 ›
                yield transcript
                yield Static(legend(self.show_rejected, self.view), id="legend")
                yield AttachmentBar(id="attachments")
                yield ChatInput(id="input")
        yield TransferList(id="calibration")  # shown while the pair is calibrated
        yield StatsBar(self.backend, self.models_label(), self.engine.n_ctx,
                       speculative=self.speculative,
                       gamma_mode=self.settings.gamma_label, id="stats")
        yield KeyFooter(NARROW_FOOTER)

    def _topbar(self) -> Text:
        out = Text(f"specchat · {safe_text(self.conversation.title)}")  # text, not markup
        c = self.conversation
        if c.preset is not None or c.system_prompt is not None:
            out.append(f"  · prompt: {safe_text(c.preset or 'its own')}", "dim")
        if c.reply_format.constrained:  # why the replies are JSON (F10)
            out.append(f"  · replies: {c.reply_format.label}", "bold")
        tools = topbar_part(c.tools)
        if tools is not None:
            out.append(tools)
        if self.session.owner is not None:
            out.append("  · read-only: open in another specchat", "bold yellow")
        if self.unsaved:
            n = self.unsaved
            out.append(f"  · {n} message{'s' if n > 1 else ''} not saved yet (retrying)",
                       "bold red")
        return out

    def _retitled(self) -> None:
        text = self._topbar()
        self._shown_topbar = text.plain
        self.query_one("#topbar", Static).update(text)

    def on_mount(self) -> None:
        # A dropped server is told on llama.cpp's thread: only a message crosses to this one.
        self._rpc_unlisten = rpc.on_failure(lambda text: self.post_message(RpcDropped(text))) \
            if self.runtime.target.settings.rpc else None
        self._shown_topbar = self._topbar().plain
        self._fill()
        self.set_interval(TICK_S, self._tick)
        if self.services.config_problem:
            self.notify(f"{self.services.config_problem}; using default settings",
                        title="Settings not loaded", severity="warning", timeout=10, markup=False)
        if self.services.store_problem:
            self.notify(self.services.store_problem, title="Chat history", severity="warning",
                        timeout=20, markup=False)

    def on_resize(self, event: events.Resize) -> None:
        # Below NARROW columns: a narrower chat list, no sparklines, a compact footer of the
        # essential keys (app.tcss, .-narrow), so nothing essential is cut at 80×24.
        narrow = event.size.width < NARROW
        self.set_class(narrow, "-narrow")
        for footer in self.query(KeyFooter):
            footer.set_narrow(narrow)

    def _fill(self) -> None:
        """The chat list filled and the input focused, once the widgets are there (a fast
        machine can deliver the mount before the composed children)."""
        if not self.query(ChatList) or not self.query(ChatInput):
            self.call_after_refresh(self._fill)
            return
        self.refresh_chat_list()
        self.query_one(ChatInput).focus()
        if self.reopen is not None:
            chat_id, self.reopen = self.reopen, None
            self.history.open_now(chat_id, offer=False)  # the pair was just chosen for it
        self.filled = True
        self.calibration.quiet()

    @property
    def transcript(self) -> Transcript:
        return self.query_one(Transcript)

    @property
    def stats_bar(self) -> StatsBar:
        return self.query_one(StatsBar)

    def refresh_chat_list(self) -> None:
        self.history.refresh()

    # --- drawing what the session says ------------------------------------------------------

    def render_views(self, views: list[Any]) -> None:
        for v in views:
            if self.tool_calls.view(v):  # a tool call's card, its result, the next round
                continue
            if isinstance(v, Streamed):
                self._streamed(v)
            elif isinstance(v, Figures):
                self.stats_bar.show(v.stats, busy=v.busy)
            elif isinstance(v, Ended):
                self._ended(v)
            elif isinstance(v, Notice):
                severity = v.severity if v.severity in ("warning", "error") else "information"
                self.notify(v.text, title=v.title, severity=severity,  # type: ignore[arg-type]
                            timeout=10 if severity != "information" else 5, markup=False)
            elif isinstance(v, Failed):
                self.app.push_screen(ErrorDialog(v.title, v.text))
            elif isinstance(v, Redraw):
                self.transcript.show_turns(self.conversation.turns)
                if self.session.job is None:
                    self._branch_stats()  # the shown branch changed: its figures, not the old
                    self.files.chat_changed()
                self.messages.shown()
            elif isinstance(v, SaveState):
                self.unsaved = v.unsaved
                self.transcript.mark_unsaved(self.session.unsaved_turns())
                if self._topbar().plain != self._shown_topbar:  # (read-only may have changed)
                    self._retitled()

    def _streamed(self, v: Streamed) -> None:
        job = self.session.job
        if job is None or self.job_widget is None:
            return
        # This thread's CPU time since the last chunk is what drawing costs: pace by it.
        cpu, wall = time.thread_time(), time.monotonic()
        if self._ui_clock is not None:
            job.pace.observe(cpu - self._ui_clock[0], wall - self._ui_clock[1])
        self._ui_clock = (cpu, wall)
        self.transcript.append(self.job_widget, v.segments)

    def _ended(self, v: Ended) -> None:
        widget, self.job_widget = self.job_widget, None
        self.stats_bar.busy = False
        self.query_one(ChatInput).cursor_blink = True
        if widget is not None:
            if v.dropped:
                widget.remove()
            else:
                self.transcript.finish(widget, v.turn.status, v.turn.stats)
        self.refresh_chat_list()
        self.files.chat_changed()  # files attached while it ran: the chat has grown
        if self._after_reply is not None:
            then, self._after_reply = self._after_reply, None
            then()
        self.calibration.reply_ended()

    def _tick(self) -> None:
        self.render_views(self.session.tick())

    # --- sending and generating --------------------------------------------------------------

    @on(ChatInput.Submitted)
    def send(self, event: ChatInput.Submitted) -> None:
        if self.files.files:  # read again first, in a worker: see chat_attachments
            self.files.send(event.text)
        elif self.send_text(event.text):
            self.query_one(ChatInput).clear()

    def send_text(self, text: str, title: str | None = None) -> bool:
        """Send ``text`` and start the reply; False (the text stays in the box) if refused.
        ``title``: as :meth:`ChatSession.send` takes it."""
        new_chat = self.conversation.chat_id is None and not self.conversation.turns
        if not self.start_reply(lambda system, sampling, meta: self.session.send(
                text, system, sampling, meta, title=title)):
            return False
        if new_chat:
            self._retitled()
            self.refresh_chat_list()
        return True

    def start_reply(self, start: Callable[[str, SamplerSettings, ReplyStats], list[Any]],
                    redraw: bool = False) -> bool:
        """Start a reply through the session (``start(system prompt, sampling, meta)``: send,
        regenerate, edit); ``redraw``: the shown branch changed above the reply. False when
        the session refused (its notice is shown)."""
        if self._rpc_down is not None:
            self.notify(self._rpc_down, title="RPC server", severity="error", timeout=30,
                        markup=False)
            return False
        if self._engine_stale and self.session.job is None:
            self.engine = ChatEngine(self.services.make_decoder(self.runtime, self.settings))
            self._engine_stale = False
            self.stats_bar.speculative = self.speculative
        meta = ReplyStats(decoder=self.engine.decoder.name, gamma_mode=self.settings.gamma_mode,
                          ctx_size=self.engine.n_ctx, pair=self.pair_label)
        views = start(self.system_prompt, self.settings.sampling, meta)
        job, reply = self.session.job, self.session.reply
        if job is None or reply is None or self.job_widget is not None:
            self.render_views(views)
            return False
        self.messages.clear()
        if redraw:
            self.transcript.show_turns(self.conversation.turns[:-1])
        else:
            self.transcript.add_user(self.conversation.turns[-2])
        self.job_widget = self.transcript.add_reply(reply)
        self.idle.clear()
        self._ui_clock = None
        self.query_one(ChatInput).cursor_blink = False  # a redraw twice a second, saved
        self.stats_bar.show(self.stats_bar.stats, busy=True, record=False)
        self.calibration.pause()  # the reply goes first: its worker waits for the pause
        self.generate(job, self.engine)
        self.render_views(views)
        return True

    @work(thread=True, exit_on_error=False, group="reply")
    def generate(self, job: ReplyJob, engine: ChatEngine) -> None:
        """The reply, in a thread: updates go to this screen as messages (thread-safe)."""
        try:
            self.calibration.wait_stopped(CALIBRATION_WAIT_S)  # never two llama.cpp jobs at once
            run_reply(job, engine, lambda u: self.post_message(ReplyProgress(u)))
        except Exception as e:  # the session says it, in a dialog; never a traceback
            self.post_message(WorkerFailed(job.id, e))
        finally:
            self.idle.set()

    # --- attached files (chat_attachments): reading and counting them off this thread -------

    @work(thread=True, exit_on_error=False, group="attach")
    def read_attachment(self, job: int, engine: ChatEngine, path: str,
                        history: list[Message], text: str, files: list[AttachedFile],
                        limit: int, max_tokens: int) -> None:
        self.post_message(read_one(job, engine, path, history, text, files, limit, max_tokens))

    @work(thread=True, exit_on_error=False, group="attach")
    def measure_attachments(self, job: int, engine: ChatEngine, history: list[Message],
                            text: str, files: list[AttachedFile], max_tokens: int) -> None:
        self.post_message(measure_all(job, engine, history, text, files, max_tokens))

    @work(thread=True, exit_on_error=False, group="attach")
    def prepare_message(self, engine: ChatEngine, history: list[Message], typed: str,
                        paths: list[str], limit: int, max_tokens: int) -> None:
        self.post_message(prepare_one(engine, history, typed, paths, limit, max_tokens))

    def on_attachment_read(self, msg: AttachmentRead) -> None:
        self.files.read(msg)

    def on_attachments_measured(self, msg: AttachmentsMeasured) -> None:
        self.files.measured(msg)

    def on_message_prepared(self, msg: MessagePrepared) -> None:
        self.files.prepared(msg)

    @on(ChatInput.AttachPath)
    def _at_path(self, event: ChatInput.AttachPath) -> None:
        self.files.add(event.path)

    @on(AttachmentBar.Removed)
    def _chip_removed(self, event: AttachmentBar.Removed) -> None:
        self.files.remove(event.index)

    def action_attach_file(self) -> None:
        self.files.pick()

    @work(thread=True, exit_on_error=False, group="calibrate")
    def calibrate_in_background(self, job: AutoCalibration) -> None:
        """The pair's calibration, in a thread (see :mod:`.chat_calibration`); it never raises."""
        outcome = job.run(lambda p: self.post_message(CalibrationProgress(p)))
        self.post_message(CalibrationEnded(outcome))

    def on_calibration_progress(self, msg: CalibrationProgress) -> None:
        self.calibration.progress(msg.progress)

    def on_calibration_ended(self, msg: CalibrationEnded) -> None:
        self.calibration.ended(msg.outcome)

    def on_screen_suspend(self) -> None:
        self.calibration.pause()  # another screen in front (the race, the wizard, a dialog)

    def on_screen_resume(self) -> None:
        self.calibration.quiet()

    def on_reply_progress(self, msg: ReplyProgress) -> None:
        self.render_views(self.session.apply(msg.update))

    def on_worker_failed(self, msg: WorkerFailed) -> None:
        self.render_views(self.session.failed(msg.job, msg.error))

    def on_rpc_dropped(self, msg: RpcDropped) -> None:
        """The reply ends as failed, its text kept and saved; no other reply can start."""
        self._rpc_down = msg.text
        job = self.session.job
        if job is not None:
            self.render_views(self.session.failed(job.id, RpcError(msg.text)))
        else:
            self.notify(msg.text, title="RPC server", severity="error", timeout=30, markup=False)

    def on_unmount(self) -> None:
        if self._rpc_unlisten is not None:
            self._rpc_unlisten()

    def when_idle(self, then: Callable[[], None]) -> None:
        """Run ``then`` now, or after stopping the reply in flight (Ctrl+N, opening a chat)."""
        if self.session.job is None:
            then()
            return
        self._after_reply = then
        self.action_stop()

    def cancel_for_exit(self) -> None:
        self.session.cancel()
        self.calibration.pause()

    def stop_engine_work(self, timeout: float) -> None:
        """Before the models are freed: the reply and the calibration stopped, their threads
        done."""
        self.cancel_for_exit()
        self.idle.wait(timeout)
        self.calibration.close(timeout)

    def save_partial_reply(self) -> None:
        """On quitting (after the worker stopped): keep what was shown, as stopped; whatever
        still cannot be saved goes to a Markdown file (``rescued``)."""
        if self._saved_on_exit:
            return
        self._saved_on_exit = True
        self.session.stop_for_exit()
        paths = self.services.paths
        folder = paths.chats_db.parent if paths is not None else self.services.export_dir
        self.rescued = self.session.rescue(folder)
        self.session.close()

    # --- actions ----------------------------------------------------------------------------

    def on_key(self, event: events.Key) -> None:
        # Esc and a key typed within Textual's ESCDELAY arrive as Alt+key (the message box
        # handles its own): still a stop, wherever the focus is.
        if event.key.startswith("alt+") and event.is_printable:
            self.action_stop()

    def take_typing(self, event: events.Key | events.Paste) -> bool:
        """A character typed (or text pasted) while the chat list or the transcript has focus
        (after Ctrl+L, after a click in the transcript) goes to the message box, which takes
        the focus: what the user types is never lost, and Enter then sends it rather than
        opening a chat. Keys the focused pane is bound to (arrows, Enter, F2, Delete, ...)
        keep their meaning. The app calls this before it hands the event to the focused
        widget, in the order the keys came (see SpecchatApp.on_event)."""
        box = self.query_one(ChatInput)
        focused = self.focused
        if focused is None or focused is box or self.app.screen is not self or box.read_only:
            return False
        if isinstance(event, events.Paste):
            text = event.text
        elif not event.is_printable or event.key in self.active_bindings:
            return False
        else:
            text = event.character or ""
            if event.key.startswith("alt+"):  # Esc and then a key, read as one (see on_key)
                self.action_stop()
        if not text:
            return False
        box.type_in(text)
        return True

    def action_stop(self) -> None:
        if self.session.cancel():
            self.notify("Stopping the reply…", timeout=2, markup=False)
        else:
            self.messages.clear()  # nothing to stop: Esc leaves the message cursor

    def action_stop_calibration(self) -> None:
        self.calibration.stop_by_user()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "stop_calibration":
            return self.calibration.shown  # in the footer only while it runs or is paused
        return True

    def action_new_chat(self) -> None:
        self.when_idle(lambda: self._opened(self.session.new_chat()))

    def _opened(self, views: list[Any]) -> None:
        self.show_conversation()
        self.render_views(views)
        self._retitled()
        self.search.opened()

    def show_conversation(self) -> None:
        conversation = self.conversation
        self.transcript.show_turns(conversation.turns)
        self.query_one("#topbar", Static).update(self._topbar())
        self._branch_stats()
        self.refresh_chat_list()
        self.messages.clear()
        self.files.chat_changed()  # the attached files' ctx figure, for this chat
        self.query_one(ChatInput).focus()

    def _branch_stats(self) -> None:
        """The stats bar for the shown branch: its replies' sparklines, its last reply's
        figures."""
        records = self.conversation.assistant_stats()
        bar = self.stats_bar
        bar.reset()
        gens = [r.generation for r in records]
        bar.set_history([g.alpha for g in gens if g.alpha is not None],
                        [g.decode_tps for g in gens if g.decode_tps])
        if records:
            bar.show(live_from_record(records[-1]), busy=False, record=False)

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
        self.messages.shown()  # the legend, or the selected message's keys in its place

    def show_legend(self, hint: Text | None = None) -> None:
        """The fate legend, or in its place what the selected message's keys do."""
        self.query_one("#legend", Static).update(hint or legend(self.show_rejected, self.view))

    # --- one message (chat_messages.py) -----------------------------------------------------

    def on_transcript_clicked(self, msg: Transcript.Clicked) -> None:
        self.messages.clicked(msg.turn, msg.step)

    def action_select_previous(self) -> None:
        self.messages.move(-1)

    def action_select_next(self) -> None:
        self.messages.move(1)

    def action_message_menu(self) -> None:
        self.messages.menu()

    def action_regenerate(self) -> None:
        self.messages.regenerate()

    def action_previous_alternative(self) -> None:
        self.messages.flip(-1)

    def action_next_alternative(self) -> None:
        self.messages.flip(1)

    def action_copy_message(self) -> None:
        self.messages.copy()

    def action_copy_code(self) -> None:
        self.messages.copy_code()

    def action_edit_message(self) -> None:
        self.messages.edit()

    def action_delete_message(self) -> None:
        self.messages.delete()

    # --- past chats (chat_history.py) --------------------------------------------------------

    def on_chat_list_open(self, msg: ChatList.Open) -> None:
        self.history.open(msg.chat_id)

    def open_chat(self, chat_id: int) -> None:
        """Show a saved chat now (no reply may be running)."""
        self.history.open_now(chat_id)

    def on_chat_list_rename(self, msg: ChatList.Rename) -> None:
        self.history.rename(msg.chat_id, msg.title)

    def on_chat_list_delete(self, msg: ChatList.Delete) -> None:
        self.history.delete(msg.chat_id, msg.title)

    def action_rename_chat(self) -> None:
        self.history.rename_current()

    def action_delete_chat(self) -> None:
        self.history.delete_current()

    def action_export(self) -> None:
        self.history.export()

    def action_toggle_chats(self) -> None:
        sidebar = self.query_one("#sidebar")
        sidebar.display = not sidebar.display
        # Focus moves now (Ctrl+L is a priority key, run before the next key is handed on):
        # what is typed right after it then reaches the list, which passes it to the box.
        self.set_focus(self.query_one(ChatList) if sidebar.display else self.query_one(ChatInput))

    def action_pair_models(self) -> None:
        self.app.open_wizard()  # type: ignore[attr-defined]

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen())

    def action_race(self) -> None:
        """The race screen on this pair (a reply in flight is stopped first: same models)."""
        def race() -> None:
            self.calibration.pause()  # before the race's worker starts: same models
            self.app.push_screen(RaceScreen(self.services, self.runtime))

        self.when_idle(race)

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

    # --- search across chats (chat_search.py) ----------------------------------------------

    def action_search(self) -> None:
        self.search.open()

    # --- the pair: a quick switcher (F8), a chat's own pair (chat_history.py) ---------------

    def action_switch_pair(self) -> None:
        choices = self.services.pair_choices()
        if not choices or self.services.open_label is None:
            self.notify("No other pair or model to switch to here: F3 pairs models.",
                        markup=False)
            return
        current = self.pair_label

        def chosen(label: str | None) -> None:
            if label is None or label == current:
                self.query_one(ChatInput).focus()
                return
            self.app.switch_to(label, self.conversation.chat_id)  # type: ignore[attr-defined]

        self.app.push_screen(PairPicker(
            choices, current, title="Switch pair or model",
            hint="Enter loads it (this chat stays open) · greyed: not on disk (F3 or "
                 "`specchat models pull ID` fetches it) · Esc cancels"), chosen)

    # --- this chat's system prompt (screens/presets.py) ------------------------------------

    def action_pick_preset(self) -> None:
        c = self.conversation
        own = c.system_prompt if c.preset is None else None

        def chosen(choice: PromptChoice | None) -> None:
            self.query_one(ChatInput).focus()
            if choice is None or choice == (c.preset, c.system_prompt):
                return
            preset, prompt = choice
            try:
                self.session.set_prompt(preset, prompt)
            except SpecchatError as e:
                self.notify(f"{e}; the prompt applies until this chat is closed",
                            severity="error", timeout=10, markup=False)
            self._retitled()
            said = f"the {preset} preset" if preset else (
                "its own system prompt" if prompt else "the Settings' system prompt")
            self.notify(f"This chat now uses {said}.", timeout=4, markup=False)

        self.app.push_screen(PresetPicker(self.services.config.all_presets(),
                                          self.settings.system_prompt, c.preset, own), chosen)

    # --- this chat's reply format (screens/reply_format.py) ---------------------------------

    def apply_chat_setting(self, value: T | None, current: T, save: Callable[[T], object],
                           what: str) -> bool:
        """A chat dialog's answer (None: cancelled): back to the message box; a changed value
        saved with the chat (kept for this chat if the store fails, said once), the top bar
        redrawn. Whether it changed."""
        self.query_one(ChatInput).focus()
        if value is None or value == current:
            return False
        try:
            save(value)
        except SpecchatError as e:
            self.notify(f"{e}; the {what} apply until this chat is closed"
                        if what.endswith("s") else
                        f"{e}; the {what} applies until this chat is closed",
                        severity="error", timeout=10, markup=False)
        self._retitled()
        return True

    def action_reply_format(self) -> None:
        current = self.conversation.reply_format

        def chosen(fmt: ReplyFormat | None) -> None:
            if not self.apply_chat_setting(fmt, current, self.session.set_format, "format"):
                return
            assert fmt is not None
            said = {"text": "are free text", "json_object": "are JSON objects"}.get(
                fmt.kind, f"follow its {fmt.label}")
            later = " from the next reply on" if self.session.job is not None else ""
            self.notify(f"This chat's replies {said}{later}.", timeout=4, markup=False)

        self.app.push_screen(ReplyFormatScreen(current), chosen)

    # --- this chat's tools and a reply's tool calls (screens/chat_tools.py) -------------------

    def action_chat_tools(self) -> None:
        self.tool_calls.open()

    @on(ToolCard.Answered)
    def _tool_answered(self, event: ToolCard.Answered) -> None:
        self.tool_calls.answered(event)
