"""Batch sizes timed once in this process, held until their second timing: :class:`FirstDecodes`.

llama.cpp sizes its compute buffers on a batch shape's first decode, which then costs up to twice
a later one (docs/performance.md: T(2) 54 ms once, then 31 ms), so
:class:`~specchat.engine.policy.cost_model.OnlineCostModel` (``skip_first``) does not count a
size's first time: it holds it, and counts the lesser of the first two at the second. Held, the
time still says something: a first decode costs at most f times a later one, so the size costs
at least H / f. Without that bound the size stays priced on a guess (a line through the sizes
counted) that can be far below what its first check just cost, and the planner chooses it again
on that guess (on a steep CPU curve, an 8-row check at 4.9 T(1) that had cost 7.5).

f is measured in the process: each size that has both its held first time and its second is one
observation first / second, and f is the largest seen (the most generous discount, so the bound
stays a bound when one size's first decode costs more over its later ones than another's), at
least 1; before any pair, the documented "up to twice" (FIRST_PRIOR). A size's plain steps give
the first pair within two steps, so the prior rarely prices anything.

Neither the held times nor f are saved with the cost model's state: a held time is a first
decode of this process's buffers, never seen again in another, and f is what this process's
first decodes cost over later ones — a new process measures its own from its first pair.
"""

from __future__ import annotations

from collections.abc import Sequence

FIRST_PRIOR = 2.0  # a first decode over a later one before any pair is seen (documented bound)


class FirstDecodes:
    """The held first times by batch size, and f; :meth:`floor` puts the bound they give on the
    verify table until each size's second timing.

    ``memory``: a held bound lapses after this many timings counted since it was held (the cost
    model's half-life: by then a counted time weighs half, and the machine's level may have
    moved). It keeps one slow first decode — other work ran during it — from pricing its size out
    for the rest of a long process (the size would never be chosen, so never timed again)."""

    def __init__(self, memory: float = 48.0) -> None:
        self.memory = memory
        self.held: dict[int, tuple[float, int]] = {}  # size -> (first seconds, timings counted then)
        self.most: float | None = None  # the largest first / second of a size seen twice
        self.timings = 0  # timings counted (what a held bound's age is measured in)

    @property
    def factor(self) -> float:
        """f: how much a first decode may cost over a later one, in this process."""
        return max(self.most, 1.0) if self.most is not None else FIRST_PRIOR

    def hold(self, n: int, seconds: float) -> None:
        """Size ``n``'s first timing in this process."""
        self.held[n] = (seconds, self.timings)

    def count(self, n: int, seconds: float) -> float:
        """A timing of size ``n`` that counts: the time to count. At a size's second timing
        that is the lesser of its first two, and first / second is one observation of f."""
        self.timings += 1
        first = self.held.pop(n, None)
        if first is None:
            return seconds
        ratio = first[0] / seconds
        self.most = ratio if self.most is None else max(self.most, ratio)
        return min(seconds, first[0])

    def bounds(self) -> tuple[tuple[int, float], ...]:
        """(size, H / f) of each held time still in force, by size: what the cache keys on."""
        f = self.factor
        return tuple(sorted((n, h / f) for n, (h, at) in self.held.items()
                            if self.timings - at < self.memory))

    def floor(self, estimates: Sequence[float],
              bounds: Sequence[tuple[int, float]] | None = None) -> tuple[float, ...]:
        """``estimates`` (T(1..k)) with each held size priced at least H / f, and every size
        above it at least that too (a bigger batch never costs less); ``bounds``: as
        :meth:`bounds` gave them, if the caller has them."""
        out = list(estimates)
        for n, low in self.bounds() if bounds is None else bounds:
            for i in range(n - 1, len(out)):
                out[i] = max(out[i], low)
        return tuple(out)
