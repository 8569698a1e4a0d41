"""The time-budgeted training loop that Medusa's heads and Kangaroo's adapter share.

Minibatches of the training positions, shuffled each epoch, until ``epochs`` passes or the time
budget is spent; every ``eval_every`` steps (and at the budget) the current weights are scored
on held-out positions and the best kept, as they are once more at the end. Progress is reported
per step in seconds of the budget; a set ``cancel`` stops it with :class:`Cancelled`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt

from specchat.errors import Cancelled
from specchat.models.progress import Progress, ProgressFn

W = TypeVar("W")  # a copy of the weights
A = TypeVar("A")  # their held-out score


@dataclass(frozen=True)
class Fitted(Generic[W, A]):
    best: W  # the weights that scored best on the held-out positions
    score: A  # their score
    steps: int
    seconds: float


@dataclass(frozen=True)
class Budget:
    minutes: float
    epochs: int  # at most, when the time allows
    batch: int  # positions per step
    eval_every: int  # steps between held-out scores


def fit_within(budget: Budget, train_pos: npt.NDArray[np.int64], rng: np.random.Generator,
               step: Callable[[npt.NDArray[np.int64]], float], snapshot: Callable[[], W],
               score: Callable[[], A], key: Callable[[A], float], describe: Callable[[A], str],
               task: str, report: ProgressFn, cancel: threading.Event | None,
               cancelled: str) -> Fitted[W, A]:
    """Train by ``step(positions) -> loss`` (one optimiser step on the positions (batch,) of
    ``train_pos``, drawn with ``rng``); ``score()`` rates the current weights on held-out
    positions (higher ``key`` is better, a tie keeps the later weights) and ``snapshot()``
    copies them; ``describe(score)`` words the best score for the progress line. ``cancelled``
    is the message of the :class:`Cancelled` raised when ``cancel`` is set."""
    best, best_score = snapshot(), score()
    total = budget.minutes * 60.0
    t0 = time.monotonic()
    steps = 0
    steps_per_epoch = max(1, train_pos.size // budget.batch)
    done = False
    for _epoch in range(budget.epochs):
        order = rng.permutation(train_pos)
        for i in range(steps_per_epoch):
            if cancel is not None and cancel.is_set():
                raise Cancelled(cancelled)
            loss = step(order[i * budget.batch : (i + 1) * budget.batch])
            steps += 1
            elapsed = time.monotonic() - t0
            if steps % budget.eval_every == 0 or elapsed >= total:
                now = score()
                if key(now) >= key(best_score):
                    best, best_score = snapshot(), now
            report(Progress(task, min(elapsed, total), total, unit="s",
                            detail=f"step {steps} · loss {loss:.3f} · {describe(best_score)}"))
            if elapsed >= total:
                done = True
                break
        if done:
            break
    now = score()
    if key(now) >= key(best_score):
        best, best_score = snapshot(), now
    seconds = time.monotonic() - t0
    report(Progress(task, min(seconds, total), total, unit="s", finished=True))
    return Fitted(best, best_score, steps, seconds)
