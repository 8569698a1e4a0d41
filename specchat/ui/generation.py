"""One reply, generated in a worker thread: run the engine, batch its events, post them.

Nothing here touches a widget; the only way back to the UI is ``post`` (``post_message``,
which is thread-safe). The UI thread sees at most one chunk and one stats update per
``interval``, whatever the decoder's speed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from textual.message import Message as UIMessage

from specchat.engine.chat import ChatEngine
from specchat.engine.chat_template import Message
from specchat.engine.events import GenerationStats
from specchat.engine.sampling import SamplerSettings
from specchat.ui.live import EventBatcher
from specchat.ui.messages import ReplyChunk, ReplyFinished, StatsUpdate

INTERVAL_S = 0.08  # at most ~12 UI updates a second


@dataclass
class ReplyJob:
    id: int
    messages: list[Message]
    sampling: SamplerSettings
    cancel: threading.Event = field(default_factory=threading.Event)


def run_reply(job: ReplyJob, engine: ChatEngine, post: Callable[[UIMessage], object],
              interval: float = INTERVAL_S) -> GenerationStats:
    """Generate ``job``'s reply, posting batches; return the final stats.

    Batches go out when an event arrives after ``interval`` has passed, and from a ticker
    thread when the decoder goes quiet (a speculative step bursts tokens, then verifies), so
    nothing sits unseen for longer than ``interval``.
    """
    ctx = engine.decoder.target
    batcher = EventBatcher(interval, ctx_used=lambda: len(ctx.tokens), ctx_size=ctx.n_ctx)
    lock = threading.Lock()
    done = threading.Event()

    def flush() -> None:
        batch = batcher.take()
        if batch.segments or batch.notices:
            post(ReplyChunk(job.id, batch.segments, batch.notices))
        if batch.final is not None:
            post(ReplyFinished(job.id, batch.final, batch.stats))
        else:
            post(StatsUpdate(job.id, batch.stats))

    def tick() -> None:
        while not done.wait(interval):
            with lock:
                if batcher.dirty and batcher.due():
                    flush()

    ticker = threading.Thread(target=tick, name=f"reply-{job.id}-ticker", daemon=True)
    ticker.start()
    try:
        for ev in engine.reply(job.messages, job.sampling, job.cancel):
            with lock:
                batcher.add(ev)
                if isinstance(ev, GenerationStats):
                    done.set()
                    flush()
                    return ev
                if batcher.due():
                    flush()
        raise RuntimeError(f"the {engine.decoder.name} decoder ended without its stats")
    except BaseException:
        with lock:
            done.set()
            flush()  # the text generated before the failure still reaches the screen
        raise
    finally:
        done.set()
        ticker.join()
