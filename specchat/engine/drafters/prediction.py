"""Drafting from a predicted output (OpenAI's Predicted Outputs): the text the caller expects the
reply to be, such as the file an edit will mostly leave as it is.

The prediction arrives with the reply's settings (``SamplerSettings.prediction``, target tokens)
and is indexed once per reply: every n-gram (1 ≤ n ≤ ``N_MAX``) with the positions that follow
its occurrences. A cursor says where in the prediction the reply goes on: it starts at the
prediction's first token and moves with every committed token that equals the prediction's next
one. Where the reply departs (the renamed variable), the cursor is lost; after each later token
the drafter looks up the reply's last tokens, longest match first, and takes the occurrence
nearest after the point it lost, so the reply re-joins the prediction just past the change.
What the reply wrote in place of the prediction's tokens there is learnt as an edit and made in
what is proposed from then on: a renamed variable is proposed renamed from its second use.

A proposal is a chain of point masses (q one-hot), cut after an end-of-generation token: the
verification rule keeps a token with probability p(token), so the reply's distribution is the
target's whatever the prediction says.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from specchat.engine.decode import arms
from specchat.engine.decode.drafting import DrafterBase, DraftRequest, Proposal
from specchat.engine.decode.registry import DrafterEnv
from specchat.engine.decode.sampling import SamplerSettings
from specchat.engine.decode.verify import Verdict, one_hot
from specchat.engine.drafters._follow import walk

NAME = "prediction"
# A lookup (it reads nothing, a proposal is a list slice), whose prior trusts what the caller
# predicted: its guesses, scored every step, soon say otherwise where the reply departs.
ARM = arms.lookup(prior_alpha=0.8)
N_MAX = 6  # longest n-gram looked up to re-join the prediction
N_MIN = 2  # shorter matches re-join at chance places (" the", a newline)
MAX_EDIT = 8  # longest replaced span (either side) learnt as an edit


def _never(token: int) -> bool:
    return False


class PredictionDrafter(DrafterBase):
    name = NAME
    free_guesses = True  # a guess follows the predicted text

    def __init__(self, is_eog: Callable[[int], bool] = _never) -> None:
        self.is_eog = is_eog
        self.prediction: tuple[int, ...] = ()
        self._index: dict[tuple[int, ...], list[int]] = {}
        self._start = 0  # where the reply begins in the committed sequence
        self._seen = 0  # reply tokens taken into account
        self._reply: list[int] = []
        # Where the reply goes on: the prediction's index, and the tokens of an edit being
        # written before it (None: lost, the reply departed from the prediction).
        self.state: tuple[int, tuple[int, ...]] | None = None
        self._lost_at = (0, 0)  # (prediction index, reply index) where the reply departed
        # Edits the reply made to the prediction so far (its tokens → the reply's), applied to
        # what is proposed next: a renamed variable is proposed renamed from its second use.
        self.edits: dict[tuple[int, ...], tuple[int, ...]] = {}

    @property
    def cursor(self) -> int | None:
        return None if self.state is None else self.state[0]

    def reset(self, prompt: Sequence[int]) -> None:
        self._start = len(prompt)
        self._seen = 0
        self._reply = []
        self.state = (0, ())
        self._lost_at = (0, 0)
        self.edits = {}

    def configure(self, settings: SamplerSettings) -> None:
        if settings.prediction != self.prediction:
            self.prediction = tuple(settings.prediction)
            index: dict[tuple[int, ...], list[int]] = {}
            p = self.prediction
            for n in range(N_MIN, N_MAX + 1):
                for j in range(n, len(p) + 1):
                    index.setdefault(p[j - n : j], []).append(j)
            self._index = index
        self.state = (0, ()) if self.prediction else None
        self.edits = {}

    # ------------------------------------------------------------------------ following

    def _next(self, state: tuple[int, tuple[int, ...]]
              ) -> tuple[int, tuple[int, tuple[int, ...]]] | None:
        """The token expected after ``state``, and the state after it (None: the end)."""
        i, pending = state
        if pending:
            return pending[0], (i, pending[1:])
        p = self.prediction
        for src, dst in self.edits.items():
            if dst and p[i : i + len(src)] == src:
                return dst[0], (i + len(src), dst[1:])
        if i < len(p):
            return p[i], (i + 1, ())
        return None

    def _follow(self, seq: Sequence[int]) -> None:
        """Take the reply's new tokens into account (O(new tokens) per step)."""
        for t in seq[self._start + self._seen:]:
            t = int(t)
            self._reply.append(t)
            self._seen += 1
            state = self.state
            nxt = self._next(state) if state is not None else None
            if nxt is not None and nxt[0] == t:
                self.state = nxt[1]
                continue
            if state is not None:
                self._lost_at = (state[0], len(self._reply) - 1)
            self.state = self._rejoin()

    def _rejoin(self) -> tuple[int, tuple[int, ...]] | None:
        """Where the reply's tail occurs in the prediction, nearest after where it was lost;
        what the reply wrote instead of the prediction's tokens in between is learnt as an
        edit."""
        r = self._reply
        lost_p, lost_r = self._lost_at
        for n in range(min(N_MAX, len(r)), N_MIN - 1, -1):
            hits = self._index.get(tuple(r[-n:]))
            if not hits:
                continue
            after = [j for j in hits if j >= lost_p]
            j = min(after) if after else hits[-1]
            src = self.prediction[lost_p : j - n]
            dst = tuple(r[lost_r : len(r) - n])
            if after and 0 < len(src) <= MAX_EDIT and len(dst) <= MAX_EDIT:
                self.edits[src] = dst
            return j, ()
        return None

    def lookup(self, k: int) -> list[int]:
        return walk(self._next, self.state, k, self.is_eog)

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
