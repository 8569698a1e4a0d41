"""Drafting from a predicted output (OpenAI's Predicted Outputs): the text the caller expects the
reply to be, such as the file an edit will mostly leave as it is.

The prediction arrives with the reply's settings (``SamplerSettings.prediction``, target tokens)
and is indexed once per reply: every n-gram (1 ≤ n ≤ ``N_MAX``) with the positions that follow
its occurrences. A cursor says where in the prediction the reply goes on: it starts at the
prediction's first token and moves with every committed token that equals the prediction's next
one. Where the reply departs (the renamed variable), the cursor is lost; after each later token
the drafter looks up the reply's last tokens, longest match first, and takes the occurrence
nearest after the point it lost, so the reply re-joins the prediction just past the change.

A proposal is a chain of point masses (q one-hot), cut after an end-of-generation token: the
verification rule keeps a token with probability p(token), so the reply's distribution is the
target's whatever the prediction says.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from specchat.engine.decode.drafting import ChainDefault, DraftRequest, Proposal
from specchat.engine.decode.registry import DrafterEnv
from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.decode.verify import Verdict, one_hot

NAME = "prediction"
N_MAX = 6  # longest n-gram looked up to re-join the prediction
N_MIN = 2  # shorter matches re-join at chance places (" the", a newline)


def _never(token: int) -> bool:
    return False


class PredictionDrafter(ChainDefault):
    name = NAME

    def __init__(self, is_eog: Callable[[int], bool] = _never) -> None:
        self.is_eog = is_eog
        self.prediction: tuple[int, ...] = ()
        self._index: dict[tuple[int, ...], list[int]] = {}
        self._start = 0  # where the reply begins in the committed sequence
        self._seen = 0  # reply tokens taken into account
        self._reply: list[int] = []
        self.cursor: int | None = None  # the prediction's index the reply goes on from
        self._lost_at = 0  # where the cursor was when the reply departed

    def reset(self, prompt: Sequence[int]) -> None:
        self._start = len(prompt)
        self._seen = 0
        self._reply = []
        self.cursor = 0
        self._lost_at = 0

    def configure(self, settings: SamplerSettings) -> None:
        if settings.prediction != self.prediction:
            self.prediction = tuple(settings.prediction)
            index: dict[tuple[int, ...], list[int]] = {}
            p = self.prediction
            for n in range(N_MIN, N_MAX + 1):
                for j in range(n, len(p) + 1):
                    index.setdefault(p[j - n : j], []).append(j)
            self._index = index
        self.cursor = 0 if self.prediction else None

    # ------------------------------------------------------------------------ following

    def _follow(self, seq: Sequence[int]) -> None:
        """Take the reply's new tokens into account (O(new tokens) per step)."""
        p = self.prediction
        for t in seq[self._start + self._seen:]:
            t = int(t)
            self._reply.append(t)
            self._seen += 1
            c = self.cursor
            if c is not None and c < len(p) and p[c] == t:
                self.cursor = c + 1
                continue
            if c is not None:
                self._lost_at = c
            self.cursor = self._rejoin()

    def _rejoin(self) -> int | None:
        """Where the reply's tail occurs in the prediction, nearest after where it was lost."""
        r = self._reply
        for n in range(min(N_MAX, len(r)), N_MIN - 1, -1):
            hits = self._index.get(tuple(r[-n:]))
            if hits:
                after = [j for j in hits if j >= self._lost_at]
                return min(after) if after else hits[-1]
        return None

    def lookup(self, k: int) -> list[int]:
        c = self.cursor
        if c is None or k <= 0:
            return []
        out = list(self.prediction[c : c + k])
        cut = next((i + 1 for i, t in enumerate(out) if self.is_eog(t)), len(out))
        return out[:cut]

    # ------------------------------------------------------------------------- drafting

    def can_propose(self, seq: Sequence[int]) -> bool:
        self._follow(seq)
        return bool(self.lookup(1))

    def guess(self, seq: Sequence[int], k: int) -> list[int]:
        self._follow(seq)
        return self.lookup(k)

    def propose(self, req: DraftRequest) -> Proposal:
        self._follow(req.seq)
        drafts = self.lookup(req.plan.depth)
        return Proposal(self.name, tuple(drafts), tuple(range(-1, len(drafts) - 1)),
                        tuple(one_hot(t) for t in drafts))

    def commit(self, seq: Sequence[int], proposal: Proposal, verdict: Verdict) -> None:
        self._follow(seq)


def build(env: DrafterEnv) -> PredictionDrafter:
    return PredictionDrafter(env.target.model.is_eog)
