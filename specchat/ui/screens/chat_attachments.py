"""The chat screen's attached files (F2): the picker, the chips over the message box, the ctx
figure with them, and the send that reads them again. The reading, counting and checking is
:mod:`specchat.session.attachments`'s, run in this widget's thread workers; their results come
back to it as messages (:class:`AttachmentRead`, :class:`AttachmentsMeasured`,
:class:`MessagePrepared`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from textual import on, work

from specchat.engine.decode.chat import ChatEngine
from specchat.engine.decode.messages import Message
from specchat.errors import SpecchatError
from specchat.session.attachments import ROOM_HINT, AttachedFile, attach, measure, prepare
from specchat.textsafe import safe_text
from specchat.ui.messages import AttachmentRead, AttachmentsMeasured, MessagePrepared
from specchat.ui.screens.attach import AttachScreen, start_folder
from specchat.ui.widgets.attachments import AttachmentBar
from specchat.ui.widgets.chat_input import ChatInput


def read_one(job: int, engine: ChatEngine, path: str, history: Sequence[Message], text: str,
             files: Sequence[AttachedFile], limit: int, max_tokens: int) -> AttachmentRead:
    """(A worker thread) The picked file read and counted, and the chat measured with it."""
    try:
        f = attach(engine, path, limit)
        fit = measure(engine, history, text, [*files, f], max_tokens)
    except SpecchatError as e:
        return AttachmentRead(job, path, None, None, str(e))
    return AttachmentRead(job, path, f, fit, None)


def measure_all(job: int, engine: ChatEngine, history: Sequence[Message], text: str,
                files: Sequence[AttachedFile], max_tokens: int) -> AttachmentsMeasured:
    try:
        return AttachmentsMeasured(job, measure(engine, history, text, files, max_tokens))
    except SpecchatError:
        return AttachmentsMeasured(job, None)


def prepare_one(engine: ChatEngine, history: Sequence[Message], typed: str, paths: Sequence[str],
                limit: int, max_tokens: int) -> MessagePrepared:
    """(A worker thread) The message with its files read again now, or why not."""
    try:
        return MessagePrepared(typed, prepare(engine, history, typed, paths, limit, max_tokens),
                               None)
    except SpecchatError as e:
        return MessagePrepared(typed, None, str(e))


class MessageFiles(AttachmentBar):
    """The chips of the attached files, and the files themselves. ``chat`` is the chat screen
    (its engine, its settings and session; Any: importing chat.py here would make a cycle)."""

    def __init__(self, chat: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.chat = chat
        self.files: list[AttachedFile] = []
        self.sending = False  # a message's files are being read again for sending
        self._job = 0  # the newest measurement; older ones are stale

    @property
    def limit(self) -> int:
        return self.chat.services.config.file_limit_kb * 1024

    def _history(self) -> list[Message]:
        return self.chat.conversation.engine_messages(self.chat.system_prompt)

    def _typed(self) -> str:
        return self.chat.query_one(ChatInput).text.strip()

    @property
    def max_tokens(self) -> int:
        return self.chat.settings.sampling.max_tokens

    def pick(self) -> None:
        self.chat.app.push_screen(AttachScreen(start_folder()), self.add)

    def add(self, path: str | None) -> None:
        """Read ``path`` (in a worker) and, if it can be attached and fits, show its chip."""
        if not path:
            return
        if any(f.path == path for f in self.files):
            self.chat.notify(f"{safe_text(path)} is attached already.", title="Attach",
                             markup=False)
            return
        self._job += 1
        self._read(self._job, self.chat.engine, path, self._history(), self._typed(),
                   list(self.files), self.limit, self.max_tokens)

    @work(thread=True, exit_on_error=False, group="attach")
    def _read(self, job: int, engine: ChatEngine, path: str, history: list[Message], text: str,
              files: list[AttachedFile], limit: int, max_tokens: int) -> None:
        self.post_message(read_one(job, engine, path, history, text, files, limit, max_tokens))

    @work(thread=True, exit_on_error=False, group="attach")
    def _measure_in_thread(self, job: int, engine: ChatEngine, history: list[Message],
                           text: str, files: list[AttachedFile], max_tokens: int) -> None:
        self.post_message(measure_all(job, engine, history, text, files, max_tokens))

    @work(thread=True, exit_on_error=False, group="attach")
    def _prepare(self, engine: ChatEngine, history: list[Message], typed: str,
                 paths: list[str], limit: int, max_tokens: int) -> None:
        self.post_message(prepare_one(engine, history, typed, paths, limit, max_tokens))

    def on_attachment_read(self, msg: AttachmentRead) -> None:
        if msg.error is not None or msg.file is None or msg.fit is None:
            self.chat.notify(msg.error or "", title="Not attached", severity="error",
                             timeout=10, markup=False)
            return
        if not msg.fit.fits:
            self.chat.notify(msg.fit.refusal(ROOM_HINT), title="Not attached: too long",
                             severity="error", timeout=15, markup=False)
            return
        if any(f.path == msg.path for f in self.files):
            return
        self.files.append(msg.file)
        self._show()
        if msg.job == self._job:
            self.chat.stats_bar.pending = msg.fit.used
        else:  # another file came or went meanwhile: measure them all
            self._measure()

    @on(AttachmentBar.Removed)
    def _chip_pressed(self, event: AttachmentBar.Removed) -> None:
        event.stop()
        self.drop(event.index)

    def drop(self, index: int) -> None:
        if 0 <= index < len(self.files):
            gone = self.files.pop(index)
            self.chat.notify(f"{safe_text(gone.name)} is no longer attached.", title="Attach",
                             markup=False)
        self._show()
        self._measure()
        self.chat.query_one(ChatInput).focus()

    def chat_changed(self) -> None:
        """Another chat or branch is shown, or a reply ended: the figure is measured again."""
        if self.files:
            self._measure()

    def _measure(self) -> None:
        self._job += 1
        if not self.files:
            self.chat.stats_bar.pending = None
            return
        self._measure_in_thread(self._job, self.chat.engine, self._history(), self._typed(),
                                list(self.files), self.max_tokens)

    def on_attachments_measured(self, msg: AttachmentsMeasured) -> None:
        if msg.job == self._job and self.files:
            self.chat.stats_bar.pending = msg.fit.used if msg.fit else None

    def _show(self) -> None:
        self.show_files(self.files)

    def send(self, typed: str) -> None:
        """Send ``typed`` with the files: they are read again (in a worker) first."""
        if self.sending:
            return
        if self.chat.session.busy:
            self.chat.notify("Still replying: press Esc to stop it first.",
                             severity="warning", markup=False)
            return
        self.sending = True
        self._prepare(self.chat.engine, self._history(), typed, [f.path for f in self.files],
                      self.limit, self.max_tokens)

    def on_message_prepared(self, msg: MessagePrepared) -> None:
        self.sending = False
        if msg.outgoing is None:
            self.chat.notify(f"{msg.error}. The message and its files are kept.",
                             title="Not sent", severity="error", timeout=15, markup=False)
            return
        if not self.chat.replies.send_text(msg.outgoing.text, title=msg.typed):
            return
        self.files = []
        self._job += 1
        self._show()
        self.chat.stats_bar.pending = None
        box = self.chat.query_one(ChatInput)
        if box.text.strip() == msg.typed:  # (unless more was typed while the files were read)
            box.clear()
