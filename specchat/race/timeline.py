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
    RejectedEvent,
    StepEvent,
    TokenEvent,
)
from specchat.engine.decode.fold import EventFold
from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.decode.stats import decode_rate, overall_rate


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
    def _read(self) -> _Read:
        """The run's events, read once by the event fold."""
        read = _Read()
        for e in self.events:
            read.at = e.t
            read.add(e.event)
        return read

    @cached_property
    def token_times(self) -> tuple[float, ...]:
        return tuple(self._read.token_times)

    @cached_property
    def tokens(self) -> tuple[TokenEvent, ...]:
        return tuple(self._read.token_events)

    @property
    def token_ids(self) -> list[int]:
        return [t.token_id for t in self.tokens]

    @property
    def text(self) -> str:
        return "".join(t.text for t in self.tokens)

    @property
    def steps(self) -> list[StepEvent]:
        return list(self._read.steps)

    @property
    def rejected(self) -> list[RejectedEvent]:
        return list(self._read.rejected_events)

    @property
    def elapsed_s(self) -> float:
        """From the start of the run to its end (the stats event)."""
        return self.events[-1].t

    @property
    def ttft_s(self) -> float | None:
        return self.token_times[0] if self.token_times else None

    @property
    def tok_s(self) -> float:
        """Generated tokens over the whole run, prompt included (overall, not decode tok/s)."""
        return overall_rate(len(self.tokens), self.elapsed_s)

    @property
    def decode_s(self) -> float:
        """From the first token to the last: decoding alone, the prompt left out."""
        times = self.token_times
        return times[-1] - times[0] if len(times) > 1 else 0.0

    @property
    def decode_tok_s(self) -> float:
        """Decode tok/s: the tokens after the first over the time they took."""
        return decode_rate(len(self.token_times), self.decode_s)

    def tokens_by(self, t: float) -> int:
        """How many tokens had arrived by time ``t``."""
        return bisect.bisect_right(self.token_times, t)


class _Read(EventFold):
    """A recorded run's tokens (with the times they arrived) and rejected drafts."""

    def __init__(self) -> None:
        super().__init__()
        self.at = 0.0  # the time of the event being added
        self.token_events: list[TokenEvent] = []
        self.token_times: list[float] = []
        self.rejected_events: list[RejectedEvent] = []

    def on_token(self, ev: TokenEvent) -> None:
        self.token_events.append(ev)
        self.token_times.append(self.at)

    def on_rejected(self, ev: RejectedEvent) -> None:
        self.rejected_events.append(ev)


def record(label: str, decoder: Decoder, prompt: Sequence[int], settings: SamplerSettings,
           cancel: threading.Event | None = None,
           clock: Callable[[], float] = time.perf_counter) -> RaceTimeline:
    """Run ``decoder`` to the end, stamping every event as it arrives (notices aside)."""
    recorder = _Recorder(clock)
    recorder.run(decoder.run(prompt, settings, cancel or threading.Event()), decoder.name)
    return RaceTimeline(label, tuple(recorder.events), tuple(recorder.notices))


class _Recorder(EventFold):
    """The event fold of a race run: each event but the notices, stamped as it arrives."""

    def __init__(self, clock: Callable[[], float]) -> None:
        super().__init__()
        self.clock = clock
        self.start = clock()
        self.events: list[TimedEvent] = []

    def _stamp(self, ev: Event) -> None:
        self.events.append(TimedEvent(self.clock() - self.start, ev))

    def on_token(self, ev: TokenEvent) -> None:
        self._stamp(ev)

    def on_rejected(self, ev: RejectedEvent) -> None:
        self._stamp(ev)

    def on_step(self, ev: StepEvent) -> None:
        self._stamp(ev)

    def on_stats(self, ev: GenerationStats) -> None:
        self._stamp(ev)
