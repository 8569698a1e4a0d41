"""What earlier requests said, for the n-gram drafter: a bounded memory of past token sequences.

A regenerated reply, an agent that sends its context again, a client that asks the same thing
twice: the new reply repeats text that no longer is in the request's own tokens. The memory
keeps each reply as it ended, with its conversation (a prompt and the reply written to it; a
conversation's next turn replaces it), most recent last, up to ``max_tokens`` in all (the
oldest whole sequences go first), and indexes every run of ``n`` tokens with where the text
went on after its most recent occurrence. Where a long
match has placed the reply in one of them (a :class:`Place`), a reply that departed from it
re-joins it on a short match near where it left (:meth:`NgramMemory.near`).

A match is ``n`` tokens long (16 by default): a two-token match in a request's own text is
good evidence in a copy, but across requests only a long one is (the chat template's tokens
repeat in every request; what follows them does not). The memory holds token ids of one
target's vocabulary: a runtime keeps one per loaded target (:meth:`DrafterEnv.kept`), shared
by its decoders and slots, so a request served on either slot finds what the other said. It
lives as long as the process: nothing is written to disk.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import NamedTuple

MATCH = 16  # tokens that must repeat before the memory proposes what followed them
# Once a long match placed the reply in a remembered sequence, a reply that departed from it
# (a word changed, a line added) re-joins it where its last REJOIN tokens occur again within
# WINDOW tokens of where the sequence would be had it kept pace: near the place, a short run is
# evidence enough, as in a copy of the request's own text.
REJOIN = 4
WINDOW = 16
MAX_TOKENS = 1 << 16  # tokens kept in all: 64 Ki ids, a few MB with the index


class Place(NamedTuple):
    """Where a remembered sequence went on (``at``: the index of its next token) when the reply
    was ``length`` tokens long."""

    number: int
    at: int
    length: int


class NgramMemory:
    """Past token sequences, indexed by their ``n``-token runs (see the module's docstring)."""

    def __init__(self, n: int = MATCH, max_tokens: int = MAX_TOKENS) -> None:
        if n < 2 or max_tokens < n:
            raise ValueError("need 2 ≤ n ≤ max_tokens")
        self.n = n
        self.max_tokens = max_tokens
        self._seqs: list[tuple[int, ...]] = []
        # run of n tokens → (sequence number, index of the token after it), most recent
        self._index: dict[tuple[int, ...], tuple[int, int]] = {}
        self._first = 0  # the sequence number of _seqs[0] (older ones were let go)
        self._lock = threading.Lock()  # slots may remember and look up from their threads

    @property
    def tokens(self) -> int:
        """Tokens held, in all."""
        return sum(len(s) for s in self._seqs)

    def remember(self, tokens: Sequence[int], replacing: int | None = None) -> int | None:
        """Keep ``tokens`` (a reply as it ended, or a sequence the drafter let go); the number
        it is kept under (None: not kept). ``replacing``: the number a drafter kept the same
        conversation under before, replaced in place where ``tokens`` goes on from it (a chat's
        next turn), so a conversation is held once, not once per turn. One no longer than a
        match, or the same as the last kept, adds nothing."""
        seq = tuple(int(t) for t in tokens)
        with self._lock:
            if replacing is not None and 0 <= replacing - self._first < len(self._seqs):
                i = replacing - self._first
                old = self._seqs[i]
                if seq[: len(old)] == old and len(seq) <= self.max_tokens:
                    self._seqs[i] = seq
                    self._add(replacing, seq, since=len(old))
                    self._bound()
                    return replacing if replacing >= self._first else None
            if len(seq) <= self.n:
                return None
            if self._seqs and self._seqs[-1] == seq:
                return self._first + len(self._seqs) - 1
            if len(seq) > self.max_tokens:
                seq = seq[-self.max_tokens:]
            number = self._first + len(self._seqs)
            self._seqs.append(seq)
            self._add(number, seq)
            self._bound()
            return number if number >= self._first else None

    def follows(self, tail: Sequence[int], k: int) -> tuple[list[int], Place | None]:
        """Up to ``k`` tokens that followed the most recent earlier occurrence of ``tail``'s
        last ``n`` tokens, and that place ([] and None when they never occurred)."""
        n = self.n
        if k <= 0 or len(tail) < n:
            return [], None
        key = tuple(int(t) for t in tail[len(tail) - n:])
        with self._lock:
            at = self._index.get(key)
            if at is None:
                return [], None
            number, j = at
            return (list(self._seqs[number - self._first][j : j + k]),
                    Place(number, j, len(tail)))

    def near(self, tail: Sequence[int], place: Place, k: int) -> tuple[list[int], Place | None]:
        """Up to ``k`` tokens of ``place``'s sequence after an occurrence of ``tail``'s last
        REJOIN tokens within WINDOW tokens of where it would be now (the nearest first), and
        that place ([] and None: none there, or the sequence was let go)."""
        if k <= 0 or len(tail) < REJOIN:
            return [], None
        key = [int(t) for t in tail[len(tail) - REJOIN:]]
        with self._lock:
            i = place.number - self._first
            if not 0 <= i < len(self._seqs):
                return [], None
            seq = self._seqs[i]
            expect = place.at + len(tail) - place.length
            for d in sorted(range(-WINDOW, WINDOW + 1), key=abs):
                j = expect + d  # the index after the run
                if REJOIN <= j < len(seq) and list(seq[j - REJOIN : j]) == key:
                    return list(seq[j : j + k]), Place(place.number, j, len(tail))
        return [], None

    def clear(self) -> None:
        with self._lock:
            self._seqs.clear()
            self._index.clear()
            self._first = 0

    def _add(self, number: int, seq: tuple[int, ...], since: int = 0) -> None:
        """Index the runs of ``seq`` with a token after them, from index ``since`` on."""
        n, index = self.n, self._index
        for j in range(max(n, since), len(seq)):
            index[seq[j - n : j]] = (number, j)

    def _bound(self) -> None:
        held = self.tokens
        while held > self.max_tokens:
            held -= len(self._seqs[0])
            self._drop_oldest()

    def _drop_oldest(self) -> None:
        """Let the oldest sequence go, and the runs that point into it (a run a later sequence
        also holds points there already): O(its length), not O(all that is held)."""
        seq, number = self._seqs.pop(0), self._first
        n, index = self.n, self._index
        for j in range(n, len(seq)):
            key = seq[j - n : j]
            if index.get(key, (None, 0))[0] == number:
                del index[key]
        self._first += 1


class Recall:
    """One drafter's use of a shared memory: what it keeps its conversation under, where the
    memory last placed its reply, and whether this request may be drafted from it."""

    def __init__(self, memory: NgramMemory) -> None:
        self.memory = memory
        self.on = True  # this request may be drafted from the memory (see allow)
        self._place: Place | None = None
        self._kept_as: int | None = None  # the number the memory keeps this conversation under

    def let_go(self, tokens: Sequence[int]) -> None:
        """A new request that does not continue ``tokens``: keep them, start afresh."""
        self.memory.remember(tokens, self._kept_as)
        self._place = self._kept_as = None

    def ended(self, seq: Sequence[int]) -> None:
        """The reply ended: kept now (another slot's drafter finds it); the conversation's next
        turn replaces it."""
        self._kept_as = self.memory.remember(seq, self._kept_as)

    def allow(self, seed: int | None) -> None:
        """A request with a seed is drafted from its own tokens alone: which random numbers a
        reply draws depends on what was drafted, so drafts from whatever came before would make
        the same seed give another reply."""
        self.on = seed is None

    def said(self, tokens: Sequence[int], k: int) -> list[int]:
        """What an earlier request said after ``tokens``: after a long match of their tail, else
        near where one placed the reply (it departed from that text and came back to it)."""
        if not self.on:
            return []
        said, place = self.memory.follows(tokens, k)
        if place is None and self._place is not None:
            said, place = self.memory.near(tokens, self._place, k)
        if place is not None:
            self._place = place
        return said
