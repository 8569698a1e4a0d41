"""The chat screen: the top bar, past chats, the transcript, the message box, the stats bar.

The chat and its reply belong to a :class:`ChatSession` (Textual-free). The screen composes
widgets that each own one concern and hold their state in reactives (the view, Markdown or
tokens, is the screen's, bound to the transcript's and the legend's); helpers, one concern
each, do the work between them and the session: the reply (chat_reply.py), past chats
(chat_history.py), one message, search, attached files, tool calls, the chat's dialogs, the
background calibration (chat_*.py). Engine work runs in thread workers (the reply's is here),
which post typed messages back, figures coalesced.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from textual import events, on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.reactive import reactive
from textual.screen import Screen

from specchat.engine.decode.chat import ChatEngine
from specchat.engine.llama import llama_thread, rpc
from specchat.engine.llama.rpc import RpcError
from specchat.runtime.opening import Runtime
from specchat.session.controller import ChatSession
from specchat.session.conversation import Conversation
from specchat.session.worker import ReplyJob, run_reply
from specchat.ui import messages as msgs
from specchat.ui.chat_settings import ChatSettings
from specchat.ui.keys import CHAT_KEYS, NARROW_FOOTER, bindings
from specchat.ui.screens.chat_attachments import MessageFiles
from specchat.ui.screens.chat_calibration import BackgroundCalibration
from specchat.ui.screens.chat_dialogs import ChatDialogs
from specchat.ui.screens.chat_history import ChatHistory
from specchat.ui.screens.chat_messages import MessageActions
from specchat.ui.screens.chat_reply import ChatReplies
from specchat.ui.screens.chat_search import ChatSearch
from specchat.ui.screens.chat_tools import ChatToolCalls
from specchat.ui.screens.help import HelpScreen
from specchat.ui.screens.race import RaceScreen
from specchat.ui.services import AppServices
from specchat.ui.widgets.chat_input import ChatInput
from specchat.ui.widgets.chat_list import ChatList
from specchat.ui.widgets.key_footer import NARROW, KeyFooter
from specchat.ui.widgets.legend import Legend
from specchat.ui.widgets.stats_bar import StatsBar, models_label
from specchat.ui.widgets.tool_card import ToolCard
from specchat.ui.widgets.top_bar import TopBar, topbar_text
from specchat.ui.widgets.transcript import AssistantMessage, Transcript

TICK_S = 5.0  # how often unsaved turns are retried (and the chat's ownership renewed)
CALIBRATION_WAIT_S = 30.0  # a reply waits this long at most for the calibration to stop


def helper_action(helper: str, method: str, *args: object) -> Callable[[Any], None]:
    """A key's action handed to one of the screen's helpers: ``action_export =
    helper_action("history", "export")`` runs ``self.history.export()``."""
    def action(screen: Any) -> None:
        getattr(getattr(screen, helper), method)(*args)

    action.__doc__ = f"{helper}.{method}{args if args else '()'}"
    return action


class ChatScreen(Screen[None]):
    BINDINGS = bindings(CHAT_KEYS)

    view = reactive("markdown", init=False)  # finished replies: "markdown" or "tokens"
    show_rejected = reactive(False, init=False)  # struck-out drafts (the token view only)

    def __init__(self, services: AppServices, runtime: Runtime, backend: str,
                 reopen: int | None = None) -> None:
        super().__init__()
        self.reopen = reopen  # a saved chat to show first (after switching pairs for it)
        self.services = services
        self.runtime = runtime
        self.settings = services.settings()
        self.engine = ChatEngine(services.make_decoder(runtime, self.settings))
        self.engine_stale = False  # the settings changed: the next reply gets a new engine
        self.session = ChatSession(services.store, runtime.selection.label,
                                   hub=services.tool_hub,
                                   max_tool_rounds=services.config.max_tool_rounds)
        self.replies = ChatReplies(self)  # the reply: started, drawn, ended
        self.history = ChatHistory(self.session, services, self.when_idle, self._opened,
                                   self.retitled, id="sidebar")  # past chats
        self.messages = MessageActions(self, self.session, self.replies.start)
        self.search = ChatSearch(self, self.session, services, self.history)
        self.files = MessageFiles(self, id="attachments")  # attached to the message written
        self.tool_calls = ChatToolCalls(self)  # this chat's tools, a reply's calls as cards
        self.dialogs = ChatDialogs(self)  # settings, pair, system prompt, reply format
        self.calibration = BackgroundCalibration(self, services, runtime, self.session,
                                                 id="calibration")
        self.transcript = Transcript(id="transcript")
        self.transcript.position = lambda turn: self.conversation.position(turn)  # ‹ 2/3 ›
        self.stats_bar = StatsBar(backend, models_label(runtime), self.engine.n_ctx,
                                  speculative=self.engine.decoder.name != "plain",
                                  gamma_mode=self.settings.gamma_label, id="stats")
        self.idle = threading.Event()  # set while no reply is being generated
        self.idle.set()
        self.filled = False  # the chat list shown and the input focused (see _fill)
        self._rpc_unlisten: Callable[[], None] | None = None

    @property
    def conversation(self) -> Conversation:
        return self.session.conversation

    @property
    def job(self) -> ReplyJob | None:
        return self.session.job

    @property
    def pair_label(self) -> str:
        return self.runtime.selection.label

    @property
    def system_prompt(self) -> str:
        """This chat's own (F9), else the settings' one."""
        own = self.conversation.system_prompt
        return own if own is not None else self.settings.system_prompt

    @property
    def job_widget(self) -> AssistantMessage | None:
        return self.transcript.reply

    # --- layout -----------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield TopBar(self._topbar(), id="topbar")
        with Horizontal(id="main"):
            yield self.history
            with Vertical(id="chat-pane"):
                yield self.transcript.data_bind(ChatScreen.view, ChatScreen.show_rejected)
                yield Legend(id="legend").data_bind(ChatScreen.view, ChatScreen.show_rejected)
                yield self.files
                yield ChatInput(id="input")
        yield self.calibration  # shown while the pair is calibrated
        yield self.stats_bar
        yield KeyFooter(NARROW_FOOTER)

    def _topbar(self) -> Any:
        return topbar_text(self.conversation, self.session.owner is not None,
                           self.replies.unsaved)

    def retitled(self) -> None:
        """The chat's title, prompt, format, tools or saved state changed: the top bar."""
        self.query_one(TopBar).title = self._topbar()

    def on_mount(self) -> None:
        # A dropped server is told on llama.cpp's thread: only a message crosses to this one.
        self._rpc_unlisten = rpc.on_failure(lambda text: self.post_message(
            msgs.RpcDropped(text))) if self.runtime.target.settings.rpc else None
        self._fill()
        self.set_interval(TICK_S, self._tick)
        if self.services.config_problem:
            self.notify(f"{self.services.config_problem}; using default settings",
                        title="Settings not loaded", severity="warning", timeout=10, markup=False)
        if self.services.store_problem:
            self.notify(self.services.store_problem, title="Chat history", severity="warning",
                        timeout=20, markup=False)

    def on_unmount(self) -> None:
        if self._rpc_unlisten is not None:
            self._rpc_unlisten()

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
        self.history.show_chats()
        self.query_one(ChatInput).focus()
        if self.reopen is not None:
            chat_id, self.reopen = self.reopen, None
            self.history.open_now(chat_id, offer=False)  # the pair was just chosen for it
        self.filled = True
        self.calibration.quiet()

    def _tick(self) -> None:
        self.render_views(self.session.tick())

    def render_views(self, views: list[Any]) -> None:
        self.replies.draw(views)

    def when_idle(self, then: Callable[[], None]) -> None:
        """Run ``then`` now, or after stopping the reply in flight (Ctrl+N, opening a chat)."""
        self.replies.when_idle(then)

    def _opened(self, views: list[Any]) -> None:
        """Another chat is the session's now: show it (and its views), say why if a search."""
        self.transcript.show_turns(self.conversation.turns)
        self.stats_bar.show_replies(self.conversation.assistant_stats())
        self.history.show_chats()
        self.messages.clear()
        self.files.chat_changed()  # the attached files' ctx figure, for this chat
        self.query_one(ChatInput).focus()
        self.render_views(views)
        self.retitled()
        self.search.opened()

    def settings_changed(self, new: ChatSettings) -> None:
        self.settings = new
        self.engine_stale = True  # a reply in flight keeps the decoder it started with
        self.stats_bar.gamma_mode = new.gamma_label

    # --- the workers, and what they post ----------------------------------------------------

    @work(thread=True, exit_on_error=False, group="reply")
    def generate(self, job: ReplyJob, engine: ChatEngine) -> None:
        """The reply, in a thread: updates go to this screen as messages (thread-safe)."""
        try:
            self.calibration.wait_stopped(CALIBRATION_WAIT_S)  # never two llama.cpp jobs at once
            # on the process's one llama thread: a worker thread that lives on must never
            # have called llama.cpp itself (engine/llama/llama_thread.py)
            llama_thread.run(run_reply, job, engine,
                             lambda u: self.post_message(msgs.ReplyProgress(u)))
        except Exception as e:  # the session says it, in a dialog; never a traceback
            self.post_message(msgs.WorkerFailed(job.id, e))
        finally:
            self.idle.set()

    def on_reply_progress(self, msg: msgs.ReplyProgress) -> None:
        self.render_views(self.session.apply(msg.update))

    def on_worker_failed(self, msg: msgs.WorkerFailed) -> None:
        self.render_views(self.session.failed(msg.job, msg.error))

    def on_rpc_dropped(self, msg: msgs.RpcDropped) -> None:
        self.replies.rpc_dropped(msg.text, lambda job: self.session.failed(job, RpcError(msg.text)))

    def on_screen_suspend(self) -> None:
        self.calibration.pause()  # another screen in front (the race, the wizard, a dialog)

    def on_screen_resume(self) -> None:
        self.calibration.quiet()

    # --- what the widgets post --------------------------------------------------------------

    @on(ChatInput.Submitted)
    def send(self, event: ChatInput.Submitted) -> None:
        if self.files.files:  # read again first, in a worker: see chat_attachments
            self.files.send(event.text)
        elif self.replies.send_text(event.text):
            self.query_one(ChatInput).clear()

    @on(ChatInput.AttachPath)
    def _at_path(self, event: ChatInput.AttachPath) -> None:
        self.files.add(event.path)

    @on(ToolCard.Answered)
    def _tool_answered(self, event: ToolCard.Answered) -> None:
        self.tool_calls.answered(event)

    def on_transcript_clicked(self, msg: Transcript.Clicked) -> None:
        self.messages.clicked(msg.turn, msg.step)

    def open_chat(self, chat_id: int) -> None:
        """Show a saved chat now (no reply may be running)."""
        self.history.open_now(chat_id)

    def on_key(self, event: events.Key) -> None:
        # Esc and a key typed within Textual's ESCDELAY arrive as Alt+key (the message box
        # handles its own): still a stop, wherever the focus is.
        if event.key.startswith("alt+") and event.is_printable:
            self.action_stop()

    def take_typing(self, event: events.Key | events.Paste) -> bool:
        """Typing while another pane has focus goes to the message box (ChatInput.take_typing).
        The app calls this before it hands the event to the focused widget, in the order the
        keys came (see SpecchatApp.on_event)."""
        box = self.query_one(ChatInput)
        if self.focused in (None, box) or self.app.screen is not self:
            return False
        return box.take_typing(event, self.active_bindings, self.action_stop)

    # --- the keys (keys.py), each handed to the helper or widget it concerns ----------------

    def action_stop(self) -> None:
        if self.session.cancel():
            self.notify("Stopping the reply…", timeout=2, markup=False)
        else:
            self.messages.clear()  # nothing to stop: Esc leaves the message cursor

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "stop_calibration":
            return self.calibration.shown  # in the footer only while it runs or is paused
        return True

    def action_new_chat(self) -> None:
        self.when_idle(lambda: self._opened(self.session.new_chat()))

    def action_toggle_view(self) -> None:
        self.view = "tokens" if self.view == "markdown" else "markdown"

    def action_toggle_rejected(self) -> None:
        self.show_rejected = not self.show_rejected
        if self.show_rejected and self.view == "markdown":
            self.view = "tokens"  # struck-out drafts only exist in the token view

    def action_race(self) -> None:
        """The race screen on this pair (a reply in flight is stopped first: same models)."""
        def race() -> None:
            self.calibration.pause()  # before the race's worker starts: same models
            self.app.push_screen(RaceScreen(self.services, self.runtime))

        self.when_idle(race)

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen())

    def action_pair_models(self) -> None:
        self.app.open_wizard()  # type: ignore[attr-defined]

    # One message (chat_messages.py), past chats (chat_history.py), search (chat_search.py),
    # the chat's dialogs (chat_dialogs.py), its tools (chat_tools.py), files (chat_attachments).
    action_select_previous = helper_action("messages", "move", -1)
    action_select_next = helper_action("messages", "move", 1)
    action_message_menu = helper_action("messages", "menu")
    action_regenerate = helper_action("messages", "regenerate")
    action_previous_alternative = helper_action("messages", "flip", -1)
    action_next_alternative = helper_action("messages", "flip", 1)
    action_copy_message = helper_action("messages", "copy")
    action_copy_code = helper_action("messages", "copy_code")
    action_edit_message = helper_action("messages", "edit")
    action_delete_message = helper_action("messages", "delete")
    action_toggle_chats = helper_action("history", "toggle")
    action_rename_chat = helper_action("history", "rename_current")
    action_delete_chat = helper_action("history", "delete_current")
    action_export = helper_action("history", "export")
    action_search = helper_action("search", "open")
    action_settings = helper_action("dialogs", "settings")
    action_switch_pair = helper_action("dialogs", "switch_pair")
    action_pick_preset = helper_action("dialogs", "pick_preset")
    action_reply_format = helper_action("dialogs", "reply_format")
    action_chat_tools = helper_action("tool_calls", "open")
    action_attach_file = helper_action("files", "pick")
    action_stop_calibration = helper_action("calibration", "stop_by_user")
