"""Typed messages from the worker threads to the UI thread (the one way back, thread-safe).

Every worker (chat reply, race, wizard, model loading) follows one pattern: a ``@work(thread=
True, exit_on_error=False)`` method of the screen (or app) that owns it, which catches what the
job raises and posts :class:`WorkerFailed`, its owner's one error sink. Stats and load progress
replace each other in the queue (``can_replace``): if the UI falls behind, it draws only the
newest figures. Reply chunks carry text and never replace each other.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from specchat.errors import SpecchatError
from specchat.models.progress import Progress
from specchat.race.result import RaceResult
from specchat.runtime.opening import Runtime
from specchat.session.attachments import AttachedFile, Outgoing
from specchat.session.auto_calibration import Outcome
from specchat.session.worker import ReplyFigures, ReplyUpdate
from specchat.store.reply_format import ReplyFormat
from specchat.tools.files import Fit
from specchat.tools.hub import ToolInfo


@dataclass
class WorkerFailed(Message, bubble=False):  # for its owner only: not the app's if a screen's
    """A worker's job raised (or stopped, cancelled): its owner says so, never a traceback."""

    job: int
    error: BaseException
    cancelled: bool = False

    @property
    def text(self) -> str:
        if isinstance(self.error, SpecchatError):
            return str(self.error)
        return f"{type(self.error).__name__}: {self.error} (a bug in specchat)"


@dataclass
class ReplyProgress(Message, bubble=False):
    """An update from the reply worker (text, figures, the end) for the chat session."""

    update: ReplyUpdate

    def can_replace(self, message: Message) -> bool:
        # ``message`` is the newer one, queued behind this: draw only the newest figures.
        return (isinstance(self.update, ReplyFigures) and isinstance(message, ReplyProgress)
                and isinstance(message.update, ReplyFigures) and message.update.job == self.update.job)


@dataclass
class LoadProgress(Message):
    progress: Progress

    def can_replace(self, message: Message) -> bool:
        # ``message`` is the newer one: it supersedes this one unless this one ends a task.
        return (isinstance(message, LoadProgress) and not self.progress.finished
                and message.progress.task == self.progress.task)


@dataclass
class RuntimeReady(Message):
    runtime: Runtime
    backend: str


@dataclass
class RaceProgress(Message):
    """What the race worker is doing (warming up, recording the plain run…)."""

    job: int
    text: str


@dataclass
class RaceRecorded(Message):
    job: int
    result: RaceResult


@dataclass
class RacePairOpened(Message):
    """Another pair's models are loaded for the race screen (it owns them from now on)."""

    runtime: Runtime


@dataclass
class CalibrationProgress(Message, bubble=False):
    """How far the background calibration of the loaded pair is (for the chat screen)."""

    progress: Progress

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, CalibrationProgress) and not (
            self.progress.finished or self.progress.failed)


@dataclass
class CalibrationEnded(Message, bubble=False):
    """The background calibration's run ended: done, paused, failed, cancelled, not needed."""

    outcome: Outcome


@dataclass
class RpcDropped(Message, bubble=False):
    """An RPC server the target runs on stopped answering (posted from llama.cpp's thread,
    which stays parked: the reply's worker never returns)."""

    text: str


@dataclass
class FormatChecked(Message, bubble=False):
    """A reply format compiled (``error`` None) or not (``error``: why, one line), for the format
    dialog that asked."""

    reply_format: ReplyFormat
    error: str | None


@dataclass
class AttachmentRead(Message, bubble=False):
    """A file picked for the message, read and counted (``file``), or why not (``error``);
    ``fit``: the chat with it, against the context (None when it was not read)."""

    job: int
    path: str
    file: AttachedFile | None
    fit: Fit | None
    error: str | None


@dataclass
class AttachmentsMeasured(Message, bubble=False):
    """The chat with the message's files against the context, after the files changed."""

    job: int
    fit: Fit | None


@dataclass
class MessagePrepared(Message, bubble=False):
    """A message with files, its files read again at send time (``outgoing``), or why it
    cannot be sent (``error``: nothing was sent, the typed text and the chips stay)."""

    typed: str
    outgoing: Outgoing | None
    error: str | None


@dataclass
class ToolsListed(Message, bubble=False):
    """The configured servers' tools, listed for the tools dialog (``failed``: a line for
    each server that did not start)."""

    tools: list[ToolInfo]
    failed: list[str]
