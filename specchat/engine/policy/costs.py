"""What a draft token and a verification cost on this machine, measured on real decodes.

Speculation pays only if γ draft steps plus one target pass over γ + 1 tokens beat γ + 1 plain
target steps. On a GPU a batch of 5 costs about what 1 does; on a CPU it does not
(docs/performance.md), so the whole curve T_v(n) is measured, not assumed. Each figure is the
fastest of a few repeats (other load on the machine only ever adds time), with batch sizes
measured round-robin so a burst of load does not skew one of them, after the cache holds a
realistic prefix.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from specchat.engine.llama.context import DecodeCancelled, LlamaContext


@dataclass(frozen=True)
class CostCurve:
    draft_s: float  # one draft step: a single-token decode and its argmax
    verify_s: tuple[float, ...]  # verify_s[n - 1]: one target decode of n tokens, all logits

    def t_verify(self, n: int) -> float:
        return self.verify_s[n - 1]

    @property
    def draft_ratio(self) -> float:
        """A draft step's cost as a fraction of one plain target step."""
        return self.draft_s / self.verify_s[0]


def _check(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise DecodeCancelled("cancelled")


def draft_step_cost(ctx: LlamaContext, prefix: Sequence[int], tokens: Sequence[int],
                    cancel: threading.Event | None = None) -> float:
    """Seconds of one single-token decode (+ argmax) after ``prefix``: the fastest over
    ``tokens``, each decoded at the next position."""
    _sync(ctx, prefix)
    times = []
    for t in tokens:
        _check(cancel)
        t0 = time.perf_counter()
        row = ctx.decode((t,), logits="last")
        np.argmax(row[0])
        times.append(time.perf_counter() - t0)
    ctx.truncate(len(prefix))
    return min(times)


def verify_costs(ctx: LlamaContext, prefix: Sequence[int], tokens: Sequence[int], max_n: int,
                 repeats: int = 3, cancel: threading.Event | None = None,
                 progress: Callable[[float], None] | None = None) -> tuple[float, ...]:
    """Seconds of decoding n = 1..max_n tokens at once after ``prefix`` (all logits, as a
    verification does), rolling the cache back after each: the fastest of ``repeats``.
    ``progress`` is told the share of the work done (by tokens decoded) after each decode."""
    if len(tokens) < max_n:
        raise ValueError(f"need {max_n} tokens to time, got {len(tokens)}")
    _sync(ctx, prefix)
    best = [float("inf")] * max_n
    work = repeats * max_n * (max_n + 1) / 2
    done = 0
    for _ in range(repeats):
        for n in range(1, max_n + 1):
            _check(cancel)
            t0 = time.perf_counter()
            ctx.decode(tokens[:n], logits="all")
            best[n - 1] = min(best[n - 1], time.perf_counter() - t0)
            ctx.truncate(len(prefix))
            done += n
            if progress is not None:
                progress(done / work)
    return non_decreasing(best)


def non_decreasing(values: Sequence[float]) -> tuple[float, ...]:
    """The closest non-decreasing curve (pool adjacent violators): a batch of n + 1 tokens never
    costs less than n, so a dip is noise — left in, it would make that γ look like a bargain."""
    blocks: list[list[float]] = []  # [mean, count]
    for v in values:
        blocks.append([v, 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m2, c2), (m1, c1) = blocks.pop(), blocks.pop()
            blocks.append([(m1 * c1 + m2 * c2) / (c1 + c2), c1 + c2])
    return tuple(m for m, c in blocks for _ in range(int(c)))


def _sync(ctx: LlamaContext, prefix: Sequence[int]) -> None:
    """Make the cache hold exactly ``prefix`` (evaluating only what differs)."""
    keep = ctx.common_prefix(prefix)
    ctx.truncate(keep)
    if keep < len(prefix):
        ctx.decode(prefix[keep:], logits="last")
