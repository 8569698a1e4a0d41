"""Rows a verify batch carries besides the token tree: the batch layout a drafter may ask for."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True)
class SideBranch:
    """Rows a drafter adds to the target's verify batch besides the proposal's tree, in
    sequences of their own (Lookahead decoding's Jacobi window, see drafters/lookahead.py).

    Row ``r`` is token ``tokens[r]`` at ``offsets[r]`` positions after the root (≥ 1); it
    belongs to the branch's sequences ``seqs[r]`` (numbered 0..n_seqs − 1, apart from the
    tree's), the first of which decides what it attends to: the cached tokens, the root, and
    the earlier rows of that sequence. Rows must come in non-decreasing offset per sequence.
    ``logits`` lists the rows whose logits the drafter wants back; ``receive`` is called with
    them (one row each, in that order) right after the batch, before anything else decodes —
    the array is valid only during the call. None of these rows stays in the cache.
    """

    tokens: tuple[int, ...]
    offsets: tuple[int, ...]
    seqs: tuple[tuple[int, ...], ...]
    n_seqs: int
    logits: tuple[int, ...]
    receive: Callable[[npt.NDArray[np.float32]], None] = field(compare=False, repr=False,
                                                               default=lambda rows: None)

    def __post_init__(self) -> None:
        n = len(self.tokens)
        if len(self.offsets) != n or len(self.seqs) != n:
            raise ValueError("a side branch needs an offset and sequences for each token")
        if any(o < 1 for o in self.offsets):
            raise ValueError("side rows come after the root (offset ≥ 1)")
        if any(not s or not all(0 <= x < self.n_seqs for x in s) for s in self.seqs):
            raise ValueError(f"side rows' sequences must be within 0..{self.n_seqs - 1}")
        if any(not 0 <= r < n for r in self.logits):
            raise ValueError("a logits row outside the side branch")

    @property
    def size(self) -> int:
        return len(self.tokens)

    @property
    def reach(self) -> int:
        """The farthest offset after the root a row takes."""
        return max(self.offsets, default=0)
