"""A reply's events as they reach the session: :class:`ReplyEvents`, a base of
:class:`~specchat.session.controller.ChatSession`.

``apply(update)`` takes the worker's updates (posted back to the UI thread): the reply's
:class:`~specchat.session.conversation.Turn` grows, is checkpointed to the store every
``checkpoint_s`` while it streams (status ``interrupted`` until it ends, so a kill keeps it,
marked), and ends with its stats; a tool turn's calls join the reply that made them and their
results follow it as ``tool`` turns. ``failed(job, error)`` ends it when the worker raised,
``cancel()`` asks the worker to stop, ``stop_for_exit()`` keeps what was shown on quitting.
Updates of an older job are ignored.
"""

from __future__ import annotations

from dataclasses import replace

from specchat.errors import SpecchatError
from specchat.session.conversation import Turn
from specchat.session.saving import SavingSession
from specchat.session.tool_reply import RoundStarted, ToolAnswered, ToolAsked, ToolCalled, TurnNote
from specchat.session.views import (
    CallAsked,
    CallShown,
    Ended,
    Failed,
    Figures,
    NewRound,
    Notice,
    Redraw,
    ResultShown,
    Streamed,
    TranscriptNote,
    View,
)
from specchat.session.worker import ReplyChunk, ReplyDone, ReplyFigures, ReplyJob, ReplyUpdate
from specchat.store import FateTrace, ReplyStats
from specchat.store.tool_parts import CallRecord, ToolPart
from specchat.textsafe import safe_text

CHECKPOINT_S = 1.0  # a streaming reply is written at most this often (and kept on a kill)


def failure_text(error: BaseException) -> tuple[str, str]:
    """A worker's error as (title, message) for the user: a bug says it is one."""
    if isinstance(error, SpecchatError):
        return "The reply could not be generated", str(error)
    return ("Something went wrong (a bug in specchat)",
            f"{type(error).__name__}: {error}\nThe chat so far is kept; you can go on.")



class ReplyEvents(SavingSession):
    # Set by ChatSession.__init__ and when a reply starts (ChatSession._start).
    job: ReplyJob | None
    reply: Turn | None
    checkpoint_s: float
    _last_checkpoint: float
    _meta: ReplyStats  # what is saved with the reply's stats (decoder, γ mode, pair...)
    _shown_before: Turn | None  # the alternative a regenerated reply replaced
    _tail: Turn | None  # a tool turn's last result: the next round follows it

    def cancel(self) -> bool:
        """Ask the reply in flight to stop; whether there was one still running."""
        if self.job is None or self.job.cancel.is_set():
            return False
        self.job.cancel.set()
        return True

    def apply(self, update: ReplyUpdate) -> list[View]:
        """A worker update, on the UI thread. Updates of an older job are ignored."""
        job, reply = self.job, self.reply
        if job is None or reply is None or update.job != job.id:
            return []
        if isinstance(update, ReplyFigures):
            return [Figures(update.stats, busy=True)]
        if isinstance(update, (ToolCalled, ToolAsked, ToolAnswered, RoundStarted, TurnNote)):
            return self._tool_update(update, reply)
        if isinstance(update, ReplyChunk):
            views: list[View] = []
            if update.segments:
                reply.trace.extend(update.segments)
                reply.saved = False
                views.append(Streamed(reply, update.segments))
            views += [Notice(n, "warning") for n in update.notices]
            # While writes fail, only tick() and the reply's end retry: each failed try can
            # wait the store's busy timeout on the UI thread.
            if self._problem is None and self.clock() - self._last_checkpoint >= self.checkpoint_s:
                self._last_checkpoint = self.clock()
                views += self.flush()
            return views
        assert isinstance(update, ReplyDone)
        s = update.stats
        # What ran: a reply that drafted nothing was decoded plainly, whatever the decoder;
        # the drafters are those that proposed tokens, not those the decoder could try.
        decoder = self._meta.decoder if s.drafted else "plain"
        stats = replace(self._meta, generation=s, gamma=update.live.gamma, decoder=decoder,
                        drafters=s.detail.drafters_used,
                        gamma_mode=update.live.mode or self._meta.gamma_mode)
        status = "cancelled" if s.stop_reason == "cancelled" else "done"
        return [*self._end(status, stats), Figures(update.live, busy=False)]

    def _tool_update(self, update: ToolCalled | ToolAsked | ToolAnswered | RoundStarted | TurnNote,
                     reply: Turn) -> list[View]:
        """A tool turn's step: a call joins the reply that made it, a result becomes a
        ``tool`` turn after it, and the next round's reply follows the last result."""
        if isinstance(update, ToolCalled):
            call = CallRecord(update.id, update.name, update.arguments)
            reply.tool = ToolPart(calls=(*reply.calls, call))
            reply.status, reply.saved = "done", False  # its text is whole: the calls end it
            return [*self.flush(), CallShown(reply, call)]
        if isinstance(update, ToolAsked):
            return [CallAsked(update.id, update.name, update.server, update.always)]
        if isinstance(update, ToolAnswered):
            result = Turn("tool", FateTrace.plain(safe_text(update.text)),
                          tool=ToolPart(call_id=update.id, name=update.name,
                                        status=update.status, seconds=update.seconds))
            self.conversation.attach(result, self._tail or reply)
            self._tail = result
            return [*self.flush(), ResultShown(result)]
        if isinstance(update, RoundStarted):
            after = self._tail or reply
            self.reply = Turn("assistant", FateTrace(), status="interrupted")
            self.conversation.attach(self.reply, after)
            self._tail = None
            return [NewRound(reply, self.reply)]
        return [TranscriptNote(update.text)]

    def failed(self, job_id: int, error: BaseException) -> list[View]:
        """The worker raised: end the reply as failed (its text, if any, is kept)."""
        if self.job is None or job_id != self.job.id:
            return []
        title, text = failure_text(error)
        return [*self._end("error", self.reply.stats if self.reply else None),
                Failed(title, text)]

    def _end(self, status: str, stats: ReplyStats | None) -> list[View]:
        reply, self.reply, self.job = self.reply, None, None
        if reply is None:
            return []
        reply.status, reply.stats, reply.saved = status, stats, False
        # (a reply whose calls have results after it is never dropped: they follow it)
        dropped = not reply.text and status != "cancelled" and reply.tool is None
        views: list[View] = []
        if dropped:  # never written: a reply's row exists only once it has text
            self.conversation.remove(reply, show_instead=self._shown_before)
            if self._shown_before is not None:
                views.append(Redraw())  # the reply it was to replace is shown again
        return [*self.flush(), Ended(reply, dropped), *views]

    def stop_for_exit(self) -> list[View]:
        """Quitting (the worker has stopped): keep the reply shown so far, as stopped."""
        reply = self.reply
        views: list[View] = []
        if reply is not None:
            views = self._end("cancelled" if reply.text else "error", reply.stats)
        return views + self.flush()

