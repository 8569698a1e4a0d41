"""When the planner stops trying a lookup for a while: the lookups (n-gram, prediction) whose
steps kept nothing several times in a row.

Lookup steps that kept nothing k times in a row pause the lookup for 2^k − 1 steps (at most
LOOKUP_PAUSE_MAX), unless its guesses, still scored on every step, come right again: past the
point where a copy departs from its source, a lookup is wrong several times in a row, and each
failed check costs several plain steps on a steep CPU curve.
"""

from __future__ import annotations

LOOKUP_PAUSE_MAX = 16


class LookupPauses:
    def __init__(self) -> None:
        self.fails: dict[str, int] = {}  # per lookup: its steps in a row that kept nothing
        self.left: dict[str, int] = {}  # per lookup: the steps left before it is tried again

    def clear(self) -> None:
        self.fails, self.left = {}, {}

    def unpaused(self, available: tuple[str, ...], hot: frozenset[str]) -> tuple[str, ...]:
        """One step on: ``available`` less the lookups pausing; a lookup in ``hot`` (its
        guesses came right again) ends its pause."""
        for name, left in list(self.left.items()):
            self.left[name] = left - 1
            if left <= 0:
                del self.left[name]
            elif name in hot:
                self.left.pop(name)
                self.fails.pop(name, None)
            else:
                available = tuple(n for n in available if n != name)
        return available

    def outcome(self, name: str, kept: bool) -> None:
        """A lookup step of ``name`` kept something, or nothing: the latter pauses it."""
        if kept:
            self.fails.pop(name, None)
            self.left.pop(name, None)
            return
        fails = self.fails[name] = self.fails.get(name, 0) + 1
        self.left[name] = min(2 ** fails - 1, LOOKUP_PAUSE_MAX)
