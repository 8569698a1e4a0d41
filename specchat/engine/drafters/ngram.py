"""Prompt-lookup drafting: propose what followed the last time the conversation said this.

The drafter indexes every n-gram (n_min ≤ n ≤ n_max) of the conversation's token sequence with
the position right after its most recent occurrence. To draft, it looks up the sequence's last
n tokens, longest n first, and proposes the tokens that followed that earlier occurrence. It
shines when the reply quotes the prompt (summaries, code edits, extraction) and costs a few
dictionary look-ups per step. The index grows incrementally as tokens are committed, so a step
costs O(new tokens), not O(conversation).

A proposal is a chain whose tokens are point masses (q one-hot), cut after an
end-of-generation token of the target's (nothing after it could be kept).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from specchat.engine.drafters import ChainDefault, DrafterEnv, DraftRequest, Proposal
from specchat.engine.verify import Verdict, one_hot

NAME = "ngram"


def _never(token: int) -> bool:
    return False


class NgramDrafter(ChainDefault):
    name = NAME

    def __init__(self, n_max: int = 3, n_min: int = 1,
                 is_eog: Callable[[int], bool] = _never) -> None:
        if not 1 <= n_min <= n_max:
            raise ValueError("need 1 ≤ n_min ≤ n_max")
        self.n_max = n_max
        self.n_min = n_min
        self.is_eog = is_eog
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

    def propose(self, req: DraftRequest) -> Proposal:
        drafts = self._chain(req.plan.depth)
        return Proposal(self.name, tuple(drafts), tuple(range(-1, len(drafts) - 1)),
                        tuple(one_hot(t) for t in drafts))

    def commit(self, seq: Sequence[int], proposal: Proposal, verdict: Verdict) -> None:
        self.reset(seq)

    def can_propose(self, seq: Sequence[int]) -> bool:
        """A match for the sequence's tail (the index follows ``seq`` after each commit)."""
        if len(seq) != len(self.tokens):
            self.reset(seq)
        return bool(self.lookup(1))

    def guess(self, seq: Sequence[int], k: int) -> list[int]:
        """The chain of up to ``k`` tokens a step would propose now: it costs a look-up, so the
        planner scores it on steps that did not run this drafter (:mod:`specchat.engine.
        guesses`)."""
        if len(seq) != len(self.tokens):
            self.reset(seq)
        return self._chain(k)

    def _chain(self, k: int) -> list[int]:
        drafts = self.lookup(k)
        cut = next((i + 1 for i, t in enumerate(drafts) if self.is_eog(t)), len(drafts))
        return drafts[:cut]

    def lookup(self, k: int) -> list[int]:
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


def build(env: DrafterEnv) -> NgramDrafter:
    # With a draft model behind it, only fairly specific matches (n ≥ 2) beat asking it.
    n_min = env.ngram_n_min or (2 if env.draft is not None else 1)
    return NgramDrafter(n_min=n_min, is_eog=env.target.model.is_eog)
