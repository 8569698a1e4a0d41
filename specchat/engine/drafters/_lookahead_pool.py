"""The two data structures of Lookahead decoding (Fu et al. 2024, arXiv:2402.02057), without
llama.cpp: the Jacobi window and the n-gram pool. Pure Python; the drafter that runs them is
:mod:`specchat.engine.drafters.lookahead`.

The window holds N − 1 *levels* of W guesses each. Column c (0 ≤ c < W) is a Jacobi
trajectory after the last committed token (the root, offset 0): level 0's guess sits at offset
c (column 0's level 0 is the root itself), level j's at offset c + j. In the target's batch the
row of level j, column c sees the cached tokens, the root, level 0's guesses of columns 1..c and
its own column's levels 1..j−1 — one sequence per column, laid out with sequence ids as in
llama.cpp's examples/lookahead. The last level's rows give, by argmax, a new guess per column
one position further: the Jacobi update. Each column then yields the n-gram of N tokens
(level 0 … level N − 2, the new guess) for the pool, and its levels move up by one (the new
guess becomes the last level).

The pool maps a token to the n-grams that followed it, most recent first, at most ``cap`` per
token (llama.cpp keeps G); the committed text's own n-grams go in as well (prompt lookup:
free, and what quoting replies repeat).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass


class NgramPool:
    """n-grams by their first token: the N − 1 tokens after it, most recent first."""

    def __init__(self, cap: int) -> None:
        if cap < 1:
            raise ValueError("an n-gram pool keeps at least one n-gram per token")
        self.cap = cap
        self._by_first: dict[int, list[tuple[int, ...]]] = {}

    def add(self, first: int, rest: Sequence[int]) -> None:
        """Remember ``rest`` after ``first`` as the most recent (once: a repeat moves up)."""
        gram = tuple(int(t) for t in rest)
        if not gram:
            return
        grams = self._by_first.setdefault(int(first), [])
        if gram in grams:
            grams.remove(gram)
        grams.insert(0, gram)
        del grams[self.cap :]

    def get(self, first: int) -> list[tuple[int, ...]]:
        return list(self._by_first.get(int(first), ()))

    def clear(self) -> None:
        self._by_first.clear()

    def __len__(self) -> int:
        return sum(len(g) for g in self._by_first.values())


@dataclass(frozen=True)
class WindowRows:
    """The window's rows for one batch (see :class:`~specchat.engine.decode.plan.SideBranch`)."""

    tokens: tuple[int, ...]
    offsets: tuple[int, ...]
    seqs: tuple[tuple[int, ...], ...]  # column numbers; the first is the row's own column
    logits: tuple[int, ...]  # the last level's rows, by column


class JacobiWindow:
    """W columns × (N − 1) levels of guesses (see the module docstring)."""

    def __init__(self, w: int, n: int) -> None:
        if w < 0:
            raise ValueError("the lookahead window cannot be negative")
        if w > 0 and n < 3:
            raise ValueError("lookahead n-grams need N ≥ 3 (two drafted tokens) with a window")
        self.w, self.n = w, n
        self.levels: list[list[int]] = [[0] * w for _ in range(max(n - 1, 0))]

    def seed(self, tokens: Sequence[int]) -> None:
        """Initial guesses from the text's tail (any start converges; text tokens are likelier
        than arbitrary ids to be right somewhere)."""
        if not tokens or not self.w:
            return
        need = self.w * len(self.levels)
        tail = list(tokens[-need:])
        for j, level in enumerate(self.levels):
            for c in range(self.w):
                level[c] = int(tail[(j * self.w + c) % len(tail)])

    @staticmethod
    def n_rows(w: int, n: int) -> int:
        """Rows a window of ``w`` columns adds to a batch (column 0's level 0 is the root)."""
        return w * (n - 1) - 1 if w > 0 else 0

    def rows(self, w: int) -> WindowRows:
        """The batch rows of the first ``w`` columns."""
        if not 1 <= w <= self.w:
            raise ValueError(f"a window of {w} columns out of {self.w}")
        tokens: list[int] = []
        offsets: list[int] = []
        seqs: list[tuple[int, ...]] = []
        logits: list[int] = []
        top = len(self.levels) - 1
        for c in range(1, w):  # level 0: seen by its own column and every later one
            tokens.append(self.levels[0][c])
            offsets.append(c)
            seqs.append(tuple(range(c, w)))
        for j in range(1, top + 1):
            for c in range(w):
                if j == top:
                    logits.append(len(tokens))
                tokens.append(self.levels[j][c])
                offsets.append(c + j)
                seqs.append((c,))
        return WindowRows(tuple(tokens), tuple(offsets), tuple(seqs), tuple(logits))

    def advance(self, root: int, new: Sequence[int]) -> list[tuple[int, ...]]:
        """One Jacobi step of the first len(new) columns: their n-grams (N tokens each, the
        first being the key), then each column's levels move up and ``new`` becomes the last."""
        grams: list[tuple[int, ...]] = []
        for c, guess in enumerate(new):
            col = [root if c == 0 else self.levels[0][c],
                   *(level[c] for level in self.levels[1:]), int(guess)]
            grams.append(tuple(col))
            for j in range(len(self.levels) - 1):
                self.levels[j][c] = self.levels[j + 1][c]
            self.levels[-1][c] = int(guess)
        return grams


def candidate_tree(grams: Sequence[Sequence[int]], max_nodes: int, max_depth: int,
                   max_leaves: int, is_eog: Callable[[int], bool]
                   ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The pool's n-grams as one token trie (tokens, parent indices): shared prefixes merge,
    children rank in the order their n-grams come (most recent first), an n-gram is cut after
    an end-of-generation token and where the limits would be passed (so a large candidate set
    shrinks to what the step can check, never fails)."""
    tokens: list[int] = []
    parents: list[int] = []
    index: dict[tuple[int, int], int] = {}
    has_child: set[int] = set()
    leaves = 0
    for gram in grams:
        node = -1
        for d, t in enumerate(gram, 1):
            if d > max_depth:
                break
            t = int(t)
            at = index.get((node, t))
            if at is None:
                grows = node < 0 or node in has_child  # a new leaf, unless it extends one
                if len(tokens) >= max_nodes or leaves + grows > max_leaves:
                    break
                at = index[(node, t)] = len(tokens)
                tokens.append(t)
                parents.append(node)
                leaves += grows
                if node >= 0:
                    has_child.add(node)
            node = at
            if is_eog(t):  # nothing after it could be kept
                break
    return tuple(tokens), tuple(parents)
