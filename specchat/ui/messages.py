"""Typed messages from the worker threads to the UI thread (the one way back, thread-safe).

Stats and load progress replace each other in the queue (``can_replace``): if the UI falls
behind, it draws only the newest figures. Reply chunks carry text and never replace each other.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from specchat.engine.events import GenerationStats
from specchat.models.progress import Progress
from specchat.race.result import RaceResult
from specchat.runtime import Runtime
from specchat.store.fates import Segment
from specchat.session.live import LiveStats


@dataclass
class ReplyChunk(Message):
    """New text of the reply being generated, with fates, and any notices from the engine."""

    job: int
    segments: list[Segment]
    notices: list[str]


@dataclass
class StatsUpdate(Message):
    job: int
    stats: LiveStats

    def can_replace(self, message: Message) -> bool:
        # ``message`` is the newer one, queued behind this: draw only the newest figures.
        return isinstance(message, StatsUpdate) and message.job == self.job


@dataclass
class ReplyFinished(Message):
    job: int
    stats: GenerationStats
    live: LiveStats


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
class RaceFailed(Message):
    job: int
    message: str


@dataclass
class RacePairOpened(Message):
    """Another pair's models are loaded for the race screen (it owns them from now on)."""

    runtime: Runtime
