"""The chat screen's attached files (F2): the picker, the chips over the message box, the ctx
figure with them, and the send that reads them again. The reading, counting and checking is
:mod:`specchat.session.attachments`'s, run in the screen's thread workers (``read_attachment``,
``measure_attachments``, ``prepare_message``); their results come back as messages that the
screen hands to this helper."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specchat.engine.decode.chat import ChatEngine
from specchat.engine.decode.chat_template import Message
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


class MessageFiles:
    """A helper the chat screen owns; ``screen`` is that screen (its workers, its engine, its
    settings and session), not imported here so that chat.py can import this module."""

    def __init__(self, screen: Any) -> None:
        self.screen = screen
        self.files: list[AttachedFile] = []
        self.sending = False  # a message's files are being read again for sending
        self._job = 0  # the newest measurement; older ones are stale

    @property
    def limit(self) -> int:
        return self.screen.services.config.file_limit_kb * 1024

    def _history(self) -> list[Message]:
        return self.screen.conversation.engine_messages(self.screen.system_prompt)

    def _typed(self) -> str:
        return self.screen.query_one(ChatInput).text.strip()

    @property
    def max_tokens(self) -> int:
        return self.screen.settings.sampling.max_tokens

    def pick(self) -> None:
        self.screen.app.push_screen(AttachScreen(start_folder()), self.add)

    def add(self, path: str | None) -> None:
        """Read ``path`` (in a worker) and, if it can be attached and fits, show its chip."""
        if not path:
            return
        if any(f.path == path for f in self.files):
            self.screen.notify(f"{safe_text(path)} is attached already.", title="Attach",
                               markup=False)
            return
        self._job += 1
        self.screen.read_attachment(self._job, self.screen.engine, path, self._history(),
                                    self._typed(), list(self.files), self.limit, self.max_tokens)

    def read(self, msg: AttachmentRead) -> None:
        if msg.error is not None or msg.file is None or msg.fit is None:
            self.screen.notify(msg.error or "", title="Not attached", severity="error",
                               timeout=10, markup=False)
            return
        if not msg.fit.fits:
            self.screen.notify(msg.fit.refusal(ROOM_HINT), title="Not attached: too long",
                               severity="error", timeout=15, markup=False)
            return
        if any(f.path == msg.path for f in self.files):
            return
        self.files.append(msg.file)
        self._show()
        if msg.job == self._job:
            self.screen.stats_bar.set_pending(msg.fit.used)
        else:  # another file came or went meanwhile: measure them all
            self._measure()

    def remove(self, index: int) -> None:
        if 0 <= index < len(self.files):
            gone = self.files.pop(index)
            self.screen.notify(f"{safe_text(gone.name)} is no longer attached.", title="Attach",
                               markup=False)
        self._show()
        self._measure()
        self.screen.query_one(ChatInput).focus()

    def chat_changed(self) -> None:
        """Another chat or branch is shown, or a reply ended: the figure is measured again."""
        if self.files:
            self._measure()

    def _measure(self) -> None:
        self._job += 1
        if not self.files:
            self.screen.stats_bar.set_pending(None)
            return
        self.screen.measure_attachments(self._job, self.screen.engine, self._history(),
                                        self._typed(), list(self.files), self.max_tokens)

    def measured(self, msg: AttachmentsMeasured) -> None:
        if msg.job == self._job and self.files:
            self.screen.stats_bar.set_pending(msg.fit.used if msg.fit else None)

    def _show(self) -> None:
        self.screen.query_one(AttachmentBar).show_files(self.files)

    def send(self, typed: str) -> None:
        """Send ``typed`` with the files: they are read again (in a worker) first."""
        if self.sending:
            return
        if self.screen.session.busy:
            self.screen.notify("Still replying: press Esc to stop it first.",
                               severity="warning", markup=False)
            return
        self.sending = True
        self.screen.prepare_message(self.screen.engine, self._history(), typed,
                                    [f.path for f in self.files], self.limit, self.max_tokens)

    def prepared(self, msg: MessagePrepared) -> None:
        self.sending = False
        if msg.outgoing is None:
            self.screen.notify(f"{msg.error}. The message and its files are kept.",
                               title="Not sent", severity="error", timeout=15, markup=False)
            return
        if not self.screen.send_text(msg.outgoing.text, title=msg.typed):
            return
        self.files = []
        self._job += 1
        self._show()
        self.screen.stats_bar.set_pending(None)
        box = self.screen.query_one(ChatInput)
        if box.text.strip() == msg.typed:  # (unless more was typed while the files were read)
            box.clear()
