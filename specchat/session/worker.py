"""One reply, generated in a worker thread: run the engine, batch its events, emit updates.

The token fates are built here, once (the batcher's :class:`FateTrace`); what leaves is typed
updates (:class:`ReplyChunk`, :class:`ReplyFigures`, :class:`ReplyDone`) through ``emit``, which
the chat screen wraps in a thread-safe ``post_message``. No Textual here. The UI thread sees
at most one text chunk per ``interval`` and one stats update per ``stats_interval``, whatever
the decoder's speed: every redraw costs the UI thread time, and the decoder's Python steps
share the GIL with it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from specchat.engine.decode.chat import ChatEngine
from specchat.engine.decode.events import Event, GenerationStats
from specchat.engine.decode.fold import missing_stats
from specchat.engine.decode.messages import Message
from specchat.engine.decode.sampling import SamplerSettings
from specchat.session.live import EventBatcher, LiveStats, Pace
from specchat.session.reply_format import reply_sampling
from specchat.session.tool_reply import TOOL_UPDATES, ToolCalled, ToolJob, ToolUpdate, tool_events
from specchat.store.fates import Segment
from specchat.store.reply_format import TEXT, ReplyFormat
from specchat.tools.turn import prediction_tokens

# A redraw costs the UI thread 5-15 ms on a small machine, whatever its size: text goes out at
# most 10 times a second (fewer when Pace says drawing is expensive), the stats twice.
STATS_INTERVAL_S = 0.5


@dataclass(frozen=True)
class ReplyChunk:
    """New text of the reply, with fates, and any notices from the engine."""

    job: int
    segments: list[Segment]
    notices: list[str]


@dataclass(frozen=True)
class ReplyFigures:
    """Live figures while the reply streams (a newer one supersedes an older one)."""

    job: int
    stats: LiveStats


@dataclass(frozen=True)
class ReplyDone:
    """The reply ended: its stats (every segment went out in the chunks before it)."""

    job: int
    stats: GenerationStats
    live: LiveStats


ReplyUpdate = ReplyChunk | ReplyFigures | ReplyDone | ToolUpdate


@dataclass
class ReplyJob:
    id: int
    messages: list[Message]
    sampling: SamplerSettings
    cancel: threading.Event = field(default_factory=threading.Event)
    pace: Pace = field(default_factory=Pace)  # the UI thread tunes it while the reply runs
    # The chat's reply format: compiled into ``sampling.grammar`` by run_reply, in its thread.
    reply_format: ReplyFormat = TEXT
    # Texts the reply may copy (the files its message carries): tokenized by run_reply, in its
    # thread, into ``sampling.prediction`` for the prediction drafter.
    predicted: tuple[str, ...] = ()
    # The chat's tools (session.tool_reply), when it offers some: the reply is a tool turn.
    tools: ToolJob | None = None


def run_reply(job: ReplyJob, engine: ChatEngine, emit: Callable[[ReplyUpdate], object],
              stats_interval: float = STATS_INTERVAL_S) -> GenerationStats:
    """Generate ``job``'s reply, emitting batches; return the final stats.

    Batches go out when an event arrives after ``job.pace.interval`` has passed, and from a
    ticker thread when the decoder goes quiet (a speculative step bursts tokens, then
    verifies), so nothing sits unseen for longer than that.
    """
    # The chat's grammar, compiled here (a worker thread; cached once the format dialog checked
    # it): a format that does not compile fails the reply before a token, with its reason.
    sampling = reply_sampling(job.sampling, job.reply_format)
    if job.predicted and job.tools is None:  # (a tool turn gives the files to each round)
        sampling = sampling.with_(prediction=prediction_tokens(engine.model, job.predicted))
    ctx = engine.decoder.target
    pace = job.pace
    batcher = EventBatcher(pace.interval, ctx_used=lambda: len(ctx.tokens),
                           ctx_size=ctx.n_ctx)
    lock = threading.Lock()
    done = threading.Event()
    last_stats = [0.0]

    def flush() -> None:
        batcher.interval = pace.interval
        batch = batcher.take()
        if batch.segments or batch.notices:
            emit(ReplyChunk(job.id, batch.segments, batch.notices))
        if batch.final is not None:
            emit(ReplyDone(job.id, batch.final, batch.stats))
        elif time.monotonic() - last_stats[0] >= stats_interval:
            last_stats[0] = time.monotonic()
            emit(ReplyFigures(job.id, batch.stats))
            batcher.gammas_posted()

    def tick() -> None:
        while not done.wait(pace.fastest):
            with lock:
                if batcher.dirty and batcher.due():
                    flush()

    ticker = threading.Thread(target=tick, name=f"reply-{job.id}-ticker", daemon=True)
    ticker.start()
    if job.tools is not None:
        events: Iterator[Event | ToolUpdate] = tool_events(
            job.id, job.tools, engine, job.messages, sampling, job.cancel, job.predicted, emit)
    else:
        events = engine.reply(job.messages, sampling, job.cancel)
    try:
        for ev in events:
            with lock:
                if isinstance(ev, TOOL_UPDATES):
                    # In order: the text written before the call first (a call ends the
                    # model's reply: its last drafts too), then the update.
                    if isinstance(ev, ToolCalled):
                        batcher.end_round()
                    flush()
                    emit(ev)
                    continue
                batcher.add(ev)
                if batcher.stats is not None:
                    done.set()
                    flush()
                    return batcher.stats
                if batcher.due():
                    flush()
        raise missing_stats(engine.decoder.name)
    except BaseException:
        with lock:
            done.set()
            flush()  # the text generated before the failure still reaches the screen
        raise
    finally:
        done.set()
        ticker.join()
