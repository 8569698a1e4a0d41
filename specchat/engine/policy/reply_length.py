"""How many more tokens a reply is likely to write: what a draft model's catch-up is set against.

A draft model that has not read the conversation (after plain or lookup steps, or a new prompt)
must first read what it missed, in one batched decode — on a CPU that can cost more than the
rest of a short reply gains from drafting. So the planner prices the read against the tokens the
reply is still expected to produce: ``E[L − n | L > n]`` over the lengths of earlier replies
(recent ones weigh more), capped by the reply's budget. With no earlier reply as long as this
one, the reply is expected to run as long again as it has (a reply that has gone on for a while
tends to go on), at least ``MIN_PRIOR`` tokens.
"""

from __future__ import annotations

from collections.abc import Mapping

KEEP = 32  # replies remembered
DECAY = 0.9  # each older reply weighs this much less
MIN_PRIOR = 32


class ReplyLengths:
    """The lengths of earlier replies, and the reply in progress."""

    def __init__(self) -> None:
        self.lengths: list[int] = []  # oldest first
        self.tokens: int | None = None  # this reply's so far (None: no reply begun)
        self.budget: int | None = None  # this reply's token budget (None: unknown)

    def begin(self) -> None:
        """A reply starts: the last one's length counts."""
        if self.tokens:
            self.add(self.tokens)
        self.tokens = 0

    def committed(self, tokens: int) -> None:
        if self.tokens is not None:
            self.tokens += tokens

    def remaining(self) -> float:
        """Tokens the reply in progress is still expected to write, within its budget."""
        return self.expected_remaining(self.tokens or 0, self.budget)

    def add(self, length: int) -> None:
        if length > 0:
            self.lengths = [*self.lengths[-(KEEP - 1):], int(length)]

    def expected_remaining(self, n: int, budget: int | None = None) -> float:
        """Tokens a reply that has written ``n`` is expected to add (≤ ``budget − n``)."""
        num = den = 0.0
        w = 1.0
        for length in reversed(self.lengths):
            if length > n:
                num += w * (length - n)
                den += w
            w *= DECAY
        est = num / den if den > 0 else float(max(n, MIN_PRIOR))
        if budget is not None:
            est = min(est, float(max(budget - n, 0)))
        return max(est, 0.0)

    def state(self) -> dict[str, object]:
        """The lengths, the reply in progress (or the last one) counted."""
        now = self.tokens or 0
        return {"reply_lengths": [*self.lengths[-(KEEP - 1):], now] if now else list(self.lengths)}

    @staticmethod
    def read_state(d: Mapping[str, object]) -> list[int]:
        """Saved lengths, checked (ValueError: another shape); older states have none."""
        raw = d.get("reply_lengths", [])
        if not isinstance(raw, list) or not all(isinstance(v, int) and v >= 0 for v in raw):
            raise ValueError("reply lengths of another shape")
        return [int(v) for v in raw][-KEEP:]

    def load_state(self, d: Mapping[str, object]) -> None:
        self.lengths = self.read_state(d)
