"""The synchronized replay: two runs recorded one after the other, played back together.

:func:`schedule` is pure: it merges two timelines into one list of events in the order they
are due, each with its due time (its time within its own run, divided by ``speed``) and which
side it belongs to. :class:`ReplayCursor` hands out what is due by a given moment (the app
polls it from a timer); :func:`play` is the real-time player for the terminal, which sleeps
until each event is due.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from specchat.engine.decode.events import Event
from specchat.race.timeline import TimedEvent

LEFT, RIGHT = 0, 1


@dataclass(frozen=True, slots=True)
class Due:
    t: float  # seconds after the replay starts
    side: int  # LEFT (plain) or RIGHT (speculative)
    event: Event


def schedule(left: Sequence[TimedEvent], right: Sequence[TimedEvent],
             speed: float = 1.0) -> list[Due]:
    """Both runs' events in due order. Ties keep each run's own order and put the left first."""
    if speed <= 0:
        raise ValueError("speed must be positive")
    keyed = [(e.t / speed, side, i, e.event) for side, run in ((LEFT, left), (RIGHT, right))
             for i, e in enumerate(run)]
    keyed.sort(key=lambda k: (k[0], k[1], k[2]))
    return [Due(t, side, ev) for t, side, _, ev in keyed]


class ReplayCursor:
    """Walks a schedule: ``advance(now)`` returns every event due by ``now`` not yet returned."""

    def __init__(self, dues: Sequence[Due]) -> None:
        self.dues = list(dues)
        self.index = 0

    @property
    def done(self) -> bool:
        return self.index >= len(self.dues)

    @property
    def next_t(self) -> float:
        return self.dues[self.index].t if not self.done else math.inf

    @property
    def end_t(self) -> float:
        return self.dues[-1].t if self.dues else 0.0

    def advance(self, now: float) -> list[Due]:
        start = self.index
        while self.index < len(self.dues) and self.dues[self.index].t <= now:
            self.index += 1
        return self.dues[start:self.index]

    def finish(self) -> list[Due]:
        """Everything not yet handed out (skipping to the end)."""
        return self.advance(math.inf)


def play(dues: Sequence[Due], emit: Callable[[float, list[Due]], None], tick: float = 0.05,
         clock: Callable[[], float] = time.perf_counter,
         sleep: Callable[[float], None] = time.sleep) -> None:
    """Replay in real time: ``emit(now, due_events)`` at most every ``tick`` seconds."""
    cursor = ReplayCursor(dues)
    start = clock()
    last = -tick
    while not cursor.done:
        now = clock() - start
        got = cursor.advance(now)
        if got:
            emit(now, got)
            last = now
        if not cursor.done:
            # Sleep until the next event is due, but draw no more often than every ``tick``.
            sleep(max(0.0, cursor.next_t - now, last + tick - now))
