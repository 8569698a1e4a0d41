"""Typed messages from the wizard's thread workers to its screen (the one way back; a failure
is the shared :class:`specchat.ui.messages.WorkerFailed`).

Progress messages replace each other in the queue while their task runs, so a fast download
cannot flood the UI; every other message is delivered as is.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from textual.message import Message

from specchat.models.calibration import CalibrationResult
from specchat.models.catalog import ModelEntry
from specchat.models.compat import CompatReport, ModelFacts
from specchat.models.hub import RepoListing
from specchat.models.local_files import LocalModel
from specchat.models.pairing import DraftCandidate, SelfDraftOption
from specchat.models.progress import Progress, ProgressFn


@dataclass
class WizardProgress(Message):
    progress: Progress

    def can_replace(self, message: Message) -> bool:
        # ``message`` is the newer one: it supersedes this one unless this one ends the task.
        p = self.progress
        return (isinstance(message, WizardProgress) and not (p.finished or p.failed)
                and message.progress.task == p.task)


@dataclass
class LocalScanned(Message):
    models: list[LocalModel]


@dataclass
class RepoListed(Message):
    role: str  # "target" or "draft"
    listing: RepoListing


@dataclass
class DraftsReady(Message):
    target: ModelEntry
    facts: ModelFacts
    candidates: list[DraftCandidate]
    self_drafts: list[SelfDraftOption]


@dataclass
class CandidateChecked(Message):
    candidate: DraftCandidate
    proceed: bool  # the user picked it: go on if it fits


@dataclass
class FilesReady(Message):
    target: Path
    draft: Path
    draft_entry: ModelEntry  # a self-draft's entry exists only once it is made
    report: CompatReport


@dataclass
class CalibrationDone(Message):
    result: CalibrationResult


@dataclass
class _Throttle:
    post: ProgressFn
    every: float = 0.1
    last: dict[str, float] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, p: Progress) -> None:
        now = time.monotonic()
        with self.lock:
            if not (p.finished or p.failed) and now - self.last.get(p.task, 0.0) < self.every:
                return
            self.last[p.task] = now
        self.post(p)


def throttled(post: ProgressFn, every: float = 0.1) -> ProgressFn:
    """Forward at most one progress record per task every ``every`` seconds (ends always)."""
    return _Throttle(post, every)
