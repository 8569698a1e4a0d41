"""How long two token sequences agree from their start: how much of a cache a new sequence keeps.

Every cache that follows a committed sequence (the target's, a draft model's, a shallow or MTP
context's) and every "what is new since last time" asks this; one helper answers them all.
"""

from __future__ import annotations

from collections.abc import Sequence


def common_prefix(a: Sequence[int], b: Sequence[int], start: int = 0) -> int:
    """The length of the longest common prefix of ``a`` and ``b``; the first ``start`` tokens
    are taken to agree (a caller that knows them equal skips them; ``start`` is returned when
    it is past the shorter sequence)."""
    for i in range(start, min(len(a), len(b))):
        if a[i] != b[i]:
            return i
    return max(start, min(len(a), len(b)))
