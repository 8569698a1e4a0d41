"""Prompt-lookup drafting: propose what followed the last time the conversation said this.

The drafter indexes every n-gram (n_min ≤ n ≤ n_max) of the conversation's token sequence with
the position right after its most recent occurrence. To draft, it looks up the sequence's last
n tokens, longest n first, and proposes the tokens that followed that earlier occurrence. It
shines when the reply quotes the prompt (summaries, code edits, extraction) and costs a few
dictionary look-ups per step. The index grows incrementally as tokens are committed, so a step
costs O(new tokens), not O(conversation).
"""

from __future__ import annotations

from collections.abc import Sequence


class NgramDrafter:
    name = "ngram"

    def __init__(self, n_max: int = 3, n_min: int = 1) -> None:
        if not 1 <= n_min <= n_max:
            raise ValueError("need 1 ≤ n_min ≤ n_max")
        self.n_max = n_max
        self.n_min = n_min
        self.tokens: list[int] = []
        # n → {n-gram: index of the token after its most recent occurrence}
        self._index: dict[int, dict[tuple[int, ...], int]] = {
            n: {} for n in range(n_min, n_max + 1)}

    def reset(self, tokens: Sequence[int]) -> None:
        """Index ``tokens`` as the conversation so far (keeps the index if they extend it)."""
        n = len(self.tokens)
        if len(tokens) >= n and list(tokens[:n]) == self.tokens:
            self.extend(tokens[n:])
            return
        self.tokens = []
        for table in self._index.values():
            table.clear()
        self.extend(tokens)

    def extend(self, new: Sequence[int]) -> None:
        """Append committed tokens to the sequence and index the n-grams they complete."""
        toks = self.tokens
        for t in new:
            # The n-grams ending just before t now have a continuation (t): index them.
            j = len(toks)
            for n, table in self._index.items():
                if j >= n:
                    table[tuple(toks[j - n : j])] = j
            toks.append(int(t))

    def propose(self, k: int) -> list[int]:
        """Up to ``k`` tokens continuing the sequence, or [] when its tail was never seen before."""
        toks = self.tokens
        if k <= 0:
            return []
        for n in range(self.n_max, self.n_min - 1, -1):
            if len(toks) < n:
                continue
            j = self._index[n].get(tuple(toks[len(toks) - n :]))
            if j is not None:
                return toks[j : j + k]
        return []
