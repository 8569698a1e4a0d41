"""The specchat app: opens the models (with progress) in a worker, then the chat screen.

The pairing wizard opens first on a first run (nothing configured yet) and from the chat screen
(F3); a pair it saves becomes the default and the app reopens on it. Other screens are pushed
onto this app the way the settings and help screens are. Each worker belongs to the screen
that shows its work (the chat screen's reply, the race's recording, the wizard's jobs; the
app's own: opening the models), catches what its job raises and posts a typed
:class:`WorkerFailed` to its owner: one error sink each, never a traceback.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from textual import events, work
from textual.app import App, SystemCommand
from textual.screen import Screen
from textual.theme import Theme
from textual.worker import get_current_worker

from specchat.engine.llama import rpc
from specchat.engine.llama.hardware import local_gpu_offload
from specchat.engine.llama.llama_lib import backend_name
from specchat.errors import SpecchatError
from specchat.models.catalog import PairEntry
from specchat.models.progress import Progress
from specchat.race.runner import RaceSetup
from specchat.runtime.opening import Runtime
from specchat.ui.messages import LoadProgress, RuntimeReady, WorkerFailed
from specchat.ui.safe_content import guard_textual_content
from specchat.ui.screens.chat import ChatScreen
from specchat.ui.screens.loading import LOADING_TASK, LoadFailedScreen, LoadingScreen
from specchat.ui.screens.race import RaceScreen
from specchat.ui.services import AppServices
from specchat.ui.wizard.screen import WizardScreen

# Shown when the catalog lacks the welcome's two pairs (a user catalog may replace them).
# "{demo}": where the demo's files stand, measured when shown (wizard.welcome.demo_words).
FIRST_RUN_INTRO = ("Welcome! Pair a big target model with a small draft model here, or press "
                   "Esc to start chatting on the built-in demo pair (SmolLM2-135M{demo}).")
SHUTDOWN_WAIT_S = 30.0  # a decode step is milliseconds; this only guards a wedged backend

COMMANDS = (
    ("New chat", "Start an empty chat", "new_chat"),
    ("Stop the reply", "Stop generating; what was written is kept", "stop"),
    ("Toggle Markdown / token colours", "Switch finished replies between the two views",
     "toggle_view"),
    ("Show / hide rejected drafts", "Draft tokens the target threw away, struck out",
     "toggle_rejected"),
    ("Show / hide past chats", "The side list of saved chats", "toggle_chats"),
    ("Rename this chat", "Give the current chat a new title", "rename_chat"),
    ("Delete this chat", "Delete the current chat and its messages", "delete_chat"),
    ("Export this chat to Markdown", "Write the chat to a .md file", "export"),
    ("Search all chats", "Find a message in any chat; Enter opens the chat there", "search"),
    ("System prompt for this chat", "A named preset, one of its own, or the default",
     "pick_preset"),
    ("Reply format for this chat", "Free text, any JSON object, a JSON schema or a grammar "
     "that every reply follows (F10)", "reply_format"),
    ("Tools for this chat", "Which MCP servers' tools this chat offers the model (each call "
     "asks you first), and what it always allows", "chat_tools"),
    ("Attach a file to the message", "A text file the model reads as a fenced block with "
     "its path; a reply that edits it drafts from it (F2)", "attach_file"),
    ("Settings", "System prompt, sampling, γ, n-gram drafting, seed", "settings"),
    ("Switch pair or model", "Load another pair or model on disk; this chat stays open",
     "switch_pair"),
    ("Pair models (wizard)", "Choose a target and a draft, download, check, calibrate, switch",
     "pair_models"),
    ("Race: plain vs speculative", "The same prompt answered both ways, replayed side by side",
     "race"),
    ("Regenerate the reply", "A new reply in place of the last one (or the selected); the "
     "old one stays, ‹ › flips back", "regenerate"),
    ("Message actions", "Copy, copy a code block, regenerate, edit and resend, delete (F4)",
     "message_menu"),
    ("Copy the message", "The selected message, or the last reply, to the clipboard",
     "copy_message"),
    ("Copy a code block", "A ``` block of the selected message or the last reply",
     "copy_code"),
    ("Edit and resend a message", "Your selected or last message; what followed it stays on "
     "its branch", "edit_message"),
    ("Delete a message", "The selected or last message (asks first)", "delete_message"),
    ("Previous alternative", "Of the selected message or the last reply (Alt+←)",
     "previous_alternative"),
    ("Next alternative", "Of the selected message or the last reply (Alt+→)",
     "next_alternative"),
    ("Select the previous message", "Move the message cursor up (Ctrl+↑)", "select_previous"),
    ("Select the next message", "Move the message cursor down (Ctrl+↓)", "select_next"),
    ("Stop calibrating", "Stop measuring this pair in the background (F12); it stays "
     "uncalibrated", "stop_calibration"),
    ("Help: what the numbers mean, and every key",
     "α, τ, γ, the token colours, the planner; then the keys (F1)", "help"),
)


def backend_of(runtime: Runtime) -> str:
    # A CUDA build with no layers offloaded still runs on the CPU.
    if runtime.target.settings.n_gpu_layers == 0:
        return "CPU"
    here = backend_name(gpu_offload=local_gpu_offload())
    servers = runtime.target.settings.rpc
    return f"{here} + RPC ×{len(servers)}" if servers else here


class _WorkerThreads(ThreadPoolExecutor):
    """The threads of Textual's thread workers. After an RPC server dropped, a reply's worker
    stays parked inside llama.cpp for good: quitting does not wait for it then."""

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        super().shutdown(wait=wait and rpc.failure() is None, cancel_futures=cancel_futures)


class SpecchatApp(App[int]):
    CSS_PATH = Path(__file__).with_name("app.tcss")  # absolute: subclasses live elsewhere
    TITLE = "specchat"

    def __init__(self, services: AppServices, race: RaceSetup | None = None) -> None:
        super().__init__()
        guard_textual_content()  # model and file text is shown, never obeyed by the terminal
        self.services = services
        self.start_race = race  # open the race screen on this prompt once the models load
        self.runtime: Runtime | None = None
        self.chat: ChatScreen | None = None
        self.rescued: Path | None = None  # unsaved messages written here on quitting
        self.reopen_chat: int | None = None  # the chat to show again once a switch has loaded

    async def on_event(self, event: events.Event) -> None:
        # Typing while a pane that takes no text has focus goes to the chat's message box.
        # Decided here, before the event is handed to the focused widget, so that the focus
        # has moved before the next key is handed on (each widget has its own queue: a later
        # check would let the keys after the first land in the wrong place or out of order).
        if isinstance(event, (events.Key, events.Paste)) and not event.is_forwarded:
            take = getattr(self.screen, "take_typing", None)
            if take is not None and take(event):
                return
        await super().on_event(event)

    # --- opening the models -----------------------------------------------------------------

    def on_mount(self) -> None:
        asyncio.get_running_loop().set_default_executor(_WorkerThreads())
        self._use_saved_theme()
        if self.services.first_run and self.services.paths is not None:
            self.push_screen(WizardScreen(self.services.paths, intro=FIRST_RUN_INTRO,
                                          welcome=True),
                             self._first_pair_chosen)
            return
        self.load()

    def load(self) -> None:
        self.push_screen(LoadingScreen(self.services.label))
        self.open_models()

    def _first_pair_chosen(self, pair: PairEntry | None) -> None:
        if pair is not None:
            self._use_pair(pair.id)
        self.services.first_run_done()
        self.load()  # the saved pair, or (Esc) the built-in default

    # --- switching pairs (the wizard) --------------------------------------------------------

    def open_wizard(self) -> None:
        if self.services.paths is None or self.services.open_pair is None:
            self.notify("The pairing wizard is not available here; run `specchat models wizard`.",
                        severity="warning", markup=False)
            return
        self.push_screen(WizardScreen(self.services.paths), self._pair_saved)

    def _pair_saved(self, pair: PairEntry | None) -> None:
        if pair is None or self.chat is None:
            return
        chat = self.chat

        def switch() -> None:
            if not self._use_pair(pair.id):
                return
            self.shutdown_engine()
            self.chat = None
            self.switch_screen(LoadingScreen(self.services.label))  # replaces the chat screen
            self.open_models()

        chat.when_idle(switch)

    def switch_to(self, label: str, reopen_chat: int | None = None) -> None:
        """Load another pair or model (the chat's F8 switcher, or a chat's own pair) with the
        loading screen, then show ``reopen_chat`` on it. The current models are freed first:
        two pairs need not fit in memory together."""
        if self.chat is None:
            return
        chat = self.chat

        def switch() -> None:
            try:
                self.services.switch_to(label)
            except SpecchatError as e:
                self.notify(str(e), title="Cannot switch", severity="error", markup=False)
                return
            self.shutdown_engine()
            self.chat = None
            self.reopen_chat = reopen_chat
            self.switch_screen(LoadingScreen(self.services.label))  # replaces the chat screen
            self.open_models()

        chat.when_idle(switch)

    def _use_pair(self, pair_id: str) -> bool:
        try:
            self.services.use_pair(pair_id)
        except SpecchatError as e:
            self.notify(str(e), title="Cannot switch pairs", severity="error", markup=False)
            return False
        self.notify(f"Pair '{pair_id}' is now the default.", markup=False)
        return True

    @work(thread=True, exclusive=True, exit_on_error=False, group="load")
    def open_models(self) -> None:
        try:
            self._open_models()
        except Exception as e:  # said on the load-failed screen
            self.post_message(WorkerFailed(0, e))

    def _open_models(self) -> None:
        # Fetching can take minutes and cannot be interrupted (pip, the quantizer), so it runs
        # in a daemon thread: quitting mid-download must not wait for the download to end.
        worker = get_current_worker()
        done: list[Runtime] = []
        failed: list[BaseException] = []

        def fetch_and_load() -> None:
            try:
                done.append(self.services.open_runtime(self._report))
            except BaseException as e:
                failed.append(e)

        thread = threading.Thread(target=fetch_and_load, name="open-models", daemon=True)
        thread.start()
        while thread.is_alive():
            thread.join(0.1)
            if worker.is_cancelled:
                return  # the app is closing
        if failed:
            raise failed[0]
        runtime = done[0]
        backend = self.services.backend or backend_of(runtime)
        if not self.post_message(RuntimeReady(runtime, backend)):
            runtime.close()  # the app closed while the models were loading

    def _report(self, p: Progress) -> None:
        self.post_message(LoadProgress(p))  # from the worker thread: thread-safe

    def on_load_progress(self, msg: LoadProgress) -> None:
        if isinstance(self.screen, LoadingScreen):
            if msg.progress.task == LOADING_TASK:
                self.screen.show_loading(msg.progress)
            else:
                self.screen.show_progress(msg.progress)

    def on_runtime_ready(self, msg: RuntimeReady) -> None:
        self.runtime = msg.runtime
        self.chat = ChatScreen(self.services, msg.runtime, msg.backend, self.reopen_chat)
        self.reopen_chat = None
        self.switch_screen(self.chat)
        for notice in msg.runtime.notices():  # how the models were loaded, where it matters
            self.notify(notice, severity="warning", timeout=12, markup=False)
        if self.start_race is not None:
            self.push_screen(RaceScreen(self.services, msg.runtime, self.start_race))
            self.start_race = None

    def on_worker_failed(self, msg: WorkerFailed) -> None:
        message = msg.text

        def after(choice: str | None) -> None:
            if choice == "retry":  # the failed screen has been dismissed
                self.push_screen(LoadingScreen(self.services.label))
                self.open_models()
            else:
                self.exit(return_code=1)

        if isinstance(self.screen, LoadingScreen):
            self.pop_screen()
        self.push_screen(LoadFailedScreen(self.services.label, message), after)

    # --- theme (Ctrl+P → Theme), remembered in the config ----------------------------------

    def _use_saved_theme(self) -> None:
        name = self.services.config.theme
        if name and name in self.available_themes:
            self.theme = name
        elif name:
            self.notify(f"unknown theme '{name}' in the settings: using the default one",
                        severity="warning", markup=False)
        self.theme_changed_signal.subscribe(self, self._theme_changed)

    def _theme_changed(self, theme: Theme) -> None:
        if theme.name == self.services.config.theme:
            return
        try:
            self.services.save_theme(theme.name)
        except SpecchatError as e:
            self.notify(str(e), severity="error", markup=False)

    # --- command palette --------------------------------------------------------------------

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        for command in super().get_system_commands(screen):
            if command.title == "Keys":  # Textual's key panel; "Keys" alone read like our help
                command = command._replace(title="Key panel (side)")
            yield command
        if isinstance(screen, ChatScreen):
            for title, help_text, action in COMMANDS:
                yield SystemCommand(title, help_text, getattr(screen, f"action_{action}"))

    # --- shutting down ----------------------------------------------------------------------

    def on_unmount(self) -> None:
        self.shutdown_engine()

    def shutdown_engine(self) -> None:
        """Stop a reply or race in flight, wait for its thread, then free the models (once)."""
        for screen in self.screen_stack:
            if isinstance(screen, RaceScreen):
                screen.close_race(SHUTDOWN_WAIT_S)
        # After an RPC server dropped, the reply's thread is parked inside llama.cpp for good
        # and the target's weights are on a server that is gone: nothing to wait for or free.
        dropped = rpc.failure() is not None
        if self.chat is not None:
            replies = self.chat.replies  # the reply in flight, and what it could not save
            replies.stop_engine_work(0.0 if dropped else SHUTDOWN_WAIT_S)
            replies.save_partial_reply()
            self.rescued = replies.rescued or self.rescued
        if self.runtime is not None and not dropped:
            self.runtime.close()
            self.runtime = None
        self.services.close_tools()
