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
        # The same for the occurrence before the most recent (a one-token edit looks up the
        # tokens just before the sequence's last, whose most recent occurrence is its own).
        self._before: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in self._index}

    def reset(self, tokens: Sequence[int]) -> None:
        """Index ``tokens`` as the conversation so far (keeps the index if they extend it)."""
        n = len(self.tokens)
        if len(tokens) >= n and list(tokens[:n]) == self.tokens:
            self.extend(tokens[n:])
            return
        self.tokens = []
        for tables in (self._index, self._before):
            for table in tables.values():
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
                    key = tuple(toks[j - n : j])
                    was = table.get(key)
                    if was is not None:
                        self._before[n][key] = was
                    table[key] = j
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
        """Up to ``k`` tokens continuing the sequence, or [] when its tail was never seen before.

        Longest match first; before a one-token match, a match (of two tokens or more) of the
        tokens before the last one, read as an edit of one token: a reply that copies a passage
        with a word changed ("every 'river' becomes 'canal'") goes on from after the replaced
        word, where a match of the new word alone points elsewhere (at the instruction that
        named it)."""
        toks = self.tokens
        if k <= 0:
            return []
        for n in range(self.n_max, max(self.n_min, 2) - 1, -1):
            j = self._at(toks, n, len(toks))
            if j is not None:
                return toks[j : j + k]
        last = len(toks) - 1
        for c in range(min(self.n_max, last), max(self.n_min, 2) - 1, -1):  # an edit after c
            # The index points these c tokens at the last token; the time before, at what the
            # last token replaced.
            j = self._before[c].get(tuple(toks[last - c : last]))
            if j is not None:
                return toks[j + 1 : j + 1 + k]
        if self.n_min == 1:
            j = self._at(toks, 1, len(toks))
            if j is not None:
                return toks[j : j + k]
        return []

    def _at(self, toks: Sequence[int], n: int, end: int) -> int | None:
        """Where the token after the most recent earlier ``toks[end − n : end]`` is."""
        if end < n:
            return None
        return self._index[n].get(tuple(toks[end - n : end]))


def build(env: DrafterEnv) -> NgramDrafter:
    # With a draft model behind it, only fairly specific matches (n ≥ 2) beat asking it.
    n_min = env.ngram_n_min or (2 if env.draft is not None else 1)
    return NgramDrafter(n_min=n_min, is_eog=env.target.model.is_eog)
