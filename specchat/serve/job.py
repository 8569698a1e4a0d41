"""A request's job: what a route's handler and the thread generating its reply share.

Each request is a :class:`Job`: the thread that runs it posts its items (:data:`Item`: the
prompt fits, each committed token, then the end or the failure) into the job's asyncio queue
through the loop's thread-safe call, and the request's handler reads them, several at once
when they are already waiting; the job's ``cancel`` event (set when its client goes away) is
the engine's own cancel, seen at the slot's next step (a prompt read stops at once, even in a
pass shared with other slots), which frees the slot for the next request.
"""
from __future__ import annotations

import asyncio
import itertools
import threading
from dataclasses import dataclass, field

from specchat.engine.decode.events import GenerationStats, StepEvent, TokenEvent
from specchat.serve.api_errors import ApiError
from specchat.serve.parse import GenerationRequest


@dataclass(frozen=True)
class Started:
    """The prompt fits and generation begins (a handler may now answer 200)."""

    prompt_tokens: int


@dataclass(frozen=True)
class Finished:
    stats: GenerationStats
    last_step: StepEvent | None = None  # the last draft/verify round: the γ mode's label
    notices: tuple[str, ...] = ()
    # With a predicted output: its tokens the reply kept and the rest (OpenAI's
    # completion_tokens_details); None when none was given.
    prediction: dict[str, int] | None = None


@dataclass(frozen=True)
class Failed:
    error: ApiError


Item = Started | TokenEvent | Finished | Failed
_ids = itertools.count(1)


@dataclass(eq=False)
class Job:
    request: GenerationRequest
    loop: asyncio.AbstractEventLoop
    cancel: threading.Event = field(default_factory=threading.Event)
    number: int = field(default_factory=lambda: next(_ids))
    items: asyncio.Queue[Item] = field(default_factory=asyncio.Queue)
    why: str = "its client went away"  # what a cancel means, for the log
    # The bytes of the tokens its log-probabilities name (special tokens as their marker),
    # written by the worker thread before it posts the token that needs them.
    pieces: dict[int, bytes] = field(default_factory=dict)
    _unread: list[Item] = field(default_factory=list)

    def post(self, item: Item) -> None:
        """From the worker thread: hand an item to the request's handler."""
        try:
            self.loop.call_soon_threadsafe(self.items.put_nowait, item)
        except RuntimeError:  # the event loop is closed: nobody will read the rest
            self.cancel.set()

    async def next(self) -> list[Item]:
        """The next item and whatever else is already waiting (several tokens: one chunk)."""
        out, self._unread = self._unread or [await self.items.get()], []
        while not self.items.empty():
            out.append(self.items.get_nowait())
        return out

    def unread(self, items: list[Item]) -> None:
        """Give items back: the next :meth:`next` returns them first."""
        self._unread = items + self._unread

