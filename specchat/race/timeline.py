"""One recorded run of a race: every event the decoder streamed, stamped with when it arrived.

Times are seconds since the run started (before the prompt was processed), taken when the
event reached the caller — the moment a user of the app would have seen it — so the time to
first token includes the prompt, as it does on screen.
"""

from __future__ import annotations

import bisect
import itertools
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from specchat.engine.decode.decoding import Decoder
from specchat.engine.decode.events import (
    Event,
    GenerationStats,
    NoticeEvent,
    RejectedEvent,
    StepEvent,
    TokenEvent,
)
from specchat.engine.decode.sampling import SamplerSettings


@dataclass(frozen=True, slots=True)
class TimedEvent:
    t: float  # seconds since the run started
    event: Event


@dataclass(frozen=True)
class RaceTimeline:
    """A run as a list of timed events; the last one is its ``GenerationStats``."""

    label: str  # "plain" | "speculative"
    events: tuple[TimedEvent, ...]
    notices: tuple[str, ...] = field(default=())
    # The planner's own forecast for this run (tokens/s from its costs and α), when a planner
    # chose the steps: what its realised speed is judged against.
    predicted_tok_s: float | None = None

    def __post_init__(self) -> None:
        if not self.events or not isinstance(self.events[-1].event, GenerationStats):
            raise ValueError("a timeline ends with the run's GenerationStats")
        times = [e.t for e in self.events]
        if any(b < a for a, b in itertools.pairwise(times)):
            raise ValueError("a timeline's times never go backwards")

    @property
    def stats(self) -> GenerationStats:
        last = self.events[-1].event
        assert isinstance(last, GenerationStats)
        return last

    @cached_property
    def token_times(self) -> tuple[float, ...]:
        return tuple(e.t for e in self.events if isinstance(e.event, TokenEvent))

    @cached_property
    def tokens(self) -> tuple[TokenEvent, ...]:
        return tuple(e.event for e in self.events if isinstance(e.event, TokenEvent))

    @property
    def token_ids(self) -> list[int]:
        return [t.token_id for t in self.tokens]

    @property
    def text(self) -> str:
        return "".join(t.text for t in self.tokens)

    @property
    def steps(self) -> list[StepEvent]:
        return [e.event for e in self.events if isinstance(e.event, StepEvent)]

    @property
    def rejected(self) -> list[RejectedEvent]:
        return [e.event for e in self.events if isinstance(e.event, RejectedEvent)]

    @property
    def elapsed_s(self) -> float:
        """From the start of the run to its end (the stats event)."""
        return self.events[-1].t

    @property
    def ttft_s(self) -> float | None:
        return self.token_times[0] if self.token_times else None

    @property
    def tok_s(self) -> float:
        """Generated tokens over the whole run, prompt included: what the replay shows."""
        return len(self.tokens) / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def decode_s(self) -> float:
        """From the first token to the last: decoding alone, the prompt left out."""
        times = self.token_times
        return times[-1] - times[0] if len(times) > 1 else 0.0

    @property
    def decode_tok_s(self) -> float:
        """Tokens after the first over the time they took: speed once the reply has started."""
        n = len(self.token_times) - 1
        return n / self.decode_s if n > 0 and self.decode_s > 0 else 0.0

    def tokens_by(self, t: float) -> int:
        """How many tokens had arrived by time ``t``."""
        return bisect.bisect_right(self.token_times, t)


def record(label: str, decoder: Decoder, prompt: Sequence[int], settings: SamplerSettings,
           cancel: threading.Event | None = None,
           clock: Callable[[], float] = time.perf_counter) -> RaceTimeline:
    """Run ``decoder`` to the end, stamping every event as it arrives."""
    events: list[TimedEvent] = []
    notices: list[str] = []
    start = clock()
    for ev in decoder.run(prompt, settings, cancel or threading.Event()):
        t = clock() - start
        if isinstance(ev, NoticeEvent):
            notices.append(ev.message)
            continue
        events.append(TimedEvent(t, ev))
        if isinstance(ev, GenerationStats):
            break
    return RaceTimeline(label, tuple(events), tuple(notices))
