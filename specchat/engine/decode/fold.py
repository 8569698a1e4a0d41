"""One reading of a reply's event stream: what every reader of the events needs, counted once.

The decoder's callers — ``run_to_end``, the live view, ``prove``, the race, the server,
``ask``, and a tool turn with its relay to the app — each read the same stream of
:mod:`~specchat.engine.decode.events`. An
:class:`EventFold` reads it for all of them: the reply's token ids and their fates, the steps
(counted by the decoder's own :class:`SpecTally`, so α and τ are the decoder's), the notices
and the closing ``GenerationStats``. A reader that must act on an event as it comes (post a
token, draw a segment, print a JSON line) overrides the hook for its kind; one that only needs
the totals reads them after :meth:`EventFold.run`. :meth:`EventFold.add` is the one place that
tells the engine's event types apart: readers hold no ``isinstance`` chains of their own.

A decoder's stream always ends with its ``GenerationStats``; one that does not is a bug in the
decoder, reported by :func:`missing_stats` in one wording wherever it is caught.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from typing import TypeVar

from specchat.engine.decode.events import (
    GenerationStats,
    NoticeEvent,
    RejectedEvent,
    StepEvent,
    TokenEvent,
    TokenOrigin,
)
from specchat.engine.decode.spec_stats import SpecTally

E = TypeVar("E")


def missing_stats(decoder: str) -> RuntimeError:
    """The error for a stream that ended without its ``GenerationStats``."""
    return RuntimeError(f"the {decoder} decoder ended without its stats")


class EventFold:
    """A reply's events, folded as they stream (see the module's docstring).

    ``add`` takes any event and ignores what is not an engine event (a tool turn's events pass
    through the same readers); after a ``GenerationStats`` it holds it as :attr:`stats`.
    """

    def __init__(self, order: tuple[str, ...] = ()) -> None:
        self.token_ids: list[int] = []
        self.origins: Counter[TokenOrigin] = Counter()  # tokens per fate
        self.steps: list[StepEvent] = []
        self.tally = SpecTally(order)  # the steps as the decoder counts them (α, τ)
        self.generated = 0  # the reply's length after the latest step, as the engine had it
        self.rejected = 0  # rejected draft tokens reported (RejectedEvent)
        self.notices: list[str] = []
        self.stats: GenerationStats | None = None

    # --- reading ------------------------------------------------------------------------

    def add(self, ev: object) -> None:
        """Fold one event in, then call its kind's hook."""
        if isinstance(ev, TokenEvent):
            self.token_ids.append(ev.token_id)
            self.origins[ev.origin] += 1
            self.on_token(ev)
        elif isinstance(ev, RejectedEvent):
            self.rejected += 1
            self.on_rejected(ev)
        elif isinstance(ev, StepEvent):
            self.steps.append(ev)
            self.tally.count(ev)
            self.generated = ev.position + ev.committed
            self.on_step(ev)
        elif isinstance(ev, NoticeEvent):
            self.notices.append(ev.message)
            self.on_notice(ev)
        elif isinstance(ev, GenerationStats):
            self.stats = ev
            self.on_stats(ev)

    def through(self, events: Iterable[E], decoder: str) -> Iterator[E]:
        """Each event of a decoder's stream, folded in before it is passed on, up to and
        including its ``GenerationStats``; :func:`missing_stats` if the stream ends first."""
        for ev in events:
            self.add(ev)
            yield ev
            if isinstance(ev, GenerationStats):
                return
        raise missing_stats(decoder)

    def run(self, events: Iterable[object], decoder: str) -> GenerationStats:
        """Fold a whole stream; its ``GenerationStats``."""
        for _ in self.through(events, decoder):
            pass
        assert self.stats is not None  # through() returns only after it
        return self.stats

    # --- hooks (nothing by default) -------------------------------------------------------

    def on_token(self, ev: TokenEvent) -> None:
        """A committed token, after it was counted."""

    def on_rejected(self, ev: RejectedEvent) -> None:
        """A rejected draft token, after it was counted."""

    def on_step(self, ev: StepEvent) -> None:
        """A draft/verify step, after the tally counted it."""

    def on_notice(self, ev: NoticeEvent) -> None:
        """A notice, after it was kept."""

    def on_stats(self, ev: GenerationStats) -> None:
        """The closing stats, after they were kept."""

    # --- totals ---------------------------------------------------------------------------

    @property
    def tokens(self) -> int:
        return len(self.token_ids)
